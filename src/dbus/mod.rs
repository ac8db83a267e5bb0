//! The session-bus contract (docs/dbus.md): names, the typed error, the limits both
//! sides share, the `Agent1` client proxy ([`proxy`]) and the desktop-notification
//! proxy ([`notifications`]). The service object that implements the contract lives in
//! `daemon::service`.
//!
//! Invariant: every name, error name and shared limit used on the bus is defined here,
//! and the client's signatures in [`proxy`] mirror the server's `#[interface]`, so
//! server and client cannot disagree; `docs/dbus.md` mirrors them for users. This
//! module never imports the daemon: cli, tools and daemon import it, one way.

pub mod desktop;
pub mod notifications;
pub mod proxy;
pub mod systemd;

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
    UnknownSoul(String),
    UnknownTask(String),
    UnknownSession(String),
    SessionBusy(String),
    RateLimited(String),
    InvalidArgument(String),
    ShuttingDown(String),
    /// `Steer` for a task that has already ended.
    TaskNotRunning(String),
    /// The caller is one of a sandbox's processes (a tool, what it started, an MCP
    /// server): it may not drive the daemon.
    SandboxedCaller(String),
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
