//! The Messages API's SSE stream, decoded: content blocks by index, a `tool_use`
//! block's input gathered from its `input_json_delta` fragments and parsed at
//! `content_block_stop`, usage added up across `message_start` and `message_delta`.

use std::collections::{BTreeMap, VecDeque};

use familiar_protocol::ids::CallId;
use familiar_protocol::task::Usage;
use serde::Deserialize;
use serde_json::Value;

use crate::llm::sse::{Decoder, Event};
use crate::llm::{FinishReason, LlmError, StreamEvent, parse_arguments};

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
        && let Some(o) = crate::llm::overflow::classify(None, "", &message)
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
