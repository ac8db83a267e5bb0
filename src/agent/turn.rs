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
//! [`run_task`] starts the task ([`task`](crate::agent::task): session, lock, repair,
//! `running` record), then drives the states until one yields a finish status. Every
//! state change that matters is persisted before the next model call, so a crash loses
//! at most the turn in flight, and every exit path goes through `Task::finish`, which
//! records the status with the partial work.
//!
//! The rules are plain functions in [`rules`](crate::agent::rules); one iteration asks the task's
//! [`ContextKeeper`](crate::agent::context::ContextKeeper) for the request, waits at the
//! [`CallGate`](crate::agent::calls::gate::CallGate) for the LLM quota, and has a
//! [`Collector`] turn the stream into a `Turn` (each call through the gate).
//!
//! The loop is also what runs a delegated sub-task ([`run_child`]): the family's runner
//! gets it as a function, since the family sits below the loop.

use std::sync::Arc;

use familiar_protocol::events::EventPayload;
use familiar_protocol::task::{TaskStatus, Usage};
use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::agent::calls::collector::{Collected, Collector};
use crate::agent::calls::dispatch::{CallEnv, MAX_PARALLEL};
use crate::agent::calls::ending::CallEnd;
use crate::agent::context::Boundary;
use crate::agent::context::reminder::Budget;
use crate::agent::events::EventBus;
use crate::agent::family::subagent::{Child, ChildEnd, Delegator, delegates};
use crate::agent::precheck;
use crate::agent::rules::{
    Limits, State, after_model_failure, after_turn, check_limits, cut_result,
};
use crate::agent::runtime::Runtime;
use crate::agent::steering::Steering;
use crate::agent::task::{Task, TaskError, TaskOutcome, TaskSpec};
use crate::llm::{LlmClient, Request};
use crate::tools::ToolContext;
use crate::tools::delegate::Subagents;

/// Times one iteration makes room after a server's overflow before the task fails: each
/// round trims or compacts, so more would only repeat a request that cannot shrink.
const MAX_OVERFLOW_ROUNDS: u32 = 3;

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
    let new_session = spec.session.is_none();
    let store_rt = Arc::clone(&rt);
    let outcome = drive(rt, spec, bus, cancel, span.clone())
        .instrument(span)
        .await?;
    if new_session {
        discard_if_unanswered(&store_rt.services.store, &outcome);
    }
    Ok(outcome)
}

/// A new session whose task failed or was skipped before the model answered at all (no
/// provider, a wrong key, `--when` conditions that did not hold) holds nothing worth
/// continuing: remove it rather than leave an empty session in `familiar sessions`.
/// Only a failure or a skip: a cancelled or timed-out task keeps its record (and what
/// the model had streamed so far). The caller says the session is new.
pub fn discard_if_unanswered(store: &crate::store::Store, outcome: &TaskOutcome) {
    if !matches!(outcome.status, TaskStatus::Failed | TaskStatus::Skipped) {
        return;
    }
    let id = &outcome.session_id;
    let unanswered = match store.load_context(id) {
        Ok(Some(ctx)) => ctx.holds_nothing(outcome.status),
        Ok(None) => return,
        Err(e) => {
            tracing::debug!(session_id = %id, "cannot check the session for an answer: {e}");
            return;
        }
    };
    if unanswered {
        match store.remove_session(id) {
            Ok(_) => {
                tracing::debug!(session_id = %id, "removed the session: the model never answered")
            }
            Err(e) => tracing::warn!(session_id = %id, "cannot remove the unanswered session: {e}"),
        }
    }
}

async fn drive(
    rt: Arc<Runtime>,
    spec: TaskSpec,
    bus: EventBus,
    cancel: CancellationToken,
    span: tracing::Span,
) -> Result<TaskOutcome, TaskError> {
    let (mut task, refusal) = Task::start(rt, spec, bus, cancel).await?;
    span.record(
        "session_id",
        tracing::field::display(&task.context.ctx().session_id),
    );
    let mut state = match refusal {
        Some(why) => State::Finish(TaskStatus::Denied, why),
        None => task.before_first_call().await,
    };
    let (status, result) = loop {
        state = match state {
            State::CheckLimits => {
                let stop = task.clock.stop(task.limits.max_wall_clock);
                match check_limits(&task.progress, &task.limits, stop) {
                    // What sub-tasks spent counts too (and a sub-task stops when the
                    // task that started it is out of budget).
                    State::CallModel => match task.family.check_budget() {
                        Some((status, why)) => State::Finish(status, why),
                        None => State::CallModel,
                    },
                    other => other,
                }
            }
            State::CallModel => task.call_model().await,
            State::AfterTurn(turn) => {
                let (next, warning) = after_turn(&mut task.progress, turn);
                if let Some(note) = warning {
                    task.emitter.emit(EventPayload::LoopWarning { note }).await;
                }
                // Once per iteration, with the turn's messages, plan and usage in it;
                // `finish` persists the last one. A failure was logged; the next save
                // tries again, and `finish` reports one that stays.
                if task.persist().is_err() {
                    tracing::debug!("the iteration was not saved; going on");
                }
                next
            }
            State::Finish(status, result) => break (status, result),
        };
    };
    Ok(task.finish(status, result).await)
}

/// Runs a delegated sub-task as a task of its own: the family's [`RunChild`](crate::agent::family::subagent::RunChild).
fn run_child(
    rt: Arc<Runtime>,
    child: Child,
    bus: EventBus,
    cancel: CancellationToken,
) -> BoxFuture<'static, ChildEnd> {
    async move {
        let spec = TaskSpec {
            task_id: child.task_id,
            prompt: child.prompt,
            session: Some(child.session_id),
            workspace: Some(child.workspace),
            origin: child.origin,
            max_iterations: Some(child.soul.max_iterations),
            soul: child.soul,
            parent: Some(child.parent),
            // A sub-task is steered through its parent's conversation, not directly.
            steering: Steering::new(),
            when: None,
        };
        match run_task(rt, spec, bus, cancel).await {
            Ok(o) => ChildEnd {
                status: o.status,
                result: o.result,
                usage: o.usage,
                iterations: o.iterations,
            },
            Err(e) => ChildEnd {
                status: TaskStatus::Failed,
                result: format!("the sub-task could not start: {e}"),
                usage: Usage::default(),
                iterations: 0,
            },
        }
    }
    .boxed()
}

impl Task {
    /// What runs once before the first model call, cheapest first: the `--when`
    /// conditions, the soul's pre-check, then its MCP servers. A task that should not
    /// call the model ends here, `skipped`, at zero tokens.
    async fn before_first_call(&mut self) -> State {
        if let Some(why) = self.unmet_conditions().await {
            return State::Finish(TaskStatus::Skipped, why);
        }
        if let Some(p) = &self.spec.soul.precheck {
            let report = precheck::run(
                p,
                &self.spec.soul.id,
                self.rt.services.store.data_dir(),
                &self.rt.services.snapshotter,
            )
            .await;
            if report.findings.is_empty() {
                let why = precheck::quiet_result(&report);
                tracing::info!("{why}");
                return State::Finish(TaskStatus::Skipped, why);
            }
            self.progress.notes.push(format!(
                "A pre-check found, before you started (look into these; do not search \
                 for them again):\n- {}",
                report.findings.join("\n- ")
            ));
        }
        self.offer_mcp_tools().await;
        State::CheckLimits
    }

    async fn call_model(&mut self) -> State {
        let Some(mut client) = self.context.model.client.take() else {
            let err = self
                .context
                .model
                .client_error
                .as_ref()
                .map_or_else(|| "no model client".to_owned(), ToString::to_string);
            return State::Finish(TaskStatus::Failed, err);
        };
        let state = self.call_model_with(&mut client).await;
        self.context.model.client = Some(client);
        state
    }

    /// One iteration: the request, the model quota, the streamed turn with its tools.
    async fn call_model_with(&mut self, client: &mut LlmClient) -> State {
        self.progress.iteration += 1;
        self.family.budget.spend_iteration();
        self.emitter
            .emit(EventPayload::IterationStarted {
                iteration: self.progress.iteration,
                max_iterations: self.limits.max_iterations,
            })
            .await;
        let (mut request, mut estimate) = self.build_request(client).await;

        // The per-session LLM limit slows the task down rather than failing it.
        if !self
            .gate
            .wait_for_llm_quota(&mut self.emitter, &self.clock.cancel)
            .await
        {
            let (s, r) = self.cancelled_status();
            return State::Finish(s, r);
        }
        let mut collected = self.collect(client, &request).await;
        // Too long for the server: make room and send it again (the same iteration), as
        // long as each round made the request smaller.
        let mut rounds = 0;
        while let Some(o) = collected.bare_overflow() {
            self.account(estimate, &collected);
            rounds += 1;
            let (recovered, usage) = if rounds > MAX_OVERFLOW_ROUNDS {
                (None, Usage::default())
            } else {
                self.context
                    .recover_overflow(
                        client,
                        &mut self.emitter,
                        &o,
                        &mut request,
                        estimate,
                        &self.clock.cancel,
                    )
                    .await
            };
            self.spend(&usage);
            match recovered {
                Some(e) => estimate = e,
                None => {
                    let why = self.context.overflow_failure(&o, &request);
                    return State::Finish(TaskStatus::Failed, why);
                }
            }
            collected = self.collect(client, &request).await;
        }
        let kept = self.account(estimate, &collected);
        let parent = self.spec.parent.as_ref().map(|p| &p.task_id);
        let collector = Collector::new(
            &self.gate,
            &mut self.emitter,
            &mut self.plan,
            &mut self.context.session.ctx,
            parent,
        );
        match collector.conclude(collected).await {
            CallEnd::Turn(turn) => {
                self.progress.consecutive_errors = 0;
                State::AfterTurn(turn)
            }
            CallEnd::Failed(e) => after_model_failure(&mut self.progress, &e),
            CallEnd::Cancelled => {
                let (s, r) = self.cancelled_status();
                match kept {
                    Some(tokens) => State::Finish(s, cut_result(s, &r, tokens, &self.limits)),
                    None => State::Finish(s, r),
                }
            }
            CallEnd::Overflow(o) => State::Finish(
                TaskStatus::Failed,
                self.context.overflow_failure(&o, &request),
            ),
            CallEnd::Finish(s, r) => State::Finish(s, r),
        }
    }

    /// The request for this iteration and its estimated input tokens.
    async fn build_request(&mut self, client: &mut LlmClient) -> (Request, u64) {
        let budget = Budget {
            iteration: self.progress.iteration,
            max_iterations: self.limits.max_iterations,
            tokens_used: self.progress.usage.total(),
            max_tokens: self.limits.max_tokens,
            elapsed: self.clock.elapsed(),
            max_wall_clock: self.limits.max_wall_clock,
            stated: self.limits == Limits::new(&self.spec.soul, None),
        };
        let at = Boundary {
            tools: self.gate.definitions(),
            tool_names: self.gate.tool_names(),
            steering: self.spec.steering.take(),
            notes: std::mem::take(&mut self.progress.notes),
            plan: self.plan.plan(),
            budget,
            cancel: &self.clock.cancel,
        };
        let built = self
            .context
            .build_request(client, &mut self.emitter, at)
            .await;
        self.spend(&built.usage);
        (built.request, built.estimate)
    }

    /// Streams `request` and runs its calls, with this iteration's token and the
    /// environment its calls share.
    async fn collect(&mut self, client: &mut LlmClient, request: &Request) -> Collected {
        for h in self.emitter.hooks() {
            h.before_llm(&self.emitter.task_ref(), request);
        }
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let iter_cancel = self.clock.cancel.child_token();
        let env = self.call_env(events_tx, iter_cancel.clone());
        let parent = self.spec.parent.as_ref().map(|p| &p.task_id);
        Collector::new(
            &self.gate,
            &mut self.emitter,
            &mut self.plan,
            &mut self.context.session.ctx,
            parent,
        )
        .collect(client, request, env, events_rx, iter_cancel)
        .await
    }

    /// What every call of this turn shares.
    fn call_env(
        &self,
        events: mpsc::UnboundedSender<EventPayload>,
        cancel: CancellationToken,
    ) -> CallEnv {
        let session_id = self.context.ctx().session_id.clone();
        CallEnv {
            task_id: self.spec.task_id.clone(),
            session_id: session_id.clone(),
            soul: self.spec.soul.id.clone(),
            approvals: self.rt.services.approvals.clone(),
            tool_ctx: ToolContext {
                workspace: self.place.workspace.clone(),
                home: self.rt.settings.config.paths.home.clone(),
                snapshotter: Arc::clone(&self.rt.services.snapshotter),
                cancel,
                sandbox: Arc::clone(&self.place.sandbox),
                launcher: Arc::clone(&self.rt.services.launcher),
                soul: self.spec.soul.id.clone(),
                session: session_id.clone(),
                memory: self.rt.settings.memory.clone(),
                subagents: self.delegator(),
                changes: Some(crate::tools::changes::ChangeLog {
                    store: Arc::clone(&self.rt.services.store),
                    versions: crate::store::Versions::new(
                        self.rt.services.store.data_dir(),
                        self.rt.settings.config.versions,
                    ),
                    task: self.spec.task_id.clone(),
                    soul: self.spec.soul.id.clone(),
                }),
                screen: crate::tools::screen::ScreenPlace {
                    dir: crate::tools::screen::session_dir(
                        &self.rt.settings.config.paths.data_dir,
                        &session_id,
                    ),
                    max_edge: self.rt.settings.config.screen.max_edge,
                },
                asked_focus: None,
            },
            events,
            parallel: Arc::new(Semaphore::new(MAX_PARALLEL)),
            hooks: self.emitter.shared_hooks(),
        }
    }

    /// What runs this task's `delegate` calls: `None` when the soul delegates to nobody
    /// or the task is a sub-task itself (so the call fails saying why).
    fn delegator(&self) -> Option<Arc<dyn Subagents>> {
        let depth = self.spec.depth();
        if delegates(&self.spec.soul, depth).is_empty() {
            return None;
        }
        Some(Arc::new(Delegator {
            rt: Arc::clone(&self.rt),
            task_id: self.spec.task_id.clone(),
            session_id: self.context.ctx().session_id.clone(),
            soul: Arc::clone(&self.spec.soul),
            depth,
            workspace: self.place.workspace.clone(),
            budget: Arc::clone(&self.family.budget),
            deadline: self.clock.deadline(self.limits.max_wall_clock),
            quota: self
                .spec
                .parent
                .as_ref()
                .map(|p| p.quota.clone())
                .unwrap_or_default(),
            bus: self.emitter.fork_bus(),
            slots: Arc::clone(&self.family.slots),
            run_child,
        }))
    }

    /// Accounts for the model call: usage, the estimator, the hooks.
    /// Counts a call's tokens; for an answer the task's stop cut (the server never sent
    /// its counts) the estimate of the request and of the text kept, whose output
    /// tokens it returns.
    fn account(&mut self, estimate: u64, c: &Collected) -> Option<u64> {
        let cut = c.cut_text();
        let estimated;
        let usage = match &cut {
            Some(text) if c.usage().total() == 0 => {
                estimated = Usage {
                    input_tokens: estimate,
                    output_tokens: self.context.model.estimator.text(text),
                    ..Usage::default()
                };
                &estimated
            }
            Some(_) | None => match c.repeated() {
                // The guard closed the stream before the server's counts: what it wrote
                // was still generated, and counts.
                Some(r) if c.usage().total() == 0 => {
                    estimated = Usage {
                        input_tokens: estimate,
                        output_tokens: self.context.model.estimator.text(&r.streamed),
                        ..Usage::default()
                    };
                    &estimated
                }
                Some(_) | None => c.usage(),
            },
        };
        self.spend(usage);
        let kept = cut.map(|_| usage.output_tokens);
        if usage.input_tokens > 0 {
            self.context
                .model
                .estimator
                .calibrate(estimate, usage.input_tokens);
        }
        let llm_result = match &c.error {
            Some(e) => Err(e),
            None => Ok(usage),
        };
        for h in self.emitter.hooks() {
            h.after_llm(&self.emitter.task_ref(), llm_result);
        }
        kept
    }

    /// Counts tokens toward the task and the budget it shares with its family.
    fn spend(&mut self, usage: &Usage) {
        self.progress.usage.add(usage);
        self.family.budget.spend_tokens(usage.total());
    }
}
