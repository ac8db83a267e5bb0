//! The state machine's rules, as plain functions of what the loop counted so far
//! ([`Progress`]) and the task's [`Limits`]: whether another model call may be made
//! ([`check_limits`]), what follows a turn ([`after_turn`]) or a failed model call
//! ([`after_model_failure`]). [`turn`](crate::agent::turn) applies them; nothing here
//! does I/O, so each rule is tested on its own.

use std::time::Duration;

use familiar_protocol::task::{TaskStatus, Usage};

use crate::agent::calls::collector::DEGENERATE_MARKER;
use crate::agent::calls::ending::Turn;
use crate::agent::calls::failure::model_failure;
use crate::agent::loop_detect::{LoopDetector, LoopVerdict, signature};
use crate::llm::{FinishReason, LlmError};
use crate::soul::Soul;

/// Model failures in a row (after the client's own retries) before the task fails.
pub const MAX_CONSECUTIVE_ERRORS: u32 = 3;
/// Turns in a row whose every call was refused before the task ends `denied`.
pub const MAX_DENIED_TURNS: u32 = 3;
/// "Your answer was cut off" continuations per task.
pub const MAX_LENGTH_CONTINUATIONS: u32 = 2;

/// Where the state machine is.
pub(super) enum State {
    CheckLimits,
    CallModel,
    AfterTurn(Turn),
    Finish(TaskStatus, String),
}

/// Whether the task may make another model call; `stop` is what the clock says.
pub(super) fn check_limits(p: &Progress, limits: &Limits, stop: Option<Stop>) -> State {
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
                "stopped after {} model call{} without finishing (max_iterations = {})",
                p.iteration,
                if p.iteration == 1 { "" } else { "s" },
                limits.max_iterations
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
pub(super) fn after_turn(p: &mut Progress, turn: Turn) -> (State, Option<String>) {
    if let Some(fatal) = turn.fatal {
        return (State::Finish(TaskStatus::Failed, fatal), None);
    }
    if turn.calls.is_empty() {
        return (after_answer(p, turn.finish, turn.text, turn.repeated), None);
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
fn after_answer(
    p: &mut Progress,
    finish: FinishReason,
    text: String,
    repeated: Option<usize>,
) -> State {
    match finish {
        FinishReason::Length => {
            p.length_continuations += 1;
            if p.length_continuations > MAX_LENGTH_CONTINUATIONS
                && let Some(repeats) = repeated
            {
                // The guard cut it, not the output limit: raising the limit would only
                // buy more copies.
                State::Finish(
                    TaskStatus::Failed,
                    format!(
                        "stopped: the answer kept repeating the same passage ({repeats} times in a row), and again after it was asked not to; the text before the repetition is kept"
                    ),
                )
            } else if p.length_continuations > MAX_LENGTH_CONTINUATIONS {
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
pub(super) fn after_model_failure(p: &mut Progress, error: &LlmError) -> State {
    p.consecutive_errors += 1;
    tracing::warn!("model call failed: {error}");
    if p.consecutive_errors >= MAX_CONSECUTIVE_ERRORS {
        State::Finish(TaskStatus::Failed, model_failure(error))
    } else {
        State::CheckLimits
    }
}

/// The limits a task runs under: its soul's, `max_iterations` lowered by the spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Limits {
    pub(super) max_iterations: u32,
    pub(super) max_tokens: u64,
    pub(super) max_wall_clock: Duration,
}

impl Limits {
    /// A task of `soul` whose request asked for at most `max_iterations`.
    pub(super) fn new(soul: &Soul, max_iterations: Option<u32>) -> Limits {
        Limits {
            max_iterations: lowered(soul.max_iterations, max_iterations),
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

/// What the loop counts and remembers from turn to turn; the rules below read and
/// update it.
#[derive(Debug, Default)]
pub(super) struct Progress {
    /// Model calls made.
    pub(super) iteration: u32,
    pub(super) usage: Usage,
    pub(super) consecutive_errors: u32,
    pub(super) denied_turns: u32,
    pub(super) length_continuations: u32,
    pub(super) loops: LoopDetector,
    /// Notes for the model's next reminder (loop warnings, continuations).
    pub(super) notes: Vec<String>,
}

/// The result of a task stopped while its model was still answering: what stopped it,
/// what the session kept of the answer, and for the wall clock which knob to turn.
pub(super) fn cut_result(status: TaskStatus, result: &str, kept: u64, limits: &Limits) -> String {
    match status {
        TaskStatus::Timeout => format!(
            "the model was still answering after {}; {kept} tokens of its answer kept in the session (continue it, or raise the soul's max_wall_clock, or lower max_output_tokens under [providers.*] in config.toml)",
            humantime::format_duration(limits.max_wall_clock)
        ),
        _ => format!(
            "{result} while the model was still answering; {kept} tokens of its answer kept in the session"
        ),
    }
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
            repeated: None,
        }
    }

    #[test]
    fn a_cut_answer_says_what_stopped_it_and_what_was_kept() {
        let r = cut_result(TaskStatus::Timeout, "stopped: …", 760, &limits());
        assert!(
            r.starts_with("the model was still answering after 1m; 760 tokens of its answer kept"),
            "{r}"
        );
        assert!(
            r.contains("max_wall_clock") && r.contains("max_output_tokens"),
            "{r}"
        );
        let r = cut_result(TaskStatus::Cancelled, "cancelled", 12, &limits());
        assert_eq!(
            r,
            "cancelled while the model was still answering; 12 tokens of its answer kept in the session"
        );
    }

    #[test]
    fn spec_may_only_lower_the_souls_max_iterations() {
        assert_eq!(lowered(20, None), 20);
        assert_eq!(lowered(20, Some(25)), 20);
        assert_eq!(lowered(20, Some(7)), 7);
        assert_eq!(lowered(20, Some(0)), 1);
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
        let (s, r) = finish(after_turn(&mut p, turn(0, FinishReason::Length)).0);
        assert_eq!(s, TaskStatus::Failed);
        assert!(r.contains("raise max_output_tokens"), "{r}");
    }

    // Regression (issue 42 §5): answers the repetition guard cut ended with "hit the
    // output limit again … raise max_output_tokens", which only buys more copies.
    #[test]
    fn answers_cut_by_the_repetition_guard_end_in_its_own_words() {
        let mut p = Progress::default();
        let repeated = || Turn {
            repeated: Some(8),
            ..turn(0, FinishReason::Length)
        };
        for _ in 1..=MAX_LENGTH_CONTINUATIONS {
            assert!(matches!(
                after_turn(&mut p, repeated()).0,
                State::CheckLimits
            ));
        }
        let (s, r) = finish(after_turn(&mut p, repeated()).0);
        assert_eq!(s, TaskStatus::Failed);
        assert_eq!(
            r,
            "stopped: the answer kept repeating the same passage (8 times in a row), and again after it was asked not to; the text before the repetition is kept"
        );
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
