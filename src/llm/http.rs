//! The HTTP half shared by both providers: send one request, map a failed status to
//! an [`LlmError`] that says what to fix, and drive the SSE body through a decoder
//! with stall detection and cancellation at every await.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use futures::stream::BoxStream;
use reqwest::header::HeaderMap;
use tokio_util::sync::CancellationToken;

use super::keys::{ApiKey, describe_source};
use super::sse::{self, ByteStream, Decoder, SseStream};
use super::{LlmError, StreamEvent};
use crate::config::{DEFAULT_LOCAL_BASE_URL, ProviderConfig};

/// Longest server-requested wait we honour; past it the server is not coming back soon
/// and the normal backoff cap is a better guess.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);
/// Longest server error text kept in an error message.
const MAX_MESSAGE: usize = 500;

/// What a provider needs to make requests.
pub(crate) struct HttpCtx {
    pub(crate) client: reqwest::Client,
    pub(crate) key: Option<ApiKey>,
    pub(crate) cfg: ProviderConfig,
}

/// The HTTP client every provider uses. Building one loads the TLS roots (a few
/// milliseconds and ~150 KiB); a long-lived caller builds it once and shares it, which
/// also keeps connections to the model server alive across tasks.
pub fn new_client() -> Result<reqwest::Client, LlmError> {
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| LlmError::Config(format!("cannot set up the HTTP client: {e}")))
}

impl HttpCtx {
    pub(crate) fn new(
        cfg: &ProviderConfig,
        key: Option<ApiKey>,
        client: reqwest::Client,
    ) -> Arc<Self> {
        Arc::new(HttpCtx {
            client,
            key,
            cfg: cfg.clone(),
        })
    }

    fn scrub(&self, text: &str) -> String {
        match &self.key {
            Some(k) => k.scrub(text),
            None => text.to_owned(),
        }
    }

    /// Maps a non-success response to the error a user can act on.
    fn status_error(&self, status: u16, headers: &HeaderMap, body: &str, model: &str) -> LlmError {
        let message = self.scrub(&server_message(body));
        let url = &self.cfg.base_url;
        let retry_after = retry_after(headers, SystemTime::now());
        if let Some(o) = super::overflow::classify(Some(status), body, &message) {
            return LlmError::ContextOverflow(o);
        }
        match status {
            400 if mentions_no_tools(&message) => LlmError::NoToolSupport(format!(
                "model `{model}` at {url} does not support tool calls (server said: {message}); \
                 pick a model with tool support (e.g. qwen2.5, llama3.1) or another provider"
            )),
            400 => LlmError::BadRequest(format!("bad request (400) from {url}: {message}")),
            401 | 403 => LlmError::Auth(match &self.key {
                Some(_) => format!(
                    "the API key in {} was rejected ({status}): {message}",
                    describe_source(&self.cfg)
                ),
                None => format!(
                    "no API key: {url} answered {status}; set api_key_env or api_key_file in \
                     [providers.{}] ({message})",
                    self.cfg.name
                ),
            }),
            404 => LlmError::NotFound(format!(
                "unknown model `{model}` or wrong base_url `{url}` (404: {message})"
            )),
            429 => LlmError::RateLimited {
                message,
                retry_after,
            },
            503 | 529 => LlmError::Overloaded {
                status,
                message,
                retry_after,
            },
            500 | 502 | 504 => LlmError::Server {
                status,
                message,
                retry_after,
            },
            _ => LlmError::Http { status, message },
        }
    }

    fn connect_error(&self, err: &reqwest::Error) -> LlmError {
        let url = &self.cfg.base_url;
        let mut detail = err.to_string();
        let mut source = std::error::Error::source(err);
        while let Some(s) = source {
            detail.push_str(": ");
            detail.push_str(&s.to_string());
            source = s.source();
        }
        let detail = self.scrub(&detail);
        let local = url == DEFAULT_LOCAL_BASE_URL
            || url.contains("://127.")
            || url.contains("://localhost");
        if local && err.is_connect() {
            LlmError::Connect(format!(
                "nothing answers at {url} ({detail}): start Ollama or llama.cpp there, or set \
                 ANTHROPIC_API_KEY / OPENAI_API_KEY, or configure [providers.*] in config.toml"
            ))
        } else {
            LlmError::Connect(format!("cannot reach {url}: {detail}"))
        }
    }
}

/// The message inside an error body: `error.message` (OpenAI, Anthropic), `error` as a
/// string (Ollama), a top-level `message` (older vLLM), else the body itself; cut to
/// [`MAX_MESSAGE`].
pub(crate) fn server_message(body: &str) -> String {
    let from_json = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            let text = match v.get("error") {
                Some(err) => err
                    .get("message")
                    .and_then(|m| m.as_str())
                    .or_else(|| err.as_str()),
                None => v.get("message").and_then(|m| m.as_str()),
            };
            text.map(str::to_owned)
        });
    let text = from_json.unwrap_or_else(|| body.trim().to_owned());
    let mut end = text.len().min(MAX_MESSAGE);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    if text.is_empty() {
        "(empty body)".to_owned()
    } else {
        text[..end].to_owned()
    }
}

fn mentions_no_tools(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("does not support tools")
        || (m.contains("tool") && (m.contains("not support") || m.contains("unsupported")))
}

/// `retry-after-ms` (Anthropic), else `Retry-After` in seconds or as an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let d = if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        Duration::try_from_secs_f64(ms / 1000.0).ok()?
    } else {
        let v = header("retry-after")?;
        match v.parse::<f64>() {
            Ok(secs) => Duration::try_from_secs_f64(secs).ok()?,
            Err(_) => {
                let at = httpdate::parse_http_date(v).ok()?;
                at.duration_since(now).unwrap_or(Duration::ZERO)
            }
        }
    };
    Some(d.min(MAX_RETRY_AFTER))
}

enum Phase {
    Send(Box<reqwest::RequestBuilder>),
    Read(SseStream),
    Done,
}

struct Drive {
    ctx: Arc<HttpCtx>,
    model: String,
    phase: Phase,
    decoder: Box<dyn Decoder>,
    queue: VecDeque<StreamEvent>,
    cancel: CancellationToken,
}

/// Streams the response to `request` through `decoder`.
pub(crate) fn drive(
    ctx: Arc<HttpCtx>,
    request: reqwest::RequestBuilder,
    decoder: Box<dyn Decoder>,
    model: String,
    cancel: CancellationToken,
) -> BoxStream<'static, Result<StreamEvent, LlmError>> {
    let state = Drive {
        ctx,
        model,
        phase: Phase::Send(Box::new(request)),
        decoder,
        queue: VecDeque::new(),
        cancel,
    };
    Box::pin(futures::stream::unfold(state, |mut st| async move {
        let item = st.next().await?;
        if item.is_err() {
            // One error ends the stream; dropping the body closes the connection.
            st.phase = Phase::Done;
            st.queue.clear();
        }
        Some((item, st))
    }))
}

impl Drive {
    async fn next(&mut self) -> Option<Result<StreamEvent, LlmError>> {
        loop {
            if let Some(ev) = self.queue.pop_front() {
                return Some(Ok(ev));
            }
            match std::mem::replace(&mut self.phase, Phase::Done) {
                Phase::Done => return None,
                Phase::Send(request) => {
                    match send(&self.ctx, &self.cancel, &self.model, *request).await {
                        Ok(sse) => self.phase = Phase::Read(sse),
                        Err(e) => return Some(Err(e)),
                    }
                }
                Phase::Read(mut sse) => {
                    let item = tokio::select! {
                        biased;
                        () = self.cancel.cancelled() => return Some(Err(LlmError::Cancelled)),
                        item = sse.next() => item,
                    };
                    let done = match item {
                        None => true,
                        Some(Err(e)) => return Some(Err(e)),
                        Some(Ok(ev)) => match self.decoder.event(&ev, &mut self.queue) {
                            Ok(done) => done,
                            Err(e) => return Some(Err(e)),
                        },
                    };
                    if done {
                        if let Err(e) = self.decoder.finish(&mut self.queue) {
                            return Some(Err(e));
                        }
                    } else {
                        self.phase = Phase::Read(sse);
                    }
                }
            }
        }
    }
}

/// Sends `request`; a success becomes the SSE event stream, anything else an error.
async fn send(
    ctx: &Arc<HttpCtx>,
    cancel: &CancellationToken,
    model: &str,
    request: reqwest::RequestBuilder,
) -> Result<SseStream, LlmError> {
    let stall = ctx.cfg.stall_timeout;
    let response = tokio::select! {
        biased;
        () = cancel.cancelled() => return Err(LlmError::Cancelled),
        r = tokio::time::timeout(stall, request.send()) => r,
    };
    let response = match response {
        Err(_) => return Err(LlmError::Stalled(stall)),
        Ok(Err(e)) => return Err(ctx.connect_error(&e)),
        Ok(Ok(r)) => r,
    };
    let status = response.status();
    if !status.is_success() {
        let headers = response.headers().clone();
        let body = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(LlmError::Cancelled),
            b = tokio::time::timeout(stall, response.text()) => b,
        };
        let body = match body {
            Ok(Ok(b)) => b,
            Ok(Err(_)) | Err(_) => String::new(),
        };
        return Err(ctx.status_error(status.as_u16(), &headers, &body, model));
    }
    let ctx = Arc::clone(ctx);
    let bytes: ByteStream = Box::pin(response.bytes_stream().map(move |chunk| {
        chunk.map_err(|e| {
            LlmError::Truncated(ctx.scrub(&format!("connection failed mid-response: {e}")))
        })
    }));
    Ok(sse::events(sse::stall_guard(bytes, stall)))
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn retry_after_reads_seconds_dates_and_ms() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            retry_after(&headers(&[("retry-after", "7")]), now),
            Some(Duration::from_secs(7))
        );
        let later = httpdate::fmt_http_date(now + Duration::from_secs(12));
        assert_eq!(
            retry_after(&headers(&[("retry-after", &later)]), now),
            Some(Duration::from_secs(12))
        );
        assert_eq!(
            retry_after(
                &headers(&[("retry-after", "7"), ("retry-after-ms", "1500")]),
                now
            ),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")]), now), None);
        assert_eq!(
            retry_after(&headers(&[("retry-after", "99999")]), now),
            Some(MAX_RETRY_AFTER)
        );
    }

    #[test]
    fn server_message_finds_the_text() {
        assert_eq!(
            server_message(r#"{"error":{"type":"x","message":"bad model"}}"#),
            "bad model"
        );
        assert_eq!(
            server_message(r#"{"error":"model 'q' not found"}"#),
            "model 'q' not found"
        );
        assert_eq!(server_message("plain"), "plain");
        assert!(mentions_no_tools(
            "registry.ollama.ai/library/gemma does not support tools"
        ));
    }
}
