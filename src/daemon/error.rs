//! Why the daemon could not start, or stopped: each says what to do.

use crate::agent::RuntimeError;
use crate::error::ConfigError;

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error(
        "cannot serve {name} on the session bus: {source} (is another `familiar daemon` running? `systemctl --user status familiar`)",
        name = familiar_protocol::NAME
    )]
    Bus {
        #[source]
        source: zbus::Error,
    },
    #[error(
        "{name} is already running as pid {pid} (`systemctl --user status familiar`; stop it before starting another)",
        name = familiar_protocol::NAME,
        pid = pid.map_or_else(|| "unknown".to_owned(), |p| p.to_string())
    )]
    AlreadyRunning { pid: Option<u32> },
    #[error("cannot start the async runtime: {0}")]
    Io(#[from] std::io::Error),
    /// The session bus went away (or took our name): nobody can reach the daemon, so it
    /// exits non-zero and systemd's `Restart=on-failure` starts it on the new bus.
    #[error(
        "lost the session bus ({0}); running tasks were cancelled and saved. systemd restarts the daemon (`systemctl --user status familiar`); without systemd, start `familiar daemon` again"
    )]
    BusLost(String),
}
