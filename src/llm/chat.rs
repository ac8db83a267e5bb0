//! The messages of the chat-style wires: OpenAI's chat completions (`openai.rs`) and
//! Ollama's `/api/chat` (`ollama.rs`). One encoder walks a conversation for both; a
//! [`ChatWire`] says what differs per wire: how a tool call and a tool result are
//! spelled, where an image's pixels go, whether reasoning and an empty assistant turn
//! are sent back.
//!
//! Invariant: what both wires share is spelled once here (the system message, text and
//! reminders joined by a blank line, tool results before the text of their message,
//! an `error: ` result, the note that an image follows in the next user message), so
//! a change to it changes both wires' bytes alike.

use std::collections::HashMap;

use familiar_protocol::ids::CallId;
use serde_json::{Value, json};

use super::image::{self, ImageWire, Images, image_wires};
use super::{ContentBlock, Message, Request, Role};

/// What one chat-style wire spells its own way; the rest of a message is [`messages`]'s.
pub(crate) trait ChatWire {
    /// Whether an assistant's reasoning goes back to the model (Ollama's `thinking`;
    /// chat completions has no way to send it).
    const SENDS_THINKING: bool;
    /// Whether an assistant turn with neither text nor calls is sent (Ollama's
    /// templates take it; chat completions servers refuse an empty assistant message).
    const SENDS_EMPTY_TURN: bool;

    /// One call of an assistant turn, in its `tool_calls`.
    fn tool_call(id: &CallId, name: &str, input: &Value) -> Value;

    /// The tool message of one result: `content` is the result's text, `name` the
    /// tool that call named (empty when no earlier turn made the call).
    fn tool_result(id: &CallId, name: &str, content: String) -> Value;

    /// The user message that carries a message's images (never empty) after its tool
    /// messages, with the message's own `text`.
    fn user_images(wires: Vec<(CallId, ImageWire)>, text: String) -> Value;
}

/// The messages of `req` on wire `W`: the system prompt first, then each message.
pub(crate) fn messages<W: ChatWire>(req: &Request, vision: bool) -> Vec<Value> {
    let mut out = Vec::with_capacity(req.messages.len() + 1);
    if !req.system.is_empty() {
        out.push(json!({"role": "system", "content": req.system}));
    }
    // Ollama's tool messages name the tool, not the call: each result finds its name.
    let mut names: HashMap<&CallId, &str> = HashMap::new();
    let images = Images::new(&req.messages, vision);
    for m in &req.messages {
        for b in &m.content {
            if let ContentBlock::ToolUse { id, name, .. } = b {
                names.insert(id, name);
            }
        }
        push_message::<W>(m, &names, &images, &mut out);
    }
    out
}

/// The tools of `req` as both wires declare them.
pub(crate) fn tools(req: &Request) -> Vec<Value> {
    req.tools
        .iter()
        .map(|t| {
            json!({"type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": t.input_schema,
            }})
        })
        .collect()
}

fn push_message<W: ChatWire>(
    m: &Message,
    names: &HashMap<&CallId, &str>,
    images: &Images,
    out: &mut Vec<Value>,
) {
    // Neither wire's tool message takes an image (chat completions accept only text
    // there, llama.cpp and vLLM refuse one; Ollama's templates place images for the
    // user's messages only): the pixels follow the tool messages in a user message.
    let wires = image_wires(m, images);
    let mut text = String::new();
    let mut thinking = String::new();
    let mut calls = Vec::new();
    // Tool results must directly follow the assistant turn that asked for them, so
    // they go before any text the same user message carries.
    for block in &m.content {
        match block {
            ContentBlock::Text { text: t } | ContentBlock::Reminder { text: t } => {
                if !text.is_empty() {
                    text.push_str("\n\n");
                }
                text.push_str(t);
            }
            ContentBlock::Thinking { thinking: t, .. } => thinking.push_str(t),
            ContentBlock::ToolUse { id, name, input } => calls.push(W::tool_call(id, name, input)),
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => {
                let mut content = if *is_error {
                    format!("error: {content}")
                } else {
                    content.clone()
                };
                if wires
                    .iter()
                    .any(|(id, w)| id == tool_use_id && matches!(w, ImageWire::Data { .. }))
                {
                    content.push('\n');
                    content.push_str(&image::follows_note(tool_use_id));
                }
                let name = names.get(tool_use_id).copied().unwrap_or_default();
                out.push(W::tool_result(tool_use_id, name, content));
            }
            ContentBlock::Image { .. } => {}
        }
    }
    if m.role == Role::User && !wires.is_empty() {
        out.push(W::user_images(wires, text));
        return;
    }
    match m.role {
        Role::User if !text.is_empty() => out.push(json!({"role": "user", "content": text})),
        Role::User => {}
        Role::Assistant => {
            if text.is_empty() && calls.is_empty() && !W::SENDS_EMPTY_TURN {
                return;
            }
            let mut msg = json!({"role": "assistant", "content": text});
            if W::SENDS_THINKING && !thinking.is_empty() {
                msg["thinking"] = Value::String(thinking);
            }
            if !calls.is_empty() {
                msg["tool_calls"] = Value::Array(calls);
            }
            out.push(msg);
        }
    }
}

#[cfg(test)]
mod tests {
    use familiar_protocol::ids::CallId;
    use serde_json::{Value, json};

    use crate::config::providers::builtin_provider;
    use crate::llm::{ContentBlock, Message, Request, Role, ToolDef};

    /// One conversation with every kind of block: a system prompt, text with a reminder,
    /// an assistant's reasoning, text and two calls, their results (one an error) with
    /// an image of the first, an assistant turn with only reasoning, a last question.
    fn conversation(png: &std::path::Path) -> Request {
        let (shot, ls) = (CallId::from_provider("c1"), CallId::from_provider("c2"));
        Request {
            model: "m".into(),
            system: "You help.".into(),
            messages: vec![
                Message {
                    role: Role::User,
                    content: vec![
                        ContentBlock::Text {
                            text: "look".into(),
                        },
                        ContentBlock::Reminder {
                            text: "<system-reminder>now</system-reminder>".into(),
                        },
                    ],
                },
                Message {
                    role: Role::Assistant,
                    content: vec![
                        ContentBlock::Thinking {
                            thinking: "a shot first".into(),
                            signature: None,
                        },
                        ContentBlock::Text {
                            text: "Looking.".into(),
                        },
                        ContentBlock::ToolUse {
                            id: shot.clone(),
                            name: "screenshot".into(),
                            input: json!({}),
                        },
                        ContentBlock::ToolUse {
                            id: ls.clone(),
                            name: "list_dir".into(),
                            input: json!({"path": "."}),
                        },
                    ],
                },
                Message {
                    role: Role::User,
                    content: vec![
                        ContentBlock::ToolResult {
                            tool_use_id: shot.clone(),
                            content: "the screen".into(),
                            is_error: false,
                        },
                        ContentBlock::ToolResult {
                            tool_use_id: ls,
                            content: "no such dir".into(),
                            is_error: true,
                        },
                        ContentBlock::Image {
                            tool_use_id: shot,
                            media_type: "image/png".into(),
                            path: png.to_owned(),
                            width: 2,
                            height: 2,
                        },
                    ],
                },
                Message {
                    role: Role::Assistant,
                    content: vec![ContentBlock::Thinking {
                        thinking: "hm".into(),
                        signature: None,
                    }],
                },
                Message::user_text("and now?"),
            ],
            tools: vec![ToolDef {
                name: "list_dir".into(),
                description: "lists".into(),
                input_schema: json!({"type": "object"}),
            }],
            max_tokens: 10,
            temperature: None,
        }
    }

    fn encoded(png: &std::path::Path) -> (Value, Value) {
        let req = conversation(png);
        let openai = serde_json::to_value(crate::llm::openai::request_body(&req, true)).unwrap();
        let mut cfg = builtin_provider("ollama").unwrap().clone();
        cfg.vision = true;
        let ollama =
            serde_json::to_value(crate::llm::ollama::request_body(&req, &cfg, 4096)).unwrap();
        (openai, ollama)
    }

    #[test]
    fn one_conversation_encodes_alike_on_both_wires_but_for_their_hooks() {
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("s.png");
        std::fs::write(&png, b"png").unwrap();
        let (openai, ollama) = encoded(&png);
        let note = "(the image of call c1 follows in the next user message)";
        let tool = json!({"type": "function", "function": {
            "name": "list_dir", "description": "lists", "parameters": {"type": "object"},
        }});
        assert_eq!(openai["tools"], json!([tool]));
        assert_eq!(ollama["tools"], json!([tool]));
        assert_eq!(
            openai["messages"],
            json!([
                {"role": "system", "content": "You help."},
                {"role": "user", "content": "look\n\n<system-reminder>now</system-reminder>"},
                {"role": "assistant", "content": "Looking.", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "screenshot", "arguments": "{}"}},
                    {"id": "c2", "type": "function", "function": {"name": "list_dir", "arguments": "{\"path\":\".\"}"}},
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": format!("the screen\n{note}")},
                {"role": "tool", "tool_call_id": "c2", "content": "error: no such dir"},
                {"role": "user", "content": [
                    {"type": "text", "text": "The image of call c1:"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,cG5n"}},
                ]},
                {"role": "user", "content": "and now?"},
            ])
        );
        assert_eq!(
            ollama["messages"],
            json!([
                {"role": "system", "content": "You help."},
                {"role": "user", "content": "look\n\n<system-reminder>now</system-reminder>"},
                {"role": "assistant", "content": "Looking.", "thinking": "a shot first", "tool_calls": [
                    {"id": "c1", "function": {"name": "screenshot", "arguments": {}}},
                    {"id": "c2", "function": {"name": "list_dir", "arguments": {"path": "."}}},
                ]},
                {"role": "tool", "tool_name": "screenshot", "content": format!("the screen\n{note}")},
                {"role": "tool", "tool_name": "list_dir", "content": "error: no such dir"},
                {"role": "user", "content": "The image of call c1 is attached.", "images": ["cG5n"]},
                {"role": "assistant", "content": "", "thinking": "hm"},
                {"role": "user", "content": "and now?"},
            ])
        );
    }
}
