//! The bus contract of familiar's daemon, `dev.familiar.Agent1` on the session bus
//! (docs/dbus.md): its names, the typed [`Error`], the limits both sides share, the ids
//! that cross it ([`ids`]), `Submit`'s options ([`SubmitOptions`]), the events a task
//! reports ([`events`], with the [`task`] and [`tier`] types they carry), what a client
//! asks and gets back ([`query`]: the `List*` rows, `GetTask`, the properties), a typed
//! async client ([`proxy::Agent1Proxy`]), the client-side fold of all of it ([`board`]:
//! which tasks run, which approvals wait, what each does) and the rules for showing
//! text a client did not write ([`display`]).
//!
//! This is the way to talk to familiar from Rust: a bar module, a desktop extension
//! or a script links this crate, not the daemon. The client returns [`Error`], so a
//! caller matches what the daemon said, not its error names:
//!
//! ```no_run
//! use familiar_protocol::events::EventPayload;
//! use familiar_protocol::{Error, SubmitOptions, proxy::Agent1Proxy};
//! use futures::StreamExt;
//!
//! # async fn run() -> Result<(), Error> {
//! let connection = zbus::Connection::session().await?;
//! let agent = Agent1Proxy::new(&connection).await?;
//! // Subscribe before `Submit`: no event of the task can be missed.
//! let mut events = agent.receive_task_event().await?;
//! let options = SubmitOptions {
//!     origin: Some("my-script".into()),
//!     ..SubmitOptions::default()
//! };
//! let (task, _session) = match agent.submit("", "how full is my disk?", options.to_dict()).await {
//!     Ok(ids) => ids,
//!     Err(Error::SessionBusy(why) | Error::RateLimited(why)) => {
//!         eprintln!("not now: {why}");
//!         return Ok(());
//!     }
//!     Err(e) => return Err(e),
//! };
//! while let Some(signal) = events.next().await {
//!     let args = signal.args()?;
//!     if args.task_id != task {
//!         continue;
//!     }
//!     // A kind this build does not know (a newer daemon's) is skipped.
//!     if let Ok(EventPayload::TaskFinished { status, result, .. }) =
//!         EventPayload::from_signal(&args.kind, &args.payload_json)
//!     {
//!         println!("{status}: {result}");
//!         break;
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! `examples/watch.rs` is a complete status watcher on the [`board::Board`]. The daemon implements the same
//! contract (`familiar::daemon::service`) and reads `Submit`'s options with
//! [`SubmitOptions::from_dict`], and its tests drive it through this proxy, so server
//! and client cannot disagree.
//!
//! Invariant: every name, error name, option and shared limit used on the bus is defined
//! here, once, and every event field that is an enum here serialises to the string the
//! bus has always carried; this crate knows nothing of the daemon.

#![warn(missing_docs)]

/// Compares an enum of the contract with the string it is serialised to, as clients
/// that read the JSON do (`decision == "ask"`); `as_str` is that string.
macro_rules! eq_str {
    ($t:ty) => {
        impl PartialEq<str> for $t {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $t {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }
    };
}
pub(crate) use eq_str;

pub mod board;
pub mod context;
pub mod display;
pub mod events;
pub mod ids;
pub mod proxy;
pub mod query;
pub mod submit;
pub mod task;
pub mod tier;

pub use submit::{ContextSource, MAX_CONTEXT_BYTES, SubmitOptions};

/// The well-known bus name.
pub const NAME: &str = "dev.familiar.Agent1";
/// The object the service is served at.
pub const PATH: &str = "/dev/familiar/Agent1";
/// The interface name.
pub const INTERFACE: &str = "dev.familiar.Agent1";
/// Prefix of our error names.
pub const ERROR_PREFIX: &str = "dev.familiar.Agent1.Error";

/// Longest prompt `Submit` takes (the same cap `familiar run` puts on stdin).
pub const MAX_PROMPT_BYTES: usize = 1 << 20;
/// Longest `origin` label `Submit` takes.
pub const MAX_ORIGIN_CHARS: usize = 64;
/// Longest steering message `Steer` takes, in bytes.
pub const MAX_STEER_BYTES: usize = 16 * 1024;
/// Longest timed grant `Grant` gives, in seconds.
pub const MAX_GRANT_SECS: u32 = 3600;
/// Characters of a prompt `ListTasks` shows.
pub const LIST_PROMPT_CHARS: usize = 80;

/// The errors a method can return, named `dev.familiar.Agent1.Error.<Variant>`. Each
/// carries a sentence a person can act on.
#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "dev.familiar.Agent1.Error")]
pub enum Error {
    /// Bus-level failures, and `org.freedesktop.DBus.Error.AccessDenied` for callers
    /// of another user.
    #[zbus(error)]
    ZBus(zbus::Error),
    /// A soul the daemon does not know.
    UnknownSoul(String),
    /// A task the daemon does not know (it remembers the last 256 finished).
    UnknownTask(String),
    /// A session that does not exist.
    UnknownSession(String),
    /// The session runs another task.
    SessionBusy(String),
    /// Too many submissions: try later.
    RateLimited(String),
    /// An argument the method does not take.
    InvalidArgument(String),
    /// The daemon is stopping.
    ShuttingDown(String),
    /// `Steer` for a task that has already ended.
    TaskNotRunning(String),
    /// `Grant` for a request that is always asked (it runs outside the sandbox, writes a
    /// file that runs programs later, or is `system_critical`): it can be approved
    /// once, never granted for the task. The request still waits.
    NotGrantable(String),
    /// The caller is one of a sandbox's processes (a tool, what it started, an MCP
    /// server): it may not drive the daemon.
    SandboxedCaller(String),
    /// `Undo` of a task that changed nothing outside its workspace, or was undone.
    NothingToUndo(String),
    /// `Undo` touched nothing: the message names each file changed since the task
    /// touched it (or whose previous content was not kept).
    UndoRefused(String),
}

impl Error {
    /// The refusal of a request that arrives while the daemon stops.
    pub fn shutting_down() -> Error {
        Error::ShuttingDown("familiar is shutting down; submit again once it is back".to_owned())
    }

    /// The refusal for a caller running as another user.
    pub fn access_denied(uid: u32, ours: u32) -> Error {
        Error::ZBus(zbus::Error::FDO(Box::new(zbus::fdo::Error::AccessDenied(
            format!("familiar serves only its own user (uid {ours}); the caller runs as uid {uid}"),
        ))))
    }
}
