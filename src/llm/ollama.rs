//! `kind = "ollama"`: Ollama's own `/api/chat`, streamed as one JSON object per line.
//!
//! Why not its OpenAI-compatible endpoint: that one cannot carry the context size, and
//! Ollama silently drops the beginning of a prompt longer than its context (the system
//! prompt first). Here every request sets `options.num_ctx` from `context_window` (or,
//! when the table sets none, from the model's own context length, read once from
//! `/api/show` and capped at [`DEFAULT_CONTEXT_WINDOW`]); a request estimated well past
//! it is refused before it is sent, as a context overflow the loop compacts for; and a
//! prompt Ollama cut anyway (its `prompt_eval_count` fills the context, or falls far
//! below the estimate) is reported as an overflow instead of an answer to half a prompt.
//!
//! Invariant: tool calls arrive whole in one line (Ollama never splits arguments), so a
//! call is complete when its line is read.

use std::collections::VecDeque;
use std::sync::Arc;

use familiar_protocol::ids::CallId;
use familiar_protocol::task::Usage;
use futures::StreamExt;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use super::chat::{self, ChatWire};
use super::http::{Endpoint, Framing, HttpCtx, drive};
use super::image::{self, ImageWire};
use super::keys::ApiKey;
use super::sse::{Decoder, Event};
use super::{ContextOverflow, Estimator, FinishReason, LlmError, Provider, Request, StreamEvent};
use crate::config::{DEFAULT_CONTEXT_WINDOW, ProviderConfig};

/// A request whose estimate passes `num_ctx` by this factor is refused before it is
/// sent: the estimate errs high (docs in `tokens.rs`), so a request just over the line
/// may still fit and is left to the server.
const REFUSE_OVER: f64 = 1.25;
/// `prompt_eval_count` at this share of `num_ctx` or more: Ollama filled the context,
/// which a prompt only does when it was cut to fit.
const FILLED: f64 = 0.98;

/// Ollama's native chat API.
pub(crate) struct Ollama {
    ctx: Arc<HttpCtx>,
    /// `num_ctx` for every request: `context_window` when configured, else the model's
    /// own, looked up at the first request.
    num_ctx: Arc<OnceCell<u32>>,
}

impl Ollama {
    pub(crate) fn new(ctx: Arc<HttpCtx>) -> Self {
        let num_ctx = Arc::new(OnceCell::new());
        if ctx.cfg.context_window_configured
            && let Err(e) = num_ctx.set(ctx.cfg.context_window)
        {
            // Cannot happen on a fresh cell; the lookup at the first request stands in.
            tracing::debug!("num_ctx already set: {e}");
        }
        Ollama { ctx, num_ctx }
    }
}

impl Provider for Ollama {
    fn stream(
        &self,
        req: &Request,
        cancel: CancellationToken,
    ) -> BoxStream<'static, Result<StreamEvent, LlmError>> {
        let ctx = Arc::clone(&self.ctx);
        let num_ctx = Arc::clone(&self.num_ctx);
        let req = req.clone();
        let start = async move {
            let n = *num_ctx
                .get_or_init(|| context_length(&ctx, &req.model, &cancel))
                .await;
            let estimate = Estimator::new().request(&req);
            if estimate as f64 > f64::from(n) * REFUSE_OVER {
                let o = ContextOverflow {
                    limit: Some(u64::from(n)),
                    requested: Some(estimate),
                    message: format!(
                        "about {estimate} tokens do not fit Ollama's num_ctx of {n}; not sent, \
                         as Ollama would drop the beginning of the prompt"
                    ),
                };
                return futures::stream::iter([Err(LlmError::ContextOverflow(o))]).boxed();
            }
            let url = format!("{}/api/chat", ctx.cfg.base_url);
            let builder = ctx
                .client
                .post(url)
                .header("accept", "application/x-ndjson")
                .json(&request_body(&req, &ctx.cfg, n));
            let decoder = Box::new(OllamaDecoder {
                num_ctx: Some(u64::from(n)),
                estimate,
                ..OllamaDecoder::default()
            });
            let model = req.model.clone();
            drive(
                ctx,
                builder,
                authorize,
                decoder,
                Endpoint {
                    framing: Framing::Ndjson,
                    check_path: "/api/tags",
                },
                model,
                cancel,
            )
        };
        futures::stream::once(start).flatten().boxed()
    }

    fn name(&self) -> &str {
        &self.ctx.cfg.name
    }

    fn default_model(&self) -> &str {
        &self.ctx.cfg.model
    }
}

/// Ollama has no keys of its own; one configured (a proxy in front) goes as a bearer.
fn authorize(builder: reqwest::RequestBuilder, key: Option<&ApiKey>) -> reqwest::RequestBuilder {
    match key {
        Some(key) => builder.bearer_auth(key.expose()),
        None => builder,
    }
}

/// The model's context length from `/api/show`, capped at [`DEFAULT_CONTEXT_WINDOW`]
/// (a model trained for 128k would otherwise make Ollama allocate that much cache); the
/// default when the lookup fails, so a request still goes out and says what is wrong.
async fn context_length(ctx: &HttpCtx, model: &str, cancel: &CancellationToken) -> u32 {
    let req = ctx
        .client
        .post(format!("{}/api/show", ctx.cfg.base_url))
        .json(&json!({ "model": model }));
    let lookup = async {
        let response = req.send().await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        let show: Value = response.json().await.ok()?;
        show_context_length(&show)
    };
    let found = tokio::select! {
        biased;
        () = cancel.cancelled() => None,
        r = tokio::time::timeout(super::models::LIST_TIMEOUT, lookup) => r.ok().flatten(),
    };
    match found {
        Some(n) => {
            let n = u32::try_from(n)
                .unwrap_or(DEFAULT_CONTEXT_WINDOW)
                .min(DEFAULT_CONTEXT_WINDOW);
            tracing::info!(model, num_ctx = n, "context size from Ollama's /api/show");
            n
        }
        None => {
            // Not a warning: with no server the request's own error says what is wrong,
            // and this line would read as if a server had answered.
            tracing::debug!(
                model,
                "no context length from Ollama's /api/show; using {DEFAULT_CONTEXT_WINDOW}"
            );
            DEFAULT_CONTEXT_WINDOW
        }
    }
}

/// `num_ctx` from the model's parameters (a Modelfile's `PARAMETER num_ctx`), else
/// `model_info["<arch>.context_length"]`.
pub(crate) fn show_context_length(show: &Value) -> Option<u64> {
    let from_params = show
        .get("parameters")
        .and_then(Value::as_str)
        .and_then(|p| {
            p.lines().find_map(|line| {
                let mut parts = line.split_whitespace();
                (parts.next() == Some("num_ctx")).then(|| parts.next()?.parse().ok())?
            })
        });
    from_params.or_else(|| {
        show.get("model_info")?
            .as_object()?
            .iter()
            .find(|(k, _)| k.ends_with(".context_length"))
            .and_then(|(_, v)| v.as_u64())
    })
}

/// The `/api/chat` body, settings first and messages last.
#[derive(Serialize)]
pub(crate) struct Body {
    model: String,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    keep_alive: Option<String>,
    options: Options,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Value>,
    messages: Vec<Value>,
}

#[derive(Serialize)]
struct Options {
    num_ctx: u32,
    num_predict: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
}

pub(crate) fn request_body(req: &Request, cfg: &ProviderConfig, num_ctx: u32) -> Body {
    Body {
        model: req.model.clone(),
        stream: true,
        keep_alive: cfg.keep_alive.clone(),
        options: Options {
            num_ctx,
            num_predict: req.max_tokens,
            temperature: req.temperature,
        },
        tools: chat::tools(req),
        messages: chat::messages::<Ollama>(req, cfg.vision),
    }
}

impl ChatWire for Ollama {
    const SENDS_THINKING: bool = true;
    const SENDS_EMPTY_TURN: bool = true;

    fn tool_call(id: &CallId, name: &str, input: &Value) -> Value {
        json!({"id": id, "function": {"name": name, "arguments": input}})
    }

    fn tool_result(_id: &CallId, name: &str, content: String) -> Value {
        json!({"role": "tool", "tool_name": name, "content": content})
    }

    fn user_images(wires: Vec<(CallId, ImageWire)>, text: String) -> Value {
        image::ollama_user_message(wires, text)
    }
}

#[derive(Deserialize)]
struct Line {
    #[serde(default)]
    message: Option<WireMessage>,
    #[serde(default)]
    done: bool,
    #[serde(default)]
    done_reason: Option<String>,
    #[serde(default)]
    prompt_eval_count: Option<u64>,
    #[serde(default)]
    eval_count: Option<u64>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize, Default)]
struct WireMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    thinking: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireCall>>,
}

#[derive(Deserialize)]
struct WireCall {
    #[serde(default)]
    id: Option<String>,
    function: WireFunction,
}

#[derive(Deserialize)]
struct WireFunction {
    name: String,
    /// An object; some builds send it as a JSON string.
    #[serde(default)]
    arguments: Value,
}

/// `/api/chat` lines → [`StreamEvent`]s.
#[derive(Default)]
pub(crate) struct OllamaDecoder {
    /// The request's `num_ctx` and estimated size, to tell a cut prompt (`None`
    /// when decoding a recording).
    num_ctx: Option<u64>,
    estimate: u64,
    thinking: String,
    calls: u32,
    done: bool,
}

impl Decoder for OllamaDecoder {
    fn event(&mut self, ev: &Event, out: &mut VecDeque<StreamEvent>) -> Result<bool, LlmError> {
        let line: Line = serde_json::from_str(&ev.data)
            .map_err(|e| LlmError::Protocol(format!("bad Ollama chat line: {e}")))?;
        if let Some(err) = line.error {
            return Err(stream_error(&err));
        }
        let msg = line.message.unwrap_or_default();
        if let Some(t) = msg.thinking.filter(|t| !t.is_empty()) {
            self.thinking.push_str(&t);
            out.push_back(StreamEvent::ThinkingDelta { text: t });
        }
        if let Some(text) = msg.content.filter(|t| !t.is_empty()) {
            out.push_back(StreamEvent::TextDelta { text });
        }
        for call in msg.tool_calls.into_iter().flatten() {
            self.calls += 1;
            let id = call
                .id
                .filter(|id| !id.is_empty())
                .map_or_else(CallId::generate, CallId::from_provider);
            let name = call.function.name;
            let input = match call.function.arguments {
                Value::String(s) => super::parse_arguments(&s),
                Value::Null => Ok(Value::Object(serde_json::Map::new())),
                v @ Value::Object(_) => Ok(v),
                other => super::parse_arguments(&other.to_string()),
            };
            out.push_back(StreamEvent::ToolCallStarted {
                id: id.clone(),
                name: name.clone(),
            });
            out.push_back(StreamEvent::ToolCallComplete { id, name, input });
        }
        if !line.done {
            return Ok(false);
        }
        self.done = true;
        let prompt = line.prompt_eval_count.unwrap_or(0);
        if let Some(o) = self.cut_prompt(prompt) {
            return Err(LlmError::ContextOverflow(o));
        }
        if !self.thinking.is_empty() {
            out.push_back(StreamEvent::ThinkingComplete {
                thinking: std::mem::take(&mut self.thinking),
                signature: None,
            });
        }
        out.push_back(StreamEvent::Usage {
            usage: Usage {
                input_tokens: prompt,
                output_tokens: line.eval_count.unwrap_or(0),
                cache_read_tokens: 0,
                cache_write_tokens: 0,
            },
        });
        let reason = match line.done_reason.as_deref() {
            _ if self.calls > 0 => FinishReason::ToolUse,
            Some("length") => FinishReason::Length,
            Some(_) | None => FinishReason::Stop,
        };
        out.push_back(StreamEvent::Finish { reason });
        Ok(true)
    }

    fn finish(&mut self, _out: &mut VecDeque<StreamEvent>) -> Result<(), LlmError> {
        if self.done {
            Ok(())
        } else {
            Err(LlmError::Truncated(
                "the response ended without its `done` line".to_owned(),
            ))
        }
    }
}

impl OllamaDecoder {
    /// The overflow to report when Ollama read `prompt` tokens of a request estimated
    /// at `self.estimate`: it filled `num_ctx`, or read far less than was sent while
    /// the request was larger than the context.
    fn cut_prompt(&self, prompt: u64) -> Option<ContextOverflow> {
        let num_ctx = self.num_ctx?;
        let filled = prompt as f64 >= num_ctx as f64 * FILLED;
        let far_below = self.estimate > num_ctx && prompt < self.estimate / 2;
        (prompt > 0 && (filled || far_below)).then(|| ContextOverflow {
            limit: Some(num_ctx),
            requested: Some(self.estimate.max(prompt)),
            message: format!(
                "Ollama read {prompt} tokens of a request of about {} with num_ctx {num_ctx}: \
                 it cut the beginning of the prompt (the system prompt first)",
                self.estimate
            ),
        })
    }
}

/// An `{"error": …}` line: Ollama's own words, a context overflow when they say so.
fn stream_error(err: &Value) -> LlmError {
    let message = err
        .as_str()
        .or_else(|| err.get("message").and_then(Value::as_str))
        .unwrap_or("unknown error")
        .to_owned();
    let body = json!({ "error": message }).to_string();
    if let Some(o) = super::overflow::classify(None, &body, &message) {
        return LlmError::ContextOverflow(o);
    }
    LlmError::Server {
        status: 500,
        message,
        retry_after: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(dec: &mut OllamaDecoder, lines: &[Value]) -> Result<Vec<StreamEvent>, LlmError> {
        let mut out = VecDeque::new();
        for l in lines {
            let ev = Event {
                data: l.to_string(),
                ..Event::default()
            };
            if dec.event(&ev, &mut out)? {
                break;
            }
        }
        dec.finish(&mut out)?;
        Ok(out.into_iter().collect())
    }

    fn done(prompt: u64) -> Value {
        json!({"message": {"role": "assistant", "content": ""}, "done": true,
               "done_reason": "stop", "prompt_eval_count": prompt, "eval_count": 3})
    }

    #[test]
    fn text_calls_and_usage() {
        let out = decode(
            &mut OllamaDecoder::default(),
            &[
                json!({"message": {"role": "assistant", "content": "hi"}, "done": false}),
                json!({"message": {"role": "assistant", "content": "", "tool_calls": [
                    {"function": {"name": "read_file", "arguments": {"path": "/tmp/x"}}}]},
                    "done": false}),
                done(40),
            ],
        )
        .unwrap();
        assert_eq!(out[0], StreamEvent::TextDelta { text: "hi".into() });
        assert!(
            matches!(&out[2], StreamEvent::ToolCallComplete { name, input: Ok(v), .. }
            if name == "read_file" && v == &json!({"path": "/tmp/x"}))
        );
        assert!(out.contains(&StreamEvent::Usage {
            usage: Usage {
                input_tokens: 40,
                output_tokens: 3,
                ..Usage::default()
            }
        }));
        assert_eq!(
            out.last(),
            Some(&StreamEvent::Finish {
                reason: FinishReason::ToolUse
            })
        );
    }

    #[test]
    fn a_prompt_cut_to_fit_is_an_overflow() {
        let mut dec = OllamaDecoder {
            num_ctx: Some(2048),
            estimate: 6000,
            ..OllamaDecoder::default()
        };
        let err = decode(&mut dec, &[done(2048)]).unwrap_err();
        assert!(
            matches!(&err, LlmError::ContextOverflow(o) if o.limit == Some(2048)),
            "{err:?}"
        );
        let mut dec = OllamaDecoder {
            num_ctx: Some(8192),
            estimate: 9000,
            ..OllamaDecoder::default()
        };
        assert!(decode(&mut dec, &[done(3000)]).is_err(), "far below");
        let mut dec = OllamaDecoder {
            num_ctx: Some(8192),
            estimate: 3000,
            ..OllamaDecoder::default()
        };
        assert!(
            decode(&mut dec, &[done(2900)]).is_ok(),
            "a prompt that fits"
        );
    }

    #[test]
    fn context_length_from_show() {
        let show = json!({"parameters": "stop \"<|im_end|>\"\nnum_ctx 16384",
                          "model_info": {"qwen2.context_length": 32768}});
        assert_eq!(show_context_length(&show), Some(16384));
        let show = json!({"model_info": {"llama.context_length": 131072}});
        assert_eq!(show_context_length(&show), Some(131072));
        assert_eq!(show_context_length(&json!({})), None);
    }

    #[test]
    fn a_cut_stream_is_truncated_not_finished() {
        let err = decode(
            &mut OllamaDecoder::default(),
            &[json!({"message": {"content": "hi"}, "done": false})],
        )
        .unwrap_err();
        assert!(matches!(err, LlmError::Truncated(_)));
    }
}
