//! Following the daemon while a client waits on one of its tasks (`ask`, a busy
//! `ask --session` that steers): the daemon's bus name is watched, so a daemon that
//! stops (`kill -9`, a crash, `systemctl --user restart`) or is replaced mid-task is
//! said at once instead of waited on forever; and the one line Ctrl-C prints, the same
//! under `run` and `ask`.
//!
//! Invariant: the watch is made before `Submit` and knows the owner it started with, so
//! any later change of owner is the daemon that ran the task going away: its task ends
//! with it (`cancelled`; the session keeps every step it saved). The client then exits
//! 3, the daemon unreachable (docs/cli.md).

use std::io::Write;
use std::time::Duration;

use anyhow::Context as _;
use familiar_protocol::task::TaskStatus;
use futures::StreamExt;
use zbus::Connection;
use zbus::fdo::{DBusProxy, NameOwnerChangedStream};

use super::Exit;
use super::client::{Failure, classify};

/// How long a daemon that vanished gets to come back (systemd restarts it in about a
/// second, `Restart=on-failure`) before the client says it is not running.
const RESTART_WAIT: Duration = Duration::from_secs(3);

/// The daemon's bus name, watched from before a task's `Submit`.
pub(super) struct DaemonWatch {
    owners: NameOwnerChangedStream,
}

/// How the daemon that ran the task went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Gone {
    /// Another daemon owns the name now (systemd restarted it, or D-Bus activation).
    Restarted,
    /// Nothing owns the name.
    Stopped,
    /// The client lost the bus itself.
    BusLost,
}

impl DaemonWatch {
    /// Subscribes to the daemon's `NameOwnerChanged`; `None` (with a debug line) when
    /// the bus refuses, and the client then follows as before, without the watch.
    pub(super) async fn start(conn: &Connection) -> Option<DaemonWatch> {
        let made = async {
            let dbus = DBusProxy::new(conn).await?;
            dbus.receive_name_owner_changed_with_args(&[(0, familiar_protocol::NAME)])
                .await
        };
        match made.await {
            Ok(owners) => Some(DaemonWatch { owners }),
            Err(e) => {
                tracing::debug!("cannot watch the daemon's bus name: {e}");
                None
            }
        }
    }

    /// Resolves once the daemon that owned the name loses it; never without a watch.
    pub(super) async fn gone(watch: Option<&mut DaemonWatch>) -> Gone {
        match watch {
            Some(w) => w.next_change().await,
            None => std::future::pending().await,
        }
    }

    async fn next_change(&mut self) -> Gone {
        loop {
            let Some(sig) = self.owners.next().await else {
                return Gone::BusLost;
            };
            let Ok(a) = sig.args() else { continue };
            if a.old_owner().is_none() {
                // The name was free and is taken: activation of the daemon this client
                // is about to call, not the loss of one.
                continue;
            }
            if a.new_owner().is_some() {
                return Gone::Restarted;
            }
            return match tokio::time::timeout(RESTART_WAIT, self.owners.next()).await {
                Ok(Some(_)) => Gone::Restarted,
                Ok(None) => Gone::BusLost,
                Err(_) => Gone::Stopped,
            };
        }
    }
}

/// What the client says, and exits with, when the daemon went mid-task: 3, or 130
/// when Ctrl-C had already asked to cancel it.
pub(super) fn daemon_gone(gone: Gone, task: &str, session: &str, interrupted: bool) -> Failure {
    let how = match gone {
        Gone::Restarted => "a new daemon is running now",
        Gone::Stopped => {
            "it is not running now: `systemctl --user start familiar`, or `familiar daemon`"
        }
        Gone::BusLost => "this client lost the session bus",
    };
    Failure {
        exit: if interrupted {
            Exit::Interrupted
        } else {
            Exit::Unreachable
        },
        message: format!(
            "the daemon stopped ({how}); task {task} was cancelled: its session {session} kept what was done — `familiar ask --session {session} PROMPT` to go on"
        ),
    }
}

/// A task the client did not cancel ended `cancelled` with a reason (the daemon
/// stopped, `familiar cancel` elsewhere): the footer shows the task's own word, so the
/// reason `TaskFinished` gave is said too.
pub(super) fn say_why_cancelled(
    status: TaskStatus,
    result: &str,
    cancelled_here: bool,
) -> std::io::Result<()> {
    if status == TaskStatus::Cancelled && !cancelled_here && result != "cancelled" {
        writeln!(std::io::stderr().lock(), "familiar: {result}")?;
    }
    Ok(())
}

/// The line Ctrl-C prints under `run` and `ask` alike, on stderr (`run --ephemeral`
/// keeps no session).
pub(super) fn cancelling_line(task: &str, session_kept: bool) -> String {
    if session_kept {
        format!("familiar: Ctrl-C: cancelling task {task}; its session keeps what was done")
    } else {
        format!("familiar: Ctrl-C: cancelling task {task}")
    }
}

/// Ctrl-C under `ask` when the daemon could not take the cancel: still 130, with what
/// is true of the task.
pub(super) fn interrupted_unsent(task: &str, why: &Failure) -> String {
    let why = why.message.as_str();
    format!("familiar: interrupted; task {task} was not cancelled here ({why})")
}

/// Ctrl-C: says so and asks the daemon to cancel `task`; `false` when the request
/// could not be sent (said on stderr), and then `ask` exits at once.
pub(super) async fn cancel_on_ctrl_c(
    proxy: &familiar_protocol::proxy::Agent1Proxy<'static>,
    task: &str,
) -> anyhow::Result<bool> {
    writeln!(std::io::stderr().lock(), "{}", cancelling_line(task, true))?;
    match proxy.cancel(task).await {
        Ok(()) => Ok(true),
        Err(e) => {
            let said = interrupted_unsent(task, &classify(e));
            writeln!(std::io::stderr().lock(), "{said}")?;
            Ok(false)
        }
    }
}

/// `TaskFinished`'s status, as the daemon spelled it.
pub(super) fn parse_status(status: &str) -> anyhow::Result<TaskStatus> {
    serde_json::from_value(serde_json::Value::String(status.to_owned()))
        .with_context(|| format!("the daemon sent an unknown status `{status}`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_daemon_that_went_says_what_to_do_and_exits_unreachable() {
        let f = daemon_gone(Gone::Restarted, "t-1", "s-1", false);
        assert_eq!(f.exit, Exit::Unreachable);
        assert!(f.message.starts_with("the daemon stopped (a new daemon is running now); task t-1 was cancelled: its session s-1 kept what was done"), "{}", f.message);
        assert!(f.message.contains("`familiar ask --session s-1 PROMPT`"));
        let f = daemon_gone(Gone::Stopped, "t-1", "s-1", true);
        assert!(f.message.contains("systemctl --user start familiar"));
        assert_eq!(f.exit, Exit::Interrupted, "Ctrl-C came first");
    }
}
