//! `familiar ask`: submit a task to the daemon over D-Bus and follow it to the end.
//!
//! Invariant: the signal subscriptions exist before `Submit` is sent, so no event of
//! the task can be missed; the exit code is the task's, as for `familiar run`. It is on a
//! keybinding, so it builds no agent runtime: one bus connection, one thread.

use std::collections::HashMap;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;

use anyhow::Context as _;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use zbus::Variant;

use super::client::{block_on, classify, connect};
use super::follow::{
    DaemonWatch, Gone, cancelling_line, daemon_gone, interrupted_unsent, say_why_cancelled,
};
use super::printer::{exit_for, print_events};
use super::prompt::{read_prompt, resolve_workspace};
use super::submit::{Subscribed, submit_options, subscribe_and_submit};
use super::typed::TypedLines;
use super::{AskArgs, Exit, Out};
use crate::agent::events::{EVENT_BUFFER, Event, EventPayload};
use crate::ids::{SessionId, TaskId};
use crate::llm::Usage;
use crate::store::TaskStatus;

/// Menus tried for `--dmenu` when `$FAMILIAR_DMENU` is not set, in order.
const MENUS: &[(&str, &[&str])] = &[
    ("fuzzel", &["--dmenu", "--prompt", "familiar> "]),
    ("wofi", &["--dmenu", "--prompt", "familiar"]),
    ("rofi", &["-dmenu", "-p", "familiar"]),
    ("bemenu", &["-p", "familiar"]),
];

/// Characters of the result shown in a `--notify` notification.
const NOTIFY_BODY_CHARS: usize = 400;

pub fn ask(config: Option<&std::path::Path>, args: AskArgs, out: Out) -> anyhow::Result<Exit> {
    warn_config_flag(config)?;
    let prompt = if args.dmenu {
        match dmenu()? {
            Some(p) => p,
            // The menu was dismissed: nothing was asked.
            None => return Ok(Exit::Completed),
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
    let options = submit_options(&args, workspace.as_ref().map(|w| w.display().to_string()));
    block_on(async {
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
        submit_and_follow(args, prompt, options, out).await
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

/// Says so when the daemon kept a previous config.toml (or policy) because the new one
/// does not load: the task runs under the old one, which the user did not expect.
async fn warn_reload_error(proxy: &crate::dbus::proxy::Agent1Proxy<'_>) -> std::io::Result<()> {
    // An older daemon lacks the property or the key: nothing to say then.
    let Ok(text) = proxy.configuration().await else {
        return Ok(());
    };
    let facts: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    if let Some(error) = facts["reload_error"].as_str() {
        writeln!(std::io::stderr().lock(), "familiar: warning: {error}")?;
    }
    Ok(())
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
    options: HashMap<&'static str, Variant<'static>>,
    mut out: Out,
) -> anyhow::Result<Exit> {
    let (conn, proxy) = match connect().await {
        Ok(v) => v,
        Err(f) => return f.report(),
    };
    let mut watch = DaemonWatch::start(&conn).await;
    let (subscribed, task, session) =
        match subscribe_and_submit(&proxy, &args, &prompt, options).await {
            Ok(v) => v,
            Err(f) => return f.report(),
        };
    let Subscribed {
        mut events,
        mut finished,
        mut approvals,
    } = subscribed;
    warn_reload_error(&proxy).await?;
    if args.detach {
        return print_detached(&mut out, args.task.json, &task, &session);
    }
    let task_id = TaskId::new(&task).context("the daemon sent a malformed task id")?;
    let session_id = SessionId::new(&session).context("the daemon sent a malformed session id")?;
    let json = args.task.json;
    let interactive = std::io::stdin().is_terminal() && !json;
    let (tx, rx) = mpsc::channel(EVENT_BUFFER);
    let printer = tokio::spawn(print_events(rx, out, json, false));
    let (answers_tx, mut answers) = mpsc::channel::<(String, bool)>(8);
    let (typed, mut steers) = typed_steering(interactive);
    let mut follow = Follow {
        task_id: task_id.clone(),
        followed: [(task.clone(), session_id.clone())].into(),
        saw_finish: false,
        new_session: args.task.session.is_none(),
        tx,
        json,
        interactive,
        typed,
        answers: answers_tx,
    };
    let mut ctrl_c = std::pin::pin!(tokio::signal::ctrl_c());
    let mut cancelled = false;
    let (status, result) = loop {
        tokio::select! {
            // Events before the finish: one reader feeds both streams in bus
            // order, so draining events first keeps task_finished last.
            biased;
            Some(sig) = events.recv() => follow.on_event(&sig).await,
            Some(sig) = finished.recv() => {
                let Ok(a) = sig.args() else { continue };
                if a.task_id == task {
                    break (a.status.clone(), a.result.clone());
                }
            }
            Some(sig) = approvals.recv() => follow.on_approval(&sig)?,
            Some(line) = steers.recv() => steer_typed(&proxy, &task, &line).await?,
            Some((request, approve)) = answers.recv() => {
                if let Err(e) = proxy.respond(&request, approve).await {
                    // Answered elsewhere first (a notification, `familiar approve`).
                    tracing::debug!("approval answer not taken: {e}");
                }
            }
            r = &mut ctrl_c, if !cancelled => {
                cancelled = true;
                if r.is_ok() {
                    writeln!(std::io::stderr().lock(), "{}", cancelling_line(&task, true))?;
                    if let Err(e) = proxy.cancel(&task).await {
                        let said = interrupted_unsent(&task, &classify(e));
                        writeln!(std::io::stderr().lock(), "{said}")?;
                        return Ok(Exit::Interrupted);
                    }
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
    let status: TaskStatus = serde_json::from_value(serde_json::Value::String(status.clone()))
        .with_context(|| format!("the daemon sent an unknown status `{status}`"))?;
    follow.finish(status, &result, session_id).await;
    printer.await.context("the output printer failed")??;
    say_why_cancelled(status, &result, cancelled)?;
    // A skipped task has no news: the journal (this command's output) says why.
    if args.notify && status != TaskStatus::Skipped {
        notify_result(status, &result).await?;
    }
    if cancelled {
        return Ok(Exit::Interrupted);
    }
    Ok(exit_for(status))
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

/// `--notify`: the result's start in a desktop notification.
async fn notify_result(status: TaskStatus, result: &str) -> std::io::Result<()> {
    let body: String = result.chars().take(NOTIFY_BODY_CHARS).collect();
    let summary = format!("familiar: {status}");
    if let Err(e) = crate::dbus::notifications::show_result(&summary, &body).await {
        writeln!(
            std::io::stderr().lock(),
            "familiar: cannot show a notification: {e}"
        )?;
    }
    Ok(())
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

/// Reads a prompt with a dmenu-style program; `None` when it was dismissed.
fn dmenu() -> anyhow::Result<Option<String>> {
    let cmd: Vec<String> = match std::env::var("FAMILIAR_DMENU") {
        Ok(s) if !s.trim().is_empty() => {
            shell_words::split(&s).context("cannot parse $FAMILIAR_DMENU")?
        }
        Ok(_) | Err(_) => {
            let found = MENUS.iter().find(|(bin, _)| in_path(bin));
            let Some((bin, args)) = found else {
                anyhow::bail!(
                    "--dmenu found none of fuzzel, wofi, rofi, bemenu in PATH; install one or set FAMILIAR_DMENU to a command that prints the prompt"
                );
            };
            std::iter::once(*bin)
                .chain(args.iter().copied())
                .map(str::to_owned)
                .collect()
        }
    };
    let Some((bin, rest)) = cmd.split_first() else {
        anyhow::bail!("$FAMILIAR_DMENU is empty");
    };
    let output = Command::new(bin)
        .args(rest)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run the menu `{bin}`"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let prompt = text.lines().next().unwrap_or_default().trim().to_owned();
    Ok((!prompt.is_empty()).then_some(prompt))
}

fn in_path(bin: &str) -> bool {
    which::which_global(bin).is_ok()
}
