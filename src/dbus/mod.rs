//! The session-bus contract of DESIGN §3: the service ([`interface`]), the client
//! ([`proxy`]) and desktop notifications ([`notifications`]).
//!
//! Invariant: every name, signature and error name used on the bus is defined here or
//! in the `#[interface]`/`#[proxy]` attributes next to it, so the server and the
//! client cannot disagree; `docs/dbus.md` mirrors them for users.

pub mod interface;
pub mod notifications;
pub mod proxy;

/// The well-known bus name.
pub const NAME: &str = "dev.familiar.Agent1";
/// The object the service is served at.
pub const PATH: &str = "/dev/familiar/Agent1";
/// The interface name.
pub const INTERFACE: &str = "dev.familiar.Agent1";
/// Prefix of our error names.
pub const ERROR_PREFIX: &str = "dev.familiar.Agent1.Error";

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
}

impl Error {
    /// The refusal for a caller running as another user.
    pub fn access_denied(uid: u32, ours: u32) -> Error {
        Error::ZBus(zbus::Error::FDO(Box::new(zbus::fdo::Error::AccessDenied(
            format!("familiar serves only its own user (uid {ours}); the caller runs as uid {uid}"),
        ))))
    }
}
