//! A task's family of delegated sub-tasks: the link a child keeps to its parent, the
//! [`budget`] they share, the slots for running children, and the [`subagent`] runner
//! that starts them. It knows nothing of the loop: the loop hands the runner its way of
//! running a task ([`subagent::RunChild`]), so the family sits below it.

pub mod budget;
pub mod subagent;

use std::sync::Arc;

use familiar_protocol::ids::{SessionId, TaskId};
use familiar_protocol::task::TaskStatus;
use tokio::sync::Semaphore;

use crate::agent::family::budget::{Budget, Exhausted};
use crate::soul::Soul;

/// A top-level task is depth 1, its children depth 2; nothing deeper.
pub const MAX_DEPTH: u32 = 2;
/// Children of one task running at once.
pub const MAX_CHILDREN: usize = 3;

/// What a child task knows of the task that started it.
#[derive(Debug, Clone)]
pub struct ParentLink {
    pub task_id: TaskId,
    pub session_id: SessionId,
    /// The child's depth (2 for a child of a top-level task).
    pub depth: u32,
    /// The child's budget, chained to the parent's.
    pub budget: Arc<Budget>,
    /// The ancestors' sessions and souls: their rate limits count the child's calls,
    /// keyed by their sessions, as if the ancestor had made them.
    pub quota: Vec<(SessionId, Arc<Soul>)>,
}

/// A task's place in its family: the budget it shares and its children's slots.
pub struct Family {
    pub budget: Arc<Budget>,
    /// [`MAX_CHILDREN`] permits for the task's sub-tasks.
    pub slots: Arc<Semaphore>,
}

impl Family {
    /// A child shares its parent's budget; a top-level task starts its own.
    pub(in crate::agent) fn new(
        parent: Option<&ParentLink>,
        max_iterations: u32,
        max_tokens: u64,
    ) -> Family {
        Family {
            budget: match parent {
                Some(p) => Arc::clone(&p.budget),
                None => Budget::root(max_iterations, max_tokens),
            },
            slots: Arc::new(Semaphore::new(MAX_CHILDREN)),
        }
    }

    /// The finish status when the budget shared with sub-tasks (or, for a sub-task, its
    /// parent's) is spent; `None` while there is some left.
    pub(in crate::agent) fn check_budget(&self) -> Option<(TaskStatus, String)> {
        match self.budget.exhausted() {
            None => None,
            Some(Exhausted::Tokens { used, max }) => Some((
                TaskStatus::BudgetExceeded,
                format!(
                    "stopped: the task and its sub-tasks used {used} tokens, the budget is {max}"
                ),
            )),
            Some(Exhausted::Iterations { used, max }) => Some((
                TaskStatus::MaxIterations,
                format!(
                    "stopped after {used} model call{} of the task and its sub-tasks (the budget is {max})",
                    if used == 1 { "" } else { "s" }
                ),
            )),
        }
    }
}
