//! Repairing a history that a crash or an older familiar left invalid or stale: a
//! tool_use without its tool_result is refused by every provider, so it gets a synthetic
//! one saying the call was interrupted; two user messages in a row (a task that failed
//! before the model answered, from a familiar that kept its prompt) get an assistant
//! note between them, since chat templates that enforce alternation reject every later
//! request of the session; and a compacted history that points at a summary in the
//! system prompt (where older familiars kept it) opens with the summary itself.

use familiar_protocol::ids::CallId;

use crate::agent::context::compaction::{SessionMemory, opening};
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
                | ContentBlock::ToolResult { .. }
                | ContentBlock::Image { .. } => None,
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

/// How older familiars opened a compacted history, the summary being in the system prompt.
const SUMMARY_IN_SYSTEM_PROMPT: &str = "[familiar: the earlier part of this conversation was \
     compacted; its summary and key facts are in the system prompt.] The current task is: ";

/// Rewrites a compacted history's opening that points at the system prompt into one
/// that carries the session's memory ([`opening`]). Returns whether it did.
pub fn inline_session_memory(history: &mut [Message], memory: &SessionMemory<'_>) -> bool {
    let Some(first) = history.first_mut() else {
        return false;
    };
    let task = match first.content.first() {
        Some(ContentBlock::Text { text }) if first.role == Role::User => {
            match text.strip_prefix(SUMMARY_IN_SYSTEM_PROMPT) {
                Some(task) => task.to_owned(),
                None => return false,
            }
        }
        _ => return false,
    };
    let mut rewritten = opening(memory, &task).content;
    rewritten.extend(first.content.drain(1..));
    first.content = rewritten;
    true
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_opening_that_points_at_the_system_prompt_gets_the_memory_itself() {
        let mut h = vec![
            Message::user_text(format!("{SUMMARY_IN_SYSTEM_PROMPT}clean the disk")),
            Message::assistant_text("done"),
        ];
        let facts = vec!["backup disk is /mnt/b".to_owned()];
        let memory = SessionMemory {
            summary: Some("Freed 2 GB."),
            facts: &facts,
        };
        assert!(inline_session_memory(&mut h, &memory));
        let ContentBlock::Text { text } = &h[0].content[0] else {
            panic!("{:?}", h[0]);
        };
        assert!(text.contains("<session_memory>\nFreed 2 GB.\nKey facts:\n- backup disk is /mnt/b\n</session_memory>\nThe current task is: clean the disk"), "{text}");
        // Once rewritten, nothing more to do.
        assert!(!inline_session_memory(&mut h, &memory));
    }

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

    /// A task that failed before the model answered left `user, user`.
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
