//! The session bus through a filter: a soul that lists names in `[sandbox] bus_talk`
//! gets, for each task, its own `xdg-dbus-proxy` (what Flatpak uses) in `--filter`
//! mode with `--talk=NAME` for each, listening in a private directory; the task's
//! commands find it in `DBUS_SESSION_BUS_ADDRESS`.
//!
//! What goes through: method calls and signals to the listed names and their replies,
//! and of the bus itself (`org.freedesktop.DBus`) only the basics (`Hello`, `AddMatch`,
//! `RemoveMatch`, `GetId`, name queries on visible names); `UpdateActivationEnvironment`
//! and `BecomeMonitor` are always refused by the proxy, so a tool cannot put
//! `LD_PRELOAD` into the services the bus starts later. Every other name is invisible.
//!
//! Reaching the proxy needs `socket(AF_UNIX)`, which the helper's seccomp filter then
//! lets through for every path: the helper hides the user's runtime directory (the real
//! bus, the user manager's private socket) from the command ([`super::cover`]), but for
//! the proxy's directory. A raw `[sandbox] sockets` grant of the session bus is refused
//! when a soul is loaded ([`session_bus_sockets`]).
//!
//! The invariant: a [`BusProxy`]'s process runs only between the first sandboxed
//! command of its task that needs it ([`BusProxy::ensure`], which returns once the
//! proxy said it is ready) and [`BusProxy::stop`] or its drop; it also exits by itself
//! when the daemon goes (its `--fd` pipe closes).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};
use tokio::sync::Mutex;

use super::launcher::OWNER_ENV;

/// The filtering proxy, resolved on the system `PATH` (`crate::programs`).
pub const PROGRAM: &str = "xdg-dbus-proxy";
/// The Debian package that brings it.
pub const PACKAGE: &str = "xdg-dbus-proxy";

/// How long a proxy may take to say it is ready before the call fails: a bound on a
/// broken system, not a wait (it is ready in milliseconds).
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Names a soul may not list: the bus itself (its basics are always there, the rest
/// never) and familiar's own service (a tool never drives the daemon).
const NEVER_TALK: &[&str] = &["org.freedesktop.DBus", "dev.familiar.*"];

/// Why the proxy could not be started.
#[derive(Debug, thiserror::Error)]
pub enum BusProxyError {
    #[error(
        "{PROGRAM} is not installed on the system PATH (Debian package {PACKAGE}; `familiar doctor` checks it)"
    )]
    Missing,
    #[error(
        "the daemon has no session bus address (DBUS_SESSION_BUS_ADDRESS, $XDG_RUNTIME_DIR/bus)"
    )]
    NoBus,
    #[error("making the bus proxy's directory in {}: {source}", dir.display())]
    Dir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("starting {PROGRAM}: {0}")]
    Spawn(std::io::Error),
    #[error("{PROGRAM} ended before it was ready ({0}); its messages are in the daemon's log")]
    NotReady(String),
}

/// Why a `bus_talk` entry is refused, for the soul file's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadBusName(String);

/// Checks a `bus_talk` entry: a well-known bus name as the D-Bus specification spells
/// it (two or more dot-separated elements of letters, digits, `_` and `-`, none
/// starting with a digit, at most 255 bytes), optionally ending in `.*` for the names
/// below it, as `xdg-dbus-proxy` reads them; never the bus itself nor familiar's own.
pub fn check_name(name: &str) -> Result<(), BadBusName> {
    let base = name.strip_suffix(".*").unwrap_or(name);
    let elements: Vec<&str> = base.split('.').collect();
    let element_ok = |e: &&str| {
        !e.is_empty()
            && !e.starts_with(|c: char| c.is_ascii_digit())
            && e.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    if base.len() > 255 || elements.len() < 2 || !elements.iter().all(element_ok) {
        return Err(BadBusName(format!(
            "`{name}` is not a well-known bus name (like `org.freedesktop.Notifications`, or `org.mpris.MediaPlayer2.*` for the names below one)"
        )));
    }
    if let Some(never) = NEVER_TALK
        .iter()
        .find(|n| covers(name, n) || covers(n, name))
    {
        return Err(BadBusName(match *never {
            "dev.familiar.*" => format!(
                "`{name}` would let the soul's tools drive familiar itself: a tool never calls the daemon"
            ),
            _ => format!(
                "`{name}` is the bus itself: its basic methods are always there through the proxy, the others (UpdateActivationEnvironment, BecomeMonitor) never"
            ),
        }));
    }
    Ok(())
}

/// Whether the `bus_talk` entry `outer` lets through everything `inner` does (the
/// same name, or `outer` ends in `.*` and `inner` is at or below its prefix): what a
/// delegated child may keep of its own list.
pub fn covers(outer: &str, inner: &str) -> bool {
    if outer == inner {
        return true;
    }
    let Some(prefix) = outer.strip_suffix(".*") else {
        return false;
    };
    let inner = inner.strip_suffix(".*").unwrap_or(inner);
    inner == prefix
        || inner
            .strip_prefix(prefix)
            .is_some_and(|r| r.starts_with('.'))
}

/// Where the session bus is: what the proxy connects to, what the commands must not
/// see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionBus {
    /// `$DBUS_SESSION_BUS_ADDRESS`, if set.
    pub address: Option<String>,
    /// `$XDG_RUNTIME_DIR`, else `/run/user/UID`: the bus's default place, and where
    /// the proxies' directories go.
    pub runtime_dir: PathBuf,
}

impl SessionBus {
    /// As this process's environment says.
    pub fn from_env() -> SessionBus {
        let runtime_dir = match std::env::var_os("XDG_RUNTIME_DIR") {
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => PathBuf::from(format!("/run/user/{}", nix::unistd::getuid())),
        };
        SessionBus {
            address: std::env::var("DBUS_SESSION_BUS_ADDRESS")
                .ok()
                .filter(|a| !a.is_empty()),
            runtime_dir,
        }
    }

    /// The bus's socket paths: each `unix:path=` of the address, and `bus` in the
    /// runtime directory, each also with its symlinks resolved.
    pub fn sockets(&self) -> Vec<PathBuf> {
        let mut out = self
            .address
            .as_deref()
            .map(address_paths)
            .unwrap_or_default();
        out.push(self.runtime_dir.join("bus"));
        let canonical: Vec<PathBuf> = out.iter().filter_map(|p| p.canonicalize().ok()).collect();
        out.extend(canonical);
        out.sort();
        out.dedup();
        out
    }

    /// The address the proxy connects to: the one set, else the runtime directory's.
    fn upstream(&self) -> Option<String> {
        self.address.clone().or_else(|| {
            let bus = self.runtime_dir.join("bus");
            bus.exists().then(|| format!("unix:path={}", escape(&bus)))
        })
    }
}

/// The session bus's socket paths as this process sees them ([`SessionBus::sockets`]):
/// a soul may not grant them as raw `sockets`.
pub fn session_bus_sockets() -> Vec<PathBuf> {
    SessionBus::from_env().sockets()
}

/// The `unix:path=` paths of a D-Bus address list (`;`-separated, values `%`-escaped).
fn address_paths(address: &str) -> Vec<PathBuf> {
    address
        .split(';')
        .filter_map(|one| one.strip_prefix("unix:"))
        .flat_map(|params| params.split(','))
        .filter_map(|kv| kv.strip_prefix("path="))
        .filter_map(unescape)
        .map(PathBuf::from)
        .collect()
}

/// A D-Bus address value with its `%XX` escapes decoded.
fn unescape(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A path as a D-Bus address value: bytes outside the always-safe set `%`-escaped.
fn escape(path: &Path) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for b in path.as_os_str().as_encoded_bytes() {
        if b.is_ascii_alphanumeric() || b"-_/.\\*".contains(b) {
            out.push(char::from(*b));
        } else if let Err(e) = write!(out, "%{b:02x}") {
            tracing::debug!("escaping a bus address: {e}");
        }
    }
    out
}

/// One task's proxy: where it listens and, once started, its process.
#[derive(Debug)]
pub struct BusProxy {
    names: Vec<String>,
    bus: SessionBus,
    /// The private directory the socket is in; removed on drop.
    dir: tempfile::TempDir,
    socket: PathBuf,
    /// Who it is for, set in its environment for the daemon's caller check.
    owner: String,
    running: Mutex<Option<Running>>,
}

#[derive(Debug)]
struct Running {
    child: Child,
    /// The read end of the `--fd` pipe: the proxy stops when it closes.
    _alive: OwnedFd,
}

impl BusProxy {
    /// A proxy to `bus` for `names` (checked with [`check_name`]), not started yet,
    /// listening in a fresh 0700 directory under the user's runtime directory.
    pub fn new(
        names: Vec<String>,
        owner: impl Into<String>,
        bus: SessionBus,
    ) -> Result<BusProxy, BusProxyError> {
        let parent = bus.runtime_dir.clone();
        let dir = tempfile::Builder::new()
            .prefix("familiar-bus-")
            .tempdir_in(&parent)
            .map_err(|source| BusProxyError::Dir {
                dir: parent.clone(),
                source,
            })?;
        let socket = dir.path().join("bus");
        Ok(BusProxy {
            names,
            bus,
            dir,
            socket,
            owner: owner.into(),
            running: Mutex::new(None),
        })
    }

    /// The bus it connects to.
    pub fn bus(&self) -> &SessionBus {
        &self.bus
    }

    /// The directory the helper keeps visible ([`super::cover`]).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The socket the commands connect to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// `DBUS_SESSION_BUS_ADDRESS` for the commands.
    pub fn address(&self) -> String {
        format!("unix:path={}", escape(&self.socket))
    }

    /// The proxy's pid while it runs.
    pub async fn pid(&self) -> Option<u32> {
        self.running
            .lock()
            .await
            .as_ref()
            .and_then(|r| r.child.id())
    }

    /// Starts the proxy unless it runs, and returns once it listens.
    pub async fn ensure(&self) -> Result<(), BusProxyError> {
        let mut running = self.running.lock().await;
        if let Some(r) = running.as_mut() {
            match r.child.try_wait() {
                Ok(None) => return Ok(()),
                Ok(Some(status)) => tracing::warn!(
                    "{PROGRAM} for {} ended ({status}); starting it again",
                    self.owner
                ),
                Err(e) => tracing::warn!("{PROGRAM} for {}: {e}; starting it again", self.owner),
            }
        }
        *running = Some(self.start().await?);
        Ok(())
    }

    async fn start(&self) -> Result<Running, BusProxyError> {
        let program = crate::programs::find(PROGRAM).ok_or(BusProxyError::Missing)?;
        let upstream = self.bus.upstream().ok_or(BusProxyError::NoBus)?;
        if self.socket.exists() {
            // A proxy that ended left its socket: it would refuse to bind.
            if let Err(e) = std::fs::remove_file(&self.socket) {
                tracing::debug!("removing {}: {e}", self.socket.display());
            }
        }
        // The proxy writes a byte to its stdout (`--fd=1`) once it listens, and stops
        // when the read end, ours, closes.
        let (alive, ready_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| BusProxyError::Spawn(e.into()))?;
        let mut cmd = Command::new(program);
        cmd.arg("--fd=1")
            .arg(&upstream)
            .arg(&self.socket)
            .arg("--filter")
            .args(self.names.iter().map(|n| format!("--talk={n}")))
            .env_clear()
            .env(OWNER_ENV, &self.owner)
            .stdin(Stdio::null())
            .stdout(Stdio::from(ready_end))
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(BusProxyError::Spawn)?;
        // Our copy of the write end goes with the command: only the proxy holds it now.
        drop(cmd);
        let alive_read = alive.try_clone().map_err(BusProxyError::Spawn)?;
        let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(alive_read)
            .map_err(BusProxyError::Spawn)?;
        let mut byte = [0u8; 1];
        let ready = tokio::select! {
            read = tokio::time::timeout(READY_TIMEOUT, pipe.read(&mut byte)) => match read {
                Ok(Ok(1)) => Ok(()),
                Ok(Ok(_)) => Err("closed its readiness pipe".to_owned()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("not ready within {READY_TIMEOUT:?}")),
            },
            status = child.wait() => Err(match status {
                Ok(s) => s.to_string(),
                Err(e) => e.to_string(),
            }),
        };
        if let Err(why) = ready {
            stop_child(&mut child).await;
            return Err(BusProxyError::NotReady(why));
        }
        tracing::info!(
            "started {PROGRAM} (pid {}) for {}: talk to {}",
            child.id().unwrap_or_default(),
            self.owner,
            self.names.join(", ")
        );
        Ok(Running {
            child,
            _alive: alive,
        })
    }

    /// Stops the proxy and reaps it: nothing of it is left when this returns.
    pub async fn stop(&self) {
        if let Some(mut r) = self.running.lock().await.take() {
            stop_child(&mut r.child).await;
        }
    }
}

/// Kills and reaps the proxy.
async fn stop_child(child: &mut Child) {
    if let Err(e) = child.kill().await {
        tracing::warn!("stopping {PROGRAM}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_names_follow_the_dbus_specification() {
        for ok in [
            "org.freedesktop.Notifications",
            "org.mpris.MediaPlayer2.*",
            "com.example.my-app_2",
        ] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "Notifications",
            ":1.42",
            "org..x",
            "org.2x",
            "org.x.",
            "org.x/y",
            "*",
            "org.*.x",
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        assert!(check_name(&format!("a.{}", "b".repeat(260))).is_err());
    }

    #[test]
    fn the_bus_itself_and_familiar_cannot_be_listed() {
        for never in [
            "org.freedesktop.DBus",
            "org.freedesktop.*",
            "dev.familiar.Agent1",
            "dev.*",
        ] {
            assert!(check_name(never).is_err(), "{never}");
        }
        assert_eq!(check_name("org.freedesktop.DBusX"), Ok(()));
    }

    #[test]
    fn a_wildcard_covers_the_names_below_its_prefix_only() {
        assert!(covers("org.a.*", "org.a"));
        assert!(covers("org.a.*", "org.a.b"));
        assert!(covers("org.a.*", "org.a.b.*"));
        assert!(!covers("org.a.*", "org.ab"));
        assert!(!covers("org.a.b", "org.a.*"));
        assert!(covers("org.a.b", "org.a.b"));
    }

    #[test]
    fn addresses_give_their_unix_paths() {
        assert_eq!(
            address_paths("unix:path=/run/user/1000/bus,guid=ab;tcp:host=x"),
            vec![PathBuf::from("/run/user/1000/bus")]
        );
        assert_eq!(
            address_paths("unix:abstract=/tmp/x;unix:guid=1,path=/tmp/a%20b"),
            vec![PathBuf::from("/tmp/a b")]
        );
        assert_eq!(escape(Path::new("/tmp/a b")), "/tmp/a%20b");
    }
}
