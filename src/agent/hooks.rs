//! Hooks: the one place the audit log and the metrics are fed from, and where a later
//! user-hook feature will plug in. Nothing else bumps a counter or writes an audit line.
//!
//! Each hook fires where the thing happens:
//! - `before_llm` just before a model request is sent (a turn's, or a full compaction's
//!   summary), `after_llm` once its stream has ended, with its usage or its error;
//! - `before_tool` just before a decided call runs (after its approval, on the call's own
//!   task; a refused call never reaches it), `after_tool` once per call of a turn when its
//!   result is folded into the turn, in call order, refused calls included;
//! - `compacted` after a micro or full compaction changed the history;
//! - `task_finished` when a started task records its finish status;
//! - `submit_limited` when the daemon refuses a `Submit` over its caller's rate limit.
//!
//! Hooks observe; they cannot change a decision. They must be quick (an audit line is one
//! `write`): they run on the loop's task, or the call's.

use std::sync::Arc;

use familiar_protocol::events::CompactionMode;
use familiar_protocol::ids::{CallId, SessionId, SoulId, TaskId};
use familiar_protocol::task::{Outcome, TaskStatus, Usage};
use familiar_protocol::tier::Tier;

use crate::agent::metrics::{Metrics, bump};
use crate::agent::trail::Trail;
use crate::llm::{LlmError, Request};
use crate::ratelimit::RateLimited;
use crate::store::{AuditDecision, AuditEntry, AuditOutcome, Store, args_digest};

/// Which task a hook call is about.
pub struct TaskRef<'a> {
    pub task_id: &'a TaskId,
    pub session_id: &'a SessionId,
    pub soul: &'a SoulId,
}

/// One tool call, decided.
pub struct ToolCallRef<'a> {
    pub call_id: &'a CallId,
    pub tool: &'a str,
    pub tier: Tier,
    pub args: &'a serde_json::Value,
    pub decision: AuditDecision,
    /// Why it was refused (the policy's reason, the approval's, the quota's); `None`
    /// when nothing refused it.
    pub reason: Option<&'a str>,
    /// How it was decided: the audit line's `reason` ends with it.
    pub trail: &'a Trail,
}

pub trait Hooks: Send + Sync {
    fn before_llm(&self, _task: &TaskRef<'_>, _request: &Request) {}
    fn after_llm(&self, _task: &TaskRef<'_>, _result: Result<&Usage, &LlmError>) {}
    fn before_tool(&self, _task: &TaskRef<'_>, _call: &ToolCallRef<'_>) {}
    fn after_tool(&self, _task: &TaskRef<'_>, _call: &ToolCallRef<'_>, _outcome: AuditOutcome) {}
    fn compacted(&self, _task: &TaskRef<'_>, _mode: CompactionMode) {}
    fn task_finished(&self, _task: &TaskRef<'_>, _status: TaskStatus) {}
    /// Not about a task: the submission was refused before one existed.
    fn submit_limited(&self, _caller: &str, _limited: &RateLimited) {}
}

/// Writes one audit line per tool call: the decision, why, and what happened.
pub struct AuditHook {
    pub store: Arc<Store>,
}

impl Hooks for AuditHook {
    fn after_tool(&self, task: &TaskRef<'_>, call: &ToolCallRef<'_>, outcome: AuditOutcome) {
        let entry = AuditEntry {
            time: crate::store::now_rfc3339(),
            task_id: Some(task.task_id.clone()),
            session_id: Some(task.session_id.clone()),
            soul: task.soul.clone(),
            tool: call.tool.to_owned(),
            tier: call.tier,
            args_digest: args_digest(call.args),
            decision: call.decision,
            reason: Some(call.trail.reason(call.reason)),
            outcome,
        };
        if let Err(e) = self.store.audit(&entry) {
            // The call already happened; losing its audit line is worth a loud warning,
            // not a failed task.
            tracing::error!(task_id = %task.task_id, tool = call.tool, "cannot write the audit log: {e}");
        }
    }
}

/// Feeds the counters of [`Metrics`].
pub struct MetricsHook {
    pub metrics: Arc<Metrics>,
}

impl Hooks for MetricsHook {
    fn before_llm(&self, _task: &TaskRef<'_>, _request: &Request) {
        bump(&self.metrics.llm_requests);
    }

    fn after_llm(&self, _task: &TaskRef<'_>, result: Result<&Usage, &LlmError>) {
        if result.is_err() {
            bump(&self.metrics.llm_failures);
        }
    }

    fn after_tool(&self, _task: &TaskRef<'_>, call: &ToolCallRef<'_>, outcome: AuditOutcome) {
        match call.decision {
            AuditDecision::Denied | AuditDecision::ApprovalTimeout => {
                bump(&self.metrics.permission_denials)
            }
            AuditDecision::RateLimited => bump(&self.metrics.rate_limited),
            AuditDecision::Allowed | AuditDecision::Approved => {}
        }
        match outcome {
            AuditOutcome::Succeeded => bump(&self.metrics.tool_executions),
            AuditOutcome::Failed => {
                bump(&self.metrics.tool_executions);
                bump(&self.metrics.tool_failures);
            }
            AuditOutcome::NotRun => {}
        }
    }

    fn compacted(&self, _task: &TaskRef<'_>, _mode: CompactionMode) {
        bump(&self.metrics.compactions);
    }

    fn task_finished(&self, _task: &TaskRef<'_>, status: TaskStatus) {
        match status.outcome() {
            Outcome::Completed => bump(&self.metrics.tasks_completed),
            Outcome::Cancelled => bump(&self.metrics.tasks_cancelled),
            Outcome::Skipped => bump(&self.metrics.tasks_skipped),
            Outcome::Limit | Outcome::Failed | Outcome::Unfinished => {
                bump(&self.metrics.tasks_failed)
            }
        }
    }

    fn submit_limited(&self, _caller: &str, _limited: &RateLimited) {
        bump(&self.metrics.rate_limited);
    }
}
