//! Repairing a history that a crash left invalid: a tool_use without its tool_result is
//! refused by every provider, so it gets a synthetic one saying the call was interrupted;
//! and two user messages in a row (a task that failed before the model answered, in a
//! session from before issue 25 §4) get an assistant note between them, since chat
//! templates that enforce alternation reject every later request of the session.

use crate::ids::CallId;
use crate::llm::{ContentBlock, Message, Role};

/// Gives every tool_use without a result a synthetic error result, so the history is
/// valid for every provider again. Returns how many were repaired.
pub fn repair_dangling(history: &mut Vec<Message>) -> usize {
    const INTERRUPTED: &str = "[familiar: this call was interrupted before it returned a result (the task stopped or familiar restarted); it may or may not have run. Check before repeating it.]";
    let mut repaired = 0;
    let mut i = 0;
    while i < history.len() {
        if history[i].role != Role::Assistant {
            i += 1;
            continue;
        }
        let uses: Vec<CallId> = history[i]
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolUse { id, .. } => Some(id.clone()),
                ContentBlock::Text { .. }
                | ContentBlock::Reminder { .. }
                | ContentBlock::Thinking { .. }
                | ContentBlock::ToolResult { .. } => None,
            })
            .collect();
        if uses.is_empty() {
            i += 1;
            continue;
        }
        let next_is_results = history.get(i + 1).is_some_and(|m| {
            m.role == Role::User
                && m.content
                    .iter()
                    .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
        });
        if !next_is_results {
            history.insert(
                i + 1,
                Message {
                    role: Role::User,
                    content: Vec::new(),
                },
            );
        }
        let results = &mut history[i + 1].content;
        for id in uses {
            let answered = results.iter().any(
                |b| matches!(b, ContentBlock::ToolResult { tool_use_id, .. } if *tool_use_id == id),
            );
            if !answered {
                results.push(ContentBlock::ToolResult {
                    tool_use_id: id,
                    content: INTERRUPTED.to_owned(),
                    is_error: true,
                });
                repaired += 1;
            }
        }
        i += 2;
    }
    repaired
}

/// A user message of words (not tool results, which every wire format sends in a role
/// of their own) that no assistant message answers yet.
fn unanswered(m: &Message) -> bool {
    m.role == Role::User
        && !m
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
}

/// What the model reads where a task ended before it answered.
pub fn no_answer_note() -> Message {
    Message::assistant_text("[familiar: the task ended here before the model answered]")
}

/// Puts an assistant note between two user messages in a row, and after a last user
/// message (a task that ended before the model answered: a failed call, a cancel, the
/// iteration limit after tool results), so the next task's prompt keeps the roles
/// alternating. Run when a session is opened for a task, before its prompt is added.
/// Returns how many were inserted.
pub fn alternate_roles(history: &mut Vec<Message>) -> usize {
    let mut inserted = 0;
    if history.last().is_some_and(unanswered) {
        history.push(no_answer_note());
        inserted += 1;
    }
    let mut i = 1;
    while i < history.len() {
        if unanswered(&history[i - 1]) && history[i].role == Role::User {
            history.insert(i, no_answer_note());
            inserted += 1;
        }
        i += 1;
    }
    inserted
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn dangling_calls_get_an_interrupted_result() {
        let call = |id: &str| ContentBlock::ToolUse {
            id: CallId::from_provider(id),
            name: "read_file".into(),
            input: json!({"path": "x"}),
        };
        let mut h = vec![
            Message::user_text("go"),
            Message {
                role: Role::Assistant,
                content: vec![call("a"), call("b")],
            },
            Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: CallId::from_provider("a"),
                    content: "ok".into(),
                    is_error: false,
                }],
            },
            Message {
                role: Role::Assistant,
                content: vec![call("c")],
            },
        ];
        assert_eq!(repair_dangling(&mut h), 2);
        assert_eq!(h.len(), 5);
        assert_eq!(h[2].content.len(), 2);
        assert!(
            matches!(&h[4].content[0], ContentBlock::ToolResult { tool_use_id, is_error: true, .. } if tool_use_id.as_str() == "c")
        );
        assert_eq!(repair_dangling(&mut h), 0, "idempotent");
    }

    /// Issue 25 §4: a task that failed before the model answered left `user, user`.
    #[test]
    fn two_user_messages_in_a_row_get_a_note_between() {
        let mut h = vec![
            Message::user_text("first task"),
            Message::user_text("second task"),
            Message::assistant_text("done"),
            Message::user_text("third"),
        ];
        assert_eq!(alternate_roles(&mut h), 2);
        let roles: Vec<Role> = h.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::User,
                Role::Assistant,
                Role::User,
                Role::Assistant,
                Role::User,
                Role::Assistant
            ]
        );
        assert_eq!(alternate_roles(&mut h), 0);
    }
}
