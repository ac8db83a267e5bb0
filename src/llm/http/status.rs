//! What a failed exchange with a model server means, in words a user can act on: a
//! status and its body ([`HttpCtx::status_error`]: a missing model, no tool support,
//! a context overflow, the server's own message, its `Retry-After`), a connection that
//! failed ([`HttpCtx::connect_error`]: refused here, or unreachable) and a first token
//! that never came ([`HttpCtx::no_first_token`], [`HttpCtx::unresponsive`]).

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;

use super::HttpCtx;
use crate::config::ProviderConfig;
use crate::llm::keys::describe_source;
use crate::llm::{ConnectError, LlmError};

/// Longest server-requested wait we honour; past it the server is not coming back soon
/// and the normal backoff cap is a better guess.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);
/// Longest server error text kept in an error message.
const MAX_MESSAGE: usize = 500;

impl HttpCtx {
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
        if let Some(o) = crate::llm::overflow::classify(Some(status), body, &message) {
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
        LlmError::NoFirstToken(crate::llm::NoFirstToken {
            after: self.cfg.first_token_timeout,
            provider: self.cfg.name.clone(),
            base_url: self.cfg.base_url.clone(),
            local: crate::config::is_local_url(&self.cfg.base_url),
            unanswered_check: None,
        })
    }

    /// The error for a server that answered neither the request within `after` nor the
    /// liveness check of `check_url`.
    pub(super) fn unresponsive(&self, after: Duration, check_url: String) -> LlmError {
        LlmError::NoFirstToken(crate::llm::NoFirstToken {
            after,
            provider: self.cfg.name.clone(),
            base_url: self.cfg.base_url.clone(),
            local: crate::config::is_local_url(&self.cfg.base_url),
            unanswered_check: Some(check_url),
        })
    }

    pub(crate) fn connect_error(&self, err: &reqwest::Error) -> LlmError {
        let url = &self.cfg.base_url;
        let refused = refused(err);
        let unresolved = unresolved(err);
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
        let message = if unresolved {
            // The resolver's own words repeat the URL: one short sentence instead.
            format!(
                "cannot reach {url}: its host name does not resolve; check base_url under \
                 [providers.{}] in config.toml and this machine's network; `familiar doctor` \
                 checks the setup",
                self.cfg.name
            )
        } else if on_this_machine && err.is_connect() {
            format!(
                "nothing answers at {url} ({detail}): {}, or set ANTHROPIC_API_KEY / \
                 OPENAI_API_KEY, or configure [providers.*] in config.toml; `familiar doctor` \
                 checks the setup",
                start_hint(url)
            )
        } else {
            format!("cannot reach {url}: {detail}")
        };
        LlmError::Connect(ConnectError {
            message,
            // A name that does not resolve will not in a second either: give up as fast.
            refused_locally: (refused && on_this_machine) || unresolved,
        })
    }
}

/// What to start at a local `url` that nothing answers, by its port: Ollama's 11434,
/// llama.cpp's 8080, else either one on that port.
fn start_hint(url: &str) -> String {
    let port = reqwest::Url::parse(url)
        .ok()
        .and_then(|u| u.port_or_known_default());
    match port {
        Some(11434) => "start Ollama there (`ollama serve`)".to_owned(),
        Some(8080) => "start llama.cpp there (`llama-server --port 8080 -m MODEL.gguf`)".to_owned(),
        Some(p) => format!(
            "start a model server on port {p} (llama.cpp: `llama-server --port {p} -m MODEL.gguf`; Ollama: `OLLAMA_HOST=127.0.0.1:{p} ollama serve`)"
        ),
        None => "start a model server there".to_owned(),
    }
}

/// Whether the host name did not resolve (hyper's connector reports the resolver's
/// failure as a `dns error`; there is no typed error to match).
fn unresolved(err: &reqwest::Error) -> bool {
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        if s.to_string().starts_with("dns error") {
            return true;
        }
        source = s.source();
    }
    false
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

    // Regression: the hint said "llama.cpp (`llama-server --port 8080`) there" for
    // Ollama's port 11434.
    #[test]
    fn the_no_server_hint_names_the_server_of_the_port() {
        let hint = super::start_hint("http://127.0.0.1:11434/v1");
        assert_eq!(hint, "start Ollama there (`ollama serve`)");
        assert!(super::start_hint("http://localhost:8080/v1").contains("llama-server --port 8080"));
        let other = super::start_hint("http://127.0.0.1:9000/v1");
        assert!(
            other.contains("--port 9000") && other.contains("127.0.0.1:9000"),
            "{other}"
        );
    }
}
