//! Images in requests: a tool's screenshot, kept on disk and named in the history by
//! [`ContentBlock::Image`], read and base64-encoded only when a request is built.
//!
//! Invariants: at most [`MAX_IMAGES_SENT`] images travel in one request (the newest:
//! an older screenshot shows a screen that has changed, and each costs a thousand
//! tokens or more), the rest become a line of text saying so; a provider without
//! `vision` gets that line for every image, never the pixels; an image whose file is
//! gone (its session pruned) becomes a line too, never a failed request.

use std::collections::HashSet;
use std::path::Path;

use base64::Engine as _;
use familiar_protocol::ids::CallId;
use serde_json::{Value, json};

use super::{ContentBlock, Message};

/// Images sent in one request, the newest first.
pub const MAX_IMAGES_SENT: usize = 2;

/// What an image block becomes on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ImageWire {
    /// The pixels: a media type and the file's bytes in base64.
    Data { media_type: String, base64: String },
    /// A line of text in its place, saying why.
    Text(String),
}

impl ImageWire {
    /// A `data:` URL (OpenAI's `image_url`), or `None` for text.
    pub(crate) fn data_url(&self) -> Option<String> {
        match self {
            ImageWire::Data { media_type, base64 } => {
                Some(format!("data:{media_type};base64,{base64}"))
            }
            ImageWire::Text(_) => None,
        }
    }
}

/// The images one request sends: which blocks carry pixels.
pub(crate) struct Images {
    vision: bool,
    recent: HashSet<CallId>,
}

impl Images {
    /// The newest [`MAX_IMAGES_SENT`] images of `messages`, for a provider that takes
    /// images (`vision`) or not.
    pub(crate) fn new(messages: &[Message], vision: bool) -> Images {
        let recent = messages
            .iter()
            .rev()
            .flat_map(|m| m.content.iter().rev())
            .filter_map(|b| match b {
                ContentBlock::Image { tool_use_id, .. } => Some(tool_use_id.clone()),
                ContentBlock::Text { .. }
                | ContentBlock::Thinking { .. }
                | ContentBlock::ToolUse { .. }
                | ContentBlock::ToolResult { .. }
                | ContentBlock::Reminder { .. } => None,
            })
            .take(MAX_IMAGES_SENT)
            .collect();
        Images { vision, recent }
    }

    /// What the image of `call`, in `path`, becomes.
    pub(crate) fn wire(&self, call: &CallId, media_type: &str, path: &Path) -> ImageWire {
        if !self.vision {
            return ImageWire::Text(format!(
                "[the image of call {call} is not shown: this model does not take images]"
            ));
        }
        if !self.recent.contains(call) {
            return ImageWire::Text(format!(
                "[the image of call {call} is an older one, no longer sent: take a new one if it is needed]"
            ));
        }
        match std::fs::read(path) {
            Ok(bytes) => ImageWire::Data {
                media_type: media_type.to_owned(),
                base64: base64::engine::general_purpose::STANDARD.encode(bytes),
            },
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "an image of the history is gone");
                ImageWire::Text(format!(
                    "[the image of call {call} is no longer on this machine]"
                ))
            }
        }
    }
}

/// What each image of `m` becomes, in order, with its call.
pub(crate) fn image_wires(m: &Message, images: &Images) -> Vec<(CallId, ImageWire)> {
    m.content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Image {
                tool_use_id,
                media_type,
                path,
                ..
            } => Some((
                tool_use_id.clone(),
                images.wire(tool_use_id, media_type, path),
            )),
            ContentBlock::Text { .. }
            | ContentBlock::Thinking { .. }
            | ContentBlock::ToolUse { .. }
            | ContentBlock::ToolResult { .. }
            | ContentBlock::Reminder { .. } => None,
        })
        .collect()
}

/// Ollama's user message with the images of `wires` (in `images`, bare base64) and the
/// message's own `text` after a line naming each.
pub(crate) fn ollama_user_message(wires: Vec<(CallId, ImageWire)>, text: String) -> Value {
    let mut pixels = Vec::new();
    let mut notes = Vec::new();
    for (id, wire) in wires {
        match wire {
            ImageWire::Data { base64, .. } => {
                notes.push(format!("The image of call {id} is attached."));
                pixels.push(Value::String(base64));
            }
            ImageWire::Text(t) => notes.push(t),
        }
    }
    if !text.is_empty() {
        notes.push(text);
    }
    let mut msg = json!({"role": "user", "content": notes.join("\n\n")});
    if !pixels.is_empty() {
        msg["images"] = Value::Array(pixels);
    }
    msg
}

/// The line a tool result carries on wires whose tool messages take no image
/// (OpenAI-compatible, Ollama): the image follows in a user message.
pub(crate) fn follows_note(call: &CallId) -> String {
    format!("(the image of call {call} follows in the next user message)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::Role;

    fn image(id: &str, path: &Path) -> ContentBlock {
        ContentBlock::Image {
            tool_use_id: CallId::from_provider(id),
            media_type: "image/png".to_owned(),
            path: path.to_owned(),
            width: 2,
            height: 1,
        }
    }

    #[test]
    fn only_the_newest_images_travel_and_only_to_a_vision_model() {
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("a.png");
        std::fs::write(&png, b"png").unwrap();
        let messages: Vec<Message> = ["c1", "c2", "c3"]
            .iter()
            .map(|id| Message {
                role: Role::User,
                content: vec![image(id, &png)],
            })
            .collect();
        let images = Images::new(&messages, true);
        let call = |id: &str| CallId::from_provider(id);
        assert_eq!(
            images.wire(&call("c3"), "image/png", &png),
            ImageWire::Data {
                media_type: "image/png".to_owned(),
                base64: "cG5n".to_owned()
            }
        );
        assert!(matches!(
            images.wire(&call("c2"), "image/png", &png),
            ImageWire::Data { .. }
        ));
        assert!(
            matches!(images.wire(&call("c1"), "image/png", &png), ImageWire::Text(t) if t.contains("older"))
        );
        let gone = dir.path().join("gone.png");
        assert!(
            matches!(images.wire(&call("c3"), "image/png", &gone), ImageWire::Text(t) if t.contains("no longer on this machine"))
        );
        let blind = Images::new(&messages, false);
        assert!(
            matches!(blind.wire(&call("c3"), "image/png", &png), ImageWire::Text(t) if t.contains("does not take images"))
        );
    }
}

/// Each provider's wire format for a tool result with an image.
#[cfg(test)]
mod wire_tests {
    use familiar_protocol::ids::CallId;
    use serde_json::{Value, json};

    use crate::config::{ProviderConfig, ProviderKind, providers::builtin_provider};
    use crate::llm::{ContentBlock, Message, Request, Role};

    fn request(png: &std::path::Path) -> Request {
        let id = CallId::from_provider("shot1");
        Request {
            model: "m".into(),
            system: String::new(),
            messages: vec![
                Message::user_text("what is on my screen?"),
                Message {
                    role: Role::Assistant,
                    content: vec![ContentBlock::ToolUse {
                        id: id.clone(),
                        name: "screenshot".into(),
                        input: json!({}),
                    }],
                },
                Message {
                    role: Role::User,
                    content: vec![
                        ContentBlock::ToolResult {
                            tool_use_id: id.clone(),
                            content: "screenshot of the window".into(),
                            is_error: false,
                        },
                        ContentBlock::Image {
                            tool_use_id: id,
                            media_type: "image/png".into(),
                            path: png.to_owned(),
                            width: 4,
                            height: 3,
                        },
                    ],
                },
            ],
            tools: Vec::new(),
            max_tokens: 10,
            temperature: None,
        }
    }

    fn cfg(kind: &str, vision: bool) -> ProviderConfig {
        let mut c = builtin_provider(kind).unwrap().clone();
        c.vision = vision;
        c
    }

    fn body(kind: ProviderKind, req: &Request, vision: bool) -> Value {
        match kind {
            ProviderKind::Openai => {
                serde_json::to_value(crate::llm::openai::request_body(req, vision))
            }
            ProviderKind::Anthropic => {
                serde_json::to_value(crate::llm::anthropic::request_body(req, vision))
            }
            ProviderKind::Ollama => serde_json::to_value(crate::llm::ollama::request_body(
                req,
                &cfg("ollama", vision),
                4096,
            )),
        }
        .unwrap()
    }

    #[test]
    fn openai_sends_the_image_in_a_user_message_after_the_tool_message() {
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("s.png");
        std::fs::write(&png, b"png").unwrap();
        let b = body(ProviderKind::Openai, &request(&png), true);
        let m = b["messages"].as_array().unwrap();
        assert_eq!(m[2]["role"], "tool");
        assert!(
            m[2]["content"]
                .as_str()
                .unwrap()
                .contains("follows in the next user message")
        );
        assert_eq!(m[3]["role"], "user");
        assert_eq!(
            m[3]["content"][1],
            json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,cG5n"}})
        );
        let blind = body(ProviderKind::Openai, &request(&png), false);
        let text = blind.to_string();
        assert!(
            !text.contains("cG5n") && text.contains("does not take images"),
            "{text}"
        );
    }

    #[test]
    fn anthropic_puts_the_image_inside_the_tool_result() {
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("s.png");
        std::fs::write(&png, b"png").unwrap();
        let b = body(ProviderKind::Anthropic, &request(&png), true);
        let result = &b["messages"][2]["content"][0];
        assert_eq!(result["type"], "tool_result");
        assert_eq!(
            result["content"],
            json!([
                {"type": "text", "text": "screenshot of the window"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "cG5n"}}
            ])
        );
        assert_eq!(b["messages"][2]["content"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn ollama_sends_images_on_a_user_message() {
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("s.png");
        std::fs::write(&png, b"png").unwrap();
        let b = body(ProviderKind::Ollama, &request(&png), true);
        let m = b["messages"].as_array().unwrap();
        assert_eq!(m[2]["role"], "tool");
        assert_eq!(m[3]["role"], "user");
        assert_eq!(m[3]["images"], json!(["cG5n"]));
    }
}
