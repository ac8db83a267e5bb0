//! The desktop tools, whichever compositor runs (Hyprland, sway, niri;
//! [`crate::compositor`]): `desktop_state` (read) and `desktop_dispatch` (execute).
//!
//! Both are hidden from the model when no compositor answers. `desktop_dispatch` takes
//! one of five actions, which the compositor's client maps to its own command; windows
//! are named by the id `desktop_state` lists, workspaces by name, and every argument is
//! checked before anything is sent (one line, no command separator). `launch` starts a
//! program *through the compositor*, outside familiar's sandbox: the loop always asks
//! before it, whatever the policy's execute mode (`catalog::runs_outside_sandbox`).

use std::sync::Arc;

use futures::FutureExt;
use serde_json::{Value, json};

use super::ToolFuture;
use super::util::{object_schema, str_arg};
use super::{Tool, ToolContext, ToolError};
use crate::catalog::{self, ToolInfo};
use crate::compositor::{Action, Compositor, CompositorError};

/// Finds the compositor now (it may start or stop while the daemon runs).
pub type Locate = Arc<dyn Fn() -> Option<Compositor> + Send + Sync>;

/// The compositor of the daemon's environment.
pub fn locate_from_env() -> Locate {
    Arc::new(|| Compositor::detect(&crate::config::ProcessEnv))
}

/// `desktop_dispatch`'s actions, as the model names them.
pub const ACTIONS: &[&str] = &[
    "focus_window",
    "move_to_workspace",
    "switch_workspace",
    "launch",
    "close_window",
];

pub struct DesktopState {
    pub locate: Locate,
}

impl Tool for DesktopState {
    fn info(&self) -> &'static ToolInfo {
        &catalog::DESKTOP_STATE
    }

    fn description(&self) -> &'static str {
        "The desktop now, as JSON: the compositor (hyprland, sway or niri), the focused \
         window, workspaces, outputs and every window with the id desktop_dispatch takes."
    }

    fn schema(&self) -> Value {
        object_schema(json!({}), &[])
    }

    fn available(&self) -> bool {
        (self.locate)().is_some()
    }

    fn execute(&self, _args: Value, _ctx: ToolContext) -> ToolFuture {
        let locate = Arc::clone(&self.locate);
        async move {
            tokio::task::spawn_blocking(move || {
                let c = locate().ok_or_else(|| ToolError::model("no compositor is running"))?;
                let state = c
                    .state()
                    .map_err(|e| ToolError::model(format!("{}: {e}", c.name())))?;
                serde_json::to_string_pretty(&state).map_err(|e| ToolError::Fatal(e.to_string()))
            })
            .await
            .map_err(|e| ToolError::Fatal(format!("desktop_state worker failed: {e}")))?
        }
        .boxed()
    }
}

pub struct DesktopDispatch {
    pub locate: Locate,
}

/// The action a call asks for; the error tells the model what is expected.
pub fn action(args: &Value) -> Result<Action, ToolError> {
    let opt = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_owned);
    let need = |k: &str, what: &str| {
        opt(k).ok_or_else(|| ToolError::model(format!("`{what}` needs `{k}`")))
    };
    let name = str_arg(args, "action")?;
    Ok(match name {
        "focus_window" => Action::FocusWindow {
            window: need("window", name)?,
        },
        "move_to_workspace" => Action::MoveToWorkspace {
            window: opt("window"),
            workspace: need("workspace", name)?,
        },
        "switch_workspace" => Action::SwitchWorkspace {
            workspace: need("workspace", name)?,
        },
        "launch" => Action::Launch {
            command: need("command", name)?,
        },
        "close_window" => Action::CloseWindow {
            window: opt("window"),
        },
        other => {
            return Err(ToolError::model(format!(
                "unknown action `{other}` (one of: {})",
                ACTIONS.join(", ")
            )));
        }
    })
}

impl Tool for DesktopDispatch {
    fn info(&self) -> &'static ToolInfo {
        &catalog::DESKTOP_DISPATCH
    }

    fn description(&self) -> &'static str {
        "Act on the desktop: focus_window (window), move_to_workspace (workspace, window; \
         without window the focused one), switch_workspace (workspace), launch (command: \
         starts a program), close_window (window; without it the focused one). Window ids \
         come from desktop_state. Needs the user's approval."
    }

    fn schema(&self) -> Value {
        object_schema(
            json!({
                "action": {"type": "string", "enum": ACTIONS},
                "window": {"type": "string", "description": "a window id from desktop_state"},
                "workspace": {"type": "string", "description": "a workspace name or number"},
                "command": {"type": "string", "description": "launch: the command line, one program"}
            }),
            &["action"],
        )
    }

    fn available(&self) -> bool {
        (self.locate)().is_some()
    }

    fn execute(&self, args: Value, _ctx: ToolContext) -> ToolFuture {
        let locate = Arc::clone(&self.locate);
        async move {
            let action = action(&args)?;
            tokio::task::spawn_blocking(move || {
                let c = locate().ok_or_else(|| ToolError::model("no compositor is running"))?;
                match c.perform(&action) {
                    Ok(sent) => Ok(format!("ok ({}): {sent}", c.name())),
                    Err(e @ CompositorError::BadArgument(_)) => {
                        Err(ToolError::model(e.to_string()))
                    }
                    Err(e @ (CompositorError::Hyprland(_) | CompositorError::Ipc(_))) => {
                        Err(ToolError::model(format!("{}: {e}", c.name())))
                    }
                }
            })
            .await
            .map_err(|e| ToolError::Fatal(format!("desktop_dispatch worker failed: {e}")))?
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_need_their_arguments() {
        assert_eq!(
            action(&json!({"action": "move_to_workspace", "workspace": "2"})).unwrap(),
            Action::MoveToWorkspace {
                window: None,
                workspace: "2".to_owned()
            }
        );
        assert!(action(&json!({"action": "focus_window"})).is_err());
        assert!(action(&json!({"action": "exit"})).is_err());
    }
}
