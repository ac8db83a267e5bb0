//! The events of a task (docs/events.md): what the `TaskEvent` signal carries as
//! `(kind, payload_json)`, what `familiar run --json` prints one per line, and what a
//! session transcript keeps.
//!
//! The payloads are here ([`EventPayload`]); what their fields say, in `fields.rs`
//! ([`Resolution`], [`CompactionMode`], [`RateScope`]); the pinned JSON of every kind,
//! in `tests.rs`.
//!
//! Invariant: the JSON is the contract. Fields that are enums here serialise to the
//! strings the bus and `--json` have always carried, and the tests below pin one line
//! per kind, so a change of spelling is a failing test, not a surprise for a client.

use serde::{Deserialize, Serialize};

use crate::ids::{CallId, RequestId, SessionId, SoulId, TaskId};
use crate::query::SandboxReport;
use crate::task::{Plan, TaskStatus, Usage};
use crate::tier::Tier;

mod fields;

pub use fields::{CallDecision, CompactionMode, RateScope, Resolution};

/// One event of one task. Serialises as `{"kind": KIND, "task_id", "session_id", ...}`.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    #[serde(flatten)]
    /// What happened.
    pub payload: EventPayload,
    /// The task it happened to.
    pub task_id: TaskId,
    /// The session the task runs in.
    pub session_id: SessionId,
}

impl Event {
    /// The event's kind (`task_started`, ...), as the signal and `--json` name it.
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
    /// The task began: what it runs under and where.
    TaskStarted {
        /// The soul it runs under.
        soul: SoulId,
        /// The whole prompt (untrusted: any client may have sent it).
        prompt: String,
        /// Who submitted it (`cli`, `dmenu`, `delegate`, a script's label).
        origin: String,
        /// The model it talks to.
        model: String,
        /// Its workspace directory.
        workspace: String,
        /// Its iteration budget.
        max_iterations: u32,
        /// What the kernel enforces for this task's tools (keys sorted on the wire, as
        /// they always were: [`sorted_keys`]).
        #[serde(serialize_with = "sorted_keys")]
        sandbox: SandboxReport,
        /// The soul's `[resources]` and what enforces them (absent when it sets none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resources: Option<serde_json::Value>,
    },
    /// A model call begins.
    IterationStarted {
        /// This call's number, from 1.
        iteration: u32,
        /// The task's budget.
        max_iterations: u32,
    },
    /// A piece of the model's answer, as it streams.
    TextDelta {
        /// The new text.
        text: String,
    },
    /// A tool call starts, with what the policy decided.
    ToolCallStarted {
        /// The call's id within the task.
        call_id: CallId,
        /// The tool.
        tool: String,
        /// Its arguments, as the model wrote them (untrusted).
        args: serde_json::Value,
        /// The tool's tier.
        tier: Tier,
        /// `allow`, `ask` or `deny`, with the reason for the last two.
        decision: CallDecision,
        #[serde(skip_serializing_if = "Option::is_none")]
        /// Why the call is asked or denied.
        reason: Option<String>,
    },
    /// A call waits for a person (`Respond`).
    ApprovalRequested {
        /// What `Respond` and `Grant` take.
        request_id: RequestId,
        /// The call it is about.
        call_id: CallId,
        /// The tool.
        tool: String,
        /// The whole call, as every approval surface shows it (`display::describe_call`).
        summary: String,
        /// The tool's tier.
        tier: Tier,
        /// Why it is asked.
        reason: String,
    },
    /// An approval request was answered, or ended unanswered.
    ApprovalResolved {
        /// The request.
        request_id: RequestId,
        /// The call it was about.
        call_id: CallId,
        /// Whether the call runs.
        approved: bool,
        /// How it ended, and who answered.
        outcome: Resolution,
    },
    /// A tool call ended.
    ToolCallFinished {
        /// The call.
        call_id: CallId,
        /// The tool.
        tool: String,
        /// Whether it succeeded.
        ok: bool,
        /// The first lines of the output (the transcript has all of it).
        preview: String,
        /// The tool's own run time (after any approval).
        duration_ms: u64,
        /// How long the approval took to be answered, when one was asked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approval_wait_ms: Option<u64>,
    },
    /// The task's plan changed.
    PlanUpdated {
        /// The plan now.
        plan: Plan,
        /// Done steps over all, 0 to 1.
        progress: f32,
    },
    /// The context was compacted to fit the model.
    Compaction {
        /// Which compaction ran.
        mode: CompactionMode,
        /// Tokens before.
        tokens_before: u64,
        /// Tokens after.
        tokens_after: u64,
        /// Messages before.
        messages_before: usize,
        /// Messages after.
        messages_after: usize,
    },
    /// A model call failed and is tried again.
    Retry {
        /// This attempt's number.
        attempt: u32,
        /// How long it waits first.
        delay_ms: u64,
        /// Why (the server's answer).
        reason: String,
    },
    /// The model's answer repeated `unit` `repeats` times in a row: the stream was
    /// cancelled and the answer kept up to the first copy (`kept_chars`), with a marker.
    DegenerateOutput {
        /// The repeated text.
        unit: String,
        /// How many times it came in a row.
        repeats: usize,
        /// Characters of the answer kept.
        kept_chars: usize,
    },
    /// The server is reading the prompt (llama.cpp's prefill progress): `processed` of
    /// `total` tokens so far, `cached` of them reused from its prompt cache.
    ModelProgress {
        /// Prompt tokens read so far.
        processed: u64,
        /// Prompt tokens in all.
        total: u64,
        /// Tokens reused from the server's cache.
        cached: u64,
    },
    /// The model failed and the next in the soul's list takes over.
    ModelFallback {
        /// The model that failed.
        from: String,
        /// The model that takes over.
        to: String,
        /// Why.
        reason: String,
    },
    /// A rate limit held a call or request back.
    RateLimited {
        /// What the limit counts.
        scope: RateScope,
        /// The limit (`30/min`).
        limit: String,
        /// How long until it may go.
        retry_after_ms: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        /// The tool, for a per-tool limit.
        tool: Option<String>,
    },
    /// The task seems to repeat itself; the model was told.
    LoopWarning {
        /// What was seen.
        note: String,
    },
    /// A `delegate` call started a sub-task; its own events follow under its task id.
    SubagentStarted {
        /// The sub-task's id.
        child_task_id: TaskId,
        /// The sub-task's session.
        child_session_id: SessionId,
        /// The soul it runs under.
        soul: SoulId,
        /// What it was asked.
        prompt: String,
        /// Its iteration budget.
        max_iterations: u32,
    },
    /// The sub-task ended; its answer is the `delegate` call's result.
    SubagentFinished {
        /// The sub-task's id.
        child_task_id: TaskId,
        /// The sub-task's session.
        child_session_id: SessionId,
        /// The soul it ran under.
        soul: SoulId,
        /// How it ended.
        status: TaskStatus,
        /// The tokens it used.
        usage: Usage,
        /// The model calls it made.
        iterations: u32,
    },
    /// A message the user added while the task ran joined it before this model call.
    SteeringReceived {
        /// The message.
        message: String,
    },
    /// The task ended (the last event of a task).
    TaskFinished {
        /// How it ended.
        status: TaskStatus,
        /// Its answer, or why it failed.
        result: String,
        /// The tokens it used.
        usage: Usage,
        /// The model calls it made.
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

/// `task_started`'s `sandbox` with its keys sorted: the bus and `--json` always
/// carried it so (it was a `serde_json::Value`), unlike the `Sandbox` property.
fn sorted_keys<S: serde::Serializer>(r: &SandboxReport, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::Error as _;
    serde_json::to_value(r)
        .map_err(S::Error::custom)?
        .serialize(s)
}

/// Events written before `session_kept` existed named kept sessions.
fn kept() -> bool {
    true
}

impl EventPayload {
    /// The event's kind (`task_started`, ...), as the signal and `--json` name it.
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
mod tests;
