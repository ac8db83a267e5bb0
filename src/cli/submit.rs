//! `familiar ask`'s submission: the options `Submit` takes, the signal subscriptions
//! made before it, and a busy `--session` steered instead of refused.
//!
//! Invariant: the subscriptions exist before `Submit` is sent, so no event of the task
//! can be missed, and each is drained from the moment it exists.

use std::collections::HashMap;
use std::io::Write;

use futures::StreamExt;
use tokio::sync::mpsc;
use zbus::Variant;

use super::client::{Failure, classify};
use super::{AskArgs, Exit};

/// `Submit`'s options for these arguments.
pub(super) fn submit_options(
    args: &AskArgs,
    workspace: Option<String>,
) -> HashMap<&'static str, Variant<'static>> {
    let origin = if args.dmenu {
        "dmenu"
    } else if std::env::var_os("INVOCATION_ID").is_some() {
        // Started by systemd (the maintenance timer's service).
        "timer"
    } else {
        "cli"
    };
    let mut options: HashMap<&str, Variant<'static>> = HashMap::new();
    options.insert("origin", Variant::from(origin));
    for (key, value) in [
        ("session", &args.task.session),
        ("provider", &args.task.provider),
        ("model", &args.task.model),
    ] {
        if let Some(v) = value {
            options.insert(key, Variant::from(v.clone()));
        }
    }
    if let Some(w) = workspace {
        options.insert("workspace", Variant::from(w));
    }
    if let Some(when) = &args.task.when {
        options.insert("when", Variant::from(when.to_string()));
    }
    options
}

fn is_session_busy(e: &zbus::Error) -> bool {
    crate::dbus::proxy::method_error(e)
        .is_some_and(|(name, _)| name == format!("{}.SessionBusy", crate::dbus::ERROR_PREFIX))
}

/// Sends `message` to the task running in `session` (`ask --session` on a busy
/// session steers it rather than fail) and returns that task's id, to follow it.
async fn steer_session(
    proxy: &crate::dbus::proxy::Agent1Proxy<'_>,
    session: &str,
    message: &str,
) -> Result<String, Failure> {
    let tasks = proxy.list_tasks().await.map_err(classify)?;
    for (id, _, status, _) in tasks {
        if status != "running" && status != "queued" {
            continue;
        }
        let Ok(json) = proxy.get_task(&id).await else {
            continue;
        };
        let of_session = serde_json::from_str::<serde_json::Value>(&json)
            .is_ok_and(|v| v["session_id"] == session && v["parent_task"].is_null());
        if of_session {
            proxy.steer(&id, message).await.map_err(classify)?;
            let mut err = std::io::stderr().lock();
            // Not being able to say so does not change what happened.
            writeln!(err, "familiar: session {session} is busy with task {id}: your message joins it at its next step").ok();
            return Ok(id);
        }
    }
    Err(Failure {
        exit: Exit::Failed,
        message: format!(
            "session {session} is busy, but its task could not be found to steer; try again"
        ),
    })
}

/// The daemon's signals for the submitted task, subscribed before `Submit`.
pub(super) struct Subscribed {
    pub(super) events: mpsc::UnboundedReceiver<crate::dbus::proxy::TaskEvent>,
    pub(super) finished: mpsc::UnboundedReceiver<crate::dbus::proxy::TaskFinished>,
    pub(super) approvals: mpsc::UnboundedReceiver<crate::dbus::proxy::ApprovalRequested>,
}

/// Subscribes to the task signals, then submits: no event of the task can be missed.
/// Each stream is drained from the moment it exists (see [`drain`]). Returns the
/// followed task's id and its session.
pub(super) async fn subscribe_and_submit(
    proxy: &crate::dbus::proxy::Agent1Proxy<'_>,
    args: &AskArgs,
    prompt: &str,
    options: HashMap<&'static str, Variant<'static>>,
) -> Result<(Subscribed, String, String), Failure> {
    let streams = async {
        Ok::<_, zbus::Error>(Subscribed {
            events: drain(proxy.receive_task_event().await?),
            finished: drain(proxy.receive_task_finished().await?),
            approvals: drain(proxy.receive_approval_requested().await?),
        })
    };
    let subscribed = streams.await.map_err(classify)?;
    let (task, session) = submit(proxy, args, prompt, options).await?;
    Ok((subscribed, task, session))
}

/// Polls `stream` from now on, into an unbounded channel.
///
/// zbus stops reading the socket while any stream's queue (64 messages) is full. Every
/// client receives every task's signals, so with many tasks running, other tasks'
/// events would fill a stream nobody polls while this client awaits a method reply
/// (`AddMatch`, `Submit`): the reply is never read (a deadlock, seen with 100
/// concurrent `ask`s). What the streams carry waits here instead; one client follows
/// one task, and the loop consumes as it goes.
fn drain<S>(mut stream: S) -> mpsc::UnboundedReceiver<S::Item>
where
    S: futures::Stream + Unpin + Send + 'static,
    S::Item: Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(item) = stream.next().await {
            if tx.send(item).is_err() {
                break;
            }
        }
    });
    rx
}

/// Submits the task; on a busy `--session`, steers the task running there instead.
/// Returns the followed task's id and its session.
async fn submit(
    proxy: &crate::dbus::proxy::Agent1Proxy<'_>,
    args: &AskArgs,
    prompt: &str,
    options: HashMap<&'static str, Variant<'static>>,
) -> Result<(String, String), Failure> {
    let soul = args.task.soul.clone().unwrap_or_default();
    match proxy.submit(&soul, prompt, options).await {
        Ok(v) => Ok(v),
        Err(e) if is_session_busy(&e) && args.task.session.is_some() => {
            let session = args.task.session.clone().unwrap_or_default();
            let task = steer_session(proxy, &session, prompt).await?;
            Ok((task, session))
        }
        Err(e) => Err(classify(e)),
    }
}
