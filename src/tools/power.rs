//! `power`: suspend, reboot or power off through logind (`org.freedesktop.login1` on
//! the system bus), never a subprocess.
//!
//! The invariant: the action is taken only when logind's `CanSuspend` / `CanReboot` /
//! `CanPowerOff` answers `yes`, and always with `interactive = false`, so familiar never
//! raises an authentication prompt of its own; `na`, `no` and `challenge` are reported
//! to the model as they are, and nothing is done. The tier is `system_critical`: the
//! default policy asks a person first, the strict one denies. Hidden when logind does
//! not answer.

use futures::FutureExt;
use serde_json::{Value, json};

use super::bus::{Bus, Presence};
use super::util::{not_one_of, object_schema, str_arg};
use super::{Tool, ToolContext, ToolError, ToolFuture};
use crate::catalog::{self, ToolInfo};
use crate::dbus::desktop::Login1ManagerProxy;

/// logind's bus name.
pub const SERVICE: &str = crate::dbus::desktop::LOGIND;

/// What the model asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Suspend,
    Reboot,
    PowerOff,
}

impl Action {
    pub const ALL: &[&str] = &["suspend", "reboot", "poweroff"];

    pub fn parse(s: &str) -> Result<Action, ToolError> {
        match s {
            "suspend" => Ok(Action::Suspend),
            "reboot" => Ok(Action::Reboot),
            "poweroff" => Ok(Action::PowerOff),
            other => Err(not_one_of("action", other, Action::ALL)),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Action::Suspend => "suspend",
            Action::Reboot => "reboot",
            Action::PowerOff => "poweroff",
        }
    }
}

pub struct Power {
    presence: Presence,
}

impl Power {
    /// logind on `bus`.
    pub fn new(bus: Bus) -> Power {
        Power {
            presence: Presence::new(bus, SERVICE),
        }
    }

    /// logind on the system bus.
    pub fn system() -> Power {
        Power::new(Bus::System)
    }
}

/// Why logind's `Can*` answer stops the action, or `None` for `yes`.
fn refusal(action: Action, answer: &str) -> Option<String> {
    let a = action.as_str();
    match answer {
        "yes" => None,
        "na" => Some(format!(
            "{a} is not available on this machine (logind: na): the hardware, the \
             configuration or the sleep settings do not support it; nothing was done"
        )),
        "no" => Some(format!(
            "{a} is not permitted for this user (logind: no); nothing was done"
        )),
        "challenge" => Some(format!(
            "{a} needs the user to authenticate (logind: challenge); familiar does not \
             raise authentication prompts, so nothing was done: the user can do it \
             themselves"
        )),
        other => Some(format!(
            "logind answered `{other}` for {a}; nothing was done"
        )),
    }
}

impl Tool for Power {
    fn info(&self) -> &'static ToolInfo {
        &catalog::POWER
    }

    fn description(&self) -> &'static str {
        "Suspend, reboot or power off this computer through logind. Always needs the \
         user's approval. Unsaved work in open applications may be lost on reboot or \
         poweroff."
    }

    fn schema(&self) -> Value {
        object_schema(
            json!({
                "action": {"type": "string", "enum": Action::ALL}
            }),
            &["action"],
        )
    }

    fn available(&self) -> bool {
        self.presence.check()
    }

    fn execute(&self, args: Value, ctx: ToolContext) -> ToolFuture {
        let bus = self.presence.bus().clone();
        async move {
            let action = Action::parse(str_arg(&args, "action")?)?;
            let a = action.as_str();
            let go = async {
                let unreachable = |e| ToolError::model(format!("logind is not reachable: {e}"));
                let conn = bus.connect().await.map_err(unreachable)?;
                let logind = Login1ManagerProxy::new(&conn).await.map_err(unreachable)?;
                let failed = |e| ToolError::model(format!("{a} failed: {e}"));
                let can = match action {
                    Action::Suspend => logind.can_suspend().await,
                    Action::Reboot => logind.can_reboot().await,
                    Action::PowerOff => logind.can_power_off().await,
                }
                .map_err(failed)?;
                if let Some(why) = refusal(action, &can) {
                    return Err(ToolError::model(why));
                }
                // Never interactive: an approval was already given in familiar, and a
                // polkit prompt raised by a daemon would surprise the user.
                match action {
                    Action::Suspend => logind.suspend(false).await,
                    Action::Reboot => logind.reboot(false).await,
                    Action::PowerOff => logind.power_off(false).await,
                }
                .map_err(failed)?;
                Ok(format!("{a}: requested from logind"))
            };
            tokio::select! {
                () = ctx.cancel.cancelled() => Err(ToolError::model("cancelled")),
                r = go => r,
            }
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_yes_goes_ahead() {
        assert_eq!(refusal(Action::Suspend, "yes"), None);
        for answer in ["na", "no", "challenge", "maybe"] {
            let why = refusal(Action::Reboot, answer).unwrap();
            assert!(why.contains("nothing was done"), "{answer}: {why}");
        }
        assert!(
            refusal(Action::Suspend, "challenge")
                .unwrap()
                .contains("authenticate")
        );
    }
}
