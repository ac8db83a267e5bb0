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
//! (`check_limits`, `after_turn`, `after_model_failure`); one model call is built in
//! [`request`](crate::agent::request), its calls pass the [`gate`](crate::agent::gate),
//! and the [`collector`](crate::agent::collector) turns its stream into a `Turn`.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::agent::collector::{CallEnd, DEGENERATE_MARKER, Turn, model_failure};
use crate::agent::events::{EventBus, EventPayload};
use crate::agent::loop_detect::{LoopVerdict, signature};
use crate::agent::runtime::Runtime;
use crate::agent::task::{Limits, Progress, Stop, Task, TaskError, TaskOutcome, TaskSpec};
use crate::llm::{FinishReason, LlmClient, LlmError};
use crate::store::TaskStatus;

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
            } else if text.contains(DEGENERATE_MARKER) {
                // "Continue where you stopped" would invite the same loop again.
                p.notes.push("[familiar: your previous answer kept repeating the same text and was cut. Do not repeat it: finish the answer in a few sentences.]".into());
                State::CheckLimits
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
        tracing::field::display(&task.session.ctx.session_id),
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
                    task.emit(EventPayload::LoopWarning { note }).await;
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

impl Task {
    /// What runs once before the first model call, cheapest first: the `--when`
    /// conditions, the soul's pre-check, then its MCP servers. A task that should not
    /// call the model ends here, `skipped`, at zero tokens.
    async fn before_first_call(&mut self) -> State {
        if let Some(why) = self.unmet_conditions().await {
            return State::Finish(TaskStatus::Skipped, why);
        }
        if let Some(report) = self.precheck().await {
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
        let Some(mut client) = self.model.client.take() else {
            let err = self
                .model
                .client_error
                .as_ref()
                .map_or_else(|| "no model client".to_owned(), ToString::to_string);
            return State::Finish(TaskStatus::Failed, err);
        };
        let state = self.call_model_with(&mut client).await;
        self.model.client = Some(client);
        state
    }

    /// One iteration: the request, the model quota, the streamed turn with its tools.
    async fn call_model_with(&mut self, client: &mut LlmClient) -> State {
        self.progress.iteration += 1;
        self.family.budget.spend_iteration();
        self.emit(EventPayload::IterationStarted {
            iteration: self.progress.iteration,
            max_iterations: self.limits.max_iterations,
        })
        .await;
        let (mut request, mut estimate) = self.build_request(client).await;

        // The per-session LLM limit slows the task down rather than failing it.
        if let Err((s, r)) = self.wait_for_llm_quota().await {
            return State::Finish(s, r);
        }
        for h in &self.rt.hooks {
            h.before_llm(&self.task_ref(), &request);
        }
        let mut collected = self.collect(client, &request).await;
        // Too long for the server: compact and send it once more (the same iteration).
        if let Some(o) = collected.bare_overflow() {
            self.account(estimate, &collected);
            match self
                .recover_overflow(client, &o, &mut request, estimate)
                .await
            {
                Some(e) => estimate = e,
                None => return State::Finish(TaskStatus::Failed, self.overflow_failure(&o)),
            }
            for h in &self.rt.hooks {
                h.before_llm(&self.task_ref(), &request);
            }
            collected = self.collect(client, &request).await;
        }
        self.account(estimate, &collected);
        match self.conclude(collected).await {
            CallEnd::Turn(turn) => {
                self.progress.consecutive_errors = 0;
                State::AfterTurn(turn)
            }
            CallEnd::Failed(e) => after_model_failure(&mut self.progress, &e),
            CallEnd::Finish(s, r) => State::Finish(s, r),
        }
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
