//! A task's lifecycle around the state machine: starting it (session, lock, sandbox,
//! model client, deadline), reporting it (events, transcript, persistence) and finishing
//! it (the status recorded with the partial work).
//!
//! Every exit of a started task goes through [`Task::finish`]; everything the task
//! writes to the transcript goes through [`SessionState::append`].

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::agent::events::{Event, EventBus, EventPayload};
use crate::agent::family::{Family, ParentLink, memory_notes};
use crate::agent::hooks::TaskRef;
use crate::agent::loop_detect::LoopDetector;
use crate::agent::mcp::McpTools;
use crate::agent::plan::PlanTracker;
use crate::agent::repair::repair_dangling;
use crate::agent::runtime::Runtime;
use crate::agent::steering::{self, Steering};
use crate::ids::{SessionId, TaskId};
use crate::llm::{ContentBlock, Estimator, LlmClient, LlmError, Message, Usage};
use crate::sandbox::{EnforcementStatus, SandboxError, SandboxPolicy, TaskResources};
use crate::snapshot::conditions::{Checker, Conditions};
use crate::soul::Soul;
use crate::store::{
    Context, ContextJournal, MemoryEntry, SessionLock, Store, StoreError, TaskRecord, TaskStatus,
    Transcript,
};

/// One task to run.
#[derive(Debug, Clone)]
pub struct TaskSpec {
    pub task_id: TaskId,
    pub soul: Arc<Soul>,
    pub prompt: String,
    /// Continue this session; a new one when `None`.
    pub session: Option<SessionId>,
    /// The writable root; `data_dir/workspaces/SESSION_ID` when `None`.
    pub workspace: Option<PathBuf>,
    /// `cli`, `hyprland`, `timer`, …
    pub origin: String,
    /// May only lower the soul's.
    pub max_iterations: Option<u32>,
    /// Set for a delegated sub-task: who started it, and the budget it shares.
    pub parent: Option<ParentLink>,
    /// Messages the user adds while it runs.
    pub steering: Steering,
    /// Run only if these hold right before the first model call; else it ends
    /// `skipped`, having cost nothing (`--when`).
    pub when: Option<Conditions>,
}

/// How a task ended.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskOutcome {
    pub task_id: TaskId,
    pub session_id: SessionId,
    pub status: TaskStatus,
    pub result: String,
    pub usage: Usage,
    pub iterations: u32,
}

/// Why a task could not start at all (nothing was recorded for it).
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the session `{0}` does not exist")]
    UnknownSession(SessionId),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
}

/// A running task: what the state machine reads and changes.
pub(super) struct Task {
    pub(super) rt: Arc<Runtime>,
    pub(super) spec: TaskSpec,
    pub(super) session: SessionState,
    pub(super) bus: EventBus,
    pub(super) clock: Clock,
    pub(super) model: Model,
    pub(super) limits: Limits,
    pub(super) progress: Progress,
    pub(super) plan: PlanTracker,
    pub(super) place: Place,
    /// Its budget (shared with its parent's, if it has one) and its sub-task slots.
    pub(super) family: Family,
    /// Long-term memory entries for the system prompt (souls with `memory = true`),
    /// read once when the task starts so the prompt stays the same for the whole task.
    pub(super) memory: Vec<MemoryEntry>,
    /// The MCP tools its soul names, found once when it starts.
    pub(super) mcp: McpTools,
}

/// The session on disk, held for the task's life.
pub(super) struct SessionState {
    pub(super) ctx: Context,
    _lock: SessionLock,
    transcript: Transcript,
    /// Where each iteration is made durable (see `store/journal.rs`).
    journal: ContextJournal,
    /// This task's record in `ctx.tasks`.
    task_index: usize,
}

/// When the task must stop.
pub(super) struct Clock {
    /// Cancelled by the caller or by the wall-clock deadline.
    pub(super) cancel: CancellationToken,
    timed_out: Arc<AtomicBool>,
    started: Instant,
}

/// The task's model client, or why it has none.
pub(super) struct Model {
    pub(super) client: Option<LlmClient>,
    pub(super) client_error: Option<LlmError>,
    /// The model requests name (a client's override wins).
    pub(super) name: String,
    /// Tokens; 0 when unknown (no full compaction then).
    pub(super) context_window: u32,
    pub(super) estimator: Estimator,
}

/// Where the task's tools run.
pub(super) struct Place {
    pub(super) workspace: PathBuf,
    pub(super) sandbox: Arc<SandboxPolicy>,
}

/// The limits a task runs under: its soul's, `max_iterations` lowered by the spec.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub(super) max_iterations: u32,
    pub(super) max_tokens: u64,
    pub(super) max_wall_clock: Duration,
}

impl Limits {
    fn for_spec(spec: &TaskSpec) -> Limits {
        let soul = &spec.soul;
        Limits {
            max_iterations: lowered(soul.max_iterations, spec.max_iterations),
            max_tokens: soul.max_tokens,
            max_wall_clock: soul.max_wall_clock,
        }
    }
}

/// A task's `max_iterations`: the request may only lower the soul's, and a task makes at
/// least one model call.
fn lowered(souls: u32, requested: Option<u32>) -> u32 {
    requested.map_or(souls, |m| m.min(souls)).max(1)
}

/// What the loop counts and remembers from turn to turn; the state machine's rules
/// (in [`turn`](crate::agent::turn)) read and update it.
#[derive(Debug, Default)]
pub(super) struct Progress {
    /// Model calls made.
    pub(super) iteration: u32,
    pub(super) usage: Usage,
    pub(super) consecutive_errors: u32,
    pub(super) denied_turns: u32,
    pub(super) length_continuations: u32,
    pub(super) full_compactions: u32,
    pub(super) loops: LoopDetector,
    /// Notes for the model's next reminder (loop warnings, continuations).
    pub(super) notes: Vec<String>,
    /// The snapshot the last reminder was built from: the next one says what changed.
    pub(super) last_snapshot: Option<crate::snapshot::Snapshot>,
}

/// Why a task stops before its work is done, as the clock sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    Cancelled,
    TimedOut,
}

impl Stop {
    /// The status and result a task stopped this way finishes with.
    pub(super) fn status(self, max_wall_clock: Duration) -> (TaskStatus, String) {
        match self {
            Stop::TimedOut => (
                TaskStatus::Timeout,
                format!(
                    "stopped: the task ran longer than its wall-clock budget of {}",
                    humantime::format_duration(max_wall_clock)
                ),
            ),
            Stop::Cancelled => (TaskStatus::Cancelled, "cancelled".to_owned()),
        }
    }
}

impl Clock {
    /// A clock whose token the caller's cancels, and `wall` from now cancels too.
    fn start(caller_cancel: &CancellationToken, wall: Duration) -> Clock {
        let cancel = caller_cancel.child_token();
        let timed_out = Arc::new(AtomicBool::new(false));
        {
            let (cancel, timed_out) = (cancel.clone(), Arc::clone(&timed_out));
            tokio::spawn(async move {
                tokio::select! {
                    () = tokio::time::sleep(wall) => {
                        timed_out.store(true, Ordering::SeqCst);
                        cancel.cancel();
                    }
                    () = cancel.cancelled() => {}
                }
            });
        }
        Clock {
            cancel,
            timed_out,
            started: Instant::now(),
        }
    }

    /// Whether the task must stop now, and why; a passed deadline counts even before
    /// the timer has fired.
    /// Time since the task started.
    pub(super) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    pub(super) fn stop(&self, wall: Duration) -> Option<Stop> {
        if self.cancel.is_cancelled() {
            return Some(self.cancelled_cause());
        }
        if self.started.elapsed() >= wall {
            self.timed_out.store(true, Ordering::SeqCst);
            return Some(Stop::TimedOut);
        }
        None
    }

    /// When the wall clock of a task allowed `wall` runs out.
    pub(super) fn deadline(&self, wall: Duration) -> Instant {
        self.started + wall
    }

    /// Why the token was cancelled: the deadline, or the caller.
    pub(super) fn cancelled_cause(&self) -> Stop {
        if self.timed_out.load(Ordering::SeqCst) {
            Stop::TimedOut
        } else {
            Stop::Cancelled
        }
    }
}

impl SessionState {
    /// Appends one entry to the transcript. A failure is logged, not returned: the
    /// task's work matters more than its record, and the session file keeps the history.
    pub(super) fn append(&mut self, entry: &serde_json::Value) {
        if let Err(e) = self.transcript.append(entry) {
            tracing::error!(session_id = %self.ctx.session_id, "cannot append to the transcript: {e}");
        }
    }
}

/// Opens (or creates) the session under its lock, repairs what a crash left behind, and
/// marks tasks that were running as interrupted.
fn open_session(
    store: &Store,
    spec: &TaskSpec,
) -> Result<(Context, SessionLock, Transcript), TaskError> {
    let (session_id, existing) = match &spec.session {
        Some(id) => match store.load_context(id)? {
            Some(ctx) => (id.clone(), Some(ctx)),
            None => return Err(TaskError::UnknownSession(id.clone())),
        },
        None => (SessionId::generate(), None),
    };
    let lock = store.lock_session(&session_id)?;
    // Reload under the lock: another process may have written it since.
    let existing = match existing {
        Some(_) => store.load_context(&session_id)?,
        None => None,
    };
    let mut ctx = existing
        .unwrap_or_else(|| Context::new(session_id.clone(), spec.soul.id.clone(), &spec.prompt));
    let mut transcript = store.transcript(&session_id)?;

    let repaired = repair_dangling(&mut ctx.history);
    if repaired > 0 {
        tracing::warn!(session_id = %session_id, "repaired {repaired} tool calls left without a result");
        transcript.append(&json!({"kind": "repair", "dangling_calls": repaired}))?;
    }
    for t in &mut ctx.tasks {
        if t.status == TaskStatus::Running || t.status == TaskStatus::Queued {
            t.status = TaskStatus::Interrupted;
        }
    }
    Ok((ctx, lock, transcript))
}

/// Why a soul may not run on this kernel at all: it requires a sandbox the kernel cannot
/// fully give.
fn refusal(rt: &Runtime, soul: &Soul) -> Option<String> {
    (soul.sandbox.require && rt.enforcement.status != EnforcementStatus::Full).then(|| {
        format!(
            "soul `{}` requires a fully enforced sandbox (sandbox.require = true), but this kernel gives {} enforcement (missing: {})",
            soul.id,
            rt.enforcement.status.as_str(),
            rt.enforcement.missing.join(", ")
        )
    })
}

impl Model {
    fn for_soul(rt: &Runtime, soul: &Soul) -> Model {
        let (client, client_error, name, context_window) = match rt.llm.client(soul) {
            Ok((c, m, w)) => (Some(c), None, m, w),
            Err(e) => (None, Some(e), soul.model.clone().unwrap_or_default(), 0),
        };
        Model {
            client,
            client_error,
            name,
            context_window,
            estimator: Estimator::new(),
        }
    }
}

impl Task {
    /// Records the task as `running` with its prompt, persists, and reports
    /// `task_started`. Returns the task, and why it may not run when it may not.
    pub(super) async fn start(
        rt: Arc<Runtime>,
        spec: TaskSpec,
        bus: EventBus,
        caller_cancel: CancellationToken,
    ) -> Result<(Task, Option<String>), TaskError> {
        let store = Arc::clone(&rt.store);
        let (mut ctx, lock, mut transcript) =
            crate::store::off_runtime(|| open_session(&store, &spec))?;
        let workspace = match &spec.workspace {
            Some(w) => w.clone(),
            None => store.ensure_workspace(&ctx.session_id)?,
        };
        let sandbox = SandboxPolicy::new(
            &spec.soul.sandbox,
            &rt.policy.protected_paths,
            &workspace,
            &rt.config.paths.home,
        )?
        .with_plans(rt.plans.clone())
        .with_owner(format!("task {} of soul {}", spec.task_id, spec.soul.id));
        let sandbox = match spec.soul.resources.is_empty() {
            true => sandbox,
            false => sandbox.with_resources(Arc::new(
                TaskResources::open(spec.soul.resources, &spec.task_id, spec.soul.id.as_str())
                    .await,
            )),
        };
        let refusal = refusal(&rt, &spec.soul);
        let limits = Limits::for_spec(&spec);
        let model = Model::for_soul(&rt, &spec.soul);
        let family = Family::new(
            spec.parent.as_ref(),
            limits.max_iterations,
            limits.max_tokens,
        );
        let memory = memory_notes(&rt, &spec.soul);

        ctx.tasks.push(TaskRecord {
            task_id: spec.task_id.clone(),
            prompt: spec.prompt.clone(),
            status: TaskStatus::Running,
            origin: spec.origin.clone(),
            workspace: Some(workspace.clone()),
            started_at: crate::store::now_rfc3339(),
            finished_at: None,
            plan: Default::default(),
            usage: Usage::default(),
            result: None,
        });
        let task_index = ctx.tasks.len() - 1;
        // Messages a steered task ended before reading open this one, before its prompt.
        let mut prompt_msg = Message::user_text(spec.prompt.clone());
        for pending in std::mem::take(&mut ctx.pending_steering).into_iter().rev() {
            prompt_msg.content.insert(
                0,
                ContentBlock::Text {
                    text: steering::as_text(&pending),
                },
            );
        }
        transcript
            .append(&json!({"kind": "message", "task_id": spec.task_id, "message": prompt_msg}))?;
        ctx.history.push(prompt_msg);
        ctx.touch();
        let journal = store.start_journal(&mut ctx)?;

        let mut task = Task {
            plan: PlanTracker::new(&spec.prompt),
            clock: Clock::start(&caller_cancel, spec.soul.max_wall_clock),
            session: SessionState {
                ctx,
                _lock: lock,
                transcript,
                journal,
                task_index,
            },
            rt,
            bus,
            model,
            limits,
            progress: Progress::default(),
            place: Place {
                workspace,
                sandbox: Arc::new(sandbox),
            },
            family,
            memory,
            mcp: McpTools::default(),
            spec,
        };
        task.emit(EventPayload::TaskStarted {
            soul: task.spec.soul.id.to_string(),
            prompt: task.spec.prompt.clone(),
            origin: task.spec.origin.clone(),
            model: task.model.name.clone(),
            workspace: task.place.workspace.display().to_string(),
            max_iterations: task.limits.max_iterations,
            sandbox: serde_json::to_value(
                task.rt
                    .enforcement
                    .for_sockets(&task.spec.soul.sandbox.sockets),
            )
            .unwrap_or_default(),
            resources: task
                .place
                .sandbox
                .resources
                .as_ref()
                .and_then(|r| serde_json::to_value(r.report()).ok()),
        })
        .await;
        Ok((task, refusal))
    }

    /// Why the task must not run after all: its `--when` conditions do not hold now.
    pub(super) async fn unmet_conditions(&self) -> Option<String> {
        let when = self.spec.when.as_ref()?;
        let (unmet, _) = Checker::connect().await.check(when).await;
        unmet.map(|u| format!("skipped: {u} (--when {when})"))
    }

    /// Finds the MCP tools the soul names, starting their servers if needed; a server
    /// that cannot start is a note for the model, not the end of the task.
    pub(super) async fn offer_mcp_tools(&mut self) {
        let (mcp, notes) = McpTools::for_allowlist(
            &self.rt.mcp,
            &self.spec.soul.grant.tools,
            &self.clock.cancel,
        )
        .await;
        self.mcp = mcp;
        self.progress.notes.extend(notes);
    }

    pub(super) fn task_ref(&self) -> TaskRef<'_> {
        TaskRef {
            task_id: &self.spec.task_id,
            session_id: &self.session.ctx.session_id,
            soul: &self.spec.soul.id,
        }
    }

    pub(super) async fn emit(&mut self, payload: EventPayload) {
        let event = Arc::new(Event {
            payload,
            task_id: self.spec.task_id.clone(),
            session_id: self.session.ctx.session_id.clone(),
        });
        // Text deltas are many and small; the final assistant message has the text.
        if !matches!(event.payload, EventPayload::TextDelta { .. }) {
            let entry = serde_json::to_value(&*event).unwrap_or_default();
            self.session.append(&entry);
        }
        self.bus.publish(event).await;
    }

    pub(super) fn record_message(&mut self, message: Message) {
        let entry = json!({"kind": "message", "task_id": self.spec.task_id, "message": message});
        self.session.append(&entry);
        self.session.ctx.history.push(message);
    }

    /// Saves the iteration (a journal line) and syncs the transcript. A failure is logged
    /// (and returned): the task goes on and the next save tries again.
    pub(super) fn persist(&mut self) -> Result<(), crate::store::StoreError> {
        self.save(false)
    }

    /// [`Task::persist`], or with `whole` the whole context file, which is what a task
    /// leaves behind: between tasks `context/SESSION_ID.json` is complete on its own.
    fn save(&mut self, whole: bool) -> Result<(), crate::store::StoreError> {
        let ctx = &mut self.session.ctx;
        if let Some(t) = ctx.tasks.get_mut(self.session.task_index) {
            t.plan = self.plan.plan().clone();
            t.usage = self.progress.usage;
        }
        ctx.touch();
        let journal = &mut self.session.journal;
        let store = &self.rt.store;
        let transcript = &mut self.session.transcript;
        crate::store::off_runtime(|| {
            let saved = match whole {
                // A whole file that cannot be written (a full disk) may still fit as a line.
                true => store.save_context(ctx).or_else(|e| {
                    tracing::warn!(session_id = %ctx.session_id, "cannot rewrite the session file ({e}); appending to its journal");
                    journal.persist(store, ctx)
                }),
                false => journal.persist(store, ctx),
            };
            if let Err(e) = &saved {
                tracing::error!(session_id = %ctx.session_id, "cannot save the session: {e}");
            }
            if let Err(e) = transcript.sync() {
                tracing::error!(session_id = %ctx.session_id, "cannot sync the transcript: {e}");
            }
            saved
        })
    }

    /// The finish status of a task whose token was cancelled.
    pub(super) fn cancelled_status(&self) -> (TaskStatus, String) {
        self.clock
            .cancelled_cause()
            .status(self.limits.max_wall_clock)
    }

    pub(super) fn max_output_tokens(&self) -> u32 {
        self.rt
            .config
            .provider(self.spec.soul.provider.as_deref())
            .map_or(crate::config::DEFAULT_MAX_OUTPUT_TOKENS, |p| {
                p.max_output_tokens
            })
    }

    /// Records the status with the partial work, persists, and reports `task_finished`.
    pub(super) async fn finish(mut self, status: TaskStatus, result: String) -> TaskOutcome {
        self.clock.cancel.cancel(); // stops the deadline timer
        self.plan.close();
        // Nothing of the task runs any more: its slice goes (with anything left in it).
        if let Some(resources) = &self.place.sandbox.resources {
            resources.close().await;
        }
        let iterations = self.progress.iteration;
        let usage = self.progress.usage;
        // Closed in the same step that takes the unread: a later Steer is refused, so
        // nothing accepted is lost.
        let unread = self.spec.steering.close();
        let pending_steering = unread.len();
        let ctx = &mut self.session.ctx;
        ctx.pending_steering.extend(unread);
        if let Some(t) = ctx.tasks.get_mut(self.session.task_index) {
            t.status = status;
            t.finished_at = Some(crate::store::now_rfc3339());
            t.result = Some(result.clone());
        }
        ctx.usage.add(&usage);
        // A task whose end could not be saved (a disk that filled up mid-task) did not
        // complete: saying "completed" lost the work silently (issue 13).
        let (status, result) = match self.save(true) {
            Ok(()) => (status, result),
            Err(e) => (
                TaskStatus::Failed,
                format!("{e}; the task's last steps are not saved. Its last answer was: {result}"),
            ),
        };
        // Before the event, so a reader who saw `task_finished` sees it counted.
        for h in &self.rt.hooks {
            h.task_finished(&self.task_ref(), status);
        }
        self.emit(EventPayload::TaskFinished {
            status,
            result: result.clone(),
            usage,
            iterations,
            pending_steering,
        })
        .await;
        if let Err(e) = self.session.transcript.sync() {
            tracing::error!("cannot sync the transcript: {e}");
        }
        TaskOutcome {
            task_id: self.spec.task_id.clone(),
            session_id: self.session.ctx.session_id.clone(),
            status,
            result,
            usage,
            iterations,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_may_only_lower_the_souls_max_iterations() {
        assert_eq!(lowered(20, None), 20);
        assert_eq!(lowered(20, Some(25)), 20);
        assert_eq!(lowered(20, Some(7)), 7);
        assert_eq!(lowered(20, Some(0)), 1);
    }
}
