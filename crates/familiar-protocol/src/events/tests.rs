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
    let mut all = vec![
        EventPayload::TaskStarted {
            soul: crate::ids::SoulId::new("safe_assistant").unwrap(),
            prompt: "hi".into(),
            origin: "cli".into(),
            model: "qwen".into(),
            workspace: "/w".into(),
            max_iterations: 10,
            sandbox: SandboxReport {
                abi: Some(6),
                status: crate::query::EnforcementStatus::Full,
                ..SandboxReport::default()
            },
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
    r#"{"kind":"task_started","soul":"safe_assistant","prompt":"hi","origin":"cli","model":"qwen","workspace":"/w","max_iterations":10,"sandbox":{"abi":6,"missing":[],"status":"full","unix_sockets":"blocked"},"task_id":"t-1","session_id":"s-1"}"#,
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
