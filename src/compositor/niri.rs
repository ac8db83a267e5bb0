//! A small client of niri's IPC on `$NIRI_SOCKET` (niri-ipc is GPL): one JSON request
//! per line (`"Workspaces"`, `{"Action": {...}}`), one JSON reply per line,
//! `{"Ok": ...}` or `{"Err": "why"}`. One connection per request, bounded by
//! [`super::IO_TIMEOUT`] and [`super::MAX_REPLY_BYTES`].

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::{Action, CompositorError, Desktop, IpcError, MAX_LISTED, Output, Window, Workspace};
use crate::config::Env;

const NAME: &str = "niri";

/// A niri instance's IPC socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Niri {
    socket: PathBuf,
}

impl Niri {
    /// A client of the socket at `socket` (no connection is made).
    pub fn at(socket: impl Into<PathBuf>) -> Niri {
        Niri {
            socket: socket.into(),
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The instance `$NIRI_SOCKET` names, when that socket exists.
    pub fn detect(env: &dyn Env) -> Option<Niri> {
        env.path("NIRI_SOCKET").filter(|p| p.exists()).map(Niri::at)
    }

    /// Sends one request and returns what its `Ok` holds; an `Err` reply is
    /// [`IpcError::Refused`].
    pub fn request(&self, request: &Value) -> Result<Value, IpcError> {
        let what = request.to_string();
        let io = super::io_error(NAME, &what);
        let mut stream = super::connect(NAME, &self.socket, &what)?;
        stream
            .write_all(format!("{what}\n").as_bytes())
            .map_err(&io)?;
        let mut line = Vec::new();
        BufReader::new((&mut stream).take(super::MAX_REPLY_BYTES + 1))
            .read_until(b'\n', &mut line)
            .map_err(&io)?;
        if line.len() as u64 > super::MAX_REPLY_BYTES {
            return Err(IpcError::TooLong {
                compositor: NAME,
                request: what.clone(),
            });
        }
        let reply: Value = serde_json::from_slice(&line).map_err(|e| {
            super::invalid(
                NAME,
                &what,
                &format!("invalid JSON: {e}"),
                &String::from_utf8_lossy(&line),
            )
        })?;
        if let Some(ok) = reply.get("Ok") {
            return Ok(ok.clone());
        }
        match reply.get("Err") {
            Some(e) => Err(IpcError::Refused {
                compositor: NAME,
                request: what.clone(),
                message: e.as_str().map_or_else(|| e.to_string(), str::to_owned),
            }),
            None => Err(super::invalid(
                NAME,
                &what,
                "neither Ok nor Err",
                &reply.to_string(),
            )),
        }
    }

    /// A request whose `Ok` is `{"NAME": value}`: the value.
    fn ask(&self, name: &str) -> Result<Value, IpcError> {
        let reply = self.request(&json!(name))?;
        reply.get(name).cloned().ok_or_else(|| {
            super::invalid(NAME, name, "not the answer asked for", &reply.to_string())
        })
    }

    /// The desktop now.
    pub fn desktop(&self) -> Result<Desktop, IpcError> {
        let workspaces = self.ask("Workspaces")?;
        let outputs = self.ask("Outputs")?;
        let windows = self.ask("Windows")?;
        Ok(desktop_from(&workspaces, &outputs, &windows))
    }

    /// Every window.
    pub fn windows(&self) -> Result<Vec<Window>, IpcError> {
        let workspaces = self.ask("Workspaces")?;
        Ok(windows_from(&self.ask("Windows")?, &workspaces))
    }

    /// A `desktop_dispatch` action as a niri action.
    pub fn perform(&self, action: &Action) -> Result<String, CompositorError> {
        let request = json!({ "Action": action_for(action)? });
        self.request(&request)?;
        Ok(request.to_string())
    }
}

/// The niri action that performs `action` (a window by its id).
fn action_for(action: &Action) -> Result<Value, CompositorError> {
    let id = |w: &str| super::numeric_window(NAME, w);
    let window = |w: &Option<String>| w.as_deref().map(id).transpose();
    // niri's workspace reference: an index on the focused output, or a name.
    let reference = |ws: &str| -> Result<Value, CompositorError> {
        let ws = super::check_workspace(ws)?;
        Ok(match ws.parse::<u8>() {
            Ok(n) => json!({"Index": n}),
            Err(_) => json!({"Name": ws}),
        })
    };
    Ok(match action {
        Action::FocusWindow { window: w } => json!({"FocusWindow": {"id": id(w)?}}),
        Action::MoveToWorkspace {
            window: w,
            workspace,
        } => json!({"MoveWindowToWorkspace": {
            "window_id": window(w)?, "reference": reference(workspace)?, "focus": false}}),
        Action::SwitchWorkspace { workspace } => {
            json!({"FocusWorkspace": {"reference": reference(workspace)?}})
        }
        // niri spawns the words as they are: no shell reads them.
        Action::Launch { argv } => json!({"Spawn": {"command": argv.argv()}}),
        Action::CloseWindow { window: w } => json!({"CloseWindow": {"id": window(w)?}}),
    })
}

/// A workspace's name as the model uses it: its name, else its index.
fn workspace_name(w: &Value) -> String {
    match w.get("name").and_then(Value::as_str) {
        Some(n) => super::cut(n),
        None => w
            .get("idx")
            .and_then(Value::as_u64)
            .unwrap_or(0)
            .to_string(),
    }
}

fn windows_from(windows: &Value, workspaces: &Value) -> Vec<Window> {
    let items = |v: &Value| v.as_array().cloned().unwrap_or_default();
    let workspaces = items(workspaces);
    items(windows)
        .iter()
        .take(MAX_LISTED)
        .map(|w| {
            let ws_id = w.get("workspace_id").and_then(Value::as_u64);
            let workspace = workspaces
                .iter()
                .find(|ws| ws_id.is_some() && ws.get("id").and_then(Value::as_u64) == ws_id)
                .map(workspace_name);
            Window {
                id: w.get("id").and_then(Value::as_u64).unwrap_or(0).to_string(),
                app_id: super::cut(w.get("app_id").and_then(Value::as_str).unwrap_or("")),
                title: super::cut(w.get("title").and_then(Value::as_str).unwrap_or("")),
                pid: w.get("pid").and_then(Value::as_i64),
                workspace,
                focused: w
                    .get("is_focused")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            }
        })
        .collect()
}

fn desktop_from(workspaces: &Value, outputs: &Value, windows: &Value) -> Desktop {
    let all_windows = windows_from(windows, workspaces);
    let ws_list = workspaces.as_array().cloned().unwrap_or_default();
    let focused_workspace = ws_list
        .iter()
        .find(|w| w.get("is_focused").and_then(Value::as_bool) == Some(true))
        .map(workspace_name);
    let count = |id: Option<u64>| {
        let on = |w: &&Value| id.is_some() && w.get("workspace_id").and_then(Value::as_u64) == id;
        windows
            .as_array()
            .map_or(0, |all| all.iter().filter(on).count()) as u32
    };
    let workspaces = ws_list
        .iter()
        .take(MAX_LISTED)
        .map(|w| Workspace {
            name: workspace_name(w),
            output: w.get("output").and_then(Value::as_str).map(super::cut),
            focused: w
                .get("is_focused")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            windows: count(w.get("id").and_then(Value::as_u64)),
        })
        .collect();
    // `Outputs` is a map from connector name to output.
    let focused_output = ws_list
        .iter()
        .find(|w| w.get("is_focused").and_then(Value::as_bool) == Some(true))
        .and_then(|w| w.get("output").and_then(Value::as_str));
    let outputs = outputs
        .as_object()
        .into_iter()
        .flatten()
        .take(MAX_LISTED)
        .map(|(name, o)| {
            let logical = |k: &str| o.pointer(&format!("/logical/{k}"));
            Output {
                name: super::cut(name),
                focused: focused_output == Some(name.as_str()),
                width: logical("width").and_then(Value::as_u64).map(|n| n as u32),
                height: logical("height").and_then(Value::as_u64).map(|n| n as u32),
                scale: logical("scale").and_then(Value::as_f64),
            }
        })
        .collect();
    Desktop {
        compositor: NAME,
        focused_window: all_windows.into_iter().find(|w| w.focused),
        focused_workspace,
        workspaces,
        outputs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_become_niri_actions() {
        let mv = Action::MoveToWorkspace {
            window: Some("12".to_owned()),
            workspace: "2".to_owned(),
        };
        assert_eq!(
            action_for(&mv).unwrap(),
            json!({"MoveWindowToWorkspace": {"window_id": 12, "reference": {"Index": 2}, "focus": false}})
        );
        let launch = Action::Launch {
            argv: crate::programs::argv::Resolved {
                program: "/usr/bin/foot".into(),
                args: vec!["-e".into(), "it's a b".into()],
            },
        };
        assert_eq!(
            action_for(&launch).unwrap(),
            json!({"Spawn": {"command": ["/usr/bin/foot", "-e", "it's a b"]}})
        );
        let close = Action::CloseWindow { window: None };
        assert_eq!(
            action_for(&close).unwrap(),
            json!({"CloseWindow": {"id": null}})
        );
    }
}
