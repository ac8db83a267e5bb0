//! The Hyprland-only tools `hypr_state` (read) and `hypr_dispatch` (execute), over
//! Hyprland's command socket ([`crate::compositor::hyprland`]). Deprecated: the
//! compositor-neutral `desktop_state` and `desktop_dispatch` ([`super::desktop`])
//! replace them; they are kept unchanged for one release so souls naming them work.
//!
//! Both are hidden from the model when no Hyprland instance answers. `hypr_dispatch`
//! accepts only dispatchers it knows, with arguments on one line and without the `;`
//! that would let one request carry a second command. `exec`-style dispatchers start
//! programs *through the compositor*, outside familiar's sandbox: the loop always asks
//! before them, whatever the policy's execute mode (see `agent::calls::gate`), and
//! their arguments pass the check `desktop_dispatch launch`'s do: one program found on
//! the system `PATH` and its plain words ([`crate::programs::argv`]), no shell line.

use std::path::Path;
use std::sync::Arc;

use futures::FutureExt;
use serde_json::{Value, json};

use super::ToolFuture;
use super::util::{object_schema, str_arg};
use super::{Tool, ToolContext, ToolError};
use crate::catalog::{self, LAUNCHING_DISPATCHERS, ToolInfo};
use crate::compositor::Hyprland;
use crate::programs::argv::Argv;

/// Finds the compositor now (it may start or stop while the daemon runs).
pub type Locate = Arc<dyn Fn() -> Option<Hyprland> + Send + Sync>;

/// The compositor of the daemon's environment.
pub fn locate_from_env() -> Locate {
    Arc::new(|| Hyprland::detect(&crate::config::ProcessEnv))
}

/// Dispatchers the model may use.
pub const DISPATCHERS: &[&str] = &[
    "exec",
    "execr",
    "workspace",
    "movetoworkspace",
    "movetoworkspacesilent",
    "focuswindow",
    "focusmonitor",
    "movefocus",
    "movewindow",
    "swapwindow",
    "resizeactive",
    "moveactive",
    "togglefloating",
    "setfloating",
    "settiled",
    "fullscreen",
    "pin",
    "centerwindow",
    "killactive",
    "closewindow",
    "togglespecialworkspace",
    "togglegroup",
    "changegroupactive",
    "layoutmsg",
    "cyclenext",
    "focusurgentorlast",
    "focuscurrentorlast",
    "renameworkspace",
    "movecurrentworkspacetomonitor",
    "swapactiveworkspaces",
    "splitratio",
    "bringactivetotop",
    "alterzorder",
    "dpms",
];

pub struct HyprState {
    pub locate: Locate,
}

impl Tool for HyprState {
    fn info(&self) -> &'static ToolInfo {
        &catalog::HYPR_STATE
    }

    fn description(&self) -> &'static str {
        "The Hyprland desktop now: workspaces, windows (class, title, workspace, address) and \
         the focused window, as JSON."
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
                let hypr = locate().ok_or_else(|| ToolError::model("Hyprland is not running"))?;
                let get = |cmd: &str| {
                    hypr.request_json(cmd)
                        .map_err(|e| ToolError::model(format!("hyprctl {cmd}: {e}")))
                };
                let state = json!({
                    "active_workspace": get("j/activeworkspace")?,
                    "active_window": get("j/activewindow")?,
                    "workspaces": get("j/workspaces")?,
                    "clients": get("j/clients")?,
                });
                serde_json::to_string_pretty(&state).map_err(|e| ToolError::Fatal(e.to_string()))
            })
            .await
            .map_err(|e| ToolError::Fatal(format!("hypr_state worker failed: {e}")))?
        }
        .boxed()
    }
}

pub struct HyprDispatch {
    pub locate: Locate,
}

/// Checks a dispatcher and its arguments; the error tells the model what is allowed.
pub fn validate(dispatcher: &str, args: &str) -> Result<(), ToolError> {
    if !DISPATCHERS.contains(&dispatcher) {
        return Err(ToolError::model(format!(
            "unknown or unsupported dispatcher `{dispatcher}` (supported: {})",
            DISPATCHERS.join(", ")
        )));
    }
    if args.chars().any(|c| c == ';' || c.is_control()) {
        return Err(ToolError::model(
            "dispatcher arguments must be one line without `;` (one dispatch per call)",
        ));
    }
    if args.len() > 1024 {
        return Err(ToolError::model(
            "dispatcher arguments are longer than 1024 bytes",
        ));
    }
    Ok(())
}

/// What is sent for `dispatcher`: an `exec`'s words checked, its program found outside
/// `home` and every word quoted for Hyprland's shell; other dispatchers' arguments as
/// they are.
pub fn dispatch_args(dispatcher: &str, args: &str, home: &Path) -> Result<String, ToolError> {
    if !LAUNCHING_DISPATCHERS.contains(&dispatcher) {
        return Ok(args.to_owned());
    }
    if args.starts_with('[') {
        return Err(ToolError::model(
            "window rules (`[…]` before the program) are not taken: give the program and its arguments, or use desktop_dispatch launch",
        ));
    }
    let argv = Argv::from_words(args)
        .and_then(|a| a.resolve(Some(home)))
        .map_err(|e| ToolError::model(e.to_string()))?;
    crate::compositor::exec_line("hyprland", &argv).map_err(|e| ToolError::model(e.to_string()))
}

impl Tool for HyprDispatch {
    fn info(&self) -> &'static ToolInfo {
        &catalog::HYPR_DISPATCH
    }

    fn description(&self) -> &'static str {
        "Run one Hyprland dispatcher, e.g. {\"dispatcher\": \"workspace\", \"args\": \"3\"} or \
         {\"dispatcher\": \"focuswindow\", \"args\": \"class:^(firefox)$\"}. `exec` launches a \
         program. Needs the user's approval."
    }

    fn schema(&self) -> Value {
        object_schema(
            json!({
                "dispatcher": {"type": "string", "enum": DISPATCHERS},
                "args": {"type": "string", "description": "the dispatcher's arguments, one line"}
            }),
            &["dispatcher"],
        )
    }

    fn available(&self) -> bool {
        (self.locate)().is_some()
    }

    fn execute(&self, args: Value, ctx: ToolContext) -> ToolFuture {
        let locate = Arc::clone(&self.locate);
        async move {
            let dispatcher = str_arg(&args, "dispatcher")?.to_owned();
            let dargs = args
                .get("args")
                .and_then(Value::as_str)
                .unwrap_or("")
                .trim()
                .to_owned();
            validate(&dispatcher, &dargs)?;
            let dargs = dispatch_args(&dispatcher, &dargs, &ctx.home)?;
            tokio::task::spawn_blocking(move || {
                let hypr = locate().ok_or_else(|| ToolError::model("Hyprland is not running"))?;
                hypr.dispatch(&dispatcher, &dargs)
                    .map_err(|e| ToolError::model(format!("dispatch {dispatcher} {dargs}: {e}")))?;
                Ok(format!("ok: dispatch {dispatcher} {dargs}")
                    .trim_end()
                    .to_owned())
            })
            .await
            .map_err(|e| ToolError::Fatal(format!("hypr_dispatch worker failed: {e}")))?
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatchers_are_checked_and_requests_cannot_be_chained() {
        assert!(validate("workspace", "3").is_ok());
        assert!(validate("exec", "kitty --single-instance").is_ok());
        assert!(validate("exit", "").is_err(), "exit would end the session");
        assert!(validate("workspace", "3; dispatch exit").is_err());
        assert!(validate("workspace", "3\ndispatch exit").is_err());
    }

    /// See: issue 39 (`exec` took a shell line).
    #[test]
    fn exec_takes_one_program_and_its_words() {
        let home = Path::new("/nonexistent-home");
        let err = dispatch_args("exec", "sh -c x && touch y", home).unwrap_err();
        assert!(err.to_string().contains("`&&`"), "{err}");
        assert!(dispatch_args("execr", "[float] sh", home).is_err());
        let sh = crate::programs::find("sh").unwrap();
        assert_eq!(
            dispatch_args("exec", "sh -c 'echo a'", home).unwrap(),
            format!("exec '{}' '-c' 'echo a'", sh.display())
        );
        assert_eq!(dispatch_args("workspace", "3", home).unwrap(), "3");
    }
}
