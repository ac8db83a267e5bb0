//! The daemon's command-line clients: `tasks`, `cancel`, `approve`, `deny`, `steer`,
//! `reload`, and the connection and error mapping `ask` and `status` share with them.
//!
//! Invariant: a daemon that cannot be reached is exit 3 with a sentence naming how to
//! start it; a typed daemon error is shown with its own message (exit 2 for bad
//! arguments, 1 otherwise). Nothing here builds a runtime: these start fast.

use std::io::Write;

use familiar_protocol::Error;
use familiar_protocol::board::Board;
use familiar_protocol::display::{terminal_safe, visible};
use familiar_protocol::proxy::{Agent1Proxy, method_error};
use familiar_protocol::task::TaskStatus;
use zbus::Connection;

use super::output::Table;
use super::{Exit, Out};

/// What to tell a person when the daemon is not there.
pub const HOW_TO_START: &str = "the familiar daemon is not running and D-Bus activation is not installed: run `familiar setup` once (installs the user units and the activation file), or start it now with `systemctl --user start familiar` (or `familiar daemon` in a terminal)";

/// A call that did not get the answer it wanted: the exit code and the sentence.
#[derive(Debug)]
pub struct Failure {
    pub exit: Exit,
    pub message: String,
}

impl Failure {
    pub fn unreachable(detail: impl std::fmt::Display) -> Failure {
        Failure {
            exit: Exit::Unreachable,
            message: format!("{HOW_TO_START} ({detail})"),
        }
    }

    /// Prints the message on stderr and yields the exit code.
    pub fn report(self) -> anyhow::Result<Exit> {
        writeln!(std::io::stderr().lock(), "familiar: {}", self.message)?;
        Ok(self.exit)
    }
}

/// Maps a failed call to its exit code and a message: the daemon's own errors by their
/// variant, the bus's (`zbus::Error` converts) by their freedesktop name.
pub fn classify(e: impl Into<Error>) -> Failure {
    let e = e.into();
    // The error's name is for programs (`--json`, gdbus); a person reads its sentence.
    let name = zbus::DBusError::name(&e);
    tracing::debug!(
        "the daemon answered {}",
        name.rsplit('.').next().unwrap_or_default()
    );
    let (exit, message) = match e {
        Error::ZBus(e) => return bus_failure(e),
        Error::ShuttingDown(m) => (Exit::Unreachable, m),
        // An unknown task id (cancel) and an unknown request id (approve, deny) are
        // the same mistake, and exit alike.
        Error::InvalidArgument(m)
        | Error::UnknownTask(m)
        | Error::UnknownSoul(m)
        | Error::UnknownSession(m) => (Exit::Usage, m),
        Error::SessionBusy(m)
        | Error::RateLimited(m)
        | Error::TaskNotRunning(m)
        | Error::NotGrantable(m)
        | Error::SandboxedCaller(m)
        | Error::NothingToUndo(m)
        | Error::UndoRefused(m) => (Exit::Failed, m),
    };
    Failure { exit, message }
}

/// A failure that is not one of the daemon's own errors: no daemon, a bus that could
/// not start it, or another error reply (a newer daemon's, `AccessDenied`).
fn bus_failure(e: zbus::Error) -> Failure {
    let Some((name, message)) = method_error(&e) else {
        return Failure::unreachable(e);
    };
    match name.as_str() {
        "org.freedesktop.DBus.Error.ServiceUnknown"
        | "org.freedesktop.DBus.Error.NameHasNoOwner"
        | "org.freedesktop.DBus.Error.NoReply"
        | "org.freedesktop.DBus.Error.Disconnected" => Failure::unreachable(message),
        n if n.starts_with("org.freedesktop.DBus.Error.Spawn") => Failure {
            exit: Exit::Unreachable,
            message: format!(
                "the familiar daemon could not be started ({message}): `familiar doctor` says why (a config.toml that does not load shows there), `journalctl --user -u familiar` has its last words"
            ),
        },
        _ => Failure {
            exit: Exit::Failed,
            message,
        },
    }
}

/// The exit code of a menu that did not open: none installed or a broken `[desktop]
/// menu` is a configuration error (2), a menu that could not start or open (no Wayland
/// display) a failure (1).
pub(super) fn menu_exit(e: &crate::launcher::LauncherError) -> Exit {
    use crate::launcher::LauncherError;
    match e {
        LauncherError::NoneFound | LauncherError::Configured(_) => Exit::Usage,
        LauncherError::Spawn { .. } | LauncherError::Failed { .. } => Exit::Failed,
    }
}

/// Whether a status `ListTasks` or `GetTask` sent is a task's that has not ended (queued
/// or running); a status this build does not know is not.
pub(super) fn unfinished(status: &str) -> bool {
    status.parse::<TaskStatus>().is_ok_and(|s| !s.is_finished())
}

/// The session bus and the daemon's proxy.
pub async fn connect() -> Result<(Connection, Agent1Proxy<'static>), Failure> {
    let conn = Connection::session().await.map_err(|e| Failure {
        exit: Exit::Unreachable,
        message: format!(
            "no session bus ({e}): outside a desktop session (ssh, a tty) export DBUS_SESSION_BUS_ADDRESS=unix:path=$XDG_RUNTIME_DIR/bus, or use `familiar run` (no daemon needed)"
        ),
    })?;
    let proxy = Agent1Proxy::new(&conn).await.map_err(classify)?;
    Ok((conn, proxy))
}

/// Whether the daemon can be reached: it owns its name, or the bus can start it. In
/// the second case it is started now, in the background, so that it is up by the time
/// it is asked; the handle yields why that failed, if it did.
pub async fn reachable() -> Result<Option<tokio::task::JoinHandle<Option<Failure>>>, Failure> {
    let (conn, _) = connect().await?;
    let dbus = zbus::fdo::DBusProxy::new(&conn).await.map_err(classify)?;
    let name = zbus::names::BusName::try_from(familiar_protocol::NAME).map_err(classify)?;
    if dbus
        .name_has_owner(name.clone())
        .await
        .map_err(|e| classify(zbus::Error::from(e)))?
    {
        return Ok(None);
    }
    let activatable = dbus
        .list_activatable_names()
        .await
        .map_err(|e| classify(zbus::Error::from(e)))?;
    if !activatable
        .iter()
        .any(|n| n.as_str() == familiar_protocol::NAME)
    {
        return Err(Failure::unreachable(
            "nothing owns dev.familiar.Agent1 and the session bus has no activation file for it",
        ));
    }
    let wellknown =
        zbus::names::WellKnownName::try_from(familiar_protocol::NAME).map_err(classify)?;
    Ok(Some(tokio::spawn(async move {
        dbus.start_service_by_name(wellknown, 0)
            .await
            .err()
            .map(|e| classify(zbus::Error::from(e)))
    })))
}

/// A small runtime for a client command: one thread, nothing more.
pub fn block_on<F: std::future::Future>(f: F) -> anyhow::Result<F::Output> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok(rt.block_on(f))
}

/// Runs `f` with a connected proxy; failures become their exit codes.
pub(super) fn with_proxy<T>(
    f: impl AsyncFnOnce(&Connection, &Agent1Proxy<'static>) -> Result<T, Error>,
) -> anyhow::Result<Result<T, Failure>> {
    block_on(async move {
        let (conn, proxy) = connect().await?;
        f(&conn, &proxy).await.map_err(classify)
    })
}

pub fn tasks(json: bool, out: &mut Out) -> anyhow::Result<Exit> {
    // ListTasks lists sub-tasks right after their parent; GetTask says which they are
    // and which approvals a running one waits for.
    let board = match with_proxy(async |_, p| Board::load(p).await)? {
        Ok(b) => b,
        Err(f) => return f.report(),
    };
    let running = |c: &familiar_protocol::board::Card| c.status() == Some(TaskStatus::Running);
    if json {
        for c in board.tasks() {
            let pending: Vec<serde_json::Value> = c
                .approvals
                .iter()
                .filter(|_| running(c))
                .map(|a| {
                    serde_json::json!({"request_id": a.request_id, "tool": a.tool,
                    "summary": a.summary})
                })
                .collect();
            out.json_line(
                &serde_json::json!({"id": c.id, "soul": c.soul, "status": c.status,
                "prompt": c.prompt, "parent_task": c.parent, "approvals": pending,
                "undoable": c.undo.is_some(), "changes": c.undo}),
            )?;
        }
        return Ok(Exit::Completed);
    }
    if board.tasks().next().is_none() {
        writeln!(out, "no tasks since the daemon started")?;
        return Ok(Exit::Completed);
    }
    let mut table = Table::new(["ID", "SOUL", "STATUS", "PROMPT"]);
    for c in board.tasks() {
        let id = match c.parent {
            Some(_) => format!("└ {}", c.id),
            None => c.id.clone(),
        };
        // Any client may have submitted it: its escapes are shown, not obeyed.
        table.row([&id, &c.soul, &c.status, &visible(&c.prompt)]);
    }
    // One line per row after the header, so each task's approvals go right below it.
    let mut lines = out.table_lines(table).into_iter();
    if let Some(header) = lines.next() {
        writeln!(out, "{header}")?;
    }
    for (line, c) in lines.zip(board.tasks()) {
        writeln!(out, "{line}")?;
        if let Some(changes) = &c.undo {
            writeln!(
                out,
                "  ↶ {} outside its workspace — `familiar undo {}` takes it back",
                visible(changes),
                c.id
            )?;
        }
        for a in c.approvals.iter().filter(|_| running(c)) {
            writeln!(
                out,
                "  waits for approval {}: {} — `familiar approve {}` or `familiar deny {}`",
                a.request_id,
                terminal_safe(&a.summary).replace('\n', "\n    "),
                a.request_id,
                a.request_id
            )?;
        }
    }
    Ok(Exit::Completed)
}

/// `familiar cancel ID`: the daemon stops the task at once; its context is saved. A
/// task that had already ended is left as it was, and said so.
pub fn cancel(task_id: &str, out: &mut Out) -> anyhow::Result<Exit> {
    let asked = with_proxy(async |_, p| {
        // Read first: the daemon accepts cancelling an ended task and changes nothing.
        let before = p.get_task(task_id).await.ok().map(|t| t.status);
        p.cancel(task_id).await?;
        Ok(before)
    })?;
    match asked {
        Ok(Some(status)) if !unfinished(&status) => said(
            out,
            &format!("task {task_id} had already ended ({status}): nothing to cancel"),
        ),
        Ok(_) => said(out, &done_line(Done::Cancel, task_id)),
        Err(f) => f.report(),
    }
}

/// `familiar undo ID`: the daemon puts back what the task changed outside its
/// workspace, or refuses naming the files that changed since.
pub fn undo(task_id: &str, out: &mut Out) -> anyhow::Result<Exit> {
    match with_proxy(async |_, p| p.undo(task_id).await)? {
        Ok(restored) => said(out, &format!("task {task_id} undone: {restored}")),
        Err(f) => f.report(),
    }
}

/// `familiar steer TASK_ID MESSAGE|-`.
pub fn steer(task_id: &str, words: &[String], out: &mut Out) -> anyhow::Result<Exit> {
    let message = super::prompt::read_prompt(words)?;
    match with_proxy(async |_, p| p.steer(task_id, &message).await)? {
        Ok(()) => said(out, &done_line(Done::Steer, task_id)),
        Err(f) => f.report(),
    }
}

/// `familiar reload`: the daemon re-reads config.toml, souls and policies now (as
/// SIGHUP does). A file that does not load is kept at its previous version: exit 2.
pub fn reload(out: &mut Out) -> anyhow::Result<Exit> {
    match with_proxy(async |_, p| p.reload().await)? {
        Ok(kept) if kept.is_empty() => said(
            out,
            "reloaded config.toml, souls and policies: new tasks use them",
        ),
        Ok(kept) => Failure {
            exit: Exit::Usage,
            message: kept,
        }
        .report(),
        Err(f) => f.report(),
    }
}

/// `familiar approve ID` and `familiar deny ID`.
pub fn respond(request_id: &str, approve: bool, out: &mut Out) -> anyhow::Result<Exit> {
    match with_proxy(async |_, p| p.respond(request_id, approve).await)? {
        Ok(()) => {
            let done = if approve { Done::Approve } else { Done::Deny };
            said(out, &done_line(done, request_id))
        }
        Err(f) => f.report(),
    }
}

/// A task-control command the daemon accepted.
#[derive(Debug, Clone, Copy)]
enum Done {
    Cancel,
    Steer,
    Approve,
    Deny,
}

/// The one line saying what an accepted task-control command did to `id`.
fn done_line(done: Done, id: &str) -> String {
    match done {
        Done::Cancel => format!("cancelled task {id} (its context is saved)"),
        Done::Steer => format!(
            "message sent to task {id}: it joins at the task's next step, or opens the session's next task"
        ),
        Done::Approve => format!("approved request {id}: the call runs"),
        Done::Deny => format!("denied request {id}: the call does not run and the task is told"),
    }
}

fn said(out: &mut Out, line: &str) -> anyhow::Result<Exit> {
    writeln!(out, "{line}")?;
    Ok(Exit::Completed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_task_control_says_what_it_did() {
        let lines: Vec<String> = [Done::Cancel, Done::Steer]
            .into_iter()
            .map(|d| done_line(d, "t-1"))
            .chain([Done::Approve, Done::Deny].map(|d| done_line(d, "r-1")))
            .collect();
        assert_eq!(
            lines,
            [
                "cancelled task t-1 (its context is saved)",
                "message sent to task t-1: it joins at the task's next step, or opens the session's next task",
                "approved request r-1: the call runs",
                "denied request r-1: the call does not run and the task is told",
            ]
        );
    }
}
