//! A task's lifecycle around the state machine: starting it (opening the session under
//! its lock, placing it: workspace, sandbox, resources; then its parts: the emitter, the
//! call gate, the context keeper, the clock), and finishing it (the status recorded with
//! the partial work).
//!
//! Every exit of a started task goes through [`Task::finish`]; everything the task
//! reports goes through its [`Emitter`].

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use familiar_protocol::events::EventPayload;
use familiar_protocol::ids::{SessionId, TaskId};
use familiar_protocol::task::{TaskStatus, Usage};
use familiar_sandbox::status::EnforcementStatus;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::agent::calls::gate::CallGate;
use crate::agent::calls::mcp::McpTools;
use crate::agent::context::compaction::SessionMemory;
use crate::agent::context::repair::{alternate_roles, inline_session_memory, repair_dangling};
use crate::agent::context::{ContextKeeper, Model, Persona, SessionState, Settings, memory_notes};
use crate::agent::emitter::Emitter;
use crate::agent::events::EventBus;
use crate::agent::family::subagent::delegates;
use crate::agent::family::{Family, ParentLink};
use crate::agent::plan::PlanTracker;
use crate::agent::rules::{Limits, Progress, Stop};
use crate::agent::runtime::Runtime;
use crate::agent::steering::{self, Steering};
use crate::llm::{ContentBlock, Message};
use crate::sandbox::busproxy::BusProxy;
use crate::sandbox::{SandboxError, SandboxPolicy, TaskResources};
use crate::snapshot::conditions::{Checker, Conditions};
use crate::soul::Soul;
use crate::store::{Context, SessionLock, Store, StoreError, TaskRecord, Transcript};

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

impl TaskSpec {
    /// 1 for a task somebody submitted, 2 for its sub-tasks.
    pub(super) fn depth(&self) -> u32 {
        self.parent.as_ref().map_or(1, |p| p.depth)
    }
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
    /// Events, transcript and hooks.
    pub(super) emitter: Emitter,
    /// What every tool call and model request passes.
    pub(super) gate: CallGate,
    /// The session's context and the model it is sent to.
    pub(super) context: ContextKeeper,
    pub(super) clock: Clock,
    pub(super) limits: Limits,
    pub(super) progress: Progress,
    pub(super) plan: PlanTracker,
    pub(super) place: Place,
    /// Its budget (shared with its parent's, if it has one) and its sub-task slots.
    pub(super) family: Family,
}

/// When the task must stop.
pub(super) struct Clock {
    /// Cancelled by the caller or by the wall-clock deadline.
    pub(super) cancel: CancellationToken,
    timed_out: Arc<AtomicBool>,
    started: Instant,
}

/// Where the task's tools run.
pub(super) struct Place {
    pub(super) workspace: PathBuf,
    pub(super) sandbox: Arc<SandboxPolicy>,
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

    // What a cancelled or cut task leaves is expected, and repaired here: the
    // transcript keeps a record; a person continuing the session needs no warning.
    let repaired = repair_dangling(&mut ctx.history);
    if repaired > 0 {
        tracing::info!(session_id = %session_id, "repaired {repaired} tool calls left without a result");
        transcript.append(&json!({"kind": "repair", "dangling_calls": repaired}))?;
    }
    let paired = alternate_roles(&mut ctx.history);
    if paired > 0 {
        tracing::info!(session_id = %session_id, "paired {paired} user messages left without an answer");
        transcript.append(&json!({"kind": "repair", "unanswered_messages": paired}))?;
    }
    let memory = SessionMemory {
        summary: ctx.summary.as_deref(),
        facts: &ctx.facts,
    };
    if inline_session_memory(&mut ctx.history, &memory) {
        transcript.append(&json!({"kind": "repair", "session_memory": "moved from the system prompt to the history's opening"}))?;
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
    (soul.sandbox.require && rt.services.enforcement.status != EnforcementStatus::Full).then(|| {
        format!(
            "soul `{}` requires a fully enforced sandbox (sandbox.require = true), but this kernel gives {} enforcement (missing: {})",
            soul.id,
            rt.services.enforcement.status.as_str(),
            rt.services.enforcement.missing.join(", ")
        )
    })
}

impl Place {
    /// Where a task of `spec` in session `session` runs: its workspace, the sandbox
    /// made for it there, and its `[resources]` (a systemd slice), if its soul has any.
    async fn for_task(
        rt: &Runtime,
        spec: &TaskSpec,
        session: &SessionId,
    ) -> Result<Place, TaskError> {
        let workspace = match &spec.workspace {
            Some(w) => w.clone(),
            None => rt.services.store.ensure_workspace(session)?,
        };
        let sandbox = SandboxPolicy::new(
            &spec.soul.sandbox,
            &rt.settings.policy.protected_paths,
            &workspace,
            &rt.settings.config.paths.home,
        )?
        .with_plans(rt.services.plans.clone())
        .with_owner(format!("task {} of soul {}", spec.task_id, spec.soul.id));
        // The bus proxy starts with the first command that may use it (idle otherwise).
        let sandbox = match spec.soul.sandbox.bus_talk.is_empty() {
            true => sandbox,
            false => sandbox.with_bus(Arc::new(
                BusProxy::new(
                    spec.soul.sandbox.bus_talk.clone(),
                    format!("task {} of soul {}", spec.task_id, spec.soul.id),
                    crate::sandbox::busproxy::SessionBus::from_env(),
                )
                .map_err(SandboxError::BusProxy)?,
            )),
        };
        let sandbox = match spec.soul.resources.is_empty() {
            true => sandbox,
            false => sandbox.with_resources(Arc::new(
                TaskResources::open(spec.soul.resources, &spec.task_id, spec.soul.id.as_str())
                    .await,
            )),
        };
        Ok(Place {
            workspace,
            sandbox: Arc::new(sandbox),
        })
    }
}

/// Records the task in its session as `running` with its prompt (after the messages a
/// steered task ended before reading), and starts the session's journal.
fn record_start(
    store: &Store,
    spec: &TaskSpec,
    mut ctx: Context,
    lock: SessionLock,
    transcript: &mut Transcript,
    workspace: &std::path::Path,
) -> Result<SessionState, TaskError> {
    ctx.tasks.push(TaskRecord {
        task_id: spec.task_id.clone(),
        prompt: spec.prompt.clone(),
        status: TaskStatus::Running,
        origin: spec.origin.clone(),
        workspace: Some(workspace.to_path_buf()),
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
    Ok(SessionState {
        ctx,
        _lock: lock,
        journal,
        task_index,
    })
}

impl Task {
    /// Opens the session and places the task, records it as `running` with its prompt,
    /// persists, and reports `task_started`. Returns the task, and why it may not run
    /// when it may not.
    pub(super) async fn start(
        rt: Arc<Runtime>,
        spec: TaskSpec,
        bus: EventBus,
        caller_cancel: CancellationToken,
    ) -> Result<(Task, Option<String>), TaskError> {
        let store = Arc::clone(&rt.services.store);
        let (ctx, lock, mut transcript) =
            crate::store::off_runtime(|| open_session(&store, &spec))?;
        let place = Place::for_task(&rt, &spec, &ctx.session_id).await?;
        let session = record_start(&store, &spec, ctx, lock, &mut transcript, &place.workspace)?;
        let refusal = refusal(&rt, &spec.soul);
        let mut task = Task::assemble(rt, spec, bus, &caller_cancel, session, transcript, place);
        let started = EventPayload::TaskStarted {
            soul: task.spec.soul.id.clone(),
            prompt: task.spec.prompt.clone(),
            origin: task.spec.origin.clone(),
            model: task.context.model.name.clone(),
            workspace: task.place.workspace.display().to_string(),
            max_iterations: task.limits.max_iterations,
            sandbox: crate::sandbox::report(
                &task
                    .rt
                    .services
                    .enforcement
                    .for_sockets(&task.place.sandbox.sockets),
            ),
            resources: task
                .place
                .sandbox
                .resources
                .as_ref()
                .and_then(|r| serde_json::to_value(r.report()).ok()),
        };
        task.emitter.emit(started).await;
        Ok((task, refusal))
    }

    /// The task's parts, over its open session and its place.
    fn assemble(
        rt: Arc<Runtime>,
        spec: TaskSpec,
        bus: EventBus,
        caller_cancel: &CancellationToken,
        session: SessionState,
        transcript: Transcript,
        place: Place,
    ) -> Task {
        let limits = Limits::new(&spec.soul, spec.max_iterations);
        let session_id = session.ctx.session_id.clone();
        let emitter = Emitter::new(
            bus,
            transcript,
            &rt.services.hooks,
            spec.task_id.clone(),
            session_id.clone(),
            spec.soul.id.clone(),
        );
        let ancestors = spec.parent.as_ref().map_or(&[][..], |p| &p.quota[..]);
        let gate = CallGate::new(
            &rt,
            Arc::clone(&spec.soul),
            &session_id,
            ancestors,
            place.workspace.clone(),
        );
        let persona = Persona {
            soul: Arc::clone(&spec.soul),
            policy: Arc::clone(&rt.settings.policy),
            workspace: place.workspace.clone(),
            memory: memory_notes(&rt, &spec.soul),
            delegates: delegates(&spec.soul, spec.depth()).to_vec(),
            prompt: spec.prompt.clone(),
        };
        let provider = rt.settings.config.provider(spec.soul.provider.as_deref());
        let provider_name = spec
            .soul
            .provider
            .clone()
            .unwrap_or_else(|| rt.settings.config.default_provider.clone());
        let model = Model::for_soul(&rt, &spec.soul, &provider_name);
        let settings = Settings {
            provider: provider_name,
            max_output_tokens: provider.map_or(crate::config::DEFAULT_MAX_OUTPUT_TOKENS, |p| {
                p.max_output_tokens
            }),
            snapshotter: Arc::clone(&rt.services.snapshotter),
        };
        let context = ContextKeeper::new(session, model, persona, settings);
        Task {
            plan: PlanTracker::new(&spec.prompt),
            clock: Clock::start(caller_cancel, spec.soul.max_wall_clock),
            family: Family::new(
                spec.parent.as_ref(),
                limits.max_iterations,
                limits.max_tokens,
            ),
            emitter,
            gate,
            context,
            limits,
            progress: Progress::default(),
            place,
            rt,
            spec,
        }
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
            &self.rt.settings.mcp,
            &self.spec.soul.grant.tools,
            &self.clock.cancel,
        )
        .await;
        self.gate.offer_mcp(mcp);
        self.progress.notes.extend(notes);
    }

    /// Saves the iteration (a journal line) and syncs the transcript. A failure is logged
    /// (and returned): the task goes on and the next save tries again.
    pub(super) fn persist(&mut self) -> Result<(), StoreError> {
        self.save(false)
    }

    /// [`Task::persist`], or with `whole` the whole context file, which is what a task
    /// leaves behind: between tasks `context/SESSION_ID.json` is complete on its own.
    fn save(&mut self, whole: bool) -> Result<(), StoreError> {
        let session = &mut self.context.session;
        let ctx = &mut session.ctx;
        if let Some(t) = ctx.tasks.get_mut(session.task_index) {
            t.plan = self.plan.plan().clone();
            t.usage = self.progress.usage;
        }
        ctx.touch();
        let journal = &mut session.journal;
        let store = &self.rt.services.store;
        let emitter = &mut self.emitter;
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
            emitter.sync();
            saved
        })
    }

    /// The finish status of a task whose token was cancelled.
    pub(super) fn cancelled_status(&self) -> (TaskStatus, String) {
        self.clock
            .cancelled_cause()
            .status(self.limits.max_wall_clock)
    }

    /// Records the status with the partial work, persists, and reports `task_finished`.
    pub(super) async fn finish(mut self, status: TaskStatus, result: String) -> TaskOutcome {
        self.clock.cancel.cancel(); // stops the deadline timer
        self.plan.close();
        // Nothing of the task runs any more: its slice goes (with anything left in it).
        if let Some(resources) = &self.place.sandbox.resources {
            resources.close().await;
        }
        if let Some(bus) = &self.place.sandbox.bus {
            bus.stop().await;
        }
        let iterations = self.progress.iteration;
        let usage = self.progress.usage;
        if self.context.model.client.is_some() {
            self.context.model.remember(&self.rt);
        }
        // Closed in the same step that takes the unread: a later Steer is refused, so
        // nothing accepted is lost.
        let unread = self.spec.steering.close();
        let pending_steering = unread.len();
        let session = &mut self.context.session;
        let ctx = &mut session.ctx;
        ctx.pending_steering.extend(unread);
        if let Some(t) = ctx.tasks.get_mut(session.task_index) {
            t.status = status;
            t.finished_at = Some(crate::store::now_rfc3339());
            t.result = Some(result.clone());
        }
        ctx.usage.add(&usage);
        // A task whose end could not be saved (a disk that filled up mid-task) did not
        // complete: saying "completed" lost the work silently.
        let (status, result) = match self.save(true) {
            Ok(()) => (status, result),
            Err(e) => (
                TaskStatus::Failed,
                format!("{e}; the task's last steps are not saved. Its last answer was: {result}"),
            ),
        };
        // A new session this task leaves with nothing in it is removed right after
        // (`discard_if_unanswered`): the finish must not name it.
        let session_kept = !self.context.ctx().holds_nothing(status);
        // Before the event, so a reader who saw `task_finished` sees it counted.
        for h in self.emitter.hooks() {
            h.task_finished(&self.emitter.task_ref(), status);
        }
        self.emitter
            .emit(EventPayload::TaskFinished {
                status,
                result: result.clone(),
                usage,
                iterations,
                pending_steering,
                session_kept,
            })
            .await;
        self.emitter.sync();
        TaskOutcome {
            task_id: self.spec.task_id.clone(),
            session_id: self.context.ctx().session_id.clone(),
            status,
            result,
            usage,
            iterations,
        }
    }
}
