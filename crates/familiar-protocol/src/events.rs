//! The events of a task (docs/events.md): what the `TaskEvent` signal carries as
//! `(kind, payload_json)`, what `familiar run --json` prints one per line, and what a
//! session transcript keeps.
//!
//! Invariant: the JSON is the contract. Fields that are enums here serialise to the
//! strings the bus and `--json` have always carried, and the tests below pin one line
//! per kind, so a change of spelling is a failing test, not a surprise for a client.

use serde::{Deserialize, Serialize};

use crate::ids::{SessionId, TaskId};
use crate::task::{Plan, TaskStatus, Usage};

/// What the policy decided for a call as it starts (`tool_call_started`'s `decision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallDecision {
    Allow,
    /// A person is asked first.
    Ask,
    Deny,
}

impl CallDecision {
    pub fn as_str(self) -> &'static str {
        match self {
            CallDecision::Allow => "allow",
            CallDecision::Ask => "ask",
            CallDecision::Deny => "deny",
        }
    }
}

impl std::fmt::Display for CallDecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Compared with the string it is serialised to, as clients that read the JSON do.
impl PartialEq<str> for CallDecision {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for CallDecision {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// Which compaction ran (the `compaction` event's `mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactionMode {
    Micro,
    /// Large tool results cut to make a request fit.
    Trim,
    Full,
}

impl CompactionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            CompactionMode::Micro => "micro",
            CompactionMode::Trim => "trim",
            CompactionMode::Full => "full",
        }
    }
}

/// One event of one task. Serialises as `{"kind": KIND, "task_id", "session_id", ...}`.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    #[serde(flatten)]
    pub payload: EventPayload,
    pub task_id: TaskId,
    pub session_id: SessionId,
}

impl Event {
    pub fn kind(&self) -> &'static str {
        self.payload.kind()
    }

    /// The payload alone as JSON (the D-Bus `TaskEvent` signal's third argument).
    pub fn payload_json(&self) -> String {
        let mut v = serde_json::to_value(&self.payload).unwrap_or_default();
        if let Some(obj) = v.as_object_mut() {
            obj.remove("kind");
        }
        v.to_string()
    }
}

impl EventPayload {
    /// The payload of a `TaskEvent(task_id, kind, payload_json)` signal.
    pub fn from_signal(kind: &str, payload_json: &str) -> Result<EventPayload, serde_json::Error> {
        let mut v: serde_json::Value = serde_json::from_str(payload_json)?;
        if let Some(obj) = v.as_object_mut() {
            obj.insert(
                "kind".to_owned(),
                serde_json::Value::String(kind.to_owned()),
            );
        }
        serde_json::from_value(v)
    }
}

/// The event kinds of docs/events.md with their payloads. Deserialisable so a D-Bus client
/// (`familiar ask`) rebuilds events from `TaskEvent(kind, payload_json)`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventPayload {
    TaskStarted {
        soul: String,
        prompt: String,
        origin: String,
        model: String,
        workspace: String,
        max_iterations: u32,
        /// What the kernel enforces for this task's tools: `abi`, `status`, `missing`.
        sandbox: serde_json::Value,
        /// The soul's `[resources]` and what enforces them (absent when it sets none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resources: Option<serde_json::Value>,
    },
    IterationStarted {
        iteration: u32,
        max_iterations: u32,
    },
    TextDelta {
        text: String,
    },
    ToolCallStarted {
        call_id: String,
        tool: String,
        args: serde_json::Value,
        tier: String,
        /// `allow`, `ask` or `deny`, with the reason for the last two.
        decision: CallDecision,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    ApprovalRequested {
        request_id: String,
        call_id: String,
        tool: String,
        summary: String,
        tier: String,
        reason: String,
    },
    ApprovalResolved {
        request_id: String,
        call_id: String,
        approved: bool,
        outcome: serde_json::Value,
    },
    ToolCallFinished {
        call_id: String,
        tool: String,
        ok: bool,
        /// The first lines of the output (the transcript has all of it).
        preview: String,
        /// The tool's own run time (after any approval).
        duration_ms: u64,
        /// How long the approval took to be answered, when one was asked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approval_wait_ms: Option<u64>,
    },
    PlanUpdated {
        plan: Plan,
        progress: f32,
    },
    Compaction {
        mode: String,
        tokens_before: u64,
        tokens_after: u64,
        messages_before: usize,
        messages_after: usize,
    },
    Retry {
        attempt: u32,
        delay_ms: u64,
        reason: String,
    },
    /// The model's answer repeated `unit` `repeats` times in a row: the stream was
    /// cancelled and the answer kept up to the first copy (`kept_chars`), with a marker.
    DegenerateOutput {
        unit: String,
        repeats: usize,
        kept_chars: usize,
    },
    /// The server is reading the prompt (llama.cpp's prefill progress): `processed` of
    /// `total` tokens so far, `cached` of them reused from its prompt cache.
    ModelProgress {
        processed: u64,
        total: u64,
        cached: u64,
    },
    ModelFallback {
        from: String,
        to: String,
        reason: String,
    },
    RateLimited {
        scope: String,
        limit: String,
        retry_after_ms: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
    },
    LoopWarning {
        note: String,
    },
    /// A `delegate` call started a sub-task; its own events follow under its task id.
    SubagentStarted {
        child_task_id: String,
        child_session_id: String,
        soul: String,
        prompt: String,
        max_iterations: u32,
    },
    /// The sub-task ended; its answer is the `delegate` call's result.
    SubagentFinished {
        child_task_id: String,
        child_session_id: String,
        soul: String,
        status: TaskStatus,
        usage: Usage,
        iterations: u32,
    },
    /// A message the user added while the task ran joined it before this model call.
    SteeringReceived {
        message: String,
    },
    TaskFinished {
        status: TaskStatus,
        result: String,
        usage: Usage,
        iterations: u32,
        /// Steering messages the task ended before reading: kept in the session, they
        /// open its next task.
        #[serde(default)]
        pending_steering: usize,
        /// False when the session is not kept after the task (a new session whose task
        /// failed or was skipped before the model answered, `run --ephemeral`): the
        /// session id then names nothing a later command can use.
        #[serde(default = "kept")]
        session_kept: bool,
    },
}

/// Events written before `session_kept` existed named kept sessions.
fn kept() -> bool {
    true
}

impl EventPayload {
    pub fn kind(&self) -> &'static str {
        match self {
            EventPayload::TaskStarted { .. } => "task_started",
            EventPayload::IterationStarted { .. } => "iteration_started",
            EventPayload::TextDelta { .. } => "text_delta",
            EventPayload::ToolCallStarted { .. } => "tool_call_started",
            EventPayload::ApprovalRequested { .. } => "approval_requested",
            EventPayload::ApprovalResolved { .. } => "approval_resolved",
            EventPayload::ToolCallFinished { .. } => "tool_call_finished",
            EventPayload::PlanUpdated { .. } => "plan_updated",
            EventPayload::Compaction { .. } => "compaction",
            EventPayload::Retry { .. } => "retry",
            EventPayload::ModelProgress { .. } => "model_progress",
            EventPayload::DegenerateOutput { .. } => "degenerate_output",
            EventPayload::ModelFallback { .. } => "model_fallback",
            EventPayload::RateLimited { .. } => "rate_limited",
            EventPayload::LoopWarning { .. } => "loop_warning",
            EventPayload::SubagentStarted { .. } => "subagent_started",
            EventPayload::SubagentFinished { .. } => "subagent_finished",
            EventPayload::SteeringReceived { .. } => "steering_received",
            EventPayload::TaskFinished { .. } => "task_finished",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(text: &str) -> Event {
        Event {
            payload: EventPayload::TextDelta { text: text.into() },
            task_id: TaskId::new("t-1").unwrap(),
            session_id: SessionId::new("s-1").unwrap(),
        }
    }

    #[test]
    fn events_serialise_with_kind_and_ids() {
        let v = serde_json::to_value(event("hi")).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"kind": "text_delta", "text": "hi", "task_id": "t-1", "session_id": "s-1"})
        );
        assert_eq!(event("hi").payload_json(), r#"{"text":"hi"}"#);
    }

    #[test]
    fn a_signal_payload_rebuilds_the_event() {
        let e = event("hi");
        let back = EventPayload::from_signal(e.kind(), &e.payload_json()).unwrap();
        assert_eq!(back.kind(), "text_delta");
        assert!(matches!(back, EventPayload::TextDelta { text } if text == "hi"));
    }

    #[test]
    fn decisions_keep_their_strings() {
        let all = [CallDecision::Allow, CallDecision::Ask, CallDecision::Deny];
        assert_eq!(
            serde_json::to_value(all).unwrap(),
            serde_json::json!(["allow", "ask", "deny"])
        );
        for d in all {
            assert_eq!(serde_json::to_value(d).unwrap(), d.as_str());
        }
    }
}
