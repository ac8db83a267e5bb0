//! The desktop tools, whichever compositor runs (Hyprland, sway, niri;
//! [`crate::compositor`]): `desktop_state` (read) and `desktop_dispatch` (execute).
//!
//! Both are hidden from the model when no compositor answers. `desktop_dispatch` takes
//! one of five actions, which the compositor's client maps to its own command; windows
//! are named by the id `desktop_state` lists, workspaces by name, and every argument is
//! checked before anything is sent (one line, no command separator). `launch` starts
//! one program with its arguments (no shell: [`crate::programs::argv`]) *through the
//! compositor*, outside familiar's sandbox: the loop always asks before it, whatever
//! the policy's execute mode (`catalog::runs_outside_sandbox`).

use std::path::Path;
use std::sync::Arc;

use futures::FutureExt;
use serde_json::{Value, json};

use super::ToolFuture;
use super::util::{object_schema, str_arg};
use super::{Tool, ToolContext, ToolError};
use crate::catalog::{self, ToolInfo};
use crate::compositor::{Action, Compositor, CompositorError};
use crate::programs::argv::Argv;

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

/// The action a call asks for, a launch's program found (outside `home`); the error
/// tells the model what is expected.
pub fn action(args: &Value, home: &Path) -> Result<Action, ToolError> {
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
            argv: Argv::from_call(args)
                .and_then(|argv| argv.resolve(Some(home)))
                .map_err(|e| ToolError::model(e.to_string()))?,
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
         without window the focused one), switch_workspace (workspace), launch (program \
         and args: starts one installed program with its arguments, no shell: e.g. \
         {\"action\": \"launch\", \"program\": \"foot\", \"args\": [\"-e\", \"htop\"]}), \
         close_window (window; without it the focused one). Window ids come from \
         desktop_state. Needs the user's approval."
    }

    fn schema(&self) -> Value {
        object_schema(
            json!({
                "action": {"type": "string", "enum": ACTIONS},
                "window": {"type": "string", "description": "a window id from desktop_state"},
                "workspace": {"type": "string", "description": "a workspace name or number"},
                "program": {"type": "string", "description": "launch: the program, a name installed in the system's directories or an absolute path"},
                "args": {"type": "array", "items": {"type": "string"}, "description": "launch: the program's arguments, one word each (no shell: quotes, `&&`, `|`, `$` are plain text)"}
            }),
            &["action"],
        )
    }

    fn available(&self) -> bool {
        (self.locate)().is_some()
    }

    fn execute(&self, args: Value, ctx: ToolContext) -> ToolFuture {
        let locate = Arc::clone(&self.locate);
        async move {
            let action = action(&args, &ctx.home)?;
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
        let home = Path::new("/nonexistent-home");
        assert_eq!(
            action(
                &json!({"action": "move_to_workspace", "workspace": "2"}),
                home
            )
            .unwrap(),
            Action::MoveToWorkspace {
                window: None,
                workspace: "2".to_owned()
            }
        );
        assert!(action(&json!({"action": "focus_window"}), home).is_err());
        assert!(action(&json!({"action": "exit"}), home).is_err());
    }

    /// See: issue 39 (`a && b` reached the compositor's shell).
    #[test]
    fn a_launch_is_one_program_found_on_the_system_path() {
        let home = Path::new("/nonexistent-home");
        let err = action(
            &json!({"action": "launch", "command": "sh && touch x"}),
            home,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("`&&` is shell syntax"), "{err}");
        let Action::Launch { argv } = action(
            &json!({"action": "launch", "program": "sh", "args": ["-c", "a && b"]}),
            home,
        )
        .unwrap() else {
            panic!("not a launch");
        };
        assert_eq!(Some(argv.program), crate::programs::find("sh"));
        assert_eq!(argv.args, ["-c", "a && b"]);
    }
}
