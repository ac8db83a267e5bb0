//! A small client of sway's IPC, which is i3's: on `$SWAYSOCK` (or `$I3SOCK`), each
//! message is the magic `i3-ipc`, the payload's length and the message type (both u32
//! in the machine's byte order), then the payload; the reply has the same frame. One
//! connection per request, like the Hyprland client, each bounded by
//! [`super::IO_TIMEOUT`] and [`super::MAX_REPLY_BYTES`]. (`swayipc` is MIT, but its
//! async flavour brings its own runtime glue for four message types; this is smaller.)

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{Action, CompositorError, Desktop, IpcError, MAX_LISTED, Output, Window, Workspace};
use crate::config::Env;

const NAME: &str = "sway";
const MAGIC: &[u8; 6] = b"i3-ipc";
const RUN_COMMAND: u32 = 0;
const GET_WORKSPACES: u32 = 1;
const GET_OUTPUTS: u32 = 3;
pub(crate) const GET_TREE: u32 = 4;

/// A sway (or i3) instance's IPC socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sway {
    socket: PathBuf,
}

impl Sway {
    /// A client of the socket at `socket` (no connection is made).
    pub fn at(socket: impl Into<PathBuf>) -> Sway {
        Sway {
            socket: socket.into(),
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The instance `$SWAYSOCK` (else `$I3SOCK`) names, when that socket exists.
    pub fn detect(env: &dyn Env) -> Option<Sway> {
        ["SWAYSOCK", "I3SOCK"]
            .into_iter()
            .filter_map(|k| env.path(k))
            .find(|p| p.exists())
            .map(Sway::at)
    }

    /// Sends one message and returns its reply's payload, parsed.
    pub fn request(&self, kind: u32, payload: &str) -> Result<Value, IpcError> {
        let what = match kind {
            RUN_COMMAND => format!("RUN_COMMAND {payload}"),
            GET_WORKSPACES => "GET_WORKSPACES".to_owned(),
            GET_OUTPUTS => "GET_OUTPUTS".to_owned(),
            GET_TREE => "GET_TREE".to_owned(),
            other => format!("message type {other}"),
        };
        let io = super::io_error(NAME, &what);
        let mut stream = super::connect(NAME, &self.socket, &what)?;
        let len = u32::try_from(payload.len())
            .map_err(|_| super::invalid(NAME, &what, "payload too long", ""))?;
        let mut frame = Vec::with_capacity(14 + payload.len());
        frame.extend_from_slice(MAGIC);
        frame.extend_from_slice(&len.to_ne_bytes());
        frame.extend_from_slice(&kind.to_ne_bytes());
        frame.extend_from_slice(payload.as_bytes());
        stream.write_all(&frame).map_err(&io)?;
        let mut header = [0u8; 14];
        stream.read_exact(&mut header).map_err(&io)?;
        if &header[..6] != MAGIC {
            return Err(super::invalid(
                NAME,
                &what,
                "no i3-ipc header",
                &String::from_utf8_lossy(&header),
            ));
        }
        let len = u64::from(u32::from_ne_bytes([
            header[6], header[7], header[8], header[9],
        ]));
        if len > super::MAX_REPLY_BYTES {
            return Err(IpcError::TooLong {
                compositor: NAME,
                request: what.clone(),
            });
        }
        let mut body = Vec::new();
        (&mut stream)
            .take(len)
            .read_to_end(&mut body)
            .map_err(&io)?;
        serde_json::from_slice(&body).map_err(|e| {
            super::invalid(
                NAME,
                &what,
                &format!("invalid JSON: {e}"),
                &String::from_utf8_lossy(&body),
            )
        })
    }

    /// Runs one sway command; an unsuccessful one is [`IpcError::Refused`] with sway's
    /// message.
    pub fn run_command(&self, command: &str) -> Result<(), IpcError> {
        let reply = self.request(RUN_COMMAND, command)?;
        let results = reply
            .as_array()
            .ok_or_else(|| super::invalid(NAME, command, "not a list", &reply.to_string()))?;
        for r in results {
            if r.get("success").and_then(Value::as_bool) != Some(true) {
                return Err(IpcError::Refused {
                    compositor: NAME,
                    request: command.to_owned(),
                    message: r
                        .get("error")
                        .and_then(Value::as_str)
                        .unwrap_or("failed")
                        .to_owned(),
                });
            }
        }
        Ok(())
    }

    /// The desktop now: workspaces, outputs, and the focused window from the tree.
    pub fn desktop(&self) -> Result<Desktop, IpcError> {
        let workspaces = self.request(GET_WORKSPACES, "")?;
        let outputs = self.request(GET_OUTPUTS, "")?;
        let tree = self.request(GET_TREE, "")?;
        Ok(desktop_from(&workspaces, &outputs, &tree))
    }

    /// Every window, from the tree.
    pub fn windows(&self) -> Result<Vec<Window>, IpcError> {
        Ok(windows_of(&self.request(GET_TREE, "")?))
    }

    /// A `desktop_dispatch` action as a sway command.
    pub fn perform(&self, action: &Action) -> Result<String, CompositorError> {
        let command = command_for(action)?;
        self.run_command(&command)?;
        Ok(command)
    }
}

/// The sway command that performs `action` (a window by its container id).
fn command_for(action: &Action) -> Result<String, CompositorError> {
    let criteria = |w: &Option<String>| -> Result<String, CompositorError> {
        Ok(match w {
            Some(id) => format!("[con_id={}] ", super::numeric_window(NAME, id)?),
            None => String::new(),
        })
    };
    // `number 2` finds workspace 2 whatever its full name (`2:web`).
    let workspace = |ws: &str| -> Result<String, CompositorError> {
        let ws = super::check_workspace(ws)?;
        Ok(match ws.parse::<i64>() {
            Ok(n) => format!("number {n}"),
            Err(_) => format!("\"{ws}\""),
        })
    };
    Ok(match action {
        Action::FocusWindow { window } => format!("{}focus", criteria(&Some(window.clone()))?),
        Action::MoveToWorkspace {
            window,
            workspace: ws,
        } => {
            format!(
                "{}move container to workspace {}",
                criteria(window)?,
                workspace(ws)?
            )
        }
        Action::SwitchWorkspace { workspace: ws } => format!("workspace {}", workspace(ws)?),
        Action::Launch { argv } => format!("exec {}", super::exec_line(NAME, argv)?),
        Action::CloseWindow { window } => format!("{}kill", criteria(window)?),
    })
}

fn desktop_from(workspaces: &Value, outputs: &Value, tree: &Value) -> Desktop {
    let windows = windows_of(tree);
    let items = |v: &Value| v.as_array().cloned().unwrap_or_default();
    let str_of = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(super::cut);
    let focused_workspace = items(workspaces)
        .iter()
        .find(|w| w.get("focused").and_then(Value::as_bool) == Some(true))
        .and_then(|w| str_of(w, "name"));
    let workspaces = items(workspaces)
        .iter()
        .take(MAX_LISTED)
        .map(|w| {
            let name = str_of(w, "name").unwrap_or_default();
            let count = windows
                .iter()
                .filter(|x| x.workspace.as_deref() == Some(name.as_str()))
                .count();
            Workspace {
                output: str_of(w, "output"),
                focused: w.get("focused").and_then(Value::as_bool).unwrap_or(false),
                windows: count as u32,
                name,
            }
        })
        .collect();
    let outputs = items(outputs)
        .iter()
        .take(MAX_LISTED)
        .map(|o| {
            let rect = |k: &str| {
                o.get("rect")
                    .and_then(|r| r.get(k))
                    .and_then(Value::as_u64)
                    .map(|n| n as u32)
            };
            let active = o.get("active").and_then(Value::as_bool).unwrap_or(false);
            Output {
                name: str_of(o, "name").unwrap_or_default(),
                focused: o.get("focused").and_then(Value::as_bool).unwrap_or(false),
                width: rect("width").filter(|_| active),
                height: rect("height").filter(|_| active),
                scale: o.get("scale").and_then(Value::as_f64).filter(|s| *s > 0.0),
            }
        })
        .collect();
    Desktop {
        compositor: NAME,
        focused_window: windows.iter().find(|w| w.focused).cloned(),
        focused_workspace,
        workspaces,
        outputs,
    }
}

/// The windows of a `GET_TREE` reply (leaf containers, tiled or floating), each with
/// its workspace; the scratchpad's are left out. At most [`MAX_LISTED`].
fn windows_of(tree: &Value) -> Vec<Window> {
    let mut out = Vec::new();
    walk(tree, None, &mut out);
    out
}

fn walk(node: &Value, workspace: Option<&str>, out: &mut Vec<Window>) {
    if out.len() >= MAX_LISTED {
        return;
    }
    let kind = node.get("type").and_then(Value::as_str).unwrap_or("");
    let name = node.get("name").and_then(Value::as_str);
    let workspace = match kind {
        "workspace" if name == Some("__i3_scratch") => return,
        "workspace" => name,
        _ => workspace,
    };
    let children: Vec<&Value> = ["nodes", "floating_nodes"]
        .iter()
        .filter_map(|k| node.get(*k).and_then(Value::as_array))
        .flatten()
        .collect();
    if children.is_empty() && matches!(kind, "con" | "floating_con") {
        let app_id = app_id_of(node);
        out.push(Window {
            id: node
                .get("id")
                .and_then(Value::as_u64)
                .unwrap_or(0)
                .to_string(),
            app_id: super::cut(app_id),
            title: super::cut(name.unwrap_or("")),
            pid: node.get("pid").and_then(Value::as_i64),
            workspace: workspace.map(super::cut),
            focused: node
                .get("focused")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        });
        return;
    }
    for child in children {
        walk(child, workspace, out);
    }
}

/// A sway node's app: its Wayland `app_id`, or an X11 window's class.
pub(crate) fn app_id_of(node: &Value) -> &str {
    node.get("app_id")
        .and_then(Value::as_str)
        .or_else(|| {
            node.pointer("/window_properties/class")
                .and_then(Value::as_str)
        })
        .unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tree() -> Value {
        json!({"id": 1, "type": "root", "name": "root", "nodes": [
            {"id": 2, "type": "output", "name": "__i3", "nodes": [
                {"id": 3, "type": "workspace", "name": "__i3_scratch", "nodes": [],
                 "floating_nodes": [{"id": 9, "type": "floating_con", "name": "hidden", "nodes": []}]}]},
            {"id": 4, "type": "output", "name": "HEADLESS-1", "nodes": [
                {"id": 5, "type": "workspace", "name": "1", "nodes": [
                    {"id": 6, "type": "con", "name": "~", "app_id": "foot", "pid": 77,
                     "focused": true, "nodes": []},
                    {"id": 7, "type": "con", "name": "X", "app_id": null, "pid": 78,
                     "window_properties": {"class": "XTerm"}, "nodes": []}],
                 "floating_nodes": []},
                {"id": 8, "type": "workspace", "name": "2", "nodes": [], "floating_nodes": []}]}]})
    }

    #[test]
    fn the_tree_gives_the_focused_window_and_the_counts() {
        let workspaces = json!([
            {"num": 1, "name": "1", "focused": true, "output": "HEADLESS-1"},
            {"num": 2, "name": "2", "focused": false, "output": "HEADLESS-1"}]);
        let outputs = json!([{"name": "HEADLESS-1", "active": true, "focused": true,
            "scale": 1.0, "rect": {"x": 0, "y": 0, "width": 1280, "height": 720}}]);
        let d = desktop_from(&workspaces, &outputs, &tree());
        let focused = d.focused_window.unwrap();
        assert_eq!(
            (
                focused.id.as_str(),
                focused.app_id.as_str(),
                focused.title.as_str(),
                focused.pid
            ),
            ("6", "foot", "~", Some(77))
        );
        assert_eq!(focused.workspace.as_deref(), Some("1"));
        assert_eq!(d.focused_workspace.as_deref(), Some("1"));
        assert_eq!(
            d.workspaces.iter().map(|w| w.windows).collect::<Vec<_>>(),
            [2, 0]
        );
        assert_eq!(d.outputs[0].width, Some(1280));
        assert_eq!(
            windows_of(&tree())[1].app_id,
            "XTerm",
            "an Xwayland window's class"
        );
    }

    #[test]
    fn actions_become_sway_commands() {
        let mv = Action::MoveToWorkspace {
            window: Some("6".to_owned()),
            workspace: "2".to_owned(),
        };
        assert_eq!(
            command_for(&mv).unwrap(),
            "[con_id=6] move container to workspace number 2"
        );
        let switch = Action::SwitchWorkspace {
            workspace: "web".to_owned(),
        };
        assert_eq!(command_for(&switch).unwrap(), "workspace \"web\"");
        let bad = Action::FocusWindow {
            window: "6] kill; [".to_owned(),
        };
        assert!(command_for(&bad).is_err());
    }
}
