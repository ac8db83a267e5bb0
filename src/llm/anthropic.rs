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

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::http::Wire;
use super::keys::ApiKey;
use super::sse::{Decoder, Event};
use super::{
    ContentBlock, FinishReason, LlmError, Message, Request, Role, StreamEvent, Usage,
    parse_arguments,
};
use crate::config::ProviderConfig;
use crate::ids::CallId;

pub(crate) const API_VERSION: &str = "2023-06-01";

/// The Messages API wire format.
pub(crate) struct Anthropic;

impl Wire for Anthropic {
    const PATH: &'static str = "/v1/messages";

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

    fn body(req: &Request, _cfg: &ProviderConfig) -> Body {
        request_body(req)
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
pub(crate) fn request_body(req: &Request) -> Body {
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
        messages: wire_messages(&req.messages),
    }
}

fn wire_messages(messages: &[Message]) -> Value {
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
                ContentBlock::ToolResult { tool_use_id, .. } => (
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
                    | ContentBlock::ToolResult { .. } => None,
                })
                .collect();
        }
        let content: Vec<Value> = blocks.into_iter().filter_map(wire_block).collect();
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
    }
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireEvent {
    MessageStart {
        message: WireMessage,
    },
    ContentBlockStart {
        index: u32,
        content_block: WireBlock,
    },
    ContentBlockDelta {
        index: u32,
        delta: WireDelta,
    },
    ContentBlockStop {
        index: u32,
    },
    MessageDelta {
        #[serde(default)]
        delta: MessageDeltaBody,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop,
    Ping,
    Error {
        error: WireError,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct WireMessage {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize, Default)]
struct MessageDeltaBody {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlock {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Option<Value>,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
        #[serde(default)]
        signature: Option<String>,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    ThinkingDelta {
        thinking: String,
    },
    SignatureDelta {
        signature: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct WireError {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    message: String,
}

enum Block {
    Text,
    Tool {
        id: CallId,
        name: String,
        json: String,
        initial: Option<Value>,
    },
    Thinking {
        text: String,
        signature: Option<String>,
    },
    Other,
}

/// Messages API SSE → [`StreamEvent`]s.
#[derive(Default)]
pub(crate) struct AnthropicDecoder {
    blocks: BTreeMap<u32, Block>,
    usage: Usage,
    saw_usage: bool,
    stop_reason: Option<FinishReason>,
    calls: u32,
    stopped: bool,
}

impl AnthropicDecoder {
    fn add_usage(&mut self, u: WireUsage) {
        self.saw_usage = true;
        // message_delta's counts are cumulative: the latest value wins.
        if let Some(n) = u.input_tokens {
            self.usage.input_tokens = n;
        }
        if let Some(n) = u.output_tokens {
            self.usage.output_tokens = n;
        }
        if let Some(n) = u.cache_creation_input_tokens {
            self.usage.cache_write_tokens = n;
        }
        if let Some(n) = u.cache_read_input_tokens {
            self.usage.cache_read_tokens = n;
        }
    }

    /// `content_block_start`: text and thinking stream at once; a tool call is
    /// announced and its arguments collected until the block stops.
    fn block_start(
        &mut self,
        index: u32,
        content_block: WireBlock,
        out: &mut VecDeque<StreamEvent>,
    ) {
        let block = match content_block {
            WireBlock::Text { text } => {
                if !text.is_empty() {
                    out.push_back(StreamEvent::TextDelta { text });
                }
                Block::Text
            }
            WireBlock::ToolUse { id, name, input } => {
                let id = CallId::from_provider(id);
                self.calls += 1;
                out.push_back(StreamEvent::ToolCallStarted {
                    id: id.clone(),
                    name: name.clone(),
                });
                Block::Tool {
                    id,
                    name,
                    json: String::new(),
                    initial: input.filter(|v| v.as_object().is_some_and(|o| !o.is_empty())),
                }
            }
            WireBlock::Thinking {
                thinking,
                signature,
            } => {
                if !thinking.is_empty() {
                    out.push_back(StreamEvent::ThinkingDelta {
                        text: thinking.clone(),
                    });
                }
                Block::Thinking {
                    text: thinking,
                    signature,
                }
            }
            WireBlock::Other => Block::Other,
        };
        self.blocks.insert(index, block);
    }

    fn block_delta(
        &mut self,
        index: u32,
        delta: WireDelta,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<(), LlmError> {
        match (self.blocks.get_mut(&index), delta) {
            (_, WireDelta::TextDelta { text }) => {
                out.push_back(StreamEvent::TextDelta { text });
            }
            (Some(Block::Tool { json, .. }), WireDelta::InputJsonDelta { partial_json }) => {
                json.push_str(&partial_json);
            }
            (Some(Block::Thinking { text, .. }), WireDelta::ThinkingDelta { thinking }) => {
                text.push_str(&thinking);
                out.push_back(StreamEvent::ThinkingDelta { text: thinking });
            }
            (
                Some(Block::Thinking { signature, .. }),
                WireDelta::SignatureDelta { signature: s },
            ) => {
                signature.get_or_insert_with(String::new).push_str(&s);
            }
            (_, WireDelta::InputJsonDelta { .. })
            | (_, WireDelta::ThinkingDelta { .. })
            | (_, WireDelta::SignatureDelta { .. }) => {
                return Err(LlmError::Protocol(format!(
                    "content_block_delta for block {index} does not match its block"
                )));
            }
            (_, WireDelta::Other) => {}
        }
        Ok(())
    }

    /// `content_block_stop`: a tool call's arguments and a thinking block are whole.
    fn block_stop(&mut self, index: u32, out: &mut VecDeque<StreamEvent>) {
        match self.blocks.remove(&index) {
            Some(Block::Tool {
                id,
                name,
                json,
                initial,
            }) => {
                let input = match initial {
                    Some(v) if json.trim().is_empty() => Ok(v),
                    Some(_) | None => parse_arguments(&json),
                };
                out.push_back(StreamEvent::ToolCallComplete { id, name, input });
            }
            Some(Block::Thinking { text, signature }) => {
                out.push_back(StreamEvent::ThinkingComplete {
                    thinking: text,
                    signature,
                });
            }
            Some(Block::Text) | Some(Block::Other) | None => {}
        }
    }
}

/// The Messages API's `stop_reason`, in our terms.
fn finish_reason(r: &str) -> FinishReason {
    match r {
        "tool_use" => FinishReason::ToolUse,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "refusal" => FinishReason::ContentFilter,
        _ => FinishReason::Stop,
    }
}

impl Decoder for AnthropicDecoder {
    fn event(&mut self, ev: &Event, out: &mut VecDeque<StreamEvent>) -> Result<bool, LlmError> {
        let wire: WireEvent = serde_json::from_str(&ev.data).map_err(|e| {
            LlmError::Protocol(format!(
                "bad `{}` event from the Messages API: {e}",
                ev.event
            ))
        })?;
        match wire {
            WireEvent::MessageStart { message } => {
                if let Some(u) = message.usage {
                    self.add_usage(u);
                }
            }
            WireEvent::ContentBlockStart {
                index,
                content_block,
            } => self.block_start(index, content_block, out),
            WireEvent::ContentBlockDelta { index, delta } => self.block_delta(index, delta, out)?,
            WireEvent::ContentBlockStop { index } => self.block_stop(index, out),
            WireEvent::MessageDelta { delta, usage } => {
                if let Some(u) = usage {
                    self.add_usage(u);
                }
                if let Some(r) = delta.stop_reason {
                    self.stop_reason = Some(finish_reason(&r));
                }
            }
            WireEvent::MessageStop => {
                self.stopped = true;
                return Ok(true);
            }
            WireEvent::Ping | WireEvent::Unknown => {}
            WireEvent::Error { error } => return Err(event_error(error)),
        }
        Ok(false)
    }

    fn finish(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), LlmError> {
        if !self.stopped {
            return Err(LlmError::Truncated(
                "the response ended before message_stop".to_owned(),
            ));
        }
        if self.saw_usage {
            out.push_back(StreamEvent::Usage { usage: self.usage });
        }
        let reason = match self.stop_reason {
            Some(r) => r,
            None if self.calls > 0 => FinishReason::ToolUse,
            None => FinishReason::Stop,
        };
        out.push_back(StreamEvent::Finish { reason });
        Ok(())
    }
}

fn event_error(e: WireError) -> LlmError {
    let message = if e.message.is_empty() {
        e.kind.clone()
    } else {
        e.message
    };
    if e.kind == "invalid_request_error"
        && let Some(o) = super::overflow::classify(None, "", &message)
    {
        return LlmError::ContextOverflow(o);
    }
    match e.kind.as_str() {
        "overloaded_error" => LlmError::Overloaded {
            status: 529,
            message,
            retry_after: None,
        },
        "rate_limit_error" => LlmError::RateLimited {
            message,
            retry_after: None,
        },
        "api_error" | "timeout_error" => LlmError::Server {
            status: 500,
            message,
            retry_after: None,
        },
        "authentication_error" | "permission_error" => LlmError::Auth(message),
        "not_found_error" => LlmError::NotFound(message),
        _ => LlmError::BadRequest(format!("{}: {message}", e.kind)),
    }
}

#[cfg(test)]
#[path = "anthropic_tests.rs"]
mod tests;
