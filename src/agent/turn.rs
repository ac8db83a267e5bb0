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
//! The rules live here as plain functions of the task's `Progress` and `Limits`
//! (`check_limits`, `after_turn`, `after_model_failure`); one iteration asks the task's
//! [`ContextKeeper`](crate::agent::context::ContextKeeper) for the request, waits at the
//! [`CallGate`](crate::agent::calls::gate::CallGate) for the LLM quota, and has a
//! [`Collector`] turn the stream into a `Turn` (each call through the gate).
//!
//! The loop is also what runs a delegated sub-task ([`run_child`]): the family's runner
//! gets it as a function, since the family sits below the loop.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::agent::calls::collector::{CallEnd, Collected, Collector, Turn, model_failure};
use crate::agent::calls::dispatch::{CallEnv, MAX_PARALLEL};
use crate::agent::context::Boundary;
use crate::agent::context::reminder::Budget;
use crate::agent::events::{EventBus, EventPayload};
use crate::agent::family::subagent::{Child, ChildEnd, Delegator, delegates};
use crate::agent::loop_detect::{LoopVerdict, signature};
use crate::agent::precheck;
use crate::agent::runtime::Runtime;
use crate::agent::steering::Steering;
use crate::agent::task::{Limits, Progress, Stop, Task, TaskError, TaskOutcome, TaskSpec};
use crate::llm::{FinishReason, LlmClient, LlmError, Request, Usage};
use crate::store::TaskStatus;
use crate::tools::ToolContext;
use crate::tools::delegate::Subagents;

/// Model failures in a row (after the client's own retries) before the task fails.
pub const MAX_CONSECUTIVE_ERRORS: u32 = 3;
/// Turns in a row whose every call was refused before the task ends `denied`.
pub const MAX_DENIED_TURNS: u32 = 3;
/// "Your answer was cut off" continuations per task.
pub const MAX_LENGTH_CONTINUATIONS: u32 = 2;

pub(super) enum State {
    CheckLimits,
    CallModel,
    AfterTurn(Turn),
    Finish(TaskStatus, String),
}

/// Whether the task may make another model call; `stop` is what the clock says.
fn check_limits(p: &Progress, limits: &Limits, stop: Option<Stop>) -> State {
    if let Some(stop) = stop {
        let (s, r) = stop.status(limits.max_wall_clock);
        return State::Finish(s, r);
    }
    if p.usage.total() >= limits.max_tokens {
        return State::Finish(
            TaskStatus::BudgetExceeded,
            format!(
                "stopped: the task used {} tokens, its budget is {}",
                p.usage.total(),
                limits.max_tokens
            ),
        );
    }
    if p.iteration >= limits.max_iterations {
        return State::Finish(
            TaskStatus::MaxIterations,
            format!(
                "stopped after {} model calls without finishing (max_iterations = {})",
                p.iteration, limits.max_iterations
            ),
        );
    }
    if p.consecutive_errors >= MAX_CONSECUTIVE_ERRORS {
        return State::Finish(
            TaskStatus::Failed,
            format!("the model failed {} times in a row", p.consecutive_errors),
        );
    }
    State::CallModel
}

/// What follows a turn: finish (an answer, a fatal tool error, too many refusals, a
/// loop) or another call. Returns the loop warning to report, if any; its note is
/// already queued for the model.
fn after_turn(p: &mut Progress, turn: Turn) -> (State, Option<String>) {
    if let Some(fatal) = turn.fatal {
        return (State::Finish(TaskStatus::Failed, fatal), None);
    }
    if turn.calls.is_empty() {
        return (after_answer(p, turn.finish, turn.text), None);
    }
    if turn.all_refused {
        p.denied_turns += 1;
        if p.denied_turns >= MAX_DENIED_TURNS {
            let why = format!(
                "stopped: every tool call of the last {MAX_DENIED_TURNS} turns was refused"
            );
            return (State::Finish(TaskStatus::Denied, why), None);
        }
    } else {
        p.denied_turns = 0;
    }
    let sig = signature(turn.calls.iter().map(|(n, a)| (n.as_str(), a)));
    match p.loops.record(sig) {
        LoopVerdict::Fine => (State::CheckLimits, None),
        LoopVerdict::Warn(note) => {
            p.notes.push(format!("[familiar: {note}]"));
            (State::CheckLimits, Some(note))
        }
        LoopVerdict::Stop(reason) => (
            State::Finish(TaskStatus::LoopDetected, format!("stopped: {reason}")),
            None,
        ),
    }
}

/// A turn without tool calls: the answer, unless it was cut off or filtered.
fn after_answer(p: &mut Progress, finish: FinishReason, text: String) -> State {
    match finish {
        FinishReason::Length => {
            p.length_continuations += 1;
            if p.length_continuations > MAX_LENGTH_CONTINUATIONS {
                State::Finish(
                    TaskStatus::Failed,
                    "the model's answer hit the output limit again; ask for a shorter answer or raise max_output_tokens".into(),
                )
            } else {
                p.notes.push("[familiar: your previous answer was cut off at the output limit. Continue where you stopped, concisely.]".into());
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
        FinishReason::Stop | FinishReason::ToolUse => State::Finish(TaskStatus::Completed, text),
    }
}

/// A transient model failure (the client's own retries spent): try again on the next
/// iteration, unless the model failed too often in a row.
fn after_model_failure(p: &mut Progress, error: &LlmError) -> State {
    p.consecutive_errors += 1;
    tracing::warn!("model call failed: {error}");
    if p.consecutive_errors >= MAX_CONSECUTIVE_ERRORS {
        State::Finish(TaskStatus::Failed, model_failure(error))
    } else {
        State::CheckLimits
    }
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
    let new_session = spec.session.is_none();
    let store_rt = Arc::clone(&rt);
    let outcome = drive(rt, spec, bus, cancel, span.clone())
        .instrument(span)
        .await?;
    // Only a failure or a skip: a cancelled or timed-out task keeps its record (and
    // what the model had streamed so far).
    if new_session && matches!(outcome.status, TaskStatus::Failed | TaskStatus::Skipped) {
        discard_if_unanswered(&store_rt.store, &outcome.session_id);
    }
    Ok(outcome)
}

/// A new session whose task failed before the model answered at all (no provider, a
/// wrong key) holds nothing worth continuing: remove it rather than leave an empty
/// session in `familiar sessions`.
pub fn discard_if_unanswered(store: &crate::store::Store, id: &crate::ids::SessionId) {
    let answered = match store.load_context(id) {
        Ok(Some(ctx)) => ctx
            .history
            .iter()
            .any(|m| m.role == crate::llm::Role::Assistant),
        Ok(None) => return,
        Err(e) => {
            tracing::debug!(session_id = %id, "cannot check the session for an answer: {e}");
            return;
        }
    };
    if !answered {
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
                self.rt.store.data_dir(),
                &self.rt.snapshotter,
            )
            .await;
            if report.findings.is_empty() {
                let why = format!("nothing to report: {}", report.quiet.join(", "));
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
        // Too long for the server: compact and send it once more (the same iteration).
        if let Some(o) = collected.bare_overflow() {
            self.account(estimate, &collected);
            let (recovered, usage) = self
                .context
                .recover_overflow(
                    client,
                    &mut self.emitter,
                    &o,
                    &mut request,
                    estimate,
                    &self.clock.cancel,
                )
                .await;
            self.spend(&usage);
            match recovered {
                Some(e) => estimate = e,
                None => {
                    let why = self.context.overflow_failure(&o);
                    return State::Finish(TaskStatus::Failed, why);
                }
            }
            collected = self.collect(client, &request).await;
        }
        self.account(estimate, &collected);
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
                State::Finish(s, r)
            }
            CallEnd::Overflow(o) => {
                State::Finish(TaskStatus::Failed, self.context.overflow_failure(&o))
            }
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
            approvals: self.rt.approvals.clone(),
            tool_ctx: ToolContext {
                workspace: self.place.workspace.clone(),
                home: self.rt.config.paths.home.clone(),
                snapshotter: Arc::clone(&self.rt.snapshotter),
                cancel,
                sandbox: Arc::clone(&self.place.sandbox),
                launcher: Arc::clone(&self.rt.launcher),
                soul: self.spec.soul.id.clone(),
                session: session_id,
                memory: self.rt.memory.clone(),
                subagents: self.delegator(),
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
    fn account(&mut self, estimate: u64, c: &Collected) {
        let usage = c.usage();
        self.spend(usage);
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
    }

    /// Counts tokens toward the task and the budget it shares with its family.
    fn spend(&mut self, usage: &Usage) {
        self.progress.usage.add(usage);
        self.family.budget.spend_tokens(usage.total());
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use serde_json::json;

    fn limits() -> Limits {
        Limits {
            max_iterations: 5,
            max_tokens: 1_000,
            max_wall_clock: Duration::from_secs(60),
        }
    }

    fn finish(state: State) -> (TaskStatus, String) {
        match state {
            State::Finish(s, r) => (s, r),
            State::CheckLimits => panic!("expected Finish, got CheckLimits"),
            State::CallModel => panic!("expected Finish, got CallModel"),
            State::AfterTurn(t) => panic!("expected Finish, got AfterTurn({t:?})"),
        }
    }

    fn turn(calls: usize, finish: FinishReason) -> Turn {
        Turn {
            text: "done".into(),
            finish,
            calls: (0..calls)
                .map(|i| ("read_file".to_owned(), json!({ "path": i })))
                .collect(),
            all_refused: false,
            fatal: None,
        }
    }

    #[test]
    fn fresh_task_may_call_the_model() {
        let p = Progress::default();
        assert!(matches!(
            check_limits(&p, &limits(), None),
            State::CallModel
        ));
    }

    #[test]
    fn a_stop_from_the_clock_wins_over_every_other_limit() {
        let p = Progress {
            iteration: 5,
            consecutive_errors: 3,
            ..Progress::default()
        };
        let (s, r) = finish(check_limits(&p, &limits(), Some(Stop::TimedOut)));
        assert_eq!(s, TaskStatus::Timeout);
        assert_eq!(
            r,
            "stopped: the task ran longer than its wall-clock budget of 1m"
        );
        let (s, r) = finish(check_limits(&p, &limits(), Some(Stop::Cancelled)));
        assert_eq!((s, r.as_str()), (TaskStatus::Cancelled, "cancelled"));
    }

    #[test]
    fn token_budget_is_checked_before_iterations() {
        let mut p = Progress {
            iteration: 5,
            ..Progress::default()
        };
        p.usage.input_tokens = 600;
        p.usage.output_tokens = 400;
        let (s, r) = finish(check_limits(&p, &limits(), None));
        assert_eq!(s, TaskStatus::BudgetExceeded);
        assert_eq!(r, "stopped: the task used 1000 tokens, its budget is 1000");
    }

    #[test]
    fn max_iterations_stops_the_task() {
        let p = Progress {
            iteration: 5,
            ..Progress::default()
        };
        let (s, r) = finish(check_limits(&p, &limits(), None));
        assert_eq!(s, TaskStatus::MaxIterations);
        assert_eq!(
            r,
            "stopped after 5 model calls without finishing (max_iterations = 5)"
        );
    }

    #[test]
    fn consecutive_model_errors_fail_the_task() {
        let p = Progress {
            consecutive_errors: MAX_CONSECUTIVE_ERRORS,
            ..Progress::default()
        };
        let (s, r) = finish(check_limits(&p, &limits(), None));
        assert_eq!(s, TaskStatus::Failed);
        assert_eq!(r, "the model failed 3 times in a row");
    }

    #[test]
    fn transient_model_failures_are_retried_until_too_many_in_a_row() {
        let mut p = Progress::default();
        let e = LlmError::Stalled(Duration::from_secs(60));
        for _ in 1..MAX_CONSECUTIVE_ERRORS {
            assert!(matches!(
                after_model_failure(&mut p, &e),
                State::CheckLimits
            ));
        }
        let (s, r) = finish(after_model_failure(&mut p, &e));
        assert_eq!(s, TaskStatus::Failed);
        assert!(r.starts_with("the model call failed: "), "{r}");
    }

    #[test]
    fn an_answer_without_calls_completes_with_its_text() {
        let mut p = Progress::default();
        let (s, r) = finish(after_turn(&mut p, turn(0, FinishReason::Stop)).0);
        assert_eq!((s, r.as_str()), (TaskStatus::Completed, "done"));
    }

    #[test]
    fn a_fatal_tool_error_fails_the_task_before_anything_else() {
        let mut p = Progress::default();
        let mut t = turn(1, FinishReason::ToolUse);
        t.all_refused = true;
        t.fatal = Some("shell failed fatally: boom".into());
        let (s, r) = finish(after_turn(&mut p, t).0);
        assert_eq!(
            (s, r.as_str()),
            (TaskStatus::Failed, "shell failed fatally: boom")
        );
        assert_eq!(
            p.denied_turns, 0,
            "refusals are not counted after a fatal error"
        );
    }

    #[test]
    fn a_cut_off_answer_is_continued_twice_then_fails() {
        let mut p = Progress::default();
        for n in 1..=MAX_LENGTH_CONTINUATIONS {
            let (state, warning) = after_turn(&mut p, turn(0, FinishReason::Length));
            assert!(matches!(state, State::CheckLimits));
            assert_eq!(warning, None);
            assert_eq!(p.notes.len(), n as usize);
        }
        let (s, _) = finish(after_turn(&mut p, turn(0, FinishReason::Length)).0);
        assert_eq!(s, TaskStatus::Failed);
    }

    #[test]
    fn filtered_or_failed_answers_fail_the_task() {
        for finish_reason in [FinishReason::ContentFilter, FinishReason::Error] {
            let mut p = Progress::default();
            let (s, _) = finish(after_turn(&mut p, turn(0, finish_reason)).0);
            assert_eq!(s, TaskStatus::Failed);
        }
    }

    #[test]
    fn refused_turns_in_a_row_end_the_task_denied_and_any_allowed_call_resets_them() {
        let mut p = Progress::default();
        let refused = |i: usize| Turn {
            all_refused: true,
            // Different calls each turn, so loop detection stays out of it.
            calls: vec![("shell".to_owned(), json!({ "command": i }))],
            ..turn(0, FinishReason::ToolUse)
        };
        after_turn(&mut p, refused(0));
        after_turn(&mut p, refused(1));
        assert_eq!(p.denied_turns, 2);
        after_turn(
            &mut p,
            Turn {
                calls: vec![("shell".to_owned(), json!({ "command": 2 }))],
                ..turn(0, FinishReason::ToolUse)
            },
        );
        assert_eq!(p.denied_turns, 0);
        for i in 3..3 + MAX_DENIED_TURNS as usize - 1 {
            assert!(matches!(
                after_turn(&mut p, refused(i)).0,
                State::CheckLimits
            ));
        }
        let (s, r) = finish(after_turn(&mut p, refused(99)).0);
        assert_eq!(s, TaskStatus::Denied);
        assert_eq!(
            r,
            "stopped: every tool call of the last 3 turns was refused"
        );
    }

    #[test]
    fn repeated_turns_warn_once_then_stop() {
        use crate::agent::loop_detect::STOP_AFTER;
        let mut p = Progress::default();
        let mut warnings = Vec::new();
        for _ in 1..STOP_AFTER {
            let (state, warning) = after_turn(&mut p, turn(1, FinishReason::ToolUse));
            assert!(matches!(state, State::CheckLimits));
            warnings.extend(warning);
        }
        assert_eq!(warnings.len(), 1, "one warning per run");
        assert_eq!(p.notes.len(), 1);
        assert!(p.notes[0].starts_with("[familiar: "));
        let (s, _) = finish(after_turn(&mut p, turn(1, FinishReason::ToolUse)).0);
        assert_eq!(s, TaskStatus::LoopDetected);
    }
}
