//! Repairing a history that a crash left invalid: a tool_use without its tool_result is
//! refused by every provider, so it gets a synthetic one saying the call was interrupted.

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
}
