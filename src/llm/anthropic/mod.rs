//! `kind = "anthropic"`: the Messages API with SSE.
//!
//! Content blocks stream by index; a `tool_use` block's input arrives as
//! `input_json_delta` fragments and is parsed at `content_block_stop`, which is when
//! the call is reported complete. Thinking blocks keep their signature so the loop can
//! send them back unchanged. Prompt caching puts `cache_control` breakpoints on the
//! system prompt, the last tool and the last block of the last message, so each turn
//! reuses everything the previous one sent. The API caches tools, then system, then
//! messages: the system block's breakpoint ends the prefix every task of a soul shares
//! (the system prompt names no session), so a new task reads it too.

mod decode;

use familiar_protocol::ids::CallId;
use serde::Serialize;
use serde_json::{Value, json};

use self::decode::AnthropicDecoder;
use super::http::Wire;
use super::image::{ImageWire, Images};
use super::keys::ApiKey;
use super::sse::Decoder;
use super::{ContentBlock, Message, Request, Role};
use crate::config::ProviderConfig;

pub(crate) const API_VERSION: &str = "2023-06-01";

/// The Messages API wire format.
pub(crate) struct Anthropic;

impl Wire for Anthropic {
    const PATH: &'static str = "/v1/messages";
    const CHECK_PATH: &'static str = "/v1/models";

    fn authorize(
        builder: reqwest::RequestBuilder,
        key: Option<&ApiKey>,
    ) -> reqwest::RequestBuilder {
        let builder = builder.header("anthropic-version", API_VERSION);
        match key {
            Some(key) => builder.header("x-api-key", key.expose()),
            None => builder,
        }
    }

    type Body = Body;

    fn body(req: &Request, cfg: &ProviderConfig) -> Body {
        request_body(req, cfg.vision)
    }

    fn decoder() -> Box<dyn Decoder> {
        Box::new(AnthropicDecoder::default())
    }
}

fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// The Messages API body, its fields in the order the server caches them (model
/// settings, system, tools, messages): a request's bytes then repeat the previous
/// request's up to its last message, which the loopback tests check.
#[derive(Serialize)]
pub(crate) struct Body {
    model: String,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Value>,
    messages: Value,
}

/// The Messages API body for `req`.
pub(crate) fn request_body(req: &Request, vision: bool) -> Body {
    let system = (!req.system.is_empty())
        .then(|| json!([{"type": "text", "text": req.system, "cache_control": ephemeral()}]));
    let tools = (!req.tools.is_empty()).then(|| {
        let mut tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
            .collect();
        if let Some(last) = tools.last_mut() {
            last["cache_control"] = ephemeral();
        }
        Value::Array(tools)
    });
    Body {
        model: req.model.clone(),
        max_tokens: req.max_tokens,
        temperature: req.temperature,
        stream: true,
        system,
        tools,
        messages: wire_messages(&req.messages, &Images::new(&req.messages, vision)),
    }
}

fn wire_messages(messages: &[Message], images: &Images) -> Value {
    // The API wants strictly alternating roles and every tool result of a turn in the
    // one user message that follows it, so consecutive same-role messages merge.
    let mut merged: Vec<(Role, Vec<&ContentBlock>)> = Vec::new();
    for m in messages {
        match merged.last_mut() {
            Some((role, blocks)) if *role == m.role => blocks.extend(&m.content),
            _ => merged.push((m.role, m.content.iter().collect())),
        }
    }
    let mut out: Vec<Value> = Vec::with_capacity(merged.len());
    let mut call_order: Vec<&CallId> = Vec::new();
    for (role, mut blocks) in merged {
        if role == Role::User {
            // Results first (the API requires it), in the order the calls were made.
            let rank = |b: &&ContentBlock| match b {
                ContentBlock::ToolResult { tool_use_id, .. }
                | ContentBlock::Image { tool_use_id, .. } => (
                    0,
                    call_order
                        .iter()
                        .position(|id| *id == tool_use_id)
                        .unwrap_or(usize::MAX),
                ),
                ContentBlock::Text { .. }
                | ContentBlock::Reminder { .. }
                | ContentBlock::Thinking { .. }
                | ContentBlock::ToolUse { .. } => (1, 0),
            };
            blocks.sort_by_key(rank);
        } else {
            call_order = blocks
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolUse { id, .. } => Some(id),
                    ContentBlock::Text { .. }
                    | ContentBlock::Reminder { .. }
                    | ContentBlock::Thinking { .. }
                    | ContentBlock::ToolResult { .. }
                    | ContentBlock::Image { .. } => None,
                })
                .collect();
        }
        let mut content: Vec<Value> = Vec::with_capacity(blocks.len());
        for block in blocks {
            match block {
                ContentBlock::Image {
                    tool_use_id,
                    media_type,
                    path,
                    ..
                } => attach_image(
                    &mut content,
                    tool_use_id,
                    images.wire(tool_use_id, media_type, path),
                ),
                other => content.extend(wire_block(other)),
            }
        }
        if content.is_empty() {
            continue;
        }
        let role = match role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        out.push(json!({"role": role, "content": content}));
    }
    if let Some(last) = out
        .last_mut()
        .and_then(|m| m["content"].as_array_mut())
        .and_then(|c| c.last_mut())
    {
        last["cache_control"] = ephemeral();
    }
    Value::Array(out)
}

/// Puts an image inside its call's `tool_result` (the Messages API takes image blocks
/// in a result's content), or on its own when the result is not in this message.
fn attach_image(content: &mut Vec<Value>, call: &CallId, wire: ImageWire) {
    let block = match wire {
        ImageWire::Data { media_type, base64 } => json!({"type": "image", "source": {
            "type": "base64", "media_type": media_type, "data": base64,
        }}),
        ImageWire::Text(text) => json!({"type": "text", "text": text}),
    };
    let result = content
        .iter_mut()
        .rev()
        .find(|v| v["type"] == "tool_result" && v["tool_use_id"].as_str() == Some(call.as_str()));
    match result {
        Some(result) => {
            let inner = match result["content"].take() {
                Value::String(text) => vec![json!({"type": "text", "text": text})],
                Value::Array(blocks) => blocks,
                _ => Vec::new(),
            };
            let mut inner = inner;
            inner.push(block);
            result["content"] = Value::Array(inner);
        }
        None => content.push(block),
    }
}

fn wire_block(block: &ContentBlock) -> Option<Value> {
    match block {
        // The API rejects empty text blocks.
        ContentBlock::Text { text } | ContentBlock::Reminder { text } if text.is_empty() => None,
        ContentBlock::Text { text } | ContentBlock::Reminder { text } => {
            Some(json!({"type": "text", "text": text}))
        }
        // Unsigned thinking (from another provider) cannot be sent back.
        ContentBlock::Thinking {
            thinking,
            signature: Some(sig),
        } => Some(json!({"type": "thinking", "thinking": thinking, "signature": sig})),
        ContentBlock::Thinking {
            signature: None, ..
        } => None,
        ContentBlock::ToolUse { id, name, input } => {
            Some(json!({"type": "tool_use", "id": id, "name": name, "input": input}))
        }
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => {
            let mut v =
                json!({"type": "tool_result", "tool_use_id": tool_use_id, "content": content});
            if *is_error {
                v["is_error"] = json!(true);
            }
            Some(v)
        }
        // Placed by `attach_image`.
        ContentBlock::Image { .. } => None,
    }
}

#[cfg(test)]
mod tests {
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
        let body = serde_json::to_value(request_body(
            &req(vec![
                Message::user_text("go"),
                Message {
                    role: Role::Assistant,
                    content: vec![use_("c1"), use_("c2")],
                },
                result("c2"),
                result("c1"),
            ]),
            false,
        ))
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
}
