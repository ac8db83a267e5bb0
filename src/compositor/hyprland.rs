//! A small client of Hyprland's command socket (hyprland-rs is GPL, and hyprctl would
//! be a subprocess per question): the [`super::Compositor`] for Hyprland, and the
//! `hyprland` section of the snapshot and `hypr_state` kept as they were.
//!
//! The socket is `$XDG_RUNTIME_DIR/hypr/$HYPRLAND_INSTANCE_SIGNATURE/.socket.sock`. The
//! compositor serves it synchronously on its main thread: one connection per request
//! (open, write, read to EOF, close). Invariant: every request is bounded by
//! [`IO_TIMEOUT`] per read or write and [`MAX_REPLY_BYTES`], so a hung or misbehaving
//! compositor can delay a snapshot, never hang the daemon or fill its memory.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Action, CompositorError, Desktop, MAX_LISTED, Output, runtime_dir};
pub use super::{IO_TIMEOUT, MAX_REPLY_BYTES};
use crate::config::Env;
const SOCKET_NAME: &str = ".socket.sock";

#[derive(Debug, thiserror::Error)]
pub enum HyprError {
    #[error("cannot connect to Hyprland at {}: {source}", socket.display())]
    Connect {
        socket: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("Hyprland did not answer `{cmd}` within {IO_TIMEOUT:?}")]
    Timeout { cmd: String },
    #[error("Hyprland request `{cmd}` failed: {source}")]
    Io {
        cmd: String,
        #[source]
        source: io::Error,
    },
    #[error("Hyprland's answer to `{cmd}` is longer than {MAX_REPLY_BYTES} bytes")]
    TooLong { cmd: String },
    #[error("Hyprland's answer to `{cmd}` is not what we expected ({reason}): {snippet:?}")]
    InvalidReply {
        cmd: String,
        reason: String,
        /// The start of the answer, for the log.
        snippet: String,
    },
}

/// The active workspace, as the snapshot shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workspace {
    pub id: i64,
    pub name: String,
    /// How many windows it holds.
    pub windows: u32,
}

/// A workspace as a window refers to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceRef {
    pub id: i64,
    pub name: String,
}

/// The focused window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    pub class: String,
    pub title: String,
    pub pid: i64,
    pub workspace: WorkspaceRef,
}

/// What the snapshot reports about Hyprland.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HyprState {
    pub active_workspace: Workspace,
    pub active_window: Option<Window>,
}

/// A Hyprland instance's command socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hyprland {
    socket: PathBuf,
}

impl Hyprland {
    /// A client of the socket at `socket` (no connection is made).
    pub fn at(socket: impl Into<PathBuf>) -> Hyprland {
        Hyprland {
            socket: socket.into(),
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The running instance: the one `HYPRLAND_INSTANCE_SIGNATURE` names while its
    /// socket accepts a connection; otherwise (a systemd user service may not see the
    /// variable, or it names an instance that has ended since) the instance directory
    /// in `$XDG_RUNTIME_DIR/hypr/` whose socket accepts a connection, newest first.
    /// `None` when Hyprland is not running.
    pub fn detect(env: &dyn Env) -> Option<Hyprland> {
        let hypr_dir = runtime_dir(env)?.join("hypr");
        if let Some(sig) = env.var("HYPRLAND_INSTANCE_SIGNATURE")
            && !sig.is_empty()
        {
            let sig = PathBuf::from(sig);
            // A signature is one path component; anything else is not Hyprland's.
            if sig.components().count() != 1 || sig.is_absolute() {
                return None;
            }
            let socket = hypr_dir.join(sig).join(SOCKET_NAME);
            if UnixStream::connect(&socket).is_ok() {
                return Some(Hyprland::at(socket));
            }
            tracing::debug!(
                "HYPRLAND_INSTANCE_SIGNATURE names {}, which does not answer: looking for a live instance",
                socket.display()
            );
        }
        let mut candidates: Vec<(SystemTime, PathBuf)> = std::fs::read_dir(&hypr_dir)
            .ok()?
            .flatten()
            .filter_map(|e| {
                let socket = e.path().join(SOCKET_NAME);
                let modified = std::fs::metadata(&socket).ok()?.modified().ok()?;
                Some((modified, socket))
            })
            .collect();
        // Dead instances leave their directories behind; the newest live one wins.
        candidates.sort_by_key(|c| std::cmp::Reverse(c.0));
        candidates
            .into_iter()
            .find(|(_, socket)| UnixStream::connect(socket).is_ok())
            .map(|(_, socket)| Hyprland::at(socket))
    }

    /// Sends one request (`j/activewindow`, `dispatch workspace 2`, …) and returns the
    /// whole answer.
    pub fn request(&self, cmd: &str) -> Result<String, HyprError> {
        let mut stream =
            UnixStream::connect(&self.socket).map_err(|source| HyprError::Connect {
                socket: self.socket.clone(),
                source,
            })?;
        let io_err = |source: io::Error| match source.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => HyprError::Timeout {
                cmd: cmd.to_owned(),
            },
            _ => HyprError::Io {
                cmd: cmd.to_owned(),
                source,
            },
        };
        stream.set_read_timeout(Some(IO_TIMEOUT)).map_err(io_err)?;
        stream.set_write_timeout(Some(IO_TIMEOUT)).map_err(io_err)?;
        stream.write_all(cmd.as_bytes()).map_err(io_err)?;
        let mut reply = Vec::new();
        (&mut stream)
            .take(MAX_REPLY_BYTES + 1)
            .read_to_end(&mut reply)
            .map_err(io_err)?;
        if reply.len() as u64 > MAX_REPLY_BYTES {
            return Err(HyprError::TooLong {
                cmd: cmd.to_owned(),
            });
        }
        String::from_utf8(reply)
            .map_err(|e| invalid(cmd, "not UTF-8", &String::from_utf8_lossy(e.as_bytes())))
    }

    /// [`Hyprland::request`] for a `j/` request, parsed.
    pub fn request_json(&self, cmd: &str) -> Result<serde_json::Value, HyprError> {
        let reply = self.request(cmd)?;
        serde_json::from_str(&reply)
            .map_err(|e| invalid(cmd, &format!("invalid JSON: {e}"), &reply))
    }

    /// The focused workspace.
    pub fn active_workspace(&self) -> Result<Workspace, HyprError> {
        let cmd = "j/activeworkspace";
        let v = self.request_json(cmd)?;
        serde_json::from_value(v.clone()).map_err(|e| invalid(cmd, &e.to_string(), &v.to_string()))
    }

    /// The focused window, `None` when no window has focus (Hyprland answers `{}`).
    pub fn active_window(&self) -> Result<Option<Window>, HyprError> {
        let cmd = "j/activewindow";
        let v = self.request_json(cmd)?;
        if v.as_object().is_some_and(|o| o.is_empty()) {
            return Ok(None);
        }
        serde_json::from_value(v.clone())
            .map(Some)
            .map_err(|e| invalid(cmd, &e.to_string(), &v.to_string()))
    }

    /// The active workspace and window, for the snapshot.
    pub fn state(&self) -> Result<HyprState, HyprError> {
        Ok(HyprState {
            active_workspace: self.active_workspace()?,
            active_window: self.active_window()?,
        })
    }

    /// Runs a dispatcher (`dispatch workspace 2`); Hyprland answers `ok` or an error
    /// message, which becomes [`HyprError::InvalidReply`].
    pub fn dispatch(&self, dispatcher: &str, args: &str) -> Result<(), HyprError> {
        // The leading `/` ends the (empty) flags, as hyprctl sends it: Hyprland before
        // 0.40 took everything up to the first `/` of a request as flags, so a path in
        // the arguments cut the request.
        let cmd = if args.is_empty() {
            format!("/dispatch {dispatcher}")
        } else {
            format!("/dispatch {dispatcher} {args}")
        };
        let reply = self.request(&cmd)?;
        if reply.trim() == "ok" {
            Ok(())
        } else {
            Err(invalid(&cmd, "the dispatcher failed", &reply))
        }
    }
}

/// The desktop layer's questions and actions, over the requests above.
impl Hyprland {
    /// The [`Desktop`] and the `hyprland` snapshot section, from one round of requests.
    pub fn desktop(&self) -> Result<(Desktop, HyprState), HyprError> {
        let active_workspace = self.active_workspace()?;
        let raw_window = self.request_json("j/activewindow")?;
        let active_window = self.active_window_from(raw_window.clone())?;
        let workspaces = self.request_json("j/workspaces")?;
        let monitors = self.request_json("j/monitors")?;
        let str_of = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(super::cut);
        let focused_window = active_window.as_ref().map(|w| super::Window {
            id: str_of(&raw_window, "address").unwrap_or_default(),
            app_id: super::cut(&w.class),
            title: super::cut(&w.title),
            pid: Some(w.pid),
            workspace: Some(super::cut(&w.workspace.name)),
            focused: true,
        });
        let workspaces = list(&workspaces)
            .map(|w| super::Workspace {
                name: str_of(w, "name").unwrap_or_default(),
                output: str_of(w, "monitor"),
                focused: w.get("id").and_then(Value::as_i64) == Some(active_workspace.id),
                windows: w.get("windows").and_then(Value::as_u64).unwrap_or(0) as u32,
            })
            .collect();
        let outputs = list(&monitors)
            .map(|m| Output {
                name: str_of(m, "name").unwrap_or_default(),
                focused: m.get("focused").and_then(Value::as_bool).unwrap_or(false),
                width: m.get("width").and_then(Value::as_u64).map(|n| n as u32),
                height: m.get("height").and_then(Value::as_u64).map(|n| n as u32),
                scale: m.get("scale").and_then(Value::as_f64),
            })
            .collect();
        let desktop = Desktop {
            compositor: "hyprland",
            focused_window,
            focused_workspace: Some(super::cut(&active_workspace.name)),
            workspaces,
            outputs,
        };
        let state = HyprState {
            active_workspace,
            active_window,
        };
        Ok((desktop, state))
    }

    fn active_window_from(&self, v: Value) -> Result<Option<Window>, HyprError> {
        if v.as_object().is_some_and(|o| o.is_empty()) {
            return Ok(None);
        }
        serde_json::from_value(v.clone())
            .map(Some)
            .map_err(|e| invalid("j/activewindow", &e.to_string(), &v.to_string()))
    }

    /// `desktop_state` on Hyprland: what `hypr_state` returned (Hyprland's own replies)
    /// and the compositor's name.
    pub fn full_state(&self) -> Result<Value, HyprError> {
        Ok(json!({
            "compositor": "hyprland",
            "active_workspace": self.request_json("j/activeworkspace")?,
            "active_window": self.request_json("j/activewindow")?,
            "workspaces": self.request_json("j/workspaces")?,
            "clients": self.request_json("j/clients")?,
        }))
    }

    /// A `desktop_dispatch` action as a dispatcher. A window named by its address must
    /// be one of `j/clients`: Hyprland answers `ok` to `closewindow` of an address that
    /// is no window, which would report a close that never happened.
    pub fn perform(&self, action: &Action) -> Result<String, CompositorError> {
        let (dispatcher, args) = dispatcher_for(action)?;
        if let Some(window) = action.window() {
            self.check_window(window)?;
        }
        self.dispatch(dispatcher, &args)?;
        Ok(format!("dispatch {dispatcher} {args}")
            .trim_end()
            .to_owned())
    }
}

impl Hyprland {
    /// `window` (`0x…`, or without the prefix as events give it) is a client now.
    fn check_window(&self, window: &str) -> Result<(), CompositorError> {
        let want = window.trim().trim_start_matches("0x").to_ascii_lowercase();
        let clients = self.request_json("j/clients")?;
        let known = list_all(&clients).any(|c| {
            c.get("address")
                .and_then(Value::as_str)
                .is_some_and(|a| a.trim_start_matches("0x").to_ascii_lowercase() == want)
        });
        if known {
            Ok(())
        } else {
            Err(CompositorError::BadArgument(format!(
                "no window `{}` on Hyprland (desktop_state lists the windows and their addresses)",
                window.trim()
            )))
        }
    }
}

/// Every element of a JSON array reply.
fn list_all(v: &Value) -> impl Iterator<Item = &Value> {
    v.as_array().into_iter().flatten()
}

/// The dispatcher and arguments that perform `action` (a window by its address).
fn dispatcher_for(action: &Action) -> Result<(&'static str, String), CompositorError> {
    let address = |id: &str| -> Result<String, CompositorError> {
        let id = id.trim();
        let hex = id.strip_prefix("0x").unwrap_or(id);
        if hex.is_empty() || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(CompositorError::BadArgument(format!(
                "window `{id}` is not a Hyprland window address (0x…, as desktop_state lists them)"
            )));
        }
        Ok(format!("address:0x{hex}"))
    };
    Ok(match action {
        Action::FocusWindow { window } => ("focuswindow", address(window)?),
        Action::MoveToWorkspace { window, workspace } => {
            let ws = super::check_workspace(workspace)?;
            match window {
                Some(w) => ("movetoworkspacesilent", format!("{ws},{}", address(w)?)),
                None => ("movetoworkspacesilent", ws.to_owned()),
            }
        }
        Action::SwitchWorkspace { workspace } => {
            ("workspace", super::check_workspace(workspace)?.to_owned())
        }
        Action::Launch { argv } => ("exec", super::exec_line("hyprland", argv)?),
        Action::CloseWindow { window: Some(w) } => ("closewindow", address(w)?),
        Action::CloseWindow { window: None } => ("killactive", String::new()),
    })
}

/// The elements of a JSON array reply, at most [`MAX_LISTED`].
fn list(v: &Value) -> impl Iterator<Item = &Value> {
    v.as_array().into_iter().flatten().take(MAX_LISTED)
}

fn invalid(cmd: &str, reason: &str, reply: &str) -> HyprError {
    HyprError::InvalidReply {
        cmd: cmd.to_owned(),
        reason: reason.to_owned(),
        snippet: reply.chars().take(200).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn no_runtime_hypr_dir_means_no_hyprland() {
        let dir = tempfile::tempdir().unwrap();
        let env: BTreeMap<String, String> = [(
            "XDG_RUNTIME_DIR".to_owned(),
            dir.path().display().to_string(),
        )]
        .into();
        assert_eq!(Hyprland::detect(&env), None);
    }

    #[test]
    fn a_signature_with_a_slash_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let env: BTreeMap<String, String> = [
            (
                "XDG_RUNTIME_DIR".to_owned(),
                dir.path().display().to_string(),
            ),
            ("HYPRLAND_INSTANCE_SIGNATURE".to_owned(), "../x".to_owned()),
        ]
        .into();
        assert_eq!(Hyprland::detect(&env), None);
    }

    #[test]
    fn actions_become_dispatchers() {
        let ws = |w: &str| Action::MoveToWorkspace {
            window: Some(w.to_owned()),
            workspace: "2".to_owned(),
        };
        assert_eq!(
            dispatcher_for(&ws("0x55d1")).unwrap(),
            ("movetoworkspacesilent", "2,address:0x55d1".to_owned())
        );
        assert!(dispatcher_for(&ws("class:foot")).is_err());
        assert_eq!(
            dispatcher_for(&Action::CloseWindow { window: None }).unwrap(),
            ("killactive", String::new())
        );
    }

    #[test]
    fn nothing_listening_is_a_connect_error() {
        let dir = tempfile::tempdir().unwrap();
        let h = Hyprland::at(dir.path().join(".socket.sock"));
        assert!(matches!(
            h.request("j/activewindow"),
            Err(HyprError::Connect { .. })
        ));
    }
}
