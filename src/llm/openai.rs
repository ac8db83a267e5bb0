//! `kind = "openai"`: chat completions with SSE, as spoken by OpenAI, Ollama,
//! llama.cpp, vLLM, LM Studio and OpenRouter.
//!
//! Real servers disagree on the details, and the decoder accepts all of them:
//! arguments whole in one chunk or as a JSON object instead of a string (Ollama),
//! missing call ids or indexes, parallel calls that all reuse index 0 with distinct
//! ids, `finish_reason` late or never, usage in a final chunk with no choices, and
//! reasoning as `reasoning_content` or `reasoning`. A call is complete when the next
//! call starts or the response finishes; until then it is never reported complete.

use std::collections::VecDeque;

use familiar_protocol::ids::CallId;
use familiar_protocol::task::Usage;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::chat::{self, ChatWire};
use super::http::Wire;
use super::image::ImageWire;
use super::keys::ApiKey;
use super::sse::{Decoder, Event};
use super::{FinishReason, LlmError, Request, StreamEvent, parse_arguments};
use crate::config::ProviderConfig;

/// The chat completions wire format.
pub(crate) struct OpenAi;

impl Wire for OpenAi {
    const PATH: &'static str = "/chat/completions";

    fn authorize(
        builder: reqwest::RequestBuilder,
        key: Option<&ApiKey>,
    ) -> reqwest::RequestBuilder {
        match key {
            Some(key) => builder.bearer_auth(key.expose()),
            None => builder,
        }
    }

    type Body = Body;

    fn body(req: &Request, cfg: &ProviderConfig) -> Body {
        let mut body = request_body(req, cfg.vision);
        // llama.cpp reports its prefill as `prompt_progress` chunks when asked. Only a
        // server of one's own is asked: OpenAI refuses fields it does not know, and
        // Ollama, vLLM and LM Studio ignore this one.
        body.return_progress = crate::config::is_local_url(&cfg.base_url).then_some(true);
        body
    }

    fn decoder() -> Box<dyn Decoder> {
        Box::new(OpenAiDecoder::default())
    }
}

/// The chat completions body, its fields in prompt order (settings, tools, messages):
/// a request's bytes repeat the previous request's up to its last message, which keeps
/// prompt caches (llama.cpp, vLLM, OpenAI) warm and the loopback tests check.
#[derive(Serialize)]
pub(crate) struct Body {
    model: String,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    stream: bool,
    stream_options: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    return_progress: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Value>,
    messages: Vec<Value>,
}

/// The chat completions body for `req`.
pub(crate) fn request_body(req: &Request, vision: bool) -> Body {
    Body {
        model: req.model.clone(),
        max_tokens: req.max_tokens,
        temperature: req.temperature,
        stream: true,
        stream_options: json!({"include_usage": true}),
        return_progress: None,
        tools: (!req.tools.is_empty()).then(|| Value::Array(chat::tools(req))),
        messages: chat::messages::<OpenAi>(req, vision),
    }
}

impl ChatWire for OpenAi {
    // Chat completions has no way to send reasoning back.
    const SENDS_THINKING: bool = false;
    const SENDS_EMPTY_TURN: bool = false;

    fn tool_call(id: &CallId, name: &str, input: &Value) -> Value {
        json!({
            "id": id, "type": "function",
            "function": {"name": name, "arguments": input.to_string()},
        })
    }

    fn tool_result(id: &CallId, _name: &str, content: String) -> Value {
        json!({"role": "tool", "tool_call_id": id, "content": content})
    }

    /// Each image as a `data:` URL after a line naming its call (or the line that
    /// stands for it), then the message's text.
    fn user_images(wires: Vec<(CallId, ImageWire)>, text: String) -> Value {
        let mut parts = Vec::new();
        for (id, wire) in &wires {
            match wire.data_url() {
                Some(url) => {
                    parts.push(json!({"type": "text", "text": format!("The image of call {id}:")}));
                    parts.push(json!({"type": "image_url", "image_url": {"url": url}}));
                }
                None => {
                    if let ImageWire::Text(t) = wire {
                        parts.push(json!({"type": "text", "text": t}));
                    }
                }
            }
        }
        if !text.is_empty() {
            parts.push(json!({"type": "text", "text": text}));
        }
        json!({"role": "user", "content": parts})
    }
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Option<Vec<Choice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
    /// llama.cpp with `return_progress`: the prefill so far.
    #[serde(default)]
    prompt_progress: Option<PromptProgress>,
}

#[derive(Deserialize)]
struct PromptProgress {
    #[serde(default)]
    total: u64,
    #[serde(default)]
    cache: u64,
    #[serde(default)]
    processed: u64,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    /// A string fragment, or the whole arguments object (Ollama).
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: u64,
}

struct PendingCall {
    index: u32,
    wire_id: Option<String>,
    id: CallId,
    name: String,
    started: bool,
    args: String,
    args_value: Option<Value>,
}

/// Chat completions SSE → [`StreamEvent`]s.
#[derive(Default)]
pub(crate) struct OpenAiDecoder {
    current: Option<PendingCall>,
    calls_seen: u32,
    thinking: String,
    finish: Option<FinishReason>,
    usage: Option<Usage>,
    done: bool,
}

impl Decoder for OpenAiDecoder {
    fn event(&mut self, ev: &Event, out: &mut VecDeque<StreamEvent>) -> Result<bool, LlmError> {
        let data = ev.data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let chunk: Chunk = serde_json::from_str(data)
            .map_err(|e| LlmError::Protocol(format!("bad chat completions chunk: {e}")))?;
        if let Some(err) = chunk.error {
            return Err(stream_error(&err));
        }
        if let Some(p) = chunk.prompt_progress {
            out.push_back(StreamEvent::PromptProgress {
                processed: p.processed,
                total: p.total,
                cached: p.cache,
            });
        }
        if let Some(u) = chunk.usage {
            let cached = u.prompt_tokens_details.map_or(0, |d| d.cached_tokens);
            self.usage = Some(Usage {
                input_tokens: u.prompt_tokens,
                output_tokens: u.completion_tokens,
                cache_read_tokens: cached,
                cache_write_tokens: 0,
            });
        }
        // n = 1: only the first choice is ours.
        let Some(choice) = chunk.choices.and_then(|c| c.into_iter().next()) else {
            return Ok(false);
        };
        let delta = choice.delta.unwrap_or_default();
        for reasoning in [delta.reasoning_content, delta.reasoning]
            .into_iter()
            .flatten()
        {
            if !reasoning.is_empty() {
                self.thinking.push_str(&reasoning);
                out.push_back(StreamEvent::ThinkingDelta { text: reasoning });
            }
        }
        if let Some(text) = delta.content
            && !text.is_empty()
        {
            out.push_back(StreamEvent::TextDelta { text });
        }
        for tc in delta.tool_calls.into_iter().flatten() {
            self.tool_call_delta(tc, out);
        }
        if let Some(reason) = choice.finish_reason {
            self.complete_current(out);
            self.finish = Some(match reason.as_str() {
                "tool_calls" | "function_call" => FinishReason::ToolUse,
                "length" => FinishReason::Length,
                "content_filter" => FinishReason::ContentFilter,
                "error" => FinishReason::Error,
                _ => FinishReason::Stop,
            });
        }
        Ok(false)
    }

    fn finish(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), LlmError> {
        if !self.done && self.finish.is_none() {
            return Err(LlmError::Truncated(
                "the response ended without finish_reason or [DONE]".to_owned(),
            ));
        }
        self.complete_current(out);
        if !self.thinking.is_empty() {
            out.push_back(StreamEvent::ThinkingComplete {
                thinking: std::mem::take(&mut self.thinking),
                signature: None,
            });
        }
        if let Some(usage) = self.usage {
            out.push_back(StreamEvent::Usage { usage });
        }
        // Some servers say `stop` after tool calls, or say nothing at all.
        let reason = match self.finish {
            Some(FinishReason::Stop) | None if self.calls_seen > 0 => FinishReason::ToolUse,
            Some(r) => r,
            None => FinishReason::Stop,
        };
        out.push_back(StreamEvent::Finish { reason });
        Ok(())
    }
}

impl OpenAiDecoder {
    fn tool_call_delta(&mut self, tc: ToolCallDelta, out: &mut VecDeque<StreamEvent>) {
        let wire_id = tc.id.filter(|id| !id.is_empty());
        let new_call = match (&self.current, tc.index) {
            (None, _) => true,
            (Some(cur), Some(index)) if index != cur.index => true,
            // Same or missing index: a different id means another call (Ollama sends
            // parallel calls all at index 0).
            (Some(cur), _) => matches!((&wire_id, &cur.wire_id), (Some(a), Some(b)) if a != b),
        };
        if new_call {
            self.complete_current(out);
            let index = tc.index.unwrap_or(self.calls_seen);
            self.calls_seen += 1;
            self.current = Some(PendingCall {
                index,
                id: wire_id
                    .clone()
                    .map_or_else(CallId::generate, CallId::from_provider),
                wire_id,
                name: String::new(),
                started: false,
                args: String::new(),
                args_value: None,
            });
        }
        let Some(cur) = self.current.as_mut() else {
            return;
        };
        if let Some(f) = tc.function {
            if let Some(name) = f.name
                && cur.name.is_empty()
            {
                cur.name = name;
            }
            match f.arguments {
                Some(Value::String(s)) => cur.args.push_str(&s),
                Some(Value::Null) | None => {}
                Some(v) => cur.args_value = Some(v),
            }
        }
        if !cur.started && !cur.name.is_empty() {
            cur.started = true;
            out.push_back(StreamEvent::ToolCallStarted {
                id: cur.id.clone(),
                name: cur.name.clone(),
            });
        }
    }

    fn complete_current(&mut self, out: &mut VecDeque<StreamEvent>) {
        let Some(call) = self.current.take() else {
            return;
        };
        if !call.started {
            out.push_back(StreamEvent::ToolCallStarted {
                id: call.id.clone(),
                name: call.name.clone(),
            });
        }
        let input = match call.args_value {
            Some(v) => Ok(v),
            None => parse_arguments(&call.args),
        };
        out.push_back(StreamEvent::ToolCallComplete {
            id: call.id,
            name: call.name,
            input,
        });
    }
}

/// An `{"error": ...}` chunk in the middle of a stream (vLLM, OpenRouter).
fn stream_error(err: &Value) -> LlmError {
    let message = err
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| err.as_str())
        .unwrap_or("unknown error")
        .to_owned();
    let code = err.get("code").and_then(Value::as_u64).unwrap_or(500);
    if let Some(o) = super::overflow::classify(None, &json!({"error": err}).to_string(), &message) {
        return LlmError::ContextOverflow(o);
    }
    match code {
        429 => LlmError::RateLimited {
            message,
            retry_after: None,
        },
        503 | 529 => LlmError::Overloaded {
            status: u16::try_from(code).unwrap_or(503),
            message,
            retry_after: None,
        },
        400..=499 => LlmError::BadRequest(format!("the server reported an error: {message}")),
        _ => LlmError::Server {
            status: u16::try_from(code).unwrap_or(500),
            message,
            retry_after: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(frames: &[Value]) -> Vec<StreamEvent> {
        let mut d = OpenAiDecoder::default();
        let mut out = VecDeque::new();
        for f in frames {
            let ev = Event {
                data: f.to_string(),
                ..Event::default()
            };
            d.event(&ev, &mut out).unwrap();
        }
        d.event(
            &Event {
                data: "[DONE]".into(),
                ..Event::default()
            },
            &mut out,
        )
        .unwrap();
        d.finish(&mut out).unwrap();
        out.into_iter().collect()
    }

    fn tc(v: Value) -> Value {
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [v]}, "finish_reason": null}]})
    }

    #[test]
    fn ollama_parallel_calls_at_index_zero_with_object_arguments() {
        let out = decode(&[
            tc(json!({"index": 0, "id": "a", "function": {"name": "f", "arguments": {"x": 1}}})),
            tc(json!({"index": 0, "id": "b", "function": {"name": "g", "arguments": {"y": 2}}})),
            json!({"choices": [{"delta": {}, "finish_reason": "stop"}]}),
        ]);
        let done: Vec<_> = out
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ToolCallComplete { id, input, .. } => {
                    Some((id.as_str().to_owned(), input.clone().unwrap()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            done,
            vec![("a".into(), json!({"x": 1})), ("b".into(), json!({"y": 2}))]
        );
        assert_eq!(
            out.last(),
            Some(&StreamEvent::Finish {
                reason: FinishReason::ToolUse
            })
        );
    }

    #[test]
    fn missing_id_and_index_still_make_a_call() {
        let out = decode(&[
            tc(json!({"function": {"name": "f", "arguments": "{\"a\""}})),
            tc(json!({"function": {"arguments": ":1}"}})),
        ]);
        let StreamEvent::ToolCallComplete { id, input, .. } = &out[1] else {
            panic!("{out:?}");
        };
        assert!(id.as_str().starts_with("call-"));
        assert_eq!(input, &Ok(json!({"a": 1})));
    }
}
