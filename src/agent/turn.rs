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
//! The rules live here as plain functions of [`Progress`] and [`Limits`]
//! ([`Progress::check_limits`], [`Progress::after_turn`]); one model call is built in
//! [`request`](crate::agent::request), passes the [`gate`](crate::agent::gate) and is
//! collected into a [`Turn`] by the [`collector`](crate::agent::collector).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::agent::events::{EventBus, EventPayload};
use crate::agent::loop_detect::{LoopDetector, LoopVerdict, signature};
use crate::agent::runtime::Runtime;
use crate::agent::task::{Stop, Task, TaskError, TaskOutcome, TaskSpec};
use crate::llm::{FinishReason, LlmClient, Usage};
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

/// What one model call and its tools produced.
#[derive(Debug)]
pub(super) struct Turn {
    pub(super) text: String,
    pub(super) finish: FinishReason,
    /// Signatures of the calls, for loop detection.
    pub(super) calls: Vec<(String, serde_json::Value)>,
    pub(super) all_refused: bool,
    pub(super) fatal: Option<String>,
}

/// The limits a task runs under: its soul's, `max_iterations` lowered by the spec.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub(super) max_iterations: u32,
    pub(super) max_tokens: u64,
    pub(super) max_wall_clock: Duration,
}

impl Limits {
    pub(super) fn for_spec(spec: &TaskSpec) -> Limits {
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

/// What the loop's rules count and remember from turn to turn.
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

impl Progress {
    /// Whether the task may make another model call; `stop` is what the clock says.
    pub(super) fn check_limits(&self, limits: &Limits, stop: Option<Stop>) -> State {
        if let Some(stop) = stop {
            let (s, r) = stop.status(limits.max_wall_clock);
            return State::Finish(s, r);
        }
        if self.usage.total() >= limits.max_tokens {
            return State::Finish(
                TaskStatus::BudgetExceeded,
                format!(
                    "stopped: the task used {} tokens, its budget is {}",
                    self.usage.total(),
                    limits.max_tokens
                ),
            );
        }
        if self.iteration >= limits.max_iterations {
            return State::Finish(
                TaskStatus::MaxIterations,
                format!(
                    "stopped after {} model calls without finishing (max_iterations = {})",
                    self.iteration, limits.max_iterations
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

    /// What follows a turn: finish (an answer, a fatal tool error, too many refusals, a
    /// loop) or another call. Returns the loop warning to report, if any; its note is
    /// already queued for the model.
    pub(super) fn after_turn(&mut self, turn: Turn) -> (State, Option<String>) {
        if let Some(fatal) = turn.fatal {
            return (State::Finish(TaskStatus::Failed, fatal), None);
        }
        if turn.calls.is_empty() {
            return (self.after_answer(turn.finish, turn.text), None);
        }
        if turn.all_refused {
            self.denied_turns += 1;
            if self.denied_turns >= MAX_DENIED_TURNS {
                let why = format!(
                    "stopped: every tool call of the last {MAX_DENIED_TURNS} turns was refused"
                );
                return (State::Finish(TaskStatus::Denied, why), None);
            }
        } else {
            self.denied_turns = 0;
        }
        let sig = signature(turn.calls.iter().map(|(n, a)| (n.as_str(), a)));
        match self.loops.record(sig) {
            LoopVerdict::Fine => (State::CheckLimits, None),
            LoopVerdict::Warn(note) => {
                self.notes.push(format!("[familiar: {note}]"));
                (State::CheckLimits, Some(note))
            }
            LoopVerdict::Stop(reason) => (
                State::Finish(TaskStatus::LoopDetected, format!("stopped: {reason}")),
                None,
            ),
        }
    }

    /// A turn without tool calls: the answer, unless it was cut off or filtered.
    fn after_answer(&mut self, finish: FinishReason, text: String) -> State {
        match finish {
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
                State::Finish(TaskStatus::Completed, text)
            }
        }
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
    let (mut task, refusal) = Task::start(rt, spec, bus, cancel).await?;
    span.record(
        "session_id",
        tracing::field::display(&task.session.ctx.session_id),
    );
    let mut state = match refusal {
        Some(why) => State::Finish(TaskStatus::Denied, why),
        None => State::CheckLimits,
    };
    let (status, result) = loop {
        state = match state {
            State::CheckLimits => {
                let stop = task.clock.stop(task.limits.max_wall_clock);
                match task.progress.check_limits(&task.limits, stop) {
                    // What sub-tasks spent counts too (and a sub-task stops when the
                    // task that started it is out of budget).
                    State::CallModel => task.family.check_budget(),
                    other => other,
                }
            }
            State::CallModel => task.call_model().await,
            State::AfterTurn(turn) => {
                let (next, warning) = task.progress.after_turn(turn);
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
        self.conclude(collected).await
    }
}

#[cfg(test)]
mod tests {
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
        assert!(matches!(p.check_limits(&limits(), None), State::CallModel));
    }

    #[test]
    fn a_stop_from_the_clock_wins_over_every_other_limit() {
        let p = Progress {
            iteration: 5,
            consecutive_errors: 3,
            ..Progress::default()
        };
        let (s, r) = finish(p.check_limits(&limits(), Some(Stop::TimedOut)));
        assert_eq!(s, TaskStatus::Timeout);
        assert_eq!(
            r,
            "stopped: the task ran longer than its wall-clock budget of 1m"
        );
        let (s, r) = finish(p.check_limits(&limits(), Some(Stop::Cancelled)));
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
        let (s, r) = finish(p.check_limits(&limits(), None));
        assert_eq!(s, TaskStatus::BudgetExceeded);
        assert_eq!(r, "stopped: the task used 1000 tokens, its budget is 1000");
    }

    #[test]
    fn max_iterations_stops_the_task() {
        let p = Progress {
            iteration: 5,
            ..Progress::default()
        };
        let (s, r) = finish(p.check_limits(&limits(), None));
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
        let (s, r) = finish(p.check_limits(&limits(), None));
        assert_eq!(s, TaskStatus::Failed);
        assert_eq!(r, "the model failed 3 times in a row");
    }

    #[test]
    fn spec_may_only_lower_the_souls_max_iterations() {
        assert_eq!(lowered(20, None), 20);
        assert_eq!(lowered(20, Some(25)), 20);
        assert_eq!(lowered(20, Some(7)), 7);
        assert_eq!(lowered(20, Some(0)), 1);
    }

    #[test]
    fn an_answer_without_calls_completes_with_its_text() {
        let mut p = Progress::default();
        let (s, r) = finish(p.after_turn(turn(0, FinishReason::Stop)).0);
        assert_eq!((s, r.as_str()), (TaskStatus::Completed, "done"));
    }

    #[test]
    fn a_fatal_tool_error_fails_the_task_before_anything_else() {
        let mut p = Progress::default();
        let mut t = turn(1, FinishReason::ToolUse);
        t.all_refused = true;
        t.fatal = Some("shell failed fatally: boom".into());
        let (s, r) = finish(p.after_turn(t).0);
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
            let (state, warning) = p.after_turn(turn(0, FinishReason::Length));
            assert!(matches!(state, State::CheckLimits));
            assert_eq!(warning, None);
            assert_eq!(p.notes.len(), n as usize);
        }
        let (s, _) = finish(p.after_turn(turn(0, FinishReason::Length)).0);
        assert_eq!(s, TaskStatus::Failed);
    }

    #[test]
    fn filtered_or_failed_answers_fail_the_task() {
        for finish_reason in [FinishReason::ContentFilter, FinishReason::Error] {
            let mut p = Progress::default();
            let (s, _) = finish(p.after_turn(turn(0, finish_reason)).0);
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
        p.after_turn(refused(0));
        p.after_turn(refused(1));
        assert_eq!(p.denied_turns, 2);
        p.after_turn(Turn {
            calls: vec![("shell".to_owned(), json!({ "command": 2 }))],
            ..turn(0, FinishReason::ToolUse)
        });
        assert_eq!(p.denied_turns, 0);
        for i in 3..3 + MAX_DENIED_TURNS as usize - 1 {
            assert!(matches!(p.after_turn(refused(i)).0, State::CheckLimits));
        }
        let (s, r) = finish(p.after_turn(refused(99)).0);
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
            let (state, warning) = p.after_turn(turn(1, FinishReason::ToolUse));
            assert!(matches!(state, State::CheckLimits));
            warnings.extend(warning);
        }
        assert_eq!(warnings.len(), 1, "one warning per run");
        assert_eq!(p.notes.len(), 1);
        assert!(p.notes[0].starts_with("[familiar: "));
        let (s, _) = finish(p.after_turn(turn(1, FinishReason::ToolUse)).0);
        assert_eq!(s, TaskStatus::LoopDetected);
    }
}
