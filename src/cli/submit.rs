//! `familiar ask`'s submission: the options `Submit` takes, the signal subscriptions
//! made before it, and a busy `--session` steered instead of refused.
//!
//! Invariant: the subscriptions exist before `Submit` is sent, so no event of the task
//! can be missed, and each is drained from the moment it exists.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use futures::StreamExt;
use tokio::sync::mpsc;

use familiar_protocol::board::Board;
use familiar_protocol::proxy::{Agent1Proxy, ApprovalRequested, TaskEvent, TaskFinished};
use familiar_protocol::{ContextSource, Error, SubmitOptions};

use super::client::{Failure, classify};
use super::{AskArgs, Exit};

/// What the user pointed at (`--context`), as the client read it.
pub(super) type Context = BTreeMap<ContextSource, String>;

/// `Submit`'s options for these arguments; a `--session` that is no session id is
/// refused as the daemon would refuse it.
fn submit_options(
    args: &AskArgs,
    workspace: Option<PathBuf>,
    context: Context,
) -> Result<SubmitOptions, Failure> {
    let origin = if args.dmenu {
        "dmenu"
    } else if std::env::var_os("INVOCATION_ID").is_some() {
        // Started by systemd (the maintenance timer's service).
        "timer"
    } else {
        "cli"
    };
    let session = args.task.session.as_deref();
    Ok(SubmitOptions {
        session: session
            .map(SubmitOptions::session_id)
            .transpose()
            .map_err(classify)?,
        origin: Some(origin.to_owned()),
        workspace,
        max_iterations: None,
        provider: args.task.provider.clone(),
        model: args.task.model.clone(),
        when: args.task.when.as_ref().map(ToString::to_string),
        context,
    })
}

/// Sends `message` to the task running in `session` (`ask --session` on a busy
/// session steers it rather than fail) and returns that task's id, to follow it.
async fn steer_session(
    proxy: &Agent1Proxy<'_>,
    session: &str,
    message: &str,
) -> Result<String, Failure> {
    let board = Board::load(proxy).await.map_err(classify)?;
    let running = board
        .running()
        .find(|c| c.session_id.as_deref() == Some(session));
    if let Some(task) = running {
        let id = task.id.clone();
        proxy.steer(&id, message).await.map_err(classify)?;
        let mut err = std::io::stderr().lock();
        // Not being able to say so does not change what happened.
        writeln!(err, "familiar: session {session} is busy with task {id}: your message joins it at its next step").ok();
        return Ok(id);
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
    pub(super) events: mpsc::UnboundedReceiver<TaskEvent>,
    pub(super) finished: mpsc::UnboundedReceiver<TaskFinished>,
    pub(super) approvals: mpsc::UnboundedReceiver<ApprovalRequested>,
}

/// Subscribes to the task signals, then submits: no event of the task can be missed.
/// Each stream is drained from the moment it exists (see [`drain`]). Returns the
/// followed task's id and its session.
pub(super) async fn subscribe_and_submit(
    proxy: &Agent1Proxy<'_>,
    args: &AskArgs,
    prompt: &str,
    workspace: Option<PathBuf>,
    context: Context,
) -> Result<(Subscribed, String, String), Failure> {
    let streams = async {
        Ok::<_, Error>(Subscribed {
            events: drain(proxy.receive_task_event().await?),
            finished: drain(proxy.receive_task_finished().await?),
            approvals: drain(proxy.receive_approval_requested().await?),
        })
    };
    let subscribed = streams.await.map_err(classify)?;
    let (task, session) = submit(proxy, args, prompt, workspace, context).await?;
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
    proxy: &Agent1Proxy<'_>,
    args: &AskArgs,
    prompt: &str,
    workspace: Option<PathBuf>,
    context: Context,
) -> Result<(String, String), Failure> {
    let soul = args.task.soul.clone().unwrap_or_default();
    let options = submit_options(args, workspace, context)?;
    match proxy.submit(&soul, prompt, options.to_dict()).await {
        Ok(v) => Ok(v),
        Err(Error::SessionBusy(_)) if args.task.session.is_some() => {
            let session = args.task.session.clone().unwrap_or_default();
            // The context goes with the message, delimited as the daemon puts it.
            let message = familiar_protocol::context::with_context(prompt, &options.context);
            let task = steer_session(proxy, &session, &message).await?;
            Ok((task, session))
        }
        Err(e) => Err(classify(e)),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn ask_args(argv: &[&str]) -> AskArgs {
        let cli = Cli::try_parse_from([&["familiar", "ask"], argv].concat()).unwrap();
        match cli.command {
            Command::Ask(a) => a,
            other => panic!("not ask: {other:?}"),
        }
    }

    #[test]
    fn the_flags_become_the_options() {
        let args = ask_args(&[
            "--session",
            "s-1",
            "--provider",
            "p",
            "--model",
            "m",
            "--when",
            "ac",
            "hi",
        ]);
        let o = submit_options(&args, Some(PathBuf::from("/w")), Context::new()).unwrap();
        assert_eq!(o.session.as_ref().map(|s| s.as_str()), Some("s-1"));
        assert_eq!(
            (o.provider.as_deref(), o.model.as_deref(), o.when.as_deref()),
            (Some("p"), Some("m"), Some("ac"))
        );
        assert_eq!(o.workspace, Some(PathBuf::from("/w")));
        assert_eq!(o.max_iterations, None);
        assert!(o.origin.is_some());
        assert!(o.context.is_empty());
    }

    #[test]
    fn context_is_repeatable_and_names_only_known_sources() {
        let args = ask_args(&["--context", "selection", "--context", "window", "hi"]);
        assert_eq!(
            args.context,
            [ContextSource::Selection, ContextSource::Window]
        );
        let e = Cli::try_parse_from(["familiar", "ask", "--context", "screen", "hi"]).unwrap_err();
        assert!(
            e.to_string().contains("`screen` is no context source"),
            "{e}"
        );
    }

    #[test]
    fn a_session_that_is_no_id_is_refused_as_the_daemon_refuses_it() {
        let f = submit_options(
            &ask_args(&["--session", "../x", "hi"]),
            None,
            Context::new(),
        )
        .unwrap_err();
        assert_eq!(f.exit, Exit::Usage);
        assert!(
            f.message.starts_with("option `session`: session id `../x`"),
            "{}",
            f.message
        );
    }
}
