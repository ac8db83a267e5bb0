//! `familiar ask`: submit a task to the daemon over D-Bus and follow it to the end.
//!
//! Invariant: the signal subscriptions exist before `Submit` is sent, so no event of
//! the task can be missed; the exit code is the task's, as for `familiar run`. It is on a
//! keybinding, so it builds no agent runtime: one bus connection, one thread. Under a
//! keybinding (`--notify`, stdout not a terminal) it writes only warnings and errors:
//! what a person needs to see is in the task's notification ([`super::progress`]).

use std::collections::HashMap;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::client::{Failure, block_on, classify, connect};
use super::follow::{
    DaemonWatch, Gone, cancel_on_ctrl_c, daemon_gone, parse_status, say_why_cancelled,
};
use super::printer::{exit_for, print_events};
use super::progress::{self, Progress};
use super::prompt::{read_prompt, resolve_workspace};
use super::submit::{Subscribed, subscribe_and_submit};
use super::typed::TypedLines;
use super::{AskArgs, Exit, Out};
use crate::agent::events::{EVENT_BUFFER, Event, EventPayload};
use crate::ids::{SessionId, TaskId};
use crate::llm::Usage;
use crate::store::TaskStatus;

pub fn ask(config: Option<&std::path::Path>, args: AskArgs, out: Out) -> anyhow::Result<Exit> {
    warn_config_flag(config)?;
    block_on(async {
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
        submit_and_follow(args, prompt, workspace, out).await
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
    tokio::select! {
        picked = crate::launcher::pick("familiar> ", &[]) => match picked {
            Ok(prompt) => Ok(Ok(prompt)),
            Err(e) => {
                let f = Failure {
                    exit: Exit::Usage,
                    message: format!("--dmenu: {e}"),
                };
                Ok(Err(fail(f, notify, None).await?))
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
    proxy: &crate::dbus::proxy::Agent1Proxy<'_>,
    notify: bool,
) -> std::io::Result<serde_json::Value> {
    // An older daemon lacks the property or the key: nothing to say then.
    let Ok(text) = proxy.configuration().await else {
        return Ok(serde_json::Value::Null);
    };
    let facts: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    if let Some(error) = facts["reload_error"].as_str() {
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
    mut out: Out,
) -> anyhow::Result<Exit> {
    let notify = args.notify && !args.detach;
    // Up before the daemon answers: the person sees at once that the key worked.
    let mut progress = match notify {
        true => Progress::start(&prompt).await,
        false => None,
    };
    let (_conn, proxy, mut watch, subscribed, task, session) =
        match submitted(&args, &prompt, workspace, &mut progress).await? {
            Ok(v) => v,
            Err(exit) => return Ok(exit),
        };
    let mut signals = subscribed;
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
    let (answers_tx, mut answers) = mpsc::channel::<(String, bool)>(8);
    let (typed, mut steers) = typed_steering(interactive);
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
    let mut ctrl_c = std::pin::pin!(tokio::signal::ctrl_c());
    let mut cancelled = false;
    let (status, result) = loop {
        tokio::select! {
            // Events before the finish: one reader feeds both streams in bus
            // order, so draining events first keeps task_finished last.
            biased;
            Some(sig) = signals.events.recv() => follow.on_event(&sig).await,
            Some(sig) = signals.finished.recv() => {
                let Ok(a) = sig.args() else { continue };
                if a.task_id == task {
                    break (a.status.clone(), a.result.clone());
                }
            }
            Some(sig) = signals.approvals.recv() => follow.on_approval(&sig)?,
            () = progress::until(follow.progress.as_ref().and_then(Progress::due)) => {
                if let Some(p) = &mut follow.progress {
                    p.flush().await;
                }
            }
            Some(line) = steers.recv() => steer_typed(&proxy, &task, &line).await?,
            Some((request, approve)) = answers.recv() => {
                if let Err(e) = proxy.respond(&request, approve).await {
                    // Answered elsewhere first (a notification, `familiar approve`).
                    tracing::debug!("approval answer not taken: {e}");
                }
            }
            r = &mut ctrl_c, if !cancelled => {
                cancelled = true;
                if r.is_ok() && !cancel_on_ctrl_c(&proxy, &task).await? {
                    return Ok(Exit::Interrupted);
                }
            }
            gone = DaemonWatch::gone(watch.as_mut()) => {
                drop(follow);
                printer.await.context("the output printer failed")??;
                return daemon_gone(gone, &task, &session, cancelled).report();
            }
            else => return daemon_gone(Gone::BusLost, &task, &session, cancelled).report(),
        }
    };
    let status = parse_status(&status)?;
    let progress = follow.progress.take();
    follow.finish(status, &result, session_id).await;
    printer.await.context("the output printer failed")??;
    say_why_cancelled(status, &result, cancelled)?;
    let notice = Notice::new(notify, quiet, &facts);
    notice
        .end(&task, &prompt, status, &result, progress)
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
    crate::dbus::proxy::Agent1Proxy<'static>,
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
    progress: &mut Option<Progress>,
) -> anyhow::Result<Result<Submitted, Exit>> {
    let submitted = async {
        let (conn, proxy) = connect().await?;
        // Before `Submit`, so a daemon that dies at once is still seen going.
        let watch = DaemonWatch::start(&conn).await;
        let (subscribed, task, session) =
            subscribe_and_submit(&proxy, args, prompt, workspace).await?;
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
    fn new(notify: bool, quiet: bool, daemon: &serde_json::Value) -> Notice {
        let expire = daemon["result_timeout_ms"]
            .as_u64()
            .map_or(progress::DEFAULT_RESULT_TIMEOUT, Duration::from_millis);
        Notice {
            notify,
            quiet,
            expire,
        }
    }

    /// The result in place of the progress; under a keybinding, the log's one line
    /// when the task did not complete.
    async fn end(
        &self,
        task: &str,
        prompt: &str,
        status: TaskStatus,
        result: &str,
        progress: Option<Progress>,
    ) -> std::io::Result<()> {
        if self.quiet && status != TaskStatus::Completed {
            let first = result.lines().next().unwrap_or_default();
            writeln!(
                std::io::stderr().lock(),
                "familiar: task {task} {status}: {}",
                crate::approval::terminal_safe(first)
            )?;
        }
        // A skipped task has no news: the journal (this command's output) says why.
        if self.notify && status != TaskStatus::Skipped {
            match progress {
                Some(p) => p.finish(status, result, self.expire, self.quiet).await?,
                None => Progress::result_only(prompt, status, result, self.expire).await,
            }
        } else if let Some(p) = progress {
            p.close().await;
        }
        Ok(())
    }
}

/// Lines typed while the task runs steer it (an approval prompt takes its own): the
/// reader, when stdin is a terminal, and the lines it reads.
fn typed_steering(interactive: bool) -> (Option<TypedLines>, mpsc::Receiver<String>) {
    let (steer_tx, steers) = mpsc::channel::<String>(8);
    let typed = if interactive {
        TypedLines::start(move |line| {
            if steer_tx.blocking_send(line).is_err() {
                tracing::debug!("the task ended before the message was sent");
            }
        })
    } else {
        None
    };
    (typed, steers)
}

/// Sends a typed line to the task and says whether it was taken.
async fn steer_typed(
    proxy: &crate::dbus::proxy::Agent1Proxy<'_>,
    task: &str,
    line: &str,
) -> std::io::Result<()> {
    let said = match proxy.steer(task, line).await {
        Ok(()) => "  ↳ noted: your message joins the task at its next step".to_owned(),
        Err(e) => format!("  ↳ not sent: {}", classify(e).message),
    };
    writeln!(std::io::stderr().lock(), "{said}")
}

/// What `ask` follows of a submitted task: its events and those of its delegated
/// sub-tasks, passed to the printer, and its approval requests.
struct Follow {
    task_id: TaskId,
    /// The task and its delegated sub-tasks (learned from `subagent_started`), with
    /// their sessions.
    followed: HashMap<String, SessionId>,
    /// Whether the task's own `task_finished` event was seen.
    saw_finish: bool,
    /// Whether the task started a new session (no `--session`).
    new_session: bool,
    tx: mpsc::Sender<Arc<Event>>,
    json: bool,
    interactive: bool,
    typed: Option<TypedLines>,
    answers: mpsc::Sender<(String, bool)>,
    /// `--notify`: the task's notification.
    progress: Option<Progress>,
}

/// Prints the events, or under a keybinding (`quiet`) takes them and prints nothing.
async fn output(
    mut rx: mpsc::Receiver<Arc<Event>>,
    out: Out,
    json: bool,
    quiet: bool,
) -> anyhow::Result<()> {
    if !quiet {
        return print_events(rx, out, json, false).await;
    }
    while rx.recv().await.is_some() {}
    Ok(())
}

impl Follow {
    async fn on_event(&mut self, sig: &crate::dbus::proxy::TaskEvent) {
        let Ok(a) = sig.args() else { return };
        let Some(session) = self.followed.get(a.task_id.as_str()).cloned() else {
            return;
        };
        let Ok(event_task) = TaskId::new(a.task_id.as_str()) else {
            return;
        };
        let payload = match EventPayload::from_signal(&a.kind, &a.payload_json) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(
                    "skipping an event this client does not know ({}): {e}",
                    a.kind
                );
                return;
            }
        };
        if let EventPayload::SubagentStarted {
            child_task_id,
            child_session_id,
            ..
        } = &payload
            && let Ok(child_session) = SessionId::new(child_session_id.as_str())
        {
            self.followed.insert(child_task_id.clone(), child_session);
        }
        self.saw_finish |=
            event_task == self.task_id && matches!(payload, EventPayload::TaskFinished { .. });
        if let Some(p) = &mut self.progress
            && let Some(text) = progress::doing(&payload)
        {
            p.update(text).await;
        }
        let event = Arc::new(Event {
            payload,
            task_id: event_task,
            session_id: session,
        });
        if self.tx.send(event).await.is_err() {
            // The printer stopped (closed stdout): keep following for the exit code.
            tracing::debug!("the output printer stopped");
        }
    }

    fn on_approval(&self, sig: &crate::dbus::proxy::ApprovalRequested) -> std::io::Result<()> {
        let Ok(a) = sig.args() else { return Ok(()) };
        if !self.followed.contains_key(a.task_id.as_str()) {
            return Ok(());
        }
        if !self.json {
            // Without a notification server this line is the only place the request
            // shows.
            let how = if self.interactive {
                "answer below, or run"
            } else {
                "run"
            };
            writeln!(
                std::io::stderr().lock(),
                "  waiting for approval {}: {how} `familiar approve {}` or `familiar deny {}`",
                a.request_id,
                a.request_id,
                a.request_id
            )?;
        }
        if self.interactive {
            ask_on_tty(
                a.request_id.clone(),
                a.tool.clone(),
                a.summary.clone(),
                a.tier.clone(),
                self.typed.clone(),
                self.answers.clone(),
            );
        }
        Ok(())
    }

    /// Ends the printed events with the task's finish: when our event subscription fell
    /// behind and was dropped, the finish signal still says how it ended.
    async fn finish(self, status: TaskStatus, result: &str, session_id: SessionId) {
        if self.saw_finish {
            return;
        }
        let payload = EventPayload::TaskFinished {
            status,
            result: result.to_owned(),
            usage: Usage::default(),
            iterations: 0,
            pending_steering: 0,
            // Without the task's own event, the kept session is guessed: a new session
            // whose task failed or was skipped is the one the daemon may have removed.
            session_kept: !(self.new_session
                && matches!(status, TaskStatus::Failed | TaskStatus::Skipped)),
        };
        let event = Arc::new(Event {
            payload,
            task_id: self.task_id,
            session_id,
        });
        if self.tx.send(event).await.is_err() {
            tracing::debug!("the output printer stopped");
        }
    }
}

/// Asks on the terminal from a thread of its own (a blocking read that may never
/// finish when the request is answered elsewhere; the process does not wait for it).
fn ask_on_tty(
    request: String,
    tool: String,
    summary: String,
    tier: String,
    typed: Option<TypedLines>,
    answers: mpsc::Sender<(String, bool)>,
) {
    std::thread::spawn(move || {
        let Ok(tty) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/tty")
        else {
            return;
        };
        // Claimed before the prompt shows, so the answer never steers the task.
        let question = typed.as_ref().map(TypedLines::open);
        let mut w = &tty;
        // The daemon made the summary visible; a signal is still not trusted to have.
        let tool = crate::approval::visible(&tool);
        let summary = crate::approval::terminal_safe(&summary).replace('\n', "\n│ ");
        let tier = crate::approval::visible(&tier);
        let asked = write!(
            w,
            "\n┌ familiar asks to run {tool} ({tier} tier)\n│ {summary}\n└ allow? [y]es / [N]o: "
        )
        .and_then(|()| w.flush());
        if asked.is_err() {
            return;
        }
        let line = match question {
            Some(question) => question.answer().unwrap_or_default(),
            None => {
                let mut line = String::new();
                if std::io::BufReader::new(&tty).read_line(&mut line).is_err() {
                    return;
                }
                line
            }
        };
        let approve = matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes");
        if answers.blocking_send((request, approve)).is_err() {
            tracing::debug!("the task ended before the answer");
        }
    });
}
