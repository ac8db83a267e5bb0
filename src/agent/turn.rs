//! The agent loop's state machine: one task, from prompt to finish status.
//!
//! ```text
//!   start ──▶ CheckLimits ──▶ CallModel ──▶ AfterTurn ──┐
//!                 ▲  │             │            │        │ tools were called
//!                 │  ▼             ▼            ▼        │
//!                 │ Finish ◀─── Finish ◀──── Finish      │
//!                 └──────────────────────────────────────┘
//! ```
//!
//! [`run_task`] loads (or creates) the session, takes its lock, repairs tool calls a
//! crash left without results, records the task as `running` and persists, then drives
//! the states until one yields a finish status. Every state change that matters is
//! persisted before the next model call, so a crash loses at most the turn in flight,
//! and every exit path goes through [`Task::finish`], which records the status with the
//! partial work.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use serde_json::json;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::agent::compaction;
use crate::agent::dispatch::{CallEnv, CallSpec, Dispatcher, Gate, MAX_PARALLEL};
use crate::agent::events::{Event, EventBus, EventPayload};
use crate::agent::hooks::{Hooks, TaskRef, ToolCallRef};
use crate::agent::loop_detect::{LoopDetector, LoopVerdict, signature};
use crate::agent::metrics::{Metrics, bump};
use crate::agent::plan::{PlanTracker, describe_call};
use crate::agent::prompt::{PromptParts, system_prompt, wrap_tool_output};
use crate::approval::ApprovalBroker;
use crate::config::Config;
use crate::ids::{CallId, SessionId, TaskId};
use crate::llm::{
    ClientEvent, ContentBlock, Estimator, FinishReason, LlmClient, LlmError, Message, Request,
    Role, StreamEvent, Usage,
};
use crate::policy::{self, Call, Decision, Outcome, PathContext, Policy, StepName};
use crate::ratelimit::{RateLimiters, Scope};
use crate::sandbox::{Enforcement, EnforcementStatus, SandboxLauncher, SandboxPolicy};
use crate::snapshot::Snapshotter;
use crate::soul::Soul;
use crate::store::{
    AuditDecision, Context, SessionLock, Store, StoreError, TaskRecord, TaskStatus, Transcript,
};
use crate::tools::{Registry, ToolContext};

/// Model failures in a row (after the client's own retries) before the task fails.
pub const MAX_CONSECUTIVE_ERRORS: u32 = 3;
/// Turns in a row whose every call was refused before the task ends `denied`.
pub const MAX_DENIED_TURNS: u32 = 3;
/// "Your answer was cut off" continuations per task.
pub const MAX_LENGTH_CONTINUATIONS: u32 = 2;
/// Tokens kept free below the context window besides the output budget.
pub const CONTEXT_RESERVE: u64 = 2_000;
/// Facts kept across compactions.
pub const MAX_FACTS: usize = 40;

/// Builds a model client for a soul.
pub trait LlmFactory: Send + Sync {
    /// The client, the model name requests use, and that model's context window.
    fn client(&self, soul: &Soul) -> Result<(LlmClient, String, u32), LlmError>;
}

/// The factory that reads `config.toml`'s providers and the process environment.
///
/// Its tasks share one HTTP client (built on first use): the TLS roots are loaded once
/// per process and connections to the model server stay alive from task to task. A
/// runtime lives on one tokio runtime, which the client's pooled connections need.
pub struct ConfigLlmFactory {
    config: Arc<Config>,
    http: std::sync::OnceLock<reqwest::Client>,
}

impl ConfigLlmFactory {
    pub fn new(config: Arc<Config>) -> Self {
        ConfigLlmFactory {
            config,
            http: std::sync::OnceLock::new(),
        }
    }

    fn http(&self) -> Result<reqwest::Client, LlmError> {
        if let Some(c) = self.http.get() {
            return Ok(c.clone());
        }
        let client = crate::llm::new_client()?;
        // Two tasks racing here both build one; the first stored wins, which is fine.
        Ok(self.http.get_or_init(|| client).clone())
    }
}

impl LlmFactory for ConfigLlmFactory {
    fn client(&self, soul: &Soul) -> Result<(LlmClient, String, u32), LlmError> {
        let cfg = self
            .config
            .provider(soul.provider.as_deref())
            .map_err(|e| LlmError::Config(e.to_string()))?;
        let providers = &self.config.providers;
        let client = LlmClient::from_config_with(
            cfg,
            &crate::config::ProcessEnv,
            &|name| providers.get(name).cloned(),
            &self.http()?,
        )?;
        let model = soul.model.clone().unwrap_or_else(|| cfg.model.clone());
        Ok((client, model, cfg.context_window))
    }
}

/// What tasks of one process share.
pub struct Runtime {
    pub config: Arc<Config>,
    pub policy: Arc<Policy>,
    pub store: Arc<Store>,
    pub tools: Arc<Registry>,
    pub limiters: Arc<RateLimiters>,
    pub approvals: ApprovalBroker,
    pub metrics: Arc<Metrics>,
    pub snapshotter: Arc<Mutex<Snapshotter>>,
    pub hooks: Vec<Arc<dyn Hooks>>,
    pub llm: Arc<dyn LlmFactory>,
    /// Starts the sandboxed helper for tools.
    pub launcher: Arc<SandboxLauncher>,
    /// What the kernel enforces ([`crate::sandbox::probe`], taken once).
    pub enforcement: Enforcement,
}

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
    #[error("{0}")]
    Sandbox(String),
}

enum State {
    CheckLimits,
    CallModel,
    AfterTurn(Turn),
    Finish(TaskStatus, String),
}

/// What one model call and its tools produced.
struct Turn {
    text: String,
    finish: FinishReason,
    /// Signatures of the calls, for loop detection.
    calls: Vec<(String, serde_json::Value)>,
    all_refused: bool,
    fatal: Option<String>,
}

/// Runs one task to its finish status.
///
/// Every log line of the task carries `task_id`, `session_id` and `soul` (journald:
/// TASK_ID, SESSION_ID, SOUL), and tool calls add `tool`.
pub async fn run_task(
    rt: Arc<Runtime>,
    spec: TaskSpec,
    bus: EventBus,
    cancel: CancellationToken,
) -> Result<TaskOutcome, TaskError> {
    use tracing::Instrument;
    let span = tracing::info_span!(
        "task",
        task_id = %spec.task_id,
        session_id = tracing::field::Empty,
        soul = %spec.soul.id,
    );
    drive(rt, spec, bus, cancel, span.clone())
        .instrument(span)
        .await
}

async fn drive(
    rt: Arc<Runtime>,
    spec: TaskSpec,
    bus: EventBus,
    cancel: CancellationToken,
    span: tracing::Span,
) -> Result<TaskOutcome, TaskError> {
    let mut task = Task::start(rt, spec, bus, cancel).await?;
    span.record("session_id", tracing::field::display(&task.ctx.session_id));
    let mut state = match task.refusal.take() {
        Some(why) => State::Finish(TaskStatus::Denied, why),
        None => State::CheckLimits,
    };
    let (status, result) = loop {
        state = match state {
            State::CheckLimits => task.check_limits(),
            State::CallModel => task.call_model().await,
            State::AfterTurn(turn) => {
                let next = task.after_turn(turn).await;
                // Once per iteration, with the turn's messages, plan and usage in it;
                // `finish` persists the last one.
                task.persist();
                next
            }
            State::Finish(status, result) => break (status, result),
        };
    };
    Ok(task.finish(status, result).await)
}

struct Task {
    rt: Arc<Runtime>,
    spec: TaskSpec,
    ctx: Context,
    _lock: SessionLock,
    transcript: Transcript,
    bus: EventBus,
    /// Cancelled by the caller or by the wall-clock deadline.
    cancel: CancellationToken,
    timed_out: Arc<AtomicBool>,
    client: Option<LlmClient>,
    client_error: Option<LlmError>,
    model: String,
    context_window: u32,
    estimator: Estimator,
    plan: PlanTracker,
    loops: LoopDetector,
    usage: Usage,
    iteration: u32,
    max_iterations: u32,
    started: Instant,
    workspace: PathBuf,
    task_index: usize,
    consecutive_errors: u32,
    denied_turns: u32,
    length_continuations: u32,
    full_compactions: u32,
    /// Notes to add to the next user turn (loop warnings, continuations).
    notes: Vec<String>,
    sandbox: Arc<SandboxPolicy>,
    /// Why the task may not run at all (a soul that requires a sandbox the kernel
    /// cannot fully give).
    refusal: Option<String>,
}

impl Task {
    async fn start(
        rt: Arc<Runtime>,
        spec: TaskSpec,
        bus: EventBus,
        caller_cancel: CancellationToken,
    ) -> Result<Task, TaskError> {
        let store = Arc::clone(&rt.store);
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
        let mut ctx = existing.unwrap_or_else(|| {
            Context::new(session_id.clone(), spec.soul.id.clone(), &spec.prompt)
        });
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

        let workspace = match &spec.workspace {
            Some(w) => w.clone(),
            None => store.ensure_workspace(&session_id)?,
        };
        let home = rt.config.paths.home.clone();
        let sandbox = SandboxPolicy::for_task(&spec.soul, &rt.policy, &workspace, &home)
            .map_err(|e| TaskError::Sandbox(e.to_string()))?;
        let refusal = (spec.soul.sandbox.require && rt.enforcement.status != EnforcementStatus::Full)
            .then(|| {
                format!(
                    "soul `{}` requires a fully enforced sandbox (sandbox.require = true), but this kernel gives {} enforcement (missing: {})",
                    spec.soul.id,
                    rt.enforcement.status.as_str(),
                    rt.enforcement.missing.join(", ")
                )
            });
        let max_iterations = spec
            .max_iterations
            .map_or(spec.soul.max_iterations, |m| {
                m.min(spec.soul.max_iterations)
            })
            .max(1);

        let (client, client_error, model, context_window) = match rt.llm.client(&spec.soul) {
            Ok((c, m, w)) => (Some(c), None, m, w),
            Err(e) => (
                None,
                Some(e),
                spec.soul.model.clone().unwrap_or_default(),
                0,
            ),
        };

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
        let prompt_msg = Message::user_text(spec.prompt.clone());
        transcript
            .append(&json!({"kind": "message", "task_id": spec.task_id, "message": prompt_msg}))?;
        ctx.history.push(prompt_msg);
        ctx.touch();
        store.save_context(&ctx)?;

        // The deadline cancels the same token as the caller, and says it was the clock.
        let cancel = caller_cancel.child_token();
        let timed_out = Arc::new(AtomicBool::new(false));
        {
            let (cancel, timed_out) = (cancel.clone(), Arc::clone(&timed_out));
            let wall = spec.soul.max_wall_clock;
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

        let mut task = Task {
            plan: PlanTracker::new(&spec.prompt),
            rt,
            ctx,
            _lock: lock,
            transcript,
            bus,
            cancel,
            timed_out,
            client,
            client_error,
            model,
            context_window,
            estimator: Estimator::new(),
            loops: LoopDetector::new(),
            usage: Usage::default(),
            iteration: 0,
            max_iterations,
            started: Instant::now(),
            workspace,
            task_index,
            consecutive_errors: 0,
            denied_turns: 0,
            length_continuations: 0,
            full_compactions: 0,
            notes: Vec::new(),
            sandbox: Arc::new(sandbox),
            refusal,
            spec,
        };
        task.emit(EventPayload::TaskStarted {
            soul: task.spec.soul.id.to_string(),
            prompt: task.spec.prompt.clone(),
            origin: task.spec.origin.clone(),
            model: task.model.clone(),
            workspace: task.workspace.display().to_string(),
            max_iterations,
            sandbox: serde_json::to_value(&task.rt.enforcement).unwrap_or_default(),
        })
        .await;
        Ok(task)
    }

    fn task_ref(&self) -> TaskRef<'_> {
        TaskRef {
            task_id: &self.spec.task_id,
            session_id: &self.ctx.session_id,
            soul: &self.spec.soul.id,
        }
    }

    async fn emit(&mut self, payload: EventPayload) {
        let event = Arc::new(Event {
            payload,
            task_id: self.spec.task_id.clone(),
            session_id: self.ctx.session_id.clone(),
        });
        // Text deltas are many and small; the final assistant message has the text.
        if !matches!(event.payload, EventPayload::TextDelta { .. }) {
            let entry = serde_json::to_value(&*event).unwrap_or_default();
            if let Err(e) = self.transcript.append(&entry) {
                tracing::error!(task_id = %self.spec.task_id, "cannot append to the transcript: {e}");
            }
        }
        self.bus.publish(event).await;
    }

    fn record_message(&mut self, message: Message) {
        let entry = json!({"kind": "message", "task_id": self.spec.task_id, "message": message});
        if let Err(e) = self.transcript.append(&entry) {
            tracing::error!(task_id = %self.spec.task_id, "cannot append to the transcript: {e}");
        }
        self.ctx.history.push(message);
    }

    /// Saves the context and syncs the transcript. A failure is logged: the task goes on
    /// and the next save tries again.
    fn persist(&mut self) {
        if let Some(t) = self.ctx.tasks.get_mut(self.task_index) {
            t.plan = self.plan.plan().clone();
            t.usage = self.usage;
        }
        self.ctx.touch();
        if let Err(e) = self.rt.store.save_context(&self.ctx) {
            tracing::error!(session_id = %self.ctx.session_id, "cannot save the session: {e}");
        }
        if let Err(e) = self.transcript.sync() {
            tracing::error!(session_id = %self.ctx.session_id, "cannot sync the transcript: {e}");
        }
    }

    fn cancelled_status(&self) -> (TaskStatus, String) {
        if self.timed_out.load(Ordering::SeqCst) {
            (
                TaskStatus::Timeout,
                format!(
                    "stopped: the task ran longer than its wall-clock budget of {}",
                    humantime::format_duration(self.spec.soul.max_wall_clock)
                ),
            )
        } else {
            (TaskStatus::Cancelled, "cancelled".to_owned())
        }
    }

    fn check_limits(&mut self) -> State {
        if self.cancel.is_cancelled() {
            let (s, r) = self.cancelled_status();
            return State::Finish(s, r);
        }
        if self.started.elapsed() >= self.spec.soul.max_wall_clock {
            self.timed_out.store(true, Ordering::SeqCst);
            let (s, r) = self.cancelled_status();
            return State::Finish(s, r);
        }
        if self.usage.total() >= self.spec.soul.max_tokens {
            return State::Finish(
                TaskStatus::BudgetExceeded,
                format!(
                    "stopped: the task used {} tokens, its budget is {}",
                    self.usage.total(),
                    self.spec.soul.max_tokens
                ),
            );
        }
        if self.iteration >= self.max_iterations {
            return State::Finish(
                TaskStatus::MaxIterations,
                format!(
                    "stopped after {} model calls without finishing (max_iterations = {})",
                    self.iteration, self.max_iterations
                ),
            );
        }
        if self.consecutive_errors >= MAX_CONSECUTIVE_ERRORS {
            return State::Finish(
                TaskStatus::Failed,
                format!(
                    "the model failed {} times in a row",
                    self.consecutive_errors
                ),
            );
        }
        State::CallModel
    }

    async fn call_model(&mut self) -> State {
        let Some(mut client) = self.client.take() else {
            let err = self
                .client_error
                .as_ref()
                .map_or_else(|| "no model client".to_owned(), ToString::to_string);
            return State::Finish(TaskStatus::Failed, err);
        };
        let state = self.call_model_with(&mut client).await;
        self.client = Some(client);
        state
    }

    async fn call_model_with(&mut self, client: &mut LlmClient) -> State {
        self.iteration += 1;
        let iteration = self.iteration;
        self.emit(EventPayload::IterationStarted {
            iteration,
            max_iterations: self.max_iterations,
        })
        .await;

        // The snapshot reads /proc: off the async threads.
        let snapshot_text = {
            let snap = Arc::clone(&self.rt.snapshotter);
            let ws = self.workspace.clone();
            tokio::task::spawn_blocking(move || {
                let mut s = snap.lock().unwrap_or_else(|e| e.into_inner());
                s.take(Some(&ws)).to_prompt_text()
            })
            .await
            .unwrap_or_else(|e| format!("(snapshot unavailable: {e})"))
        };

        if !self.notes.is_empty() {
            let text = std::mem::take(&mut self.notes).join("\n\n");
            self.add_user_note(text);
        }

        let offered = self.rt.tools.offered(&self.spec.soul.grant.tools);
        let tool_names: Vec<&str> = offered.iter().map(|t| t.info().name).collect();
        let tool_defs = self.rt.tools.definitions(&self.spec.soul.grant.tools);
        let (soul, policy) = (Arc::clone(&self.spec.soul), Arc::clone(&self.rt.policy));
        let (workspace, max_iterations) = (self.workspace.clone(), self.max_iterations);
        let build_system = |ctx: &Context| {
            system_prompt(&PromptParts {
                soul: &soul,
                policy: &policy,
                tools: &tool_names,
                workspace: &workspace,
                snapshot_text: &snapshot_text,
                summary: ctx.summary.as_deref(),
                facts: &ctx.facts,
                iteration,
                max_iterations,
            })
        };

        // Compaction: micro always, full when the estimate says so.
        if let Some(stats) = compaction::micro_compact(&mut self.ctx.history) {
            bump(&self.rt.metrics.compactions);
            let tokens = (stats.chars_saved / 4) as u64;
            self.emit(EventPayload::Compaction {
                mode: "micro".into(),
                tokens_before: tokens,
                tokens_after: 0,
                messages_before: self.ctx.history.len(),
                messages_after: self.ctx.history.len(),
            })
            .await;
        }
        let system = build_system(&self.ctx);
        let mut request = Request {
            model: client.model_override().unwrap_or(&self.model).to_owned(),
            system,
            messages: self.ctx.history.clone(),
            tools: tool_defs,
            max_tokens: self.max_output_tokens(),
            temperature: None,
        };
        let mut estimate = self.estimator.request(&request);
        if self.context_window > 0
            && compaction::needs_full(
                estimate,
                self.context_window,
                u64::from(request.max_tokens) + CONTEXT_RESERVE,
                self.ctx.history.len(),
            )
            && self.full_compactions < compaction::MAX_FULL_COMPACTIONS
        {
            self.full_compact(client, estimate).await;
            request.system = build_system(&self.ctx);
            request.messages = self.ctx.history.clone();
            estimate = self.estimator.request(&request);
        }

        // The per-session LLM limit slows the task down rather than failing it.
        if let State::Finish(s, r) = self.wait_for_llm_quota().await {
            return State::Finish(s, r);
        }

        for h in &self.rt.hooks {
            h.before_llm(&self.task_ref(), &request);
        }
        let (events_tx, mut events_rx) = mpsc::unbounded_channel();
        let iter_cancel = self.cancel.child_token();
        let env = CallEnv {
            task_id: self.spec.task_id.clone(),
            session_id: self.ctx.session_id.clone(),
            soul: self.spec.soul.id.clone(),
            approvals: self.rt.approvals.clone(),
            tool_ctx: ToolContext {
                workspace: self.workspace.clone(),
                home: self.rt.config.paths.home.clone(),
                snapshotter: Arc::clone(&self.rt.snapshotter),
                cancel: iter_cancel.clone(),
                sandbox: Arc::clone(&self.sandbox),
                launcher: Arc::clone(&self.rt.launcher),
            },
            events: events_tx,
            parallel: Arc::new(Semaphore::new(MAX_PARALLEL)),
        };
        let mut dispatcher = Dispatcher::new();
        let mut blocks: Vec<ContentBlock> = Vec::new();
        let mut text = String::new();
        let mut finish = None;
        let mut turn_usage = Usage::default();
        let mut refused = 0usize;
        let mut stream_error = None;

        {
            let mut stream = client.stream(&request, iter_cancel.clone());
            loop {
                tokio::select! {
                    Some(ev) = events_rx.recv() => self.emit(ev).await,
                    item = stream.next() => match item {
                        None => break,
                        Some(Err(e)) => { stream_error = Some(e); break; }
                        Some(Ok(ev)) => match ev {
                            ClientEvent::Event(StreamEvent::TextDelta { text: t }) => {
                                text.push_str(&t);
                                self.emit(EventPayload::TextDelta { text: t }).await;
                            }
                            ClientEvent::Event(StreamEvent::ThinkingDelta { .. }) => {}
                            ClientEvent::Event(StreamEvent::ThinkingComplete { thinking, signature }) => {
                                blocks.push(ContentBlock::Thinking { thinking, signature });
                            }
                            ClientEvent::Event(StreamEvent::ToolCallStarted { .. }) => {}
                            ClientEvent::Event(StreamEvent::ToolCallComplete { id, name, input }) => {
                                if !text.is_empty() {
                                    blocks.push(ContentBlock::Text { text: std::mem::take(&mut text) });
                                }
                                let (args, gate, trail) = match input {
                                    Ok(args) => {
                                        let (gate, trail) = self.gate(&id, &name, &args).await;
                                        (args, gate, trail)
                                    }
                                    Err(invalid) => (
                                        json!({}),
                                        Gate::Refuse {
                                            decision: AuditDecision::Denied,
                                            reason: format!("{invalid}. Send the call again with a JSON object that matches the tool's schema."),
                                        },
                                        "arguments=deny".to_owned(),
                                    ),
                                };
                                if matches!(gate, Gate::Refuse { .. }) {
                                    refused += 1;
                                }
                                blocks.push(ContentBlock::ToolUse { id: id.clone(), name: name.clone(), input: args.clone() });
                                let tool = self.rt.tools.get(&name).cloned();
                                let tier = crate::catalog::info(&name)
                                    .map_or(crate::policy::Tier::SystemCritical, |i| crate::catalog::tier_for_call(i, &args));
                                let mutating = tool.as_ref().is_none_or(|t| t.is_mutating(&args));
                                self.plan.start(&id, describe_call(&name, &args));
                                dispatcher.submit(&env, CallSpec {
                                    call_id: id,
                                    summary: describe_call(&name, &args),
                                    name,
                                    tier,
                                    args,
                                    tool,
                                    mutating,
                                    gate,
                                    trail,
                                });
                            }
                            ClientEvent::Event(StreamEvent::Usage { usage }) => turn_usage = usage,
                            ClientEvent::Event(StreamEvent::Finish { reason }) => finish = Some(reason),
                            ClientEvent::Retry { attempt, delay, reason } => {
                                self.emit(EventPayload::Retry { attempt, delay_ms: delay.as_millis() as u64, reason }).await;
                            }
                            ClientEvent::ModelFallback { from, to } => {
                                self.emit(EventPayload::ModelFallback { from, to, reason: "repeated overload or a stalled stream".into() }).await;
                            }
                            ClientEvent::AttemptDiscarded => {
                                blocks.clear();
                                text.clear();
                                refused = 0;
                                dispatcher.discard_attempt();
                            }
                        },
                    },
                }
            }
        }

        // Every started call finishes (or sees the cancellation) before the turn ends.
        let finished = {
            let wait = dispatcher.finish();
            tokio::pin!(wait);
            loop {
                tokio::select! {
                    Some(ev) = events_rx.recv() => self.emit(ev).await,
                    done = &mut wait => break done,
                }
            }
        };
        drop(env);
        while let Ok(ev) = events_rx.try_recv() {
            self.emit(ev).await;
        }
        let (calls, orphans) = finished;
        for o in orphans {
            let entry = json!({"kind": "orphaned_tool_result", "ok": o.ok, "output": o.output});
            if let Err(e) = self.transcript.append(&entry) {
                tracing::error!("cannot append to the transcript: {e}");
            }
        }

        // Account for the model call.
        self.usage.add(&turn_usage);
        if turn_usage.input_tokens > 0 {
            self.estimator.calibrate(estimate, turn_usage.input_tokens);
        }
        let llm_result = match &stream_error {
            Some(e) => Err(e),
            None => Ok(&turn_usage),
        };
        for h in &self.rt.hooks {
            h.after_llm(&self.task_ref(), llm_result);
        }

        // Tool results, in call order, whatever happened to the stream.
        let mut results = Vec::with_capacity(calls.len());
        let mut fatal = None;
        let mut signatures = Vec::with_capacity(calls.len());
        for (call, result) in &calls {
            let audit_reason = match &result.reason {
                Some(r) => format!("{r} [{}]", result.trail),
                None => format!("[{}]", result.trail),
            };
            let cref = ToolCallRef {
                call_id: &call.call_id,
                tool: &call.name,
                tier: call.tier,
                args: &call.args,
                decision: result.decision,
                reason: Some(&audit_reason),
            };
            for h in &self.rt.hooks {
                h.before_tool(&self.task_ref(), &cref);
                h.after_tool(&self.task_ref(), &cref, result.outcome);
            }
            self.ctx
                .record_tool_call(&call.name, !result.ok, result.duration_ms);
            self.plan.finish(&call.call_id, result.ok, &result.output);
            let entry = json!({"kind": "tool_result", "call_id": call.call_id, "tool": call.name, "ok": result.ok, "output": result.output});
            if let Err(e) = self.transcript.append(&entry) {
                tracing::error!("cannot append to the transcript: {e}");
            }
            if result.fatal && fatal.is_none() {
                fatal = Some(format!("{} failed fatally: {}", call.name, result.output));
            }
            signatures.push((call.name.clone(), call.args.clone()));
            results.push(ContentBlock::ToolResult {
                tool_use_id: call.call_id.clone(),
                content: wrap_tool_output(&call.name, result.ok, &result.output),
                is_error: !result.ok,
            });
        }
        if !calls.is_empty() {
            let plan = self.plan.plan().clone();
            let progress = self.plan.progress();
            self.emit(EventPayload::PlanUpdated { plan, progress })
                .await;
        }

        if let Some(err) = stream_error {
            // The partial turn is dropped from the history, but the calls that ran are
            // recorded above (transcript, plan, audit) and remembered by the dispatcher.
            return match err {
                LlmError::Cancelled => {
                    // Calls that ran before the cancel are part of the work: keep them
                    // with their (possibly "cancelled") results.
                    if !results.is_empty() {
                        self.record_message(Message {
                            role: Role::Assistant,
                            content: blocks,
                        });
                        self.record_message(Message {
                            role: Role::User,
                            content: results,
                        });
                    }
                    let (s, r) = self.cancelled_status();
                    State::Finish(s, r)
                }
                e @ (LlmError::Auth(_)
                | LlmError::BadRequest(_)
                | LlmError::NotFound(_)
                | LlmError::NoToolSupport(_)
                | LlmError::Config(_)
                | LlmError::Http { .. }
                | LlmError::RetriesExhausted { .. }) => {
                    State::Finish(TaskStatus::Failed, e.to_string())
                }
                e @ (LlmError::RateLimited { .. }
                | LlmError::Overloaded { .. }
                | LlmError::Server { .. }
                | LlmError::Connect(_)
                | LlmError::Stalled(_)
                | LlmError::Truncated(_)
                | LlmError::Protocol(_)) => {
                    self.consecutive_errors += 1;
                    tracing::warn!(task_id = %self.spec.task_id, "model call failed: {e}");
                    if self.consecutive_errors >= MAX_CONSECUTIVE_ERRORS {
                        State::Finish(TaskStatus::Failed, format!("the model call failed: {e}"))
                    } else {
                        State::CheckLimits
                    }
                }
            };
        }
        self.consecutive_errors = 0;

        if !text.is_empty() {
            blocks.push(ContentBlock::Text { text: text.clone() });
        }
        let full_text: String = blocks
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                ContentBlock::Thinking { .. }
                | ContentBlock::ToolUse { .. }
                | ContentBlock::ToolResult { .. } => None,
            })
            .collect::<Vec<_>>()
            .join("");
        if !blocks.is_empty() {
            self.record_message(Message {
                role: Role::Assistant,
                content: blocks,
            });
        }
        if !results.is_empty() {
            self.record_message(Message {
                role: Role::User,
                content: results,
            });
        }
        let called_tools = !calls.is_empty();
        State::AfterTurn(Turn {
            text: full_text,
            finish: finish.unwrap_or(if called_tools {
                FinishReason::ToolUse
            } else {
                FinishReason::Stop
            }),
            all_refused: called_tools && refused == calls.len(),
            calls: signatures,
            fatal,
        })
    }

    async fn after_turn(&mut self, turn: Turn) -> State {
        if let Some(fatal) = turn.fatal {
            return State::Finish(TaskStatus::Failed, fatal);
        }
        if turn.calls.is_empty() {
            return match turn.finish {
                FinishReason::Length => {
                    self.length_continuations += 1;
                    if self.length_continuations > MAX_LENGTH_CONTINUATIONS {
                        State::Finish(
                            TaskStatus::Failed,
                            "the model's answer hit the output limit again; ask for a shorter answer or raise max_output_tokens".into(),
                        )
                    } else {
                        self.notes.push("[familiar: your previous answer was cut off at the output limit. Continue where you stopped, concisely.]".into());
                        State::CheckLimits
                    }
                }
                FinishReason::ContentFilter => State::Finish(
                    TaskStatus::Failed,
                    "the provider's content filter stopped the response".into(),
                ),
                FinishReason::Error => {
                    State::Finish(TaskStatus::Failed, "the model reported an error".into())
                }
                FinishReason::Stop | FinishReason::ToolUse => {
                    State::Finish(TaskStatus::Completed, turn.text)
                }
            };
        }
        if turn.all_refused {
            self.denied_turns += 1;
            if self.denied_turns >= MAX_DENIED_TURNS {
                return State::Finish(
                    TaskStatus::Denied,
                    format!(
                        "stopped: every tool call of the last {MAX_DENIED_TURNS} turns was refused"
                    ),
                );
            }
        } else {
            self.denied_turns = 0;
        }
        let sig = signature(turn.calls.iter().map(|(n, a)| (n.as_str(), a)));
        match self.loops.record(sig) {
            LoopVerdict::Fine => {}
            LoopVerdict::Warn(note) => {
                self.notes.push(format!("[familiar: {note}]"));
                self.emit(EventPayload::LoopWarning { note }).await;
            }
            LoopVerdict::Stop(reason) => {
                return State::Finish(TaskStatus::LoopDetected, format!("stopped: {reason}"));
            }
        }
        State::CheckLimits
    }

    fn add_user_note(&mut self, note: String) {
        // Appended to the last user message when it is one (tool results), so roles
        // keep alternating; a new user message otherwise.
        match self.ctx.history.last_mut() {
            Some(m) if m.role == Role::User => m.content.push(ContentBlock::Text { text: note }),
            Some(_) | None => self.record_message(Message::user_text(note)),
        }
    }

    fn max_output_tokens(&self) -> u32 {
        self.rt
            .config
            .provider(self.spec.soul.provider.as_deref())
            .map_or(crate::config::DEFAULT_MAX_OUTPUT_TOKENS, |p| {
                p.max_output_tokens
            })
    }

    /// Decides one call: policy, then rate limits. Emits `tool_call_started`. Returns
    /// the gate and the decision's steps for the audit log.
    async fn gate(&mut self, id: &CallId, name: &str, args: &serde_json::Value) -> (Gate, String) {
        let tier = crate::catalog::info(name).map_or(crate::policy::Tier::SystemCritical, |i| {
            crate::catalog::tier_for_call(i, args)
        });
        let ctx = PathContext {
            home: &self.rt.config.paths.home,
            cwd: &self.workspace,
        };
        let mut verdict = policy::decide(
            &self.spec.soul.id,
            &self.spec.soul.grant,
            &self.rt.policy,
            &Call {
                tool: name,
                tier,
                args,
            },
            &ctx,
        );
        let mut gate = match &verdict.decision {
            Decision::Allow => match crate::catalog::runs_outside_sandbox(name, args) {
                Some(why) => {
                    verdict.record(StepName::ShellAnalysis, Outcome::Ask, why);
                    Gate::Ask {
                        reason: format!("{why}: it is always asked"),
                    }
                }
                None => Gate::Run,
            },
            Decision::Ask { reason } => Gate::Ask {
                reason: reason.clone(),
            },
            Decision::Deny { reason, .. } => Gate::Refuse {
                decision: AuditDecision::Denied,
                reason: reason.clone(),
            },
        };
        if !matches!(gate, Gate::Refuse { .. })
            && let Err(limited) = self.check_tool_quota(name)
        {
            {
                self.emit(EventPayload::RateLimited {
                    scope: limited.scope.as_str().to_owned(),
                    limit: limited.spec.to_string(),
                    retry_after_ms: limited.retry_after.as_millis() as u64,
                    tool: Some(name.to_owned()),
                })
                .await;
                verdict.record(StepName::RateLimit, Outcome::Deny, limited.to_string());
                gate = Gate::Refuse {
                    decision: AuditDecision::RateLimited,
                    reason: limited.to_string(),
                };
            }
        }
        let (decision, reason) = match &gate {
            Gate::Run => ("allow", None),
            Gate::Ask { reason } => ("ask", Some(reason.clone())),
            Gate::Refuse { reason, .. } => ("deny", Some(reason.clone())),
        };
        self.emit(EventPayload::ToolCallStarted {
            call_id: id.to_string(),
            tool: name.to_owned(),
            args: args.clone(),
            tier: tier.to_string(),
            decision: decision.to_owned(),
            reason,
        })
        .await;
        let mut trail = verdict
            .steps
            .iter()
            .map(|s| format!("{}={}", s.name.as_str(), s.outcome.as_str()))
            .collect::<Vec<_>>()
            .join(", ");
        trail.push_str(&format!(
            ", sandbox={}",
            self.rt.enforcement.status.as_str()
        ));
        if let Some(abi) = self.rt.enforcement.abi {
            trail.push_str(&format!(" (landlock abi {abi})"));
        }
        (gate, trail)
    }

    fn check_tool_quota(&self, tool: &str) -> Result<(), crate::ratelimit::RateLimited> {
        let session = self.ctx.session_id.as_str();
        let per_tool_key = format!("{session}/{tool}");
        let soul = &self.spec.soul.rate_limits;
        let pol = &self.rt.policy.rate_limits;
        let mut checks = Vec::new();
        for limits in [soul, pol] {
            if let Some(spec) = limits.tool_calls {
                checks.push((Scope::SessionTools, session, spec));
            }
            if let Some(spec) = limits.tools.get(tool) {
                checks.push((Scope::SessionTool, per_tool_key.as_str(), *spec));
            }
        }
        if let Some(spec) = self.rt.policy.global_tool_calls {
            checks.push((Scope::GlobalTools, "global", spec));
        }
        self.rt.limiters.check_all(checks)
    }

    /// Waits (cancellably) until the session may make another model request.
    async fn wait_for_llm_quota(&mut self) -> State {
        let specs: Vec<_> = [
            self.spec.soul.rate_limits.llm_calls,
            self.rt.policy.rate_limits.llm_calls,
        ]
        .into_iter()
        .flatten()
        .collect();
        let session = self.ctx.session_id.to_string();
        loop {
            let checks = specs
                .iter()
                .map(|s| (Scope::SessionLlm, session.as_str(), *s));
            match self.rt.limiters.check_all(checks) {
                Ok(()) => return State::CallModel,
                Err(limited) => {
                    self.emit(EventPayload::RateLimited {
                        scope: limited.scope.as_str().to_owned(),
                        limit: limited.spec.to_string(),
                        retry_after_ms: limited.retry_after.as_millis() as u64,
                        tool: None,
                    })
                    .await;
                    tokio::select! {
                        () = tokio::time::sleep(limited.retry_after) => {}
                        () = self.cancel.cancelled() => {
                            let (s, r) = self.cancelled_status();
                            return State::Finish(s, r);
                        }
                    }
                }
            }
        }
    }

    /// Summarises the older history with the model; on failure, keeps going without.
    async fn full_compact(&mut self, client: &mut LlmClient, tokens_before: u64) {
        let Some(cut) = compaction::split_point(&self.ctx.history) else {
            return;
        };
        self.full_compactions += 1;
        let messages_before = self.ctx.history.len();
        let prompt = compaction::summary_prompt(
            self.ctx.summary.as_deref(),
            &self.ctx.facts,
            &self.ctx.history[..cut],
        );
        let request = Request {
            model: client.model_override().unwrap_or(&self.model).to_owned(),
            system: "You write concise, faithful summaries of agent sessions.".into(),
            messages: vec![Message::user_text(prompt)],
            tools: Vec::new(),
            max_tokens: self.max_output_tokens(),
            temperature: None,
        };
        let mut answer = String::new();
        let mut failed = None;
        {
            let mut stream = client.stream(&request, self.cancel.child_token());
            while let Some(item) = stream.next().await {
                match item {
                    Ok(ClientEvent::Event(StreamEvent::TextDelta { text })) => {
                        answer.push_str(&text)
                    }
                    Ok(ClientEvent::Event(StreamEvent::Usage { usage })) => self.usage.add(&usage),
                    Ok(ClientEvent::AttemptDiscarded) => answer.clear(),
                    Ok(_) => {}
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
        }
        bump(&self.rt.metrics.llm_requests);
        if let Some(e) = failed {
            bump(&self.rt.metrics.llm_failures);
            tracing::warn!(task_id = %self.spec.task_id, "compaction summary failed: {e}");
            return;
        }
        let (summary, facts) = compaction::parse_summary(&answer);
        if summary.is_empty() {
            return;
        }
        self.ctx.summary = Some(summary);
        compaction::merge_facts(&mut self.ctx.facts, facts, MAX_FACTS);
        compaction::apply_cut(&mut self.ctx.history, cut, &self.spec.prompt);
        bump(&self.rt.metrics.compactions);
        let tokens_after = self.estimator.messages(&self.ctx.history);
        let messages_after = self.ctx.history.len();
        self.emit(EventPayload::Compaction {
            mode: "full".into(),
            tokens_before,
            tokens_after,
            messages_before,
            messages_after,
        })
        .await;
    }

    async fn finish(mut self, status: TaskStatus, result: String) -> TaskOutcome {
        self.cancel.cancel(); // stops the deadline timer
        self.plan.close();
        let iterations = self.iteration;
        if let Some(t) = self.ctx.tasks.get_mut(self.task_index) {
            t.status = status;
            t.finished_at = Some(crate::store::now_rfc3339());
            t.result = Some(result.clone());
        }
        self.ctx.usage.input_tokens += self.usage.input_tokens;
        self.ctx.usage.output_tokens += self.usage.output_tokens;
        match status {
            TaskStatus::Completed => bump(&self.rt.metrics.tasks_completed),
            TaskStatus::Failed
            | TaskStatus::Cancelled
            | TaskStatus::MaxIterations
            | TaskStatus::BudgetExceeded
            | TaskStatus::Timeout
            | TaskStatus::LoopDetected
            | TaskStatus::Denied
            | TaskStatus::Interrupted
            | TaskStatus::Queued
            | TaskStatus::Running => bump(&self.rt.metrics.tasks_failed),
        }
        self.persist();
        self.emit(EventPayload::TaskFinished {
            status,
            result: result.clone(),
            usage: self.usage,
            iterations,
        })
        .await;
        if let Err(e) = self.transcript.sync() {
            tracing::error!("cannot sync the transcript: {e}");
        }
        TaskOutcome {
            task_id: self.spec.task_id.clone(),
            session_id: self.ctx.session_id.clone(),
            status,
            result,
            usage: self.usage,
            iterations,
        }
    }
}

/// Gives every tool_use without a result a synthetic error result, so the history is
/// valid for every provider again. Returns how many were repaired.
pub fn repair_dangling(history: &mut Vec<Message>) -> usize {
    const INTERRUPTED: &str = "[familiar: this call was interrupted before it returned a result (the task stopped or familiar restarted); it may or may not have run. Check before repeating it.]";
    let mut repaired = 0;
    let mut i = 0;
    while i < history.len() {
        if history[i].role != Role::Assistant {
            i += 1;
            continue;
        }
        let uses: Vec<CallId> = history[i]
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolUse { id, .. } => Some(id.clone()),
                ContentBlock::Text { .. }
                | ContentBlock::Thinking { .. }
                | ContentBlock::ToolResult { .. } => None,
            })
            .collect();
        if uses.is_empty() {
            i += 1;
            continue;
        }
        let next_is_results = history.get(i + 1).is_some_and(|m| {
            m.role == Role::User
                && m.content
                    .iter()
                    .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
        });
        if !next_is_results {
            history.insert(
                i + 1,
                Message {
                    role: Role::User,
                    content: Vec::new(),
                },
            );
        }
        let results = &mut history[i + 1].content;
        for id in uses {
            let answered = results.iter().any(
                |b| matches!(b, ContentBlock::ToolResult { tool_use_id, .. } if *tool_use_id == id),
            );
            if !answered {
                results.push(ContentBlock::ToolResult {
                    tool_use_id: id,
                    content: INTERRUPTED.to_owned(),
                    is_error: true,
                });
                repaired += 1;
            }
        }
        i += 2;
    }
    repaired
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dangling_calls_get_an_interrupted_result() {
        let call = |id: &str| ContentBlock::ToolUse {
            id: CallId::from_provider(id),
            name: "read_file".into(),
            input: json!({"path": "x"}),
        };
        let mut h = vec![
            Message::user_text("go"),
            Message {
                role: Role::Assistant,
                content: vec![call("a"), call("b")],
            },
            Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: CallId::from_provider("a"),
                    content: "ok".into(),
                    is_error: false,
                }],
            },
            Message {
                role: Role::Assistant,
                content: vec![call("c")],
            },
        ];
        assert_eq!(repair_dangling(&mut h), 2);
        assert_eq!(h.len(), 5);
        assert_eq!(h[2].content.len(), 2);
        assert!(
            matches!(&h[4].content[0], ContentBlock::ToolResult { tool_use_id, is_error: true, .. } if tool_use_id.as_str() == "c")
        );
        assert_eq!(repair_dangling(&mut h), 0, "idempotent");
    }
}
