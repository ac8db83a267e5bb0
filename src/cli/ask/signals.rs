//! What `ask` does with the signals of the task it follows: its events and those of its
//! delegated sub-tasks to the printer (or, under a keybinding, to the notification), its
//! approval requests asked on the terminal, lines typed meanwhile sent as steering, and
//! the loop that waits for its `TaskFinished` while the daemon, Ctrl-C and the answers
//! are watched.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::Arc;

use familiar_protocol::display::{terminal_safe, visible};
use familiar_protocol::events::{Event, EventPayload};
use familiar_protocol::ids::{SessionId, TaskId};
use familiar_protocol::proxy::{Agent1Proxy, ApprovalRequested, TaskEvent};
use familiar_protocol::task::{TaskStatus, Usage};
use tokio::sync::mpsc;

use crate::cli::Out;
use crate::cli::client::classify;
use crate::cli::follow::{DaemonWatch, Gone, cancel_on_ctrl_c};
use crate::cli::printer::print_events;
use crate::cli::progress::{self, Progress};
use crate::cli::submit::Subscribed;
use crate::cli::typed::TypedLines;

/// Lines typed while the task runs steer it (an approval prompt takes its own): the
/// reader, when stdin is a terminal, and the lines it reads.
pub(super) fn typed_steering(interactive: bool) -> (Option<TypedLines>, mpsc::Receiver<String>) {
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
pub(super) async fn steer_typed(
    proxy: &Agent1Proxy<'_>,
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
pub(super) struct Follow {
    pub(super) task_id: TaskId,
    /// The task and its delegated sub-tasks (learned from `subagent_started`), with
    /// their sessions.
    pub(super) followed: HashMap<String, SessionId>,
    /// Whether the task's own `task_finished` event was seen.
    pub(super) saw_finish: bool,
    /// Whether the task started a new session (no `--session`).
    pub(super) new_session: bool,
    pub(super) tx: mpsc::Sender<Arc<Event>>,
    pub(super) json: bool,
    pub(super) interactive: bool,
    pub(super) typed: Option<TypedLines>,
    pub(super) answers: mpsc::Sender<(String, bool)>,
    /// `--notify`: the task's notification.
    pub(super) progress: Option<Progress>,
}

/// Prints the events, or under a keybinding (`quiet`) takes them and prints nothing.
pub(super) async fn output(
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
    async fn on_event(&mut self, sig: &TaskEvent) {
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
        {
            self.followed
                .insert(child_task_id.to_string(), child_session_id.clone());
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

    fn on_approval(&self, sig: &ApprovalRequested) -> std::io::Result<()> {
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
    pub(super) async fn finish(self, status: TaskStatus, result: &str, session_id: SessionId) {
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

/// How following a task ended.
pub(super) enum Followed {
    /// Its `TaskFinished`: the status and result as the signal carries them.
    Finished { status: String, result: String },
    /// Ctrl-C, and the person left the task running.
    Left,
    /// The daemon went away (or the bus did).
    Gone(Gone),
}

/// What the follow loop watches besides Ctrl-C: the task's signals, the lines typed,
/// the answers to approvals asked on the terminal, the daemon's bus name.
pub(super) struct Inputs {
    pub(super) signals: Subscribed,
    pub(super) steers: mpsc::Receiver<String>,
    pub(super) answers: mpsc::Receiver<(String, bool)>,
    pub(super) watch: Option<DaemonWatch>,
}

impl Follow {
    /// Follows `task` until its `TaskFinished`, Ctrl-C that leaves it running, or the
    /// daemon's end; `cancelled` is set when Ctrl-C cancelled it.
    pub(super) async fn until_finished(
        &mut self,
        proxy: &Agent1Proxy<'static>,
        task: &str,
        mut inputs: Inputs,
        cancelled: &mut bool,
    ) -> anyhow::Result<Followed> {
        let signals = &mut inputs.signals;
        let mut ctrl_c = std::pin::pin!(tokio::signal::ctrl_c());
        loop {
            tokio::select! {
                // Events before the finish: one reader feeds both streams in bus
                // order, so draining events first keeps task_finished last.
                biased;
                Some(sig) = signals.events.recv() => self.on_event(&sig).await,
                Some(sig) = signals.finished.recv() => {
                    let Ok(a) = sig.args() else { continue };
                    if a.task_id == task {
                        return Ok(Followed::Finished {
                            status: a.status.clone(),
                            result: a.result.clone(),
                        });
                    }
                }
                Some(sig) = signals.approvals.recv() => self.on_approval(&sig)?,
                () = progress::until(self.progress.as_ref().and_then(Progress::due)) => {
                    if let Some(p) = &mut self.progress {
                        p.flush().await;
                    }
                }
                Some(line) = inputs.steers.recv() => steer_typed(proxy, task, &line).await?,
                Some((request, approve)) = inputs.answers.recv() => {
                    if let Err(e) = proxy.respond(&request, approve).await {
                        // Answered elsewhere first (a notification, `familiar approve`).
                        tracing::debug!("approval answer not taken: {e}");
                    }
                }
                r = &mut ctrl_c, if !*cancelled => {
                    *cancelled = true;
                    if r.is_ok() && !cancel_on_ctrl_c(proxy, task).await? {
                        return Ok(Followed::Left);
                    }
                }
                gone = DaemonWatch::gone(inputs.watch.as_mut()) => return Ok(Followed::Gone(gone)),
                else => return Ok(Followed::Gone(Gone::BusLost)),
            }
        }
    }
}

/// Asks on the terminal from a thread of its own (a blocking read that may never
/// finish when the request is answered elsewhere; the process does not wait for it).
pub(super) fn ask_on_tty(
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
        let tool = visible(&tool);
        let summary = terminal_safe(&summary).replace('\n', "\n│ ");
        let tier = visible(&tier);
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
