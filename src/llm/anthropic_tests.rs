//! The Messages API body and decoder.

use super::*;
use crate::llm::ToolDef;

fn req(messages: Vec<Message>) -> Request {
    Request {
        model: "m".into(),
        system: "be brief".into(),
        messages,
        tools: vec![
            ToolDef {
                name: "a".into(),
                description: "A".into(),
                input_schema: json!({"type": "object"}),
            },
            ToolDef {
                name: "b".into(),
                description: "B".into(),
                input_schema: json!({"type": "object"}),
            },
        ],
        max_tokens: 100,
        temperature: None,
    }
}

#[test]
fn tool_results_group_into_one_user_message_in_call_order() {
    let use_ = |id: &str| ContentBlock::ToolUse {
        id: CallId::from_provider(id),
        name: "a".into(),
        input: json!({}),
    };
    let result = |id: &str| Message {
        role: Role::User,
        content: vec![ContentBlock::ToolResult {
            tool_use_id: CallId::from_provider(id),
            content: id.into(),
            is_error: false,
        }],
    };
    let body = serde_json::to_value(request_body(&req(vec![
        Message::user_text("go"),
        Message {
            role: Role::Assistant,
            content: vec![use_("c1"), use_("c2")],
        },
        result("c2"),
        result("c1"),
    ])))
    .unwrap();
    let msgs = body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3);
    assert_eq!(
        msgs[2],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "c1"},
            {"type": "tool_result", "tool_use_id": "c2", "content": "c2",
             "cache_control": {"type": "ephemeral"}},
        ]})
    );
    assert_eq!(body["tools"][0].get("cache_control"), None);
    assert_eq!(body["tools"][1]["cache_control"], ephemeral());
    assert_eq!(body["system"][0]["cache_control"], ephemeral());
}
