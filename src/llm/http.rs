//! The HTTP half shared by both providers: [`HttpProvider`] posts the body a [`Wire`]
//! format builds, maps a failed status to an [`LlmError`] that says what to fix, and
//! drives the SSE body through the format's decoder with stall detection and
//! cancellation at every await. `openai.rs` and `anthropic.rs` hold only their wire
//! formats (body, headers, decoder); neither imports the other.

use std::collections::VecDeque;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use futures::StreamExt;
use futures::stream::BoxStream;
use reqwest::header::HeaderMap;
use tokio_util::sync::CancellationToken;

use super::keys::{ApiKey, KeySlot, describe_source};
use super::sse::{self, ByteStream, Decoder, SseStream};
use super::{ConnectError, LlmError, Provider, Request, StreamEvent};
use crate::config::ProviderConfig;

/// Longest server-requested wait we honour; past it the server is not coming back soon
/// and the normal backoff cap is a better guess.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);
/// Longest server error text kept in an error message.
const MAX_MESSAGE: usize = 500;
/// Silence before the first response, after which a cheap request asks whether the
/// server answers at all: a stopped or wedged server (it accepts connections, never
/// replies) is told from a busy one within seconds instead of `first_token_timeout`.
const PROBE_AFTER: Duration = Duration::from_secs(10);
/// How long the liveness check may take: any HTTP answer (even an error status) within
/// it shows the server alive and the request's wait goes on.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a provider needs to make requests.
pub(crate) struct HttpCtx {
    pub(crate) client: reqwest::Client,
    key: KeySlot,
    pub(crate) cfg: ProviderConfig,
}

/// The HTTP client every provider uses. Its TLS reads the system's root certificates
/// at the first `https://` handshake, not here (see [`super::tls`]); a long-lived caller
/// builds it once and shares it, which keeps connections to the model server alive
/// across tasks and the roots read once.
pub fn new_client() -> Result<reqwest::Client, LlmError> {
    let tls = super::tls::client_config()
        .map_err(|e| LlmError::Config(format!("cannot set up TLS for the HTTP client: {e}")))?;
    client_builder(tls)
        .build()
        .map_err(|e| LlmError::Config(format!("cannot set up the HTTP client: {e}")))
}

/// [`new_client`]'s settings over the TLS configuration `tls`.
pub(super) fn client_builder(tls: rustls::ClientConfig) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(10))
        .tls_backend_preconfigured(tls)
}

impl HttpCtx {
    pub(crate) fn new(cfg: &ProviderConfig, key: KeySlot, client: reqwest::Client) -> Arc<Self> {
        Arc::new(HttpCtx {
            client,
            key,
            cfg: cfg.clone(),
        })
    }

    /// The key requests carry (read from the Secret Service on first use).
    pub(crate) async fn key(&self) -> Result<Option<&ApiKey>, LlmError> {
        self.key.get(&self.cfg.name).await
    }

    fn scrub(&self, text: &str) -> String {
        match self.key.known() {
            Some(k) => k.scrub(text),
            None => text.to_owned(),
        }
    }

    /// Maps a non-success response to the error a user can act on.
    pub(crate) fn status_error(
        &self,
        status: u16,
        headers: &HeaderMap,
        body: &str,
        model: &str,
    ) -> LlmError {
        let message = self.scrub(&server_message(body));
        let url = &self.cfg.base_url;
        let retry_after = retry_after(headers, SystemTime::now());
        if let Some(o) = super::overflow::classify(Some(status), body, &message) {
            return LlmError::ContextOverflow(o);
        }
        if matches!(status, 400 | 404)
            && let Some(m) = model_missing(&self.cfg, model, &message, body)
        {
            return LlmError::NotFound(m);
        }
        match status {
            400 if mentions_no_tools(&message) => LlmError::NoToolSupport(format!(
                "model `{model}` at {url} does not support tool calls (server said: {message}); \
                 pick a model with tool support (e.g. qwen2.5, llama3.1) or another provider"
            )),
            400 => LlmError::BadRequest(format!("bad request (400) from {url}: {message}")),
            401 | 403 => LlmError::Auth(match self.key.known() {
                Some(_) => format!(
                    "the API key in {} was rejected ({status}): {message}",
                    describe_source(&self.cfg)
                ),
                None => format!(
                    "no API key: {url} answered {status}; set api_key_env, api_key_file or \
                     api_key_secret in [providers.{}] ({message})",
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

    /// The error for a request that got no token within `first_token_timeout`.
    pub(crate) fn no_first_token(&self) -> LlmError {
        LlmError::NoFirstToken(super::NoFirstToken {
            after: self.cfg.first_token_timeout,
            provider: self.cfg.name.clone(),
            base_url: self.cfg.base_url.clone(),
            local: crate::config::is_local_url(&self.cfg.base_url),
            unanswered_check: None,
        })
    }

    /// The error for a server that answered neither the request within `after` nor the
    /// liveness check of `check_url`.
    fn unresponsive(&self, after: Duration, check_url: String) -> LlmError {
        LlmError::NoFirstToken(super::NoFirstToken {
            after,
            provider: self.cfg.name.clone(),
            base_url: self.cfg.base_url.clone(),
            local: crate::config::is_local_url(&self.cfg.base_url),
            unanswered_check: Some(check_url),
        })
    }

    /// Whether the server answers `url` (any status) within [`PROBE_TIMEOUT`]. No key
    /// goes with it: a 401 shows the server alive as well as a 200 does.
    async fn answers(&self, url: &str) -> bool {
        let check = self.client.get(url).send();
        match tokio::time::timeout(PROBE_TIMEOUT, check).await {
            Ok(Ok(_)) => true,
            Ok(Err(e)) => {
                tracing::debug!(url, "liveness check failed: {e}");
                false
            }
            Err(_) => false,
        }
    }

    pub(crate) fn connect_error(&self, err: &reqwest::Error) -> LlmError {
        let url = &self.cfg.base_url;
        let refused = refused(err);
        let on_this_machine = is_loopback_url(url);
        let detail = if refused {
            // The whole chain ("error sending request for url (…): client error
            // (Connect): tcp connect error: …") says nothing more than this.
            "connection refused".to_owned()
        } else {
            let mut detail = err.to_string();
            let mut source = std::error::Error::source(err);
            while let Some(s) = source {
                detail.push_str(": ");
                detail.push_str(&s.to_string());
                source = s.source();
            }
            self.scrub(&detail)
        };
        let message = if on_this_machine && err.is_connect() {
            format!(
                "nothing answers at {url} ({detail}): start Ollama (`ollama serve`) or llama.cpp \
                 (`llama-server --port 8080`) there, or set ANTHROPIC_API_KEY / OPENAI_API_KEY, \
                 or configure [providers.*] in config.toml; `familiar doctor` checks the setup"
            )
        } else {
            format!("cannot reach {url}: {detail}")
        };
        LlmError::Connect(ConnectError {
            message,
            refused_locally: refused && on_this_machine,
        })
    }
}

/// Whether the connection was refused (nothing listens), as opposed to timing out or
/// failing TLS.
fn refused(err: &reqwest::Error) -> bool {
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        source = s.source();
    }
    false
}

/// Whether `url` names this machine (a loopback address or `localhost`).
fn is_loopback_url(url: &str) -> bool {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return false;
    };
    let Some(host) = parsed.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback() || ip.is_unspecified(),
        Err(_) => host == "localhost" || host.ends_with(".localhost"),
    }
}

/// The sentence for a server that says the model does not exist, naming the fix:
/// `ollama pull` for Ollama, else the config key.
fn model_missing(cfg: &ProviderConfig, model: &str, message: &str, body: &str) -> Option<String> {
    let lower = message.to_ascii_lowercase();
    let url = &cfg.base_url;
    let name = &cfg.name;
    if lower.contains("try pulling it") || (lower.contains("not found") && url.contains(":11434")) {
        return Some(format!(
            "model `{model}` is not installed in Ollama at {url}: run `ollama pull {model}`, or \
             set `model` in [providers.{name}] (or the soul's `model`) to one `ollama list` shows \
             (server said: {message})"
        ));
    }
    let code = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("error")?.get("code")?.as_str().map(str::to_owned));
    let says_missing = code.as_deref() == Some("model_not_found")
        || (lower.contains("model")
            && (lower.contains("does not exist") || lower.contains("not found")));
    says_missing.then(|| {
        format!(
            "model `{model}` does not exist at {url} (or this key may not use it): set `model` in \
             [providers.{name}] (or the soul's `model`) to a model the server lists; \
             `familiar doctor` shows them (server said: {message})"
        )
    })
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

/// Adds a wire format's headers and the key to a request ([`Wire::authorize`]).
type Authorize = fn(reqwest::RequestBuilder, Option<&ApiKey>) -> reqwest::RequestBuilder;

enum Phase {
    /// The request without its key, which may still have to be read.
    Send(Box<reqwest::RequestBuilder>, Authorize),
    Read(SseStream),
    Done,
}

struct Drive {
    ctx: Arc<HttpCtx>,
    model: String,
    framing: Framing,
    /// The liveness check's path under the base URL ([`Wire::CHECK_PATH`]).
    check_path: &'static str,
    phase: Phase,
    decoder: Box<dyn Decoder>,
    queue: VecDeque<StreamEvent>,
    cancel: CancellationToken,
    /// When the wait for the first token ends (`first_token_timeout` after sending).
    first_token_by: Option<Instant>,
    /// A token came: from now on `stall_timeout` bounds the gap between events.
    answering: bool,
}

/// One provider's wire format: where a request goes, how it carries the key, its body,
/// and the decoder of its stream. The HTTP side ([`HttpProvider`]) is the same for all.
pub(crate) trait Wire: Send + Sync + 'static {
    /// The path under the provider's base URL.
    const PATH: &'static str;

    /// A cheap GET under the base URL for the liveness check (see [`PROBE_AFTER`]);
    /// any answer counts, so a path the server lacks (404) does as well.
    const CHECK_PATH: &'static str = "/models";

    /// Adds the provider's own headers and the API key, if there is one.
    fn authorize(builder: reqwest::RequestBuilder, key: Option<&ApiKey>)
    -> reqwest::RequestBuilder;

    /// The JSON body for `req`: a struct, so its fields go out in the order it
    /// declares (a `Value` would sort them), which keeps request prefixes stable.
    type Body: serde::Serialize;

    /// The JSON body for `req` to the server `cfg` describes.
    fn body(req: &Request, cfg: &ProviderConfig) -> Self::Body;

    /// A decoder for one response's stream.
    fn decoder() -> Box<dyn Decoder>;
}

/// A provider that speaks wire format `W` over HTTP with SSE.
pub(crate) struct HttpProvider<W> {
    ctx: Arc<HttpCtx>,
    wire: PhantomData<W>,
}

impl<W: Wire> HttpProvider<W> {
    pub(crate) fn new(ctx: Arc<HttpCtx>) -> Self {
        HttpProvider {
            ctx,
            wire: PhantomData,
        }
    }
}

impl<W: Wire> Provider for HttpProvider<W> {
    fn stream(
        &self,
        req: &Request,
        cancel: CancellationToken,
    ) -> BoxStream<'static, Result<StreamEvent, LlmError>> {
        let url = format!("{}{}", self.ctx.cfg.base_url, W::PATH);
        let builder = self
            .ctx
            .client
            .post(url)
            .header("accept", "text/event-stream")
            .json(&W::body(req, &self.ctx.cfg));
        drive(
            Arc::clone(&self.ctx),
            builder,
            W::authorize,
            W::decoder(),
            Endpoint {
                framing: Framing::Sse,
                check_path: W::CHECK_PATH,
            },
            req.model.clone(),
            cancel,
        )
    }

    fn name(&self) -> &str {
        &self.ctx.cfg.name
    }

    fn default_model(&self) -> &str {
        &self.ctx.cfg.model
    }
}

/// How a response body is cut into events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// Server-sent events (OpenAI, Anthropic).
    Sse,
    /// One JSON object per line (Ollama's native API).
    Ndjson,
}

/// How a provider's responses are framed, and where its liveness check goes.
pub(crate) struct Endpoint {
    pub(crate) framing: Framing,
    /// The liveness check's path under the base URL ([`Wire::CHECK_PATH`]).
    pub(crate) check_path: &'static str,
}

/// Streams the response to `request` through `decoder`.
pub(crate) fn drive(
    ctx: Arc<HttpCtx>,
    request: reqwest::RequestBuilder,
    authorize: Authorize,
    decoder: Box<dyn Decoder>,
    endpoint: Endpoint,
    model: String,
    cancel: CancellationToken,
) -> BoxStream<'static, Result<StreamEvent, LlmError>> {
    let state = Drive {
        ctx,
        model,
        framing: endpoint.framing,
        check_path: endpoint.check_path,
        phase: Phase::Send(Box::new(request), authorize),
        decoder,
        queue: VecDeque::new(),
        cancel,
        first_token_by: None,
        answering: false,
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
                self.answering |= ev.is_answer();
                return Some(Ok(ev));
            }
            match std::mem::replace(&mut self.phase, Phase::Done) {
                Phase::Done => return None,
                Phase::Send(request, authorize) => {
                    let key = tokio::select! {
                        biased;
                        () = self.cancel.cancelled() => return Some(Err(LlmError::Cancelled)),
                        key = self.ctx.key() => key,
                    };
                    let request = match key {
                        Ok(key) => authorize(*request, key),
                        Err(e) => return Some(Err(e)),
                    };
                    let by = Instant::now() + self.ctx.cfg.first_token_timeout;
                    self.first_token_by = Some(by);
                    let check_url = format!("{}{}", self.ctx.cfg.base_url, self.check_path);
                    match send(
                        &self.ctx,
                        &self.cancel,
                        &self.model,
                        request,
                        Wait { by, check_url },
                        self.framing,
                    )
                    .await
                    {
                        Ok(sse) => self.phase = Phase::Read(sse),
                        Err(e) => return Some(Err(e)),
                    }
                }
                Phase::Read(mut sse) => {
                    // Until the first token the server may be reading a long prompt
                    // (with or without progress reports): that wait is bounded by
                    // first_token_timeout alone, never by stall_timeout.
                    let (deadline, timed_out) = match self.first_token_by {
                        Some(by) if !self.answering => (by, self.ctx.no_first_token()),
                        Some(_) | None => {
                            let stall = self.ctx.cfg.stall_timeout;
                            (Instant::now() + stall, LlmError::Stalled(stall))
                        }
                    };
                    let item = tokio::select! {
                        biased;
                        () = self.cancel.cancelled() => return Some(Err(LlmError::Cancelled)),
                        item = tokio::time::timeout_at(deadline, sse.next()) => match item {
                            Ok(item) => item,
                            Err(_) => return Some(Err(timed_out)),
                        },
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

/// How long [`send`] waits for the response, and how it checks the server meanwhile.
struct Wait {
    /// The first token's deadline.
    by: Instant,
    /// Asked after [`PROBE_AFTER`] of silence (see [`HttpCtx::answers`]).
    check_url: String,
}

/// Sends `request`; a success becomes the SSE event stream, anything else an error.
/// Some servers send the headers only with the first token (after the prefill), so the
/// wait for them is the first token's.
async fn send(
    ctx: &Arc<HttpCtx>,
    cancel: &CancellationToken,
    model: &str,
    request: reqwest::RequestBuilder,
    wait: Wait,
    framing: Framing,
) -> Result<SseStream, LlmError> {
    let stall = ctx.cfg.stall_timeout;
    let response = tokio::select! {
        biased;
        () = cancel.cancelled() => return Err(LlmError::Cancelled),
        r = first_response(ctx, request.send(), wait) => r?,
    };
    let response = match response {
        Err(e) => return Err(ctx.connect_error(&e)),
        Ok(r) => r,
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
    // The gaps between events are bounded in `Drive`, which knows whether the answer
    // has started (bytes alone do not tell a progress report from a token).
    let bytes = sse::size_guard(bytes, sse::MAX_RESPONSE_BYTES);
    Ok(match framing {
        Framing::Sse => sse::events(bytes),
        Framing::Ndjson => sse::ndjson_lines(bytes),
    })
}

/// Waits for `response` until `wait.by`. Silence for [`PROBE_AFTER`] starts a liveness
/// check: a server that answers it is busy (reading a long prompt; llama.cpp and Ollama
/// serve their model lists meanwhile) and the wait goes on; one that answers neither is
/// stopped or wedged, and the request fails now with what to check.
async fn first_response<T>(
    ctx: &HttpCtx,
    response: impl Future<Output = T>,
    wait: Wait,
) -> Result<T, LlmError> {
    let started = Instant::now();
    let mut response = std::pin::pin!(response);
    let check_at = started + PROBE_AFTER;
    if check_at < wait.by {
        tokio::select! {
            biased;
            r = &mut response => return Ok(r),
            () = tokio::time::sleep_until(check_at) => {}
        }
        let alive = tokio::select! {
            biased;
            r = &mut response => return Ok(r),
            alive = ctx.answers(&wait.check_url) => alive,
        };
        if !alive {
            return Err(ctx.unresponsive(started.elapsed(), wait.check_url));
        }
    }
    tokio::time::timeout_at(wait.by, response)
        .await
        .map_err(|_| ctx.no_first_token())
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
