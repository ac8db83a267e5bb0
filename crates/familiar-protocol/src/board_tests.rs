use super::*;
use crate::ids::SessionId;

fn event(board: &mut Board, task: &str, kind: &str, json: &str) {
    board.event(task, &EventPayload::from_signal(kind, json).unwrap());
}

const STARTED: &str = r#"{"soul":"boss","prompt":"how full is my disk","origin":"cli","model":"m","workspace":"/w","max_iterations":5,"sandbox":{}}"#;
const DELEGATED: &str = r#"{"child_task_id":"t-2","child_session_id":"s-2","soul":"helper","prompt":"du it","max_iterations":5}"#;
const ASKED: &str = r#"{"request_id":"r-1","call_id":"c","tool":"shell","summary":"shell: du -sh ~","tier":"execute","reason":"policy asks"}"#;
const DENIED: &str =
    r#"{"request_id":"r-1","call_id":"c","approved":false,"outcome":{"outcome":"denied"}}"#;

#[test]
fn events_build_the_tasks_their_family_and_what_waits() {
    let mut b = Board::default();
    event(&mut b, "t-1", "task_started", STARTED);
    event(&mut b, "t-1", "subagent_started", DELEGATED);
    event(
        &mut b,
        "t-2",
        "task_started",
        r#"{"soul":"helper","prompt":"du it","origin":"delegate","model":"m","workspace":"/w","max_iterations":5,"sandbox":{}}"#,
    );
    event(&mut b, "t-2", "approval_requested", ASKED);
    let running: Vec<&str> = b.running().map(|c| c.id.as_str()).collect();
    assert_eq!(running, ["t-1"]);
    let child = b.get("t-2").unwrap();
    assert_eq!(child.parent.as_deref(), Some("t-1"));
    assert_eq!(child.session_id.as_deref(), Some("s-2"));
    assert_eq!(child.doing, "waiting for your answer: shell: du -sh ~");
    assert_eq!(b.get("t-1").unwrap().doing, "handing a part to helper");
    let waiting: Vec<(&str, &str)> = b
        .waiting()
        .map(|(c, a)| (c.id.as_str(), a.request_id.as_str()))
        .collect();
    assert_eq!(waiting, [("t-2", "r-1")]);
    event(&mut b, "t-2", "approval_resolved", DENIED);
    assert_eq!(b.waiting().count(), 0);
    assert_eq!(b.get("t-2").unwrap().doing, "denied; thinking again");
    b.finished("t-2", "completed", "not written");
    b.finished("t-1", "failed", "no model");
    assert_eq!(b.running().count(), 0);
    assert_eq!(b.get("t-1").unwrap().result.as_deref(), Some("no model"));
    let order: Vec<&str> = b.tasks().map(|c| c.id.as_str()).collect();
    assert_eq!(order, ["t-1", "t-2"]);
}

#[test]
fn a_loaded_board_knows_the_family_approvals_and_undo() {
    let row = |id: &str, status: &str| TaskRow {
        id: id.into(),
        soul: "s".into(),
        status: status.into(),
        prompt: "p".repeat(100),
    };
    let view: TaskView = serde_json::from_str(
        r#"{"id":"t-1","session_id":"s-1","soul":"s","status":"completed","prompt":"p","origin":"cli","plan":null,"usage":{"input_tokens":0,"output_tokens":0},"result":"ok","changes":"changed 1 file","undoable":true}"#,
    )
    .unwrap();
    let b = Board::from_replies(
        vec![row("t-1", "completed"), row("t-3", "queued")],
        vec![Some(view), None],
    );
    let done = b.get("t-1").unwrap();
    assert_eq!(done.undo.as_deref(), Some("changed 1 file"));
    assert_eq!(
        done.session_id,
        Some(SessionId::new("s-1").unwrap().to_string())
    );
    let queued = b.get("t-3").unwrap();
    assert_eq!(
        (queued.doing.as_str(), queued.prompt.len()),
        ("queued", LIST_PROMPT_CHARS)
    );
    assert_eq!(b.running().count(), 1);
}

#[test]
fn an_event_the_board_already_holds_changes_nothing() {
    let mut b = Board::default();
    event(&mut b, "t-1", "task_started", STARTED);
    event(&mut b, "t-1", "approval_requested", ASKED);
    let before = b.clone();
    event(&mut b, "t-1", "approval_requested", ASKED);
    assert_eq!(b, before);
}
