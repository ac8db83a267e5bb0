//! What a task reports about itself on the bus: its status, its plan and the tokens it
//! used (`TaskFinished`, `GetTask`, the `task_finished`, `plan_updated` and
//! `subagent_finished` events), the same types the daemon keeps in a session's context.
//!
//! Invariant: every status serialises to the one string the bus and the context files
//! have always carried, and `as_str` is that string.

use serde::{Deserialize, Serialize};

/// Where a task stands. The finish statuses are the D-Bus `TaskFinished` strings
/// (docs/dbus.md); `interrupted` marks a task a crash left `running`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Accepted, waiting for a slot (its session or the daemon is busy).
    Queued,
    /// Running.
    Running,
    /// Ended with an answer.
    Completed,
    /// Ended on an error (the result says which).
    Failed,
    /// Stopped on purpose (Ctrl-C, `familiar cancel`, shutdown).
    Cancelled,
    /// Used its iteration budget.
    MaxIterations,
    /// Used its token budget.
    BudgetExceeded,
    /// Ran out of time.
    Timeout,
    /// Repeated itself until stopped.
    LoopDetected,
    /// A person or the policy refused what it needed.
    Denied,
    /// A crash left it running.
    Interrupted,
    /// Never ran: the conditions it was submitted under (`--when`) did not hold.
    Skipped,
}

impl TaskStatus {
    /// Every status.
    pub const ALL: [TaskStatus; 12] = [
        TaskStatus::Queued,
        TaskStatus::Running,
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
        TaskStatus::MaxIterations,
        TaskStatus::BudgetExceeded,
        TaskStatus::Timeout,
        TaskStatus::LoopDetected,
        TaskStatus::Denied,
        TaskStatus::Interrupted,
        TaskStatus::Skipped,
    ];

    /// The serialised spelling (`max_iterations`).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Queued => "queued",
            TaskStatus::Running => "running",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
            TaskStatus::MaxIterations => "max_iterations",
            TaskStatus::BudgetExceeded => "budget_exceeded",
            TaskStatus::Timeout => "timeout",
            TaskStatus::LoopDetected => "loop_detected",
            TaskStatus::Denied => "denied",
            TaskStatus::Interrupted => "interrupted",
            TaskStatus::Skipped => "skipped",
        }
    }

    /// Whether the task will never run again.
    pub fn is_finished(self) -> bool {
        self.outcome() != Outcome::Unfinished
    }

    /// What kind of end this is: the one place that sorts the statuses, for exit
    /// codes, metrics and a sub-task's result.
    pub fn outcome(self) -> Outcome {
        match self {
            TaskStatus::Queued | TaskStatus::Running => Outcome::Unfinished,
            TaskStatus::Completed => Outcome::Completed,
            TaskStatus::MaxIterations | TaskStatus::BudgetExceeded | TaskStatus::Timeout => {
                Outcome::Limit
            }
            // Stopped on purpose (Ctrl-C, `familiar cancel`, shutdown): not a failure.
            TaskStatus::Cancelled => Outcome::Cancelled,
            // Its conditions did not hold: nothing went wrong, nothing was spent.
            TaskStatus::Skipped => Outcome::Skipped,
            TaskStatus::Failed
            | TaskStatus::LoopDetected
            | TaskStatus::Denied
            | TaskStatus::Interrupted => Outcome::Failed,
        }
    }
}

/// The kinds of end a [`TaskStatus`] falls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Queued or running.
    Unfinished,
    /// Ended with an answer.
    Completed,
    /// A budget ran out: iterations, tokens or wall clock.
    Limit,
    /// Stopped on purpose.
    Cancelled,
    /// Never ran: its `--when` conditions did not hold.
    Skipped,
    /// Failed, denied, stopped by loop detection, or interrupted by a crash.
    Failed,
}

/// A status string this crate does not know (a newer daemon's, or no status at all).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown task status `{0}`")]
pub struct UnknownStatus(pub String);

/// Reads the strings `ListTasks`, `GetTask` and `TaskFinished` carry.
impl std::str::FromStr for TaskStatus {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<TaskStatus, UnknownStatus> {
        TaskStatus::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The task's plan, as the model states and updates it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// What the task means to achieve.
    pub goal: String,
    /// Its steps, in order.
    pub steps: Vec<PlanStep>,
}

/// One step of a [`Plan`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanStep {
    /// What the step does.
    pub description: String,
    /// Where it stands.
    pub status: StepStatus,
    /// What the step produced, short; the full output is in the transcript.
    pub output: Option<String>,
}

/// Where a [`PlanStep`] stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Not begun.
    Pending,
    /// Under way.
    InProgress,
    /// Done.
    Completed,
    /// Failed.
    Failed,
    /// Left out.
    Skipped,
}

impl StepStatus {
    /// The serialised spelling (`in_progress`).
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Pending => "pending",
            StepStatus::InProgress => "in_progress",
            StepStatus::Completed => "completed",
            StepStatus::Failed => "failed",
            StepStatus::Skipped => "skipped",
        }
    }
}

/// Token usage as the server reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Answer tokens.
    pub output_tokens: u64,
    #[serde(default)]
    /// Prompt tokens read from the server's cache.
    pub cache_read_tokens: u64,
    #[serde(default)]
    /// Prompt tokens written to it.
    pub cache_write_tokens: u64,
}

impl Usage {
    /// Adds `other` to these counts.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
    }

    /// Prompt and answer tokens.
    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_spelling_matches_serde() {
        for s in TaskStatus::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
    }

    #[test]
    fn statuses_read_back_from_their_strings() {
        for s in TaskStatus::ALL {
            assert_eq!(s.as_str().parse(), Ok(s));
        }
        assert_eq!(
            "paused".parse::<TaskStatus>(),
            Err(UnknownStatus("paused".into()))
        );
    }

    #[test]
    fn only_queued_and_running_are_unfinished() {
        let unfinished: Vec<_> = TaskStatus::ALL
            .into_iter()
            .filter(|s| !s.is_finished())
            .collect();
        assert_eq!(unfinished, [TaskStatus::Queued, TaskStatus::Running]);
    }

    #[test]
    fn usage_adds_up() {
        let mut u = Usage {
            input_tokens: 1,
            output_tokens: 2,
            cache_read_tokens: 3,
            cache_write_tokens: 4,
        };
        u.add(&u.clone());
        assert_eq!(u.total(), 6);
        assert_eq!(u.cache_write_tokens, 8);
    }
}
