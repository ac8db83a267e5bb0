//! The events of a task (docs/events.md): what the `TaskEvent` signal carries as
//! `(kind, payload_json)`, what `familiar run --json` prints one per line, and what a
//! session transcript keeps.
//!
//! Invariant: the JSON is the contract. Fields that are enums here serialise to the
//! strings the bus and `--json` have always carried, and the tests below pin one line
//! per kind, so a change of spelling is a failing test, not a surprise for a client.

use serde::{Deserialize, Serialize};

use crate::ids::{CallId, RequestId, SessionId, SoulId, TaskId};
use crate::task::{Plan, TaskStatus, Usage};
use crate::tier::{Mode, Tier};

/// What the policy decided for a call as it starts (`tool_call_started`'s `decision`):
/// the [`Mode`] the call got, `allow`, `ask` or `deny`.
pub type CallDecision = Mode;

/// How an approval request ended (`approval_resolved`'s `outcome`, an object whose own
/// `outcome` names the variant: `{"outcome": "denied", "by": "dbus:1.42"}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Resolution {
    /// A person approved; `by` says where (`dbus:…`, `tty`, `notification`; empty when
    /// a sender left it out).
    Approved {
        #[serde(default)]
        by: String,
    },
    /// An earlier "allow for N minutes" covered it.
    Granted,
    Denied {
        #[serde(default)]
        by: String,
    },
    TimedOut,
    /// Nothing could show the question to a person.
    NobodyToAsk,
    Cancelled,
}

impl Resolution {
    /// Whether the call runs.
    pub fn approved(&self) -> bool {
        match self {
            Resolution::Approved { .. } | Resolution::Granted => true,
            Resolution::Denied { .. }
            | Resolution::TimedOut
            | Resolution::NobodyToAsk
            | Resolution::Cancelled => false,
        }
    }
}

/// Which compaction ran (the `compaction` event's `mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
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

impl std::fmt::Display for CompactionMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

crate::eq_str!(CompactionMode);

/// What a rate limit counts (the `rate_limited` event's `scope`), serialised as the
/// phrase a person reads after the limit (`30/min tool calls per session`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RateScope {
    /// All tool calls of one session.
    #[serde(rename = "tool calls per session")]
    SessionTools,
    /// Calls of one tool in one session.
    #[serde(rename = "calls of this tool per session")]
    SessionTool,
    /// LLM requests of one session.
    #[serde(rename = "model requests per session")]
    SessionLlm,
    /// All tool calls of the daemon.
    #[serde(rename = "tool calls across all sessions")]
    GlobalTools,
    /// `Submit` calls of one D-Bus caller.
    #[serde(rename = "task submissions per caller")]
    Submit,
}

impl RateScope {
    pub const ALL: [RateScope; 5] = [
        RateScope::SessionTools,
        RateScope::SessionTool,
        RateScope::SessionLlm,
        RateScope::GlobalTools,
        RateScope::Submit,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RateScope::SessionTools => "tool calls per session",
            RateScope::SessionTool => "calls of this tool per session",
            RateScope::SessionLlm => "model requests per session",
            RateScope::GlobalTools => "tool calls across all sessions",
            RateScope::Submit => "task submissions per caller",
        }
    }
}

impl std::fmt::Display for RateScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

crate::eq_str!(RateScope);

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
        soul: SoulId,
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
        call_id: CallId,
        tool: String,
        args: serde_json::Value,
        tier: Tier,
        /// `allow`, `ask` or `deny`, with the reason for the last two.
        decision: CallDecision,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    ApprovalRequested {
        request_id: RequestId,
        call_id: CallId,
        tool: String,
        summary: String,
        tier: Tier,
        reason: String,
    },
    ApprovalResolved {
        request_id: RequestId,
        call_id: CallId,
        approved: bool,
        outcome: Resolution,
    },
    ToolCallFinished {
        call_id: CallId,
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
        mode: CompactionMode,
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
        scope: RateScope,
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
        child_task_id: TaskId,
        child_session_id: SessionId,
        soul: SoulId,
        prompt: String,
        max_iterations: u32,
    },
    /// The sub-task ended; its answer is the `delegate` call's result.
    SubagentFinished {
        child_task_id: TaskId,
        child_session_id: SessionId,
        soul: SoulId,
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
    use crate::task::{PlanStep, StepStatus};

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

    const USAGE: Usage = Usage {
        input_tokens: 1,
        output_tokens: 2,
        cache_read_tokens: 3,
        cache_write_tokens: 4,
    };

    /// One payload of each kind, typed, in the order of [`PINNED`].
    fn one_of_each() -> Vec<EventPayload> {
        use serde_json::json;
        let mut all = vec![
            EventPayload::TaskStarted {
                soul: crate::ids::SoulId::new("safe_assistant").unwrap(),
                prompt: "hi".into(),
                origin: "cli".into(),
                model: "qwen".into(),
                workspace: "/w".into(),
                max_iterations: 10,
                sandbox: json!({"abi": 6, "missing": [], "status": "full"}),
                resources: None,
            },
            EventPayload::IterationStarted {
                iteration: 1,
                max_iterations: 10,
            },
            EventPayload::TextDelta { text: "hi".into() },
        ];
        all.extend(calls());
        all.extend([
            EventPayload::PlanUpdated {
                plan: Plan {
                    goal: "g".into(),
                    steps: vec![PlanStep {
                        description: "d".into(),
                        status: StepStatus::InProgress,
                        output: None,
                    }],
                },
                progress: 0.5,
            },
            EventPayload::Compaction {
                mode: CompactionMode::Full,
                tokens_before: 9000,
                tokens_after: 1200,
                messages_before: 61,
                messages_after: 4,
            },
            EventPayload::Retry {
                attempt: 1,
                delay_ms: 500,
                reason: "429".into(),
            },
            EventPayload::DegenerateOutput {
                unit: "ab".into(),
                repeats: 40,
                kept_chars: 2,
            },
            EventPayload::ModelProgress {
                processed: 100,
                total: 400,
                cached: 50,
            },
            EventPayload::ModelFallback {
                from: "a".into(),
                to: "b".into(),
                reason: "overloaded".into(),
            },
            EventPayload::RateLimited {
                scope: RateScope::SessionTools,
                limit: "30/min".into(),
                retry_after_ms: 2000,
                tool: Some("shell".into()),
            },
            EventPayload::LoopWarning { note: "n".into() },
            EventPayload::SubagentStarted {
                child_task_id: crate::ids::TaskId::new("t-2").unwrap(),
                child_session_id: crate::ids::SessionId::new("s-2").unwrap(),
                soul: crate::ids::SoulId::new("research_agent").unwrap(),
                prompt: "p".into(),
                max_iterations: 5,
            },
            EventPayload::SubagentFinished {
                child_task_id: crate::ids::TaskId::new("t-2").unwrap(),
                child_session_id: crate::ids::SessionId::new("s-2").unwrap(),
                soul: crate::ids::SoulId::new("research_agent").unwrap(),
                status: TaskStatus::MaxIterations,
                usage: USAGE,
                iterations: 5,
            },
            EventPayload::SteeringReceived {
                message: "m".into(),
            },
            EventPayload::TaskFinished {
                status: TaskStatus::Completed,
                result: "done".into(),
                usage: USAGE,
                iterations: 2,
                pending_steering: 0,
                session_kept: true,
            },
        ]);
        all
    }

    /// The four kinds of a tool call's life, typed.
    fn calls() -> [EventPayload; 4] {
        [
            EventPayload::ToolCallStarted {
                call_id: crate::ids::CallId::new("c1").unwrap(),
                tool: "shell".into(),
                args: serde_json::json!({"command": "ls"}),
                tier: Tier::Execute,
                decision: CallDecision::Ask,
                reason: Some("policy asks".into()),
            },
            EventPayload::ApprovalRequested {
                request_id: crate::ids::RequestId::new("r-1").unwrap(),
                call_id: crate::ids::CallId::new("c1").unwrap(),
                tool: "shell".into(),
                summary: "shell: ls".into(),
                tier: Tier::SystemCritical,
                reason: "policy asks".into(),
            },
            EventPayload::ApprovalResolved {
                request_id: crate::ids::RequestId::new("r-1").unwrap(),
                call_id: crate::ids::CallId::new("c1").unwrap(),
                approved: false,
                outcome: Resolution::Denied {
                    by: "dbus::1.42".into(),
                },
            },
            EventPayload::ToolCallFinished {
                call_id: crate::ids::CallId::new("c1").unwrap(),
                tool: "shell".into(),
                ok: true,
                preview: "a\nb".into(),
                duration_ms: 12,
                approval_wait_ms: Some(1500),
            },
        ]
    }

    /// What the same payloads serialised to before their fields were typed (the
    /// string-typed definitions of November 2026, built apart and printed): the bus and
    /// `--json` must not change.
    const PINNED: [&str; 19] = [
        r#"{"kind":"task_started","soul":"safe_assistant","prompt":"hi","origin":"cli","model":"qwen","workspace":"/w","max_iterations":10,"sandbox":{"abi":6,"missing":[],"status":"full"},"task_id":"t-1","session_id":"s-1"}"#,
        r#"{"kind":"iteration_started","iteration":1,"max_iterations":10,"task_id":"t-1","session_id":"s-1"}"#,
        r#"{"kind":"text_delta","text":"hi","task_id":"t-1","session_id":"s-1"}"#,
        r#"{"kind":"tool_call_started","call_id":"c1","tool":"shell","args":{"command":"ls"},"tier":"execute","decision":"ask","reason":"policy asks","task_id":"t-1","session_id":"s-1"}"#,
        r#"{"kind":"approval_requested","request_id":"r-1","call_id":"c1","tool":"shell","summary":"shell: ls","tier":"system_critical","reason":"policy asks","task_id":"t-1","session_id":"s-1"}"#,
        r#"{"kind":"approval_resolved","request_id":"r-1","call_id":"c1","approved":false,"outcome":{"outcome":"denied","by":"dbus::1.42"},"task_id":"t-1","session_id":"s-1"}"#,
        r#"{"kind":"tool_call_finished","call_id":"c1","tool":"shell","ok":true,"preview":"a\nb","duration_ms":12,"approval_wait_ms":1500,"task_id":"t-1","session_id":"s-1"}"#,
        r#"{"kind":"plan_updated","plan":{"goal":"g","steps":[{"description":"d","status":"in_progress","output":null}]},"progress":0.5,"task_id":"t-1","session_id":"s-1"}"#,
        r#"{"kind":"compaction","mode":"full","tokens_before":9000,"tokens_after":1200,"messages_before":61,"messages_after":4,"task_id":"t-1","session_id":"s-1"}"#,
        r#"{"kind":"retry","attempt":1,"delay_ms":500,"reason":"429","task_id":"t-1","session_id":"s-1"}"#,
        r#"{"kind":"degenerate_output","unit":"ab","repeats":40,"kept_chars":2,"task_id":"t-1","session_id":"s-1"}"#,
        r#"{"kind":"model_progress","processed":100,"total":400,"cached":50,"task_id":"t-1","session_id":"s-1"}"#,
        r#"{"kind":"model_fallback","from":"a","to":"b","reason":"overloaded","task_id":"t-1","session_id":"s-1"}"#,
        r#"{"kind":"rate_limited","scope":"tool calls per session","limit":"30/min","retry_after_ms":2000,"tool":"shell","task_id":"t-1","session_id":"s-1"}"#,
        r#"{"kind":"loop_warning","note":"n","task_id":"t-1","session_id":"s-1"}"#,
        r#"{"kind":"subagent_started","child_task_id":"t-2","child_session_id":"s-2","soul":"research_agent","prompt":"p","max_iterations":5,"task_id":"t-1","session_id":"s-1"}"#,
        r#"{"kind":"subagent_finished","child_task_id":"t-2","child_session_id":"s-2","soul":"research_agent","status":"max_iterations","usage":{"input_tokens":1,"output_tokens":2,"cache_read_tokens":3,"cache_write_tokens":4},"iterations":5,"task_id":"t-1","session_id":"s-1"}"#,
        r#"{"kind":"steering_received","message":"m","task_id":"t-1","session_id":"s-1"}"#,
        r#"{"kind":"task_finished","status":"completed","result":"done","usage":{"input_tokens":1,"output_tokens":2,"cache_read_tokens":3,"cache_write_tokens":4},"iterations":2,"pending_steering":0,"session_kept":true,"task_id":"t-1","session_id":"s-1"}"#,
    ];

    fn with_ids(payload: EventPayload) -> Event {
        Event {
            payload,
            task_id: TaskId::new("t-1").unwrap(),
            session_id: SessionId::new("s-1").unwrap(),
        }
    }

    #[test]
    fn every_kind_keeps_its_json() {
        let all = one_of_each();
        assert_eq!(all.len(), PINNED.len());
        for (payload, pinned) in all.into_iter().zip(PINNED) {
            let e = with_ids(payload);
            assert_eq!(serde_json::to_string(&e).unwrap(), pinned, "{}", e.kind());
        }
    }

    #[test]
    fn every_kind_comes_back_from_its_signal() {
        for e in one_of_each().into_iter().map(with_ids) {
            let back = EventPayload::from_signal(e.kind(), &e.payload_json()).unwrap();
            assert_eq!(
                serde_json::to_value(&back).unwrap(),
                serde_json::to_value(&e.payload).unwrap()
            );
        }
    }

    #[test]
    fn typed_fields_compare_with_their_strings() {
        assert!(Tier::SystemCritical == "system_critical");
        assert!(CompactionMode::Trim == "trim");
        assert!(CallDecision::Deny == "deny");
        assert!(RateScope::Submit == "task submissions per caller");
    }

    #[test]
    fn scopes_serialise_to_their_phrases() {
        for s in RateScope::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
    }
}
