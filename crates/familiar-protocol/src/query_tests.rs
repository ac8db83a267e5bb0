use zbus::Type;

use super::*;
use crate::task::{PlanStep, StepStatus};

/// A sub-task waiting for an approval, typed.
fn view() -> TaskView {
    TaskView {
        id: TaskId::new("t-2").unwrap(),
        session_id: SessionId::new("s-2").unwrap(),
        soul: SoulId::new("helper").unwrap(),
        status: "running".into(),
        prompt: "write n.txt".into(),
        origin: "delegate".into(),
        plan: Some(Plan {
            goal: "g".into(),
            steps: vec![PlanStep {
                description: "d".into(),
                status: StepStatus::InProgress,
                output: None,
            }],
        }),
        usage: Usage {
            input_tokens: 1,
            output_tokens: 2,
            cache_read_tokens: 3,
            cache_write_tokens: 4,
        },
        result: None,
        approvals: vec![PendingApproval {
            request_id: RequestId::new("r-1").unwrap(),
            tool: "write_file".into(),
            tier: Tier::Write,
            summary: "write_file: n.txt\n  content: x".into(),
            reason: "policy asks".into(),
            grant: Some("allow write_file in this task for 10 minutes".into()),
        }],
        parent_task: Some(TaskId::new("t-1").unwrap()),
        parent_session: Some(SessionId::new("s-1").unwrap()),
        children: vec![TaskId::new("t-3").unwrap()],
        changes: None,
        undoable: false,
    }
}

/// What the daemon's `json!` of November 2026 sent for the same task.
const VIEW: &str = r#"{"approvals":[{"grant":"allow write_file in this task for 10 minutes","reason":"policy asks","request_id":"r-1","summary":"write_file: n.txt\n  content: x","tier":"write","tool":"write_file"}],"changes":null,"children":["t-3"],"id":"t-2","origin":"delegate","parent_session":"s-1","parent_task":"t-1","plan":{"goal":"g","steps":[{"description":"d","output":null,"status":"in_progress"}]},"prompt":"write n.txt","result":null,"session_id":"s-2","soul":"helper","status":"running","undoable":false,"usage":{"cache_read_tokens":3,"cache_write_tokens":4,"input_tokens":1,"output_tokens":2}}"#;

#[test]
fn get_task_keeps_its_json_both_ways() {
    assert_eq!(view().to_json(), VIEW);
    assert_eq!(TaskView::from_json(VIEW).unwrap(), view());
}

#[test]
fn an_older_daemons_task_reads_with_defaults() {
    let old = r#"{"id":"t-1","session_id":"s-1","soul":"s","status":"completed","prompt":"p","origin":"cli","plan":null,"usage":{"input_tokens":0,"output_tokens":0},"result":"ok"}"#;
    let v = TaskView::from_json(old).unwrap();
    assert_eq!(v.status(), Some(TaskStatus::Completed));
    assert!(v.approvals.is_empty() && v.parent_task.is_none() && v.undo().is_none());
}

#[test]
fn rows_keep_the_signatures_of_their_methods() {
    assert_eq!(TaskRow::SIGNATURE.to_string(), "(ssss)");
    assert_eq!(SoulRow::SIGNATURE.to_string(), "(sssu)");
    assert_eq!(SessionRow::SIGNATURE.to_string(), "(ssst)");
    assert_eq!(MemoryEntry::SIGNATURE.to_string(), "(ssss)");
}

#[test]
fn a_row_status_this_build_does_not_know_is_not_unfinished() {
    let row = |status: &str| TaskRow {
        id: "t-1".into(),
        soul: "s".into(),
        status: status.into(),
        prompt: String::new(),
    };
    assert!(row("queued").unfinished() && row("running").unfinished());
    assert!(!row("completed").unfinished() && !row("paused_by_2027").unfinished());
}

/// The `Sandbox` property of November 2026 (the sandbox crate's `Enforcement`).
const SANDBOX: &str = r#"{"abi":5,"status":"partial","missing":["signal and abstract unix socket scoping (ABI 6)"],"unix_sockets":"granted","sockets":["/run/user/1000/bus"]}"#;

#[test]
fn the_sandbox_report_keeps_its_json_both_ways() {
    let r = SandboxReport {
        abi: Some(5),
        status: EnforcementStatus::Partial,
        missing: vec!["signal and abstract unix socket scoping (ABI 6)".into()],
        unix_sockets: UnixSockets::Granted,
        sockets: vec!["/run/user/1000/bus".into()],
    };
    assert_eq!(r.to_json(), SANDBOX);
    assert_eq!(serde_json::from_str::<SandboxReport>(SANDBOX).unwrap(), r);
    assert_eq!(
        r.describe(),
        "Landlock ABI 5, partial, unix sockets granted (missing: signal and abstract unix socket scoping (ABI 6))"
    );
    let none = SandboxReport {
        missing: vec!["landlock".into()],
        ..SandboxReport::default()
    };
    assert_eq!(
        none.describe(),
        "none, unix sockets blocked (missing: landlock)"
    );
}

/// The `Configuration` property of November 2026.
const CONFIGURATION: &str = r#"{"config":"/h/.config/familiar/config.toml","data_dir":"/h/.local/state/familiar","default_soul":"safe_assistant","model":"qwen","policy":"default","provider":"local","reload_error":null,"result_timeout_ms":60000,"warm":{"desktop":{"at":"2026-11-28T20:00:00Z","cached_tokens":0,"ms":0,"prompt_tokens":0,"reason":"on battery","state":"skipped"}}}"#;

#[test]
fn the_configuration_keeps_its_json_both_ways() {
    let c = Configuration {
        config: Some("/h/.config/familiar/config.toml".into()),
        provider: Some("local".into()),
        model: Some("qwen".into()),
        default_soul: Some("safe_assistant".into()),
        policy: Some("default".into()),
        data_dir: Some("/h/.local/state/familiar".into()),
        reload_error: None,
        warm: BTreeMap::from([(
            "desktop".to_owned(),
            SoulWarmth {
                state: WarmState::Skipped,
                prompt_tokens: 0,
                cached_tokens: 0,
                ms: 0,
                at: "2026-11-28T20:00:00Z".into(),
                reason: Some("on battery".into()),
            },
        )]),
        result_timeout_ms: Some(60000),
    };
    assert_eq!(c.to_json(), CONFIGURATION);
    assert_eq!(
        serde_json::from_str::<Configuration>(CONFIGURATION).unwrap(),
        c
    );
}

#[test]
fn every_state_and_status_serialises_to_its_string() {
    for s in [
        WarmState::Cold,
        WarmState::Warming,
        WarmState::Warm,
        WarmState::Skipped,
        WarmState::Failed,
    ] {
        assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
    }
    for s in [
        EnforcementStatus::Full,
        EnforcementStatus::Partial,
        EnforcementStatus::None,
    ] {
        assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
    }
    for s in [
        UnixSockets::Blocked,
        UnixSockets::Granted,
        UnixSockets::Open,
    ] {
        assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
    }
}
