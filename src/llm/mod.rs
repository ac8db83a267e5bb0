//! LLM providers: the message model shared by the loop, the store and the providers,
//! and the streaming client the agent loop talks to.
//!
//! [`Message`] and [`ContentBlock`] are familiar's own canonical conversation format:
//! they are what the session context persists (`history`) and what each provider
//! translates to its wire format. Tool arguments are kept as parsed JSON.
//!
//! A [`Provider`] streams one model response as [`StreamEvent`]s; [`LlmClient`] wraps
//! one with retries, stall handling and model fallback and yields [`ClientEvent`]s.
//! Invariants every provider keeps: a stream ends after its first `Err`, `Finish` is
//! the last event of a successful stream, and `ToolCallComplete` is emitted only for a
//! call whose arguments were received whole (a cut stream never completes a call).
//!
//! Layout: `openai.rs` and `anthropic/` are the two SSE wire formats, `ollama.rs`
//! Ollama's own NDJSON API (with its context size per request); `chat.rs` the message
//! encoder that chat completions and Ollama share, with a hook per wire for what they
//! spell differently (tool calls, tool results, images); `http.rs` is the
//! transport both share and `tls.rs` its certificate checks; [`sse`] turns bytes into
//! events and knows no provider; what both formats share (argument parsing, picking a
//! decoder by kind) lives here.

mod anthropic;
mod chat;
mod client;
mod error;
mod http;
pub mod image;
pub use http::new_client;
mod keys;
pub mod models;
mod ollama;
mod openai;
pub mod overflow;
pub mod repetition;
pub mod retry;
pub mod sse;
mod tls;
pub use tls::install_tls_provider;
pub mod tokens;

use std::sync::Arc;

use familiar_protocol::ids::CallId;
use familiar_protocol::task::Usage;
use futures::stream::BoxStream;
use tokio_util::sync::CancellationToken;

use self::http::{HttpProvider, Wire};
use crate::config::{Env, ProviderConfig, ProviderKind};

pub use client::{
    ClientEvent, Fallback, LlmClient, OVERLOADS_BEFORE_FALLBACK, REFUSED_RETRIES,
    REFUSED_RETRY_DELAY,
};
pub use error::{ConnectError, LlmError, NoFirstToken};
pub use overflow::ContextOverflow;
pub use retry::{RetryPolicy, Sleeper};
pub use tokens::Estimator;

use serde::{Deserialize, Serialize};

/// Who said it. System prompts are not messages: they travel beside them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
}

/// One block of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    /// Model reasoning, kept with its signature so it can be sent back (Anthropic
    /// rejects a tool-use turn whose thinking was dropped or altered).
    Thinking {
        thinking: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    ToolUse {
        id: CallId,
        name: String,
        input: serde_json::Value,
    },
    ToolResult {
        tool_use_id: CallId,
        content: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
    /// An image a tool returned (a screenshot), right after that call's result in the
    /// same user message. The pixels stay in `path` (under the data directory's
    /// `screens/`), so the history stays small; a provider reads them when it builds a
    /// request ([`image`]).
    Image {
        tool_use_id: CallId,
        media_type: String,
        path: std::path::PathBuf,
        width: u32,
        height: u32,
    },
    /// A `<system-reminder>` block familiar appended to a user message (the machine's
    /// state, the task's budget): sent as text, stored apart from the user's words so
    /// it is repeated byte for byte and shown as what it is.
    Reminder {
        text: String,
    },
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<ContentBlock>,
}

impl Message {
    pub fn user_text(text: impl Into<String>) -> Self {
        Message {
            role: Role::User,
            content: vec![ContentBlock::Text { text: text.into() }],
        }
    }

    pub fn assistant_text(text: impl Into<String>) -> Self {
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::Text { text: text.into() }],
        }
    }
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDef {
    pub name: String,
    pub description: String,
    /// JSON schema of the arguments object.
    pub input_schema: serde_json::Value,
}

/// One model request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub model: String,
    pub system: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolDef>,
    pub max_tokens: u32,
    pub temperature: Option<f32>,
}

impl Request {
    /// A request with the provider's model, output limit and temperature.
    pub fn new(
        cfg: &ProviderConfig,
        system: impl Into<String>,
        messages: Vec<Message>,
        tools: Vec<ToolDef>,
    ) -> Self {
        Request {
            model: cfg.model.clone(),
            system: system.into(),
            messages,
            tools,
            max_tokens: cfg.max_output_tokens,
            temperature: cfg.temperature,
        }
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    Stop,
    ToolUse,
    Length,
    ContentFilter,
    Error,
}

/// Tool arguments that did not parse: sent back to the model as a tool error so it can
/// correct the call, never a reason to abort the task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("invalid arguments: {error} (received: {raw})")]
pub struct InvalidArguments {
    /// What the model sent, cut to [`InvalidArguments::MAX_RAW`] bytes.
    pub raw: String,
    pub error: String,
}

impl InvalidArguments {
    pub const MAX_RAW: usize = 2000;

    pub(crate) fn new(raw: &str, error: impl Into<String>) -> Self {
        let mut end = raw.len().min(Self::MAX_RAW);
        while !raw.is_char_boundary(end) {
            end -= 1;
        }
        InvalidArguments {
            raw: raw[..end].to_owned(),
            error: error.into(),
        }
    }
}

/// Parses a tool call's accumulated arguments (both wire formats send them as JSON
/// text); empty means no arguments, and a JSON string holding an object
/// (double-encoded by some servers) is unwrapped.
pub(crate) fn parse_arguments(raw: &str) -> Result<serde_json::Value, InvalidArguments> {
    use serde_json::Value;
    if raw.trim().is_empty() {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::String(inner)) => match serde_json::from_str::<Value>(&inner) {
            Ok(v @ Value::Object(_)) => Ok(v),
            Ok(_) | Err(_) => Err(InvalidArguments::new(
                raw,
                "arguments must be a JSON object",
            )),
        },
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(InvalidArguments::new(
            raw,
            "arguments must be a JSON object",
        )),
        Err(e) => Err(InvalidArguments::new(raw, e.to_string())),
    }
}

/// One event of a streamed model response.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    TextDelta {
        text: String,
    },
    ThinkingDelta {
        text: String,
    },
    /// A whole thinking block, with the signature needed to send it back.
    ThinkingComplete {
        thinking: String,
        signature: Option<String>,
    },
    ToolCallStarted {
        id: CallId,
        name: String,
    },
    /// The call's arguments arrived whole: the loop may start the tool now.
    ToolCallComplete {
        id: CallId,
        name: String,
        input: Result<serde_json::Value, InvalidArguments>,
    },
    Usage {
        usage: Usage,
    },
    Finish {
        reason: FinishReason,
    },
    /// The server is still reading the prompt (llama.cpp's `prompt_progress`):
    /// `processed` of `total` tokens, `cached` of them reused from its prompt cache.
    /// Not an answer: it does not end the wait for the first token.
    PromptProgress {
        processed: u64,
        total: u64,
        cached: u64,
    },
}

impl StreamEvent {
    /// Whether this is part of the answer (text, thinking, a call, its end), as
    /// opposed to news of the prefill.
    pub fn is_answer(&self) -> bool {
        !matches!(self, StreamEvent::PromptProgress { .. })
    }
}

/// A model backend speaking one wire protocol.
pub trait Provider: Send + Sync {
    /// Streams one response. Cancelling `cancel` ends the stream at its next await with
    /// [`LlmError::Cancelled`] and drops the connection.
    fn stream(
        &self,
        req: &Request,
        cancel: CancellationToken,
    ) -> BoxStream<'static, Result<StreamEvent, LlmError>>;

    /// The `[providers.NAME]` this was built from.
    fn name(&self) -> &str;

    /// The model requests use unless they name another.
    fn default_model(&self) -> &str;
}

/// Builds the provider `cfg` describes, reading its API key through `env`.
pub fn build(cfg: &ProviderConfig, env: &dyn Env) -> Result<Arc<dyn Provider>, LlmError> {
    build_with(cfg, env, &http::new_client()?)
}

/// [`build`] on a shared HTTP client (see [`http::new_client`]). The key is still read
/// per provider (now, or from the Secret Service at its first request), so a rotated
/// key is picked up by the next task.
pub fn build_with(
    cfg: &ProviderConfig,
    env: &dyn Env,
    client: &reqwest::Client,
) -> Result<Arc<dyn Provider>, LlmError> {
    let key = keys::KeySlot::new(cfg, env)?;
    let http = http::HttpCtx::new(cfg, key, client.clone());
    Ok(match cfg.kind {
        ProviderKind::Openai => Arc::new(HttpProvider::<openai::OpenAi>::new(http)),
        ProviderKind::Anthropic => Arc::new(HttpProvider::<anthropic::Anthropic>::new(http)),
        ProviderKind::Ollama => Arc::new(ollama::Ollama::new(http)),
    })
}

/// A decoder for `kind`'s wire format.
pub(crate) fn decoder(kind: ProviderKind) -> Box<dyn sse::Decoder> {
    match kind {
        ProviderKind::Openai => openai::OpenAi::decoder(),
        ProviderKind::Anthropic => anthropic::Anthropic::decoder(),
        ProviderKind::Ollama => Box::new(ollama::OllamaDecoder::default()),
    }
}

/// Decodes a recorded response body in `kind`'s wire format, split into `chunks`,
/// to the events a live stream would yield (the error, if any, last).
pub fn decode_recorded(
    kind: ProviderKind,
    chunks: Vec<bytes::Bytes>,
) -> Vec<Result<StreamEvent, LlmError>> {
    let frame = match kind {
        ProviderKind::Openai | ProviderKind::Anthropic => sse::events,
        ProviderKind::Ollama => sse::ndjson_lines,
    };
    sse::decode_with(decoder(kind), chunks, frame)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_serialise_with_tagged_blocks() {
        let m = Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Text { text: "hi".into() },
                ContentBlock::ToolUse {
                    id: CallId::from_provider("c1"),
                    name: "read_file".into(),
                    input: json!({"path": "/tmp/x"}),
                },
            ],
        };
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(
            v,
            json!({"role": "assistant", "content": [
                {"type": "text", "text": "hi"},
                {"type": "tool_use", "id": "c1", "name": "read_file", "input": {"path": "/tmp/x"}}
            ]})
        );
        assert_eq!(serde_json::from_value::<Message>(v).unwrap(), m);
    }

    #[test]
    fn arguments_are_checked() {
        assert_eq!(parse_arguments(""), Ok(json!({})));
        assert_eq!(parse_arguments("\"{\\\"a\\\":1}\""), Ok(json!({"a": 1})));
        let err = parse_arguments("{\"a\":").unwrap_err();
        assert!(err.to_string().starts_with("invalid arguments: "), "{err}");
        assert!(parse_arguments("[1]").is_err());
    }
}
