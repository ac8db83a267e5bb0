//! `systemd_user`: status, list, start, stop, restart and reload of the user's systemd
//! units, through the user manager's D-Bus API (`org.freedesktop.systemd1` on the
//! session bus), not `systemctl`: no subprocess, so no sandbox question.
//!
//! The invariant: a unit name reaches the manager only after validation
//! (`[A-Za-z0-9@._:-]`, not starting with `-`, at most 256 bytes, a unit type suffix
//! added the way `systemctl` does), and familiar's own units (`familiar*.service`,
//! `familiar*.timer`, `dev.familiar.*`) are never stopped, restarted or reloaded by
//! the model: the policy blocks those calls too, this is the second lock. The tool is
//! hidden when no user manager answers on the bus.

use std::time::Duration;

use futures::{FutureExt, StreamExt};
use serde_json::{Value, json};

use super::bus::{Bus, Presence};
use super::util::{not_one_of, object_schema, str_arg};
use super::{Tool, ToolContext, ToolError, ToolFuture};
use crate::catalog::{self, ToolInfo};
use crate::dbus::systemd::{ManagerProxy, SERVICE, UnitProxy, UnitRow};

/// Most units `list` shows.
pub const MAX_LISTED: usize = 100;
/// systemd's `UNIT_NAME_MAX`.
pub const MAX_UNIT_NAME: usize = 256;
/// How long a start/stop/restart/reload job is waited for before the tool reports it
/// as still running (the job goes on in the manager either way).
pub const JOB_WAIT: Duration = Duration::from_secs(60);
/// Unit types systemd knows; a name without one of them gets `.service`.
const UNIT_TYPES: &[&str] = &[
    "service",
    "socket",
    "target",
    "device",
    "mount",
    "automount",
    "swap",
    "timer",
    "path",
    "slice",
    "scope",
];

/// What the model asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Status,
    List,
    Start,
    Stop,
    Restart,
    Reload,
}

impl Action {
    pub const ALL: &[&str] = &["status", "list", "start", "stop", "restart", "reload"];

    pub fn parse(s: &str) -> Result<Action, ToolError> {
        Ok(match s {
            "status" => Action::Status,
            "list" => Action::List,
            "start" => Action::Start,
            "stop" => Action::Stop,
            "restart" => Action::Restart,
            "reload" => Action::Reload,
            other => return Err(not_one_of("action", other, Action::ALL)),
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            Action::Status => "status",
            Action::List => "list",
            Action::Start => "start",
            Action::Stop => "stop",
            Action::Restart => "restart",
            Action::Reload => "reload",
        }
    }

    /// Whether taking familiar's own unit through this action would take familiar down
    /// (or restart it mid-task).
    fn disturbs_familiar(self) -> bool {
        match self {
            Action::Stop | Action::Restart | Action::Reload => true,
            Action::Status | Action::List | Action::Start => false,
        }
    }
}

/// A checked unit name, with `.service` added when it has no unit type (as
/// `systemctl` does, so `familiar` and `familiar.service` are the same unit here).
pub fn unit_name(unit: &str) -> Result<String, ToolError> {
    let unit = unit.trim();
    let valid = !unit.is_empty()
        && unit.len() <= MAX_UNIT_NAME
        && !unit.starts_with('-')
        && unit
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "@._:-".contains(c));
    if !valid {
        return Err(ToolError::model(format!(
            "invalid unit name `{unit}`: use letters, digits and `@._:-`, not starting with `-` (e.g. `pipewire.service`)"
        )));
    }
    let typed = unit
        .rsplit_once('.')
        .is_some_and(|(_, suffix)| UNIT_TYPES.contains(&suffix));
    let name = if typed {
        unit.to_owned()
    } else {
        format!("{unit}.service")
    };
    if name.len() > MAX_UNIT_NAME {
        return Err(ToolError::model(format!(
            "unit name `{unit}` is longer than {MAX_UNIT_NAME} bytes"
        )));
    }
    Ok(name)
}

/// familiar's own units: the daemon, its maintenance service and timer, and its D-Bus
/// activation.
pub fn is_familiar_unit(name: &str) -> bool {
    (name.starts_with("familiar") && (name.ends_with(".service") || name.ends_with(".timer")))
        || name.starts_with("dev.familiar.")
        || name.contains("-dev.familiar.")
}

/// The user manager's failed units on `bus`, by name (a pre-check's probe).
pub async fn failed_units(bus: &Bus) -> zbus::Result<Vec<String>> {
    let conn = bus.connect().await?;
    let manager = ManagerProxy::new(&conn).await?;
    Ok(manager
        .list_units()
        .await?
        .into_iter()
        .filter(|u| u.3 == "failed")
        .map(|u| u.0)
        .collect())
}

pub struct SystemdUser {
    presence: Presence,
}

impl SystemdUser {
    /// The user manager on `bus`.
    pub fn new(bus: Bus) -> SystemdUser {
        SystemdUser {
            presence: Presence::new(bus, SERVICE),
        }
    }

    /// The user manager of the session bus.
    pub fn session() -> SystemdUser {
        SystemdUser::new(Bus::Session)
    }
}

impl Tool for SystemdUser {
    fn info(&self) -> &'static ToolInfo {
        &catalog::SYSTEMD_USER
    }

    fn description(&self) -> &'static str {
        "The user's systemd units (the user manager, like `systemctl --user`). `list` shows \
         failed then active units; `status` one unit's state; `start`, `stop`, `restart`, \
         `reload` change one unit and wait for the job's result. Use `journal` for a unit's \
         logs. familiar's own units cannot be stopped, restarted or reloaded."
    }

    fn schema(&self) -> Value {
        object_schema(
            json!({
                "action": {"type": "string", "enum": Action::ALL},
                "unit": {
                    "type": "string",
                    "description": "unit name, e.g. `pipewire.service`; required except for `list`"
                }
            }),
            &["action"],
        )
    }

    fn is_mutating(&self, args: &Value) -> bool {
        !matches!(
            args.get("action").and_then(Value::as_str),
            Some("status" | "list")
        )
    }

    fn available(&self) -> bool {
        self.presence.check()
    }

    fn execute(&self, args: Value, ctx: ToolContext) -> ToolFuture {
        let bus = self.presence.bus().clone();
        async move {
            let action = Action::parse(str_arg(&args, "action")?)?;
            let unit = match (action, args.get("unit").and_then(Value::as_str)) {
                (Action::List, _) => None,
                (_, Some(u)) => Some(unit_name(u)?),
                (_, None) => {
                    return Err(ToolError::model(format!(
                        "`{}` needs a `unit`",
                        action.as_str()
                    )));
                }
            };
            if let Some(u) = &unit
                && action.disturbs_familiar()
                && is_familiar_unit(u)
            {
                return Err(ToolError::model(format!(
                    "refused: `{u}` is familiar's own unit; familiar does not {} itself",
                    action.as_str()
                )));
            }
            let conn = bus.connect().await.map_err(unreachable)?;
            let manager = ManagerProxy::new(&conn).await.map_err(unreachable)?;
            tokio::select! {
                () = ctx.cancel.cancelled() => Err(ToolError::model("cancelled")),
                r = run(&conn, &manager, action, unit) => r,
            }
        }
        .boxed()
    }
}

fn unreachable(e: zbus::Error) -> ToolError {
    ToolError::model(format!("the systemd user manager is not reachable: {e}"))
}

/// A failed manager call, told to the model with systemd's own message.
fn call_error(what: &str, e: zbus::Error) -> ToolError {
    match familiar_protocol::proxy::method_error(&e) {
        Some((name, message)) => {
            let short = name.rsplit('.').next().unwrap_or_default();
            ToolError::model(format!("{what}: {message} ({short})"))
        }
        None => ToolError::model(format!("{what}: {e}")),
    }
}

async fn run(
    conn: &zbus::Connection,
    manager: &ManagerProxy<'_>,
    action: Action,
    unit: Option<String>,
) -> Result<String, ToolError> {
    let unit = match (action, unit) {
        (Action::List, _) => return list(manager).await,
        (_, Some(unit)) => unit,
        (_, None) => return Err(ToolError::model("a `unit` is needed")),
    };
    match action {
        Action::Status => status(conn, manager, &unit).await,
        Action::List => list(manager).await,
        Action::Start | Action::Stop | Action::Restart | Action::Reload => {
            job(conn, manager, action, &unit).await
        }
    }
}

async fn list(manager: &ManagerProxy<'_>) -> Result<String, ToolError> {
    let units = manager
        .list_units()
        .await
        .map_err(|e| call_error("listing units", e))?;
    let line = |u: &UnitRow| format!("  {}  {}/{}  {}", u.0, u.3, u.4, u.1);
    let mut failed: Vec<&UnitRow> = units.iter().filter(|u| u.3 == "failed").collect();
    let mut active: Vec<&UnitRow> = units
        .iter()
        .filter(|u| {
            matches!(
                u.3.as_str(),
                "active" | "reloading" | "activating" | "deactivating" | "refreshing"
            )
        })
        .collect();
    failed.sort_by(|a, b| a.0.cmp(&b.0));
    active.sort_by(|a, b| a.0.cmp(&b.0));
    let others = units.len() - failed.len() - active.len();
    let mut out = vec![format!("failed units: {}", failed.len())];
    let shown_failed = failed.len().min(MAX_LISTED);
    out.extend(failed[..shown_failed].iter().map(|u| line(u)));
    out.push(format!("active units: {}", active.len()));
    let shown_active = active.len().min(MAX_LISTED - shown_failed);
    out.extend(active[..shown_active].iter().map(|u| line(u)));
    let cut = failed.len() + active.len() - shown_failed - shown_active;
    if cut > 0 {
        out.push(format!(
            "({cut} more not shown: at most {MAX_LISTED} units are listed; ask for one with `status`)"
        ));
    }
    if others > 0 {
        out.push(format!("({others} inactive units not listed)"));
    }
    Ok(out.join("\n"))
}

async fn unit_proxy<'a>(
    conn: &zbus::Connection,
    manager: &ManagerProxy<'_>,
    unit: &str,
) -> Result<UnitProxy<'a>, ToolError> {
    let path = manager
        .load_unit(unit)
        .await
        .map_err(|e| call_error(&format!("loading {unit}"), e))?;
    UnitProxy::builder(conn)
        .path(path)
        // Fresh values on every read: the state changes under us.
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .map_err(|e| call_error(&format!("unit {unit}"), e))
}

/// `ActiveState (SubState)`.
async fn state(u: &UnitProxy<'_>, unit: &str) -> Result<String, ToolError> {
    let err = |e| call_error(&format!("reading the state of {unit}"), e);
    let active = u.active_state().await.map_err(err)?;
    let sub = u.sub_state().await.map_err(err)?;
    Ok(format!("{active} ({sub})"))
}

async fn status(
    conn: &zbus::Connection,
    manager: &ManagerProxy<'_>,
    unit: &str,
) -> Result<String, ToolError> {
    let u = unit_proxy(conn, manager, unit).await?;
    let err = |e| call_error(&format!("reading {unit}"), e);
    let load = u.load_state().await.map_err(err)?;
    if load == "not-found" {
        return Err(ToolError::model(format!(
            "no unit `{unit}` (load state not-found); `list` shows the loaded units"
        )));
    }
    let description = u.description().await.map_err(err)?;
    let state = state(&u, unit).await?;
    Ok(format!(
        "{unit}: {state}\ndescription: {description}\nload state: {load}"
    ))
}

async fn job(
    conn: &zbus::Connection,
    manager: &ManagerProxy<'_>,
    action: Action,
    unit: &str,
) -> Result<String, ToolError> {
    let what = format!("{} {unit}", action.as_str());
    // Subscribe before queueing, so a fast job's end is not missed.
    let mut removed = manager
        .receive_job_removed()
        .await
        .map_err(|e| call_error(&what, e))?;
    let queued = match action {
        Action::Start => manager.start_unit(unit, "replace").await,
        Action::Stop => manager.stop_unit(unit, "replace").await,
        Action::Restart => manager.restart_unit(unit, "replace").await,
        Action::Reload => manager.reload_unit(unit, "replace").await,
        Action::Status | Action::List => {
            return Err(ToolError::Fatal(format!("{what} is not a job")));
        }
    };
    let job = queued.map_err(|e| call_error(&what, e))?;
    let wait = async {
        while let Some(signal) = removed.next().await {
            match signal.args() {
                Ok(args) if args.job == job => return Some(args.result),
                Ok(_) => {}
                Err(e) => tracing::debug!("unreadable JobRemoved: {e}"),
            }
        }
        None
    };
    let result = match tokio::time::timeout(JOB_WAIT, wait).await {
        Ok(Some(result)) => result,
        Ok(None) => return Err(ToolError::model(format!("{what}: the manager went away"))),
        Err(_) => {
            return Ok(format!(
                "{what}: job {} still running after {}s; check again with `status`",
                job.as_str(),
                JOB_WAIT.as_secs()
            ));
        }
    };
    let now = match unit_proxy(conn, manager, unit).await {
        Ok(u) => state(&u, unit).await.unwrap_or_else(|e| e.to_string()),
        Err(e) => e.to_string(),
    };
    if result == "done" {
        Ok(format!("{what}: done; now {now}"))
    } else {
        // systemd's job results: canceled, timeout, failed, dependency, skipped, …
        Err(ToolError::model(format!(
            "{what}: job {result}; now {now}. `journal` with this unit shows why"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_names_are_checked_and_typed_like_systemctl() {
        assert_eq!(unit_name("pipewire").unwrap(), "pipewire.service");
        assert_eq!(unit_name("foo@1.service").unwrap(), "foo@1.service");
        assert_eq!(unit_name("backup.timer").unwrap(), "backup.timer");
        assert_eq!(
            unit_name("org.gnome.Shell").unwrap(),
            "org.gnome.Shell.service"
        );
        for bad in ["", "-H", "--user", "a b", "a;b", "a/b", "ä.service"] {
            assert!(unit_name(bad).is_err(), "{bad:?}");
        }
        assert!(unit_name(&"a".repeat(MAX_UNIT_NAME)).is_err());
    }

    #[test]
    fn familiar_units_are_recognised() {
        for own in [
            "familiar.service",
            "familiar-maintenance.service",
            "familiar-maintenance.timer",
            "dev.familiar.Agent1.service",
            "dbus-:1.2-dev.familiar.Agent1@0.service",
        ] {
            assert!(is_familiar_unit(own), "{own}");
        }
        for other in [
            "pipewire.service",
            "familiarity.socket",
            "my-familiar.service",
        ] {
            assert!(!is_familiar_unit(other), "{other}");
        }
        assert!(is_familiar_unit(&unit_name("familiar").unwrap()));
    }
}
