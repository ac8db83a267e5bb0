//! The desktop layer: one [`Compositor`] whichever of Hyprland, sway (or i3) and niri
//! runs, each spoken to over its own socket by a small client of ours
//! ([`hyprland`], [`sway`], [`niri`]: hyprland-rs and niri-ipc are GPL, and a
//! `hyprctl`/`swaymsg`/`niri msg` subprocess per question would cost a fork each).
//!
//! What every compositor answers the same way: the [`Desktop`] the snapshot shows (the
//! compositor's name, the focused window's app id or class and title, the workspaces,
//! the outputs), the windows the desktop tools address, and the five [`Action`]s of
//! `desktop_dispatch`, each mapped to the compositor's own command.
//!
//! Invariant: every request of every client is bounded by [`IO_TIMEOUT`] per read or
//! write and [`MAX_REPLY_BYTES`], so a hung or misbehaving compositor can delay a
//! snapshot, never hang the daemon or fill its memory; the lists a [`Desktop`] holds are
//! capped ([`MAX_LISTED`]).

pub mod geometry;
pub mod hyprland;
pub mod niri;
pub mod sway;
pub mod wayland;

use std::io;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::config::Env;
use crate::programs::argv::{self, Resolved};
pub use hyprland::{HyprError, Hyprland};
pub use niri::Niri;
pub use sway::Sway;

/// Longest we wait for one read or write on a compositor's socket.
pub const IO_TIMEOUT: Duration = Duration::from_millis(500);
/// Largest reply we read (a tree with hundreds of windows is well under this).
pub const MAX_REPLY_BYTES: u64 = 8 * 1024 * 1024;
/// Workspaces, outputs and windows a [`Desktop`] or a window list holds at most.
pub const MAX_LISTED: usize = 64;
/// Longest title, app id or name kept.
const MAX_NAME_CHARS: usize = 128;

/// A compositor that answers, and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compositor {
    Hyprland(Hyprland),
    /// sway, or i3 (the same IPC).
    Sway(Sway),
    Niri(Niri),
}

/// Why a compositor's answer is missing (sway's and niri's clients; Hyprland's keeps
/// its own [`HyprError`], wrapped in [`CompositorError::Hyprland`]).
#[derive(Debug, thiserror::Error)]
pub enum IpcError {
    #[error("cannot connect to {compositor} at {}: {source}", socket.display())]
    Connect {
        compositor: &'static str,
        socket: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{compositor} did not answer `{request}` within {IO_TIMEOUT:?}")]
    Timeout {
        compositor: &'static str,
        request: String,
    },
    #[error("{compositor} request `{request}` failed: {source}")]
    Io {
        compositor: &'static str,
        request: String,
        #[source]
        source: io::Error,
    },
    #[error("{compositor}'s answer to `{request}` is longer than {MAX_REPLY_BYTES} bytes")]
    TooLong {
        compositor: &'static str,
        request: String,
    },
    #[error("{compositor}'s answer to `{request}` is not what we expected ({reason}): {snippet:?}")]
    InvalidReply {
        compositor: &'static str,
        request: String,
        reason: String,
        /// The start of the answer, for the log.
        snippet: String,
    },
    /// The compositor understood the request and refused it, saying why.
    #[error("{compositor} refused `{request}`: {message}")]
    Refused {
        compositor: &'static str,
        request: String,
        message: String,
    },
}

/// Why a desktop question or action failed.
#[derive(Debug, thiserror::Error)]
pub enum CompositorError {
    #[error(transparent)]
    Hyprland(#[from] HyprError),
    #[error(transparent)]
    Ipc(#[from] IpcError),
    /// The action's arguments do not fit this compositor (a window id of another form,
    /// a workspace name it cannot take): the model can correct them.
    #[error("{0}")]
    BadArgument(String),
}

/// The desktop as the snapshot shows it (`familiar snapshot --json`'s `desktop`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Desktop {
    /// `hyprland`, `sway` or `niri`.
    pub compositor: &'static str,
    /// `null` when no window has the focus.
    pub focused_window: Option<Window>,
    /// The focused workspace's name, when the compositor says.
    pub focused_workspace: Option<String>,
    /// At most [`MAX_LISTED`].
    pub workspaces: Vec<Workspace>,
    /// At most [`MAX_LISTED`].
    pub outputs: Vec<Output>,
}

/// A window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Window {
    /// What `desktop_dispatch` takes as `window`: Hyprland's address (`0x55d1…`),
    /// sway's container id, niri's window id.
    pub id: String,
    /// The Wayland app id, or the X11 class (Hyprland's `class`, an Xwayland window's).
    pub app_id: String,
    pub title: String,
    pub pid: Option<i64>,
    /// The name of its workspace, when it is on one.
    pub workspace: Option<String>,
    pub focused: bool,
}

/// A workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Workspace {
    /// What `desktop_dispatch` takes as `workspace`.
    pub name: String,
    /// The output it is on.
    pub output: Option<String>,
    pub focused: bool,
    /// How many windows it holds.
    pub windows: u32,
}

/// An output (a monitor).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Output {
    pub name: String,
    pub focused: bool,
    /// Logical size in pixels, when it is on.
    pub width: Option<u32>,
    pub height: Option<u32>,
    pub scale: Option<f64>,
}

/// One `desktop_dispatch` action. A window of `None` is the focused one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    FocusWindow {
        window: String,
    },
    MoveToWorkspace {
        window: Option<String>,
        workspace: String,
    },
    SwitchWorkspace {
        workspace: String,
    },
    /// Starts one program with its arguments through the compositor: outside
    /// familiar's sandbox. Found already ([`crate::programs::argv`]); each client
    /// passes the words on whole.
    Launch {
        argv: Resolved,
    },
    CloseWindow {
        window: Option<String>,
    },
}

impl Action {
    /// The window the action names, if it names one (`None`: the focused one, or none).
    pub fn window(&self) -> Option<&str> {
        match self {
            Action::FocusWindow { window } => Some(window),
            Action::MoveToWorkspace { window, .. } | Action::CloseWindow { window } => {
                window.as_deref()
            }
            Action::SwitchWorkspace { .. } | Action::Launch { .. } => None,
        }
    }
}

impl Compositor {
    /// The running compositor, from the environment: `HYPRLAND_INSTANCE_SIGNATURE`,
    /// `SWAYSOCK` (or `I3SOCK`), `NIRI_SOCKET`, in that order; without any of them (a
    /// systemd user service may not see the session's variables) the newest live socket
    /// in `$XDG_RUNTIME_DIR` (Hyprland's `hypr/*/`, sway's `sway-ipc.*.sock`, niri's
    /// `niri.*.sock`). `None` when none answers.
    pub fn detect(env: &dyn Env) -> Option<Compositor> {
        let set = |k: &str| env.var(k).is_some_and(|v| !v.is_empty());
        // A variable left from an earlier session (the user manager keeps what was
        // exported) names a socket that is gone: the next one is tried.
        if set("HYPRLAND_INSTANCE_SIGNATURE")
            && let Some(h) = Hyprland::detect(env)
        {
            return Some(Compositor::Hyprland(h));
        }
        if (set("SWAYSOCK") || set("I3SOCK"))
            && let Some(s) = Sway::detect(env)
        {
            return Some(Compositor::Sway(s));
        }
        if set("NIRI_SOCKET")
            && let Some(n) = Niri::detect(env)
        {
            return Some(Compositor::Niri(n));
        }
        let runtime = runtime_dir(env)?;
        Hyprland::detect(env)
            .map(Compositor::Hyprland)
            .or_else(|| {
                newest_live(&runtime, "sway-ipc.", ".sock").map(|s| Compositor::Sway(Sway::at(s)))
            })
            .or_else(|| {
                newest_live(&runtime, "niri.", ".sock").map(|s| Compositor::Niri(Niri::at(s)))
            })
    }

    /// `hyprland`, `sway` or `niri`.
    pub fn name(&self) -> &'static str {
        match self {
            Compositor::Hyprland(_) => "hyprland",
            Compositor::Sway(_) => "sway",
            Compositor::Niri(_) => "niri",
        }
    }

    pub fn socket(&self) -> &Path {
        match self {
            Compositor::Hyprland(h) => h.socket(),
            Compositor::Sway(s) => s.socket(),
            Compositor::Niri(n) => n.socket(),
        }
    }

    /// The desktop now, for the snapshot.
    pub fn desktop(&self) -> Result<Desktop, CompositorError> {
        Ok(match self {
            Compositor::Hyprland(h) => h.desktop()?.0,
            Compositor::Sway(s) => s.desktop()?,
            Compositor::Niri(n) => n.desktop()?,
        })
    }

    /// What `desktop_state` returns: the [`Desktop`] and every window; on Hyprland its
    /// own replies as well (`hypr_state`'s, as rich as before).
    pub fn state(&self) -> Result<serde_json::Value, CompositorError> {
        match self {
            Compositor::Hyprland(h) => Ok(h.full_state()?),
            Compositor::Sway(s) => Ok(with_windows(s.desktop()?, s.windows()?)),
            Compositor::Niri(n) => Ok(with_windows(n.desktop()?, n.windows()?)),
        }
    }

    /// Performs `action`; returns the compositor's command it sent, for the model.
    pub fn perform(&self, action: &Action) -> Result<String, CompositorError> {
        match self {
            Compositor::Hyprland(h) => h.perform(action),
            Compositor::Sway(s) => s.perform(action),
            Compositor::Niri(n) => n.perform(action),
        }
    }
}

fn with_windows(desktop: Desktop, windows: Vec<Window>) -> serde_json::Value {
    let mut v = serde_json::to_value(&desktop).unwrap_or_default();
    v["windows"] = serde_json::to_value(&windows).unwrap_or_default();
    v
}

/// A workspace name a command can carry: one line, no quote, separator or bracket of
/// any compositor's command syntax.
pub(crate) fn check_workspace(name: &str) -> Result<&str, CompositorError> {
    let name = name.trim();
    let bad = |c: char| c.is_control() || "\"'`;,[]\\{}$".contains(c);
    if name.is_empty() || name.chars().count() > 64 || name.chars().any(bad) {
        return Err(CompositorError::BadArgument(format!(
            "workspace `{name}` is not a name familiar can pass on: 1 to 64 characters, no quotes, `;`, `,`, brackets or backslash"
        )));
    }
    Ok(name)
}

/// What a compositor's `exec` hands to `sh -c` for `argv` ([`argv::sh_line`]).
/// `sway` reads `$NAME` as its own variables in it (`$$` is one `$`); Hyprland's
/// socket, before 0.40, split a request holding `[[BATCH]]` at `;`, so there a word
/// with `;` is refused.
pub(crate) fn exec_line(compositor: &str, argv: &Resolved) -> Result<String, CompositorError> {
    let line = argv::sh_line(argv);
    match compositor {
        "sway" => Ok(line.replace('$', "$$")),
        _ if line.contains(';') => Err(CompositorError::BadArgument(format!(
            "{compositor} cannot be given a `;` in a program's arguments (its socket reads it as the end of a command)"
        ))),
        _ => Ok(line),
    }
}

/// A numeric window id (sway's container id, niri's window id).
pub(crate) fn numeric_window(compositor: &str, id: &str) -> Result<u64, CompositorError> {
    id.trim().parse().map_err(|_| {
        CompositorError::BadArgument(format!(
            "window `{id}` is not a {compositor} window id (a number, as desktop_state lists them)"
        ))
    })
}

/// Cut to [`MAX_NAME_CHARS`].
pub(crate) fn cut(s: &str) -> String {
    s.chars().take(MAX_NAME_CHARS).collect()
}

/// `$XDG_RUNTIME_DIR`, else `/run/user/UID` (what systemd-logind creates).
pub(crate) fn runtime_dir(env: &dyn Env) -> Option<PathBuf> {
    env.path("XDG_RUNTIME_DIR").or_else(|| {
        // Our uid without unsafe code: /proc/self belongs to us.
        let uid = std::fs::metadata("/proc/self").ok()?.uid();
        Some(PathBuf::from(format!("/run/user/{uid}")))
    })
}

/// The newest socket `dir/PREFIX*SUFFIX` that accepts a connection (dead compositors
/// leave theirs behind).
fn newest_live(dir: &Path, prefix: &str, suffix: &str) -> Option<PathBuf> {
    let mut candidates: Vec<(SystemTime, PathBuf)> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with(prefix) && name.ends_with(suffix)
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    candidates.sort_by_key(|c| std::cmp::Reverse(c.0));
    candidates
        .into_iter()
        .find(|(_, socket)| UnixStream::connect(socket).is_ok())
        .map(|(_, socket)| socket)
}

/// Connects to `socket` with [`IO_TIMEOUT`] on reads and writes.
pub(crate) fn connect(
    compositor: &'static str,
    socket: &Path,
    request: &str,
) -> Result<UnixStream, IpcError> {
    let stream = UnixStream::connect(socket).map_err(|source| IpcError::Connect {
        compositor,
        socket: socket.to_owned(),
        source,
    })?;
    let set = stream
        .set_read_timeout(Some(IO_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(IO_TIMEOUT)));
    set.map_err(io_error(compositor, request))?;
    Ok(stream)
}

/// Maps an I/O error of `request` to [`IpcError::Timeout`] or [`IpcError::Io`].
pub(crate) fn io_error<'a>(
    compositor: &'static str,
    request: &'a str,
) -> impl Fn(io::Error) -> IpcError + 'a {
    move |source| match source.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => IpcError::Timeout {
            compositor,
            request: request.to_owned(),
        },
        _ => IpcError::Io {
            compositor,
            request: request.to_owned(),
            source,
        },
    }
}

pub(crate) fn invalid(
    compositor: &'static str,
    request: &str,
    reason: &str,
    reply: &str,
) -> IpcError {
    IpcError::InvalidReply {
        compositor,
        request: request.to_owned(),
        reason: reason.to_owned(),
        snippet: reply.chars().take(200).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_names_cannot_carry_a_second_command() {
        assert_eq!(check_workspace(" 2 ").unwrap(), "2");
        assert!(check_workspace("web").is_ok());
        for bad in ["", "2; exit", "2,exit", "a\"b", "a\nb", "[x]"] {
            assert!(check_workspace(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_exec_line_is_the_quoted_words_for_each_shell() {
        let argv = Resolved {
            program: "/usr/bin/foot".into(),
            args: vec!["$HOME".into(), "a b".into()],
        };
        assert_eq!(
            exec_line("hyprland", &argv).unwrap(),
            "exec '/usr/bin/foot' '$HOME' 'a b'"
        );
        assert_eq!(
            exec_line("sway", &argv).unwrap(),
            "exec '/usr/bin/foot' '$$HOME' 'a b'"
        );
        let semicolon = Resolved {
            program: "/usr/bin/foot".into(),
            args: vec!["a;b".into()],
        };
        assert!(exec_line("hyprland", &semicolon).is_err());
        assert!(exec_line("sway", &semicolon).is_ok());
    }

    #[test]
    fn nothing_set_and_nothing_listening_is_no_compositor() {
        let dir = tempfile::tempdir().unwrap();
        let env: std::collections::BTreeMap<String, String> = [(
            "XDG_RUNTIME_DIR".to_owned(),
            dir.path().display().to_string(),
        )]
        .into();
        assert_eq!(Compositor::detect(&env), None);
        // A dead sway's socket is skipped.
        drop(std::os::unix::net::UnixListener::bind(dir.path().join("sway-ipc.0.1.sock")).unwrap());
        assert_eq!(Compositor::detect(&env), None);
        // A live one is found, even with a stale variable of another compositor left.
        let live = dir.path().join("sway-ipc.0.2.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&live).unwrap();
        let mut env = env;
        env.insert(
            "NIRI_SOCKET".to_owned(),
            "/nonexistent/niri.sock".to_owned(),
        );
        assert_eq!(
            Compositor::detect(&env),
            Some(Compositor::Sway(Sway::at(live)))
        );
    }
}
