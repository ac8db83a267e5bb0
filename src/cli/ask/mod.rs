//! `familiar ask`: submit a task to the daemon over D-Bus and follow it to the end.
//!
//! Invariant: the signal subscriptions exist before `Submit` is sent, so no event of
//! the task can be missed; the exit code is the task's, as for `familiar run`. It is on a
//! keybinding, so it builds no agent runtime: one bus connection, one thread. Under a
//! keybinding (`--notify`, stdout not a terminal) it writes only warnings and errors:
//! what a person needs to see is in the task's notification ([`super::progress`]).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use familiar_protocol::display::terminal_safe;
use familiar_protocol::ids::{SessionId, TaskId};
use familiar_protocol::query::Configuration;
use familiar_protocol::task::TaskStatus;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

mod context;
mod signals;

use super::client::{Failure, block_on, connect};
use super::follow::{DaemonWatch, daemon_gone, parse_status, say_why_cancelled};
use super::printer::exit_for;
use super::progress::{self, Progress, Undo};
use super::prompt::{read_prompt, resolve_workspace};
use super::submit::{Subscribed, subscribe_and_submit};
use super::{AskArgs, Exit, Out};
use signals::{Follow, Followed, Inputs, output, typed_steering};

/// Events read from the bus and not yet printed (the printer keeps up with a
/// terminal; the bound only stops a stuck one from holding them all).
const EVENT_BUFFER: usize = 256;

pub fn ask(config: Option<&std::path::Path>, args: AskArgs, out: Out) -> anyhow::Result<Exit> {
    warn_config_flag(config)?;
    block_on(async {
        // At the key press, before a menu opens: what the user pointed at then.
        let taken = context::read(&args.context).await;
        let prompt = if args.dmenu {
            match menu_prompt(args.notify).await? {
                Ok(Some(p)) => p,
                // The menu was dismissed: nothing was asked.
                Ok(None) => return Ok(Exit::Completed),
                Err(exit) => return Ok(exit),
            }
        } else {
            read_prompt(&args.task.prompt)?
        };
        let workspace = args
            .task
            .workspace
            .as_deref()
            .map(resolve_workspace)
            .transpose()?;
        if let (Some(when), Some(wait)) = (&args.task.when, args.task.wait) {
            // Waiting here holds no slot of the daemon's queue.
            let cancel = CancellationToken::new();
            tokio::select! {
                () = super::when::wait_for(when, wait, &cancel) => {}
                r = tokio::signal::ctrl_c() => {
                    r.context("cannot watch for Ctrl-C")?;
                    super::when::interrupted(when);
                    return Ok(Exit::Interrupted);
                }
            }
        }
        submit_and_follow(args, prompt, workspace, taken, out).await
    })?
}

/// `--config` is only the flag's choice: FAMILIAR_CONFIG set for a whole session is not
/// a per-call choice. The daemon is one process for every client: a per-call config
/// would let any caller swap its policy. Say so rather than ignore the flag silently.
fn warn_config_flag(config: Option<&std::path::Path>) -> std::io::Result<()> {
    let from_env = std::env::var_os("FAMILIAR_CONFIG").map(PathBuf::from);
    if let Some(path) = config.filter(|p| from_env.as_deref() != Some(*p)) {
        writeln!(
            std::io::stderr().lock(),
            "familiar: warning: --config {} is not used by `ask`: the daemon reads its own config.toml (and re-reads it when it changes); `familiar run` uses the file in this process",
            path.display()
        )?;
    }
    Ok(())
}

/// `--dmenu`: checks that the daemon can be reached or activated, starts it while the
/// person types (a start that fails closes the menu and says why), then reads the
/// prompt with the launcher. `Ok(Err(exit))` when the menu was not opened, could not
/// be, or was closed.
async fn menu_prompt(notify: bool) -> anyhow::Result<Result<Option<String>, Exit>> {
    let start = match super::client::reachable().await {
        Ok(start) => start,
        Err(f) => return Ok(Err(fail(f, notify, None).await?)),
    };
    let start_failed = async move {
        if let Some(handle) = start
            && let Ok(Some(f)) = handle.await
        {
            return f;
        }
        std::future::pending().await
    };
    let menu = crate::launcher::Menu::for_client();
    tokio::select! {
        picked = crate::launcher::pick(&menu, "familiar> ", &[]) => match picked {
            Ok(prompt) => Ok(Ok(prompt)),
            Err(e) => {
                let f = Failure {
                    exit: super::client::menu_exit(&e),
                    message: format!("--dmenu: {e}"),
                };
                // Under a keybinding nobody reads stderr: a key that did nothing must
                // say why on screen (issue 42 §5), with or without --notify.
                let on_screen = notify || !std::io::stdout().is_terminal();
                Ok(Err(fail(f, on_screen, None).await?))
            }
        },
        // The menu is dropped, which kills it: nobody types into the void.
        f = start_failed => Ok(Err(fail(f, notify, None).await?)),
    }
}

/// Reports a failure before a task exists: on stderr, and with `--notify` on screen.
async fn fail(f: Failure, notify: bool, prompt: Option<&str>) -> anyhow::Result<Exit> {
    if notify {
        progress::failure(prompt, &f.message).await;
    }
    f.report()
}

/// The daemon's `Configuration` facts; says so when the daemon kept a previous
/// config.toml (or policy) because the new one does not load: the task runs under the
/// old one, which the user did not expect (with `--notify`, on screen too).
async fn daemon_facts(
    proxy: &familiar_protocol::proxy::Agent1Proxy<'_>,
    notify: bool,
) -> std::io::Result<Configuration> {
    // An older daemon lacks the property or the key: nothing to say then.
    let Ok(facts) = proxy.configuration().await else {
        return Ok(Configuration::default());
    };
    if let Some(error) = &facts.reload_error {
        writeln!(std::io::stderr().lock(), "familiar: warning: {error}")?;
        if notify {
            progress::warning(error).await;
        }
    }
    Ok(facts)
}

/// `ask --detach`: the ids on stdout (for scripts), and for people on stderr how to
/// follow, steer and stop the task.
fn print_detached(out: &mut Out, json: bool, task: &str, session: &str) -> anyhow::Result<Exit> {
    if json {
        out.json_line(&serde_json::json!({"task_id": task, "session_id": session}))?;
    } else {
        writeln!(out, "{task} {session}")?;
        out.flush()?;
        writeln!(std::io::stderr().lock(), "{}", detached_hint(task, session))?;
    }
    Ok(Exit::Completed)
}

fn detached_hint(task: &str, session: &str) -> String {
    format!(
        "familiar: task {task} runs in the background: `familiar tasks` lists it, `familiar steer {task} MESSAGE` adds to it, `familiar cancel {task}` stops it, `familiar sessions show {session}` shows its answer"
    )
}

async fn submit_and_follow(
    args: AskArgs,
    prompt: String,
    workspace: Option<PathBuf>,
    taken: context::Taken,
    mut out: Out,
) -> anyhow::Result<Exit> {
    let notify = args.notify && !args.detach;
    taken.warn_skipped()?;
    // Up before the daemon answers: the person sees at once that the key worked.
    let mut progress = match notify {
        true => Progress::start(&prompt, &taken.summary()).await,
        false => None,
    };
    let (_conn, proxy, watch, subscribed, task, session) =
        match submitted(&args, &prompt, workspace, taken.context, &mut progress).await? {
            Ok(v) => v,
            Err(exit) => return Ok(exit),
        };
    let signals = subscribed;
    let facts = daemon_facts(&proxy, args.notify).await?;
    if args.detach {
        return print_detached(&mut out, args.task.json, &task, &session);
    }
    let task_id = TaskId::new(&task).context("the daemon sent a malformed task id")?;
    let session_id = SessionId::new(&session).context("the daemon sent a malformed session id")?;
    let json = args.task.json;
    // Under a keybinding stdout is the compositor's log: the notification says it all.
    let quiet = notify && !json && !std::io::stdout().is_terminal();
    let interactive = std::io::stdin().is_terminal() && !json;
    let (tx, rx) = mpsc::channel(EVENT_BUFFER);
    let printer = tokio::spawn(output(rx, out, json, quiet));
    let (answers_tx, answers) = mpsc::channel::<(String, bool)>(8);
    let (typed, steers) = typed_steering(interactive);
    let mut follow = Follow {
        task_id: task_id.clone(),
        followed: [(task.clone(), session_id.clone())].into(),
        saw_finish: false,
        new_session: args.task.session.is_none(),
        tx,
        // Quiet: the approval's line too (the notification asks).
        json: json || quiet,
        interactive,
        typed,
        answers: answers_tx,
        progress: progress.take(),
    };
    let mut cancelled = false;
    let inputs = Inputs {
        signals,
        steers,
        answers,
        watch,
    };
    let (status, result) = match follow
        .until_finished(&proxy, &task, inputs, &mut cancelled)
        .await?
    {
        Followed::Finished { status, result } => (status, result),
        Followed::Left => return Ok(Exit::Interrupted),
        Followed::Gone(gone) => {
            drop(follow);
            printer.await.context("the output printer failed")??;
            return daemon_gone(gone, &task, &session, cancelled).report();
        }
    };
    let status = parse_status(&status)?;
    let progress = follow.progress.take();
    follow.finish(status, &result, session_id).await;
    printer.await.context("the output printer failed")??;
    say_why_cancelled(status, &result, cancelled)?;
    let notice = Notice::new(notify, quiet, &facts);
    // What it changed outside its workspace, for the answer's Undo.
    let undo = match notify {
        true => Undo::of(&proxy, &task).await,
        false => None,
    };
    notice
        .end(&task, &prompt, status, &result, progress, undo.as_ref())
        .await?;
    if cancelled {
        return Ok(Exit::Interrupted);
    }
    Ok(exit_for(status))
}

/// A submitted task: the bus connection, the daemon's proxy, the watch on its bus name
/// and the subscriptions, both made before `Submit`, the task's and its session's ids.
type Submitted = (
    zbus::Connection,
    familiar_protocol::proxy::Agent1Proxy<'static>,
    Option<DaemonWatch>,
    Subscribed,
    String,
    String,
);

/// `Submit`, after the subscriptions; a failure is reported (on stderr, and on screen
/// with `--notify`: in place of the progress when it is up) and is `Ok(Err(exit))`.
async fn submitted(
    args: &AskArgs,
    prompt: &str,
    workspace: Option<PathBuf>,
    context: super::submit::Context,
    progress: &mut Option<Progress>,
) -> anyhow::Result<Result<Submitted, Exit>> {
    let submitted = async {
        let (conn, proxy) = connect().await?;
        // Before `Submit`, so a daemon that dies at once is still seen going.
        let watch = DaemonWatch::start(&conn).await;
        let (subscribed, task, session) =
            subscribe_and_submit(&proxy, args, prompt, workspace, context).await?;
        Ok::<_, Failure>((conn, proxy, watch, subscribed, task, session))
    };
    match submitted.await {
        Ok(v) => Ok(Ok(v)),
        Err(f) => Ok(Err(match progress.take() {
            Some(p) => {
                p.refused(&f.message).await;
                f.report()?
            }
            None => fail(f, args.notify, Some(prompt)).await?,
        })),
    }
}

/// How the end of a task is told under `--notify`.
struct Notice {
    notify: bool,
    /// Under a keybinding: stdout is the compositor's log.
    quiet: bool,
    /// How long the result stays.
    expire: Duration,
}

impl Notice {
    fn new(notify: bool, quiet: bool, daemon: &Configuration) -> Notice {
        let expire = daemon
            .result_timeout_ms
            .map_or(progress::DEFAULT_RESULT_TIMEOUT, Duration::from_millis);
        Notice {
            notify,
            quiet,
            expire,
        }
    }

    /// The result in place of the progress (with the task's Undo when it has one);
    /// under a keybinding, the log's one line when the task did not complete.
    async fn end(
        &self,
        task: &str,
        prompt: &str,
        status: TaskStatus,
        result: &str,
        progress: Option<Progress>,
        undo: Option<&Undo>,
    ) -> std::io::Result<()> {
        if self.quiet && status != TaskStatus::Completed {
            let first = result.lines().next().unwrap_or_default();
            writeln!(
                std::io::stderr().lock(),
                "familiar: task {task} {status}: {}",
                terminal_safe(first)
            )?;
        }
        // A skipped task has no news: the journal (this command's output) says why.
        if self.notify && status != TaskStatus::Skipped {
            match progress {
                Some(p) => {
                    p.finish(status, result, self.expire, self.quiet, undo)
                        .await?;
                }
                None => Progress::result_only(prompt, status, result, self.expire).await,
            }
        } else if let Some(p) = progress {
            p.close().await;
        }
        Ok(())
    }
}
