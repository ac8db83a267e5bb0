//! [`LlmError`]: what can go wrong talking to a model, split by what the caller does
//! about it (retry, fall back, or tell the user what to fix).
//!
//! Messages never contain an API key: server text is scrubbed before it is stored
//! here (see `http/status.rs`).

use std::time::Duration;

/// Why a model request failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    /// Missing or rejected API key; the message names what to set.
    #[error("{0}")]
    Auth(String),
    /// 400: the server's own message.
    #[error("{0}")]
    BadRequest(String),
    /// The request does not fit the model's context, in any server's wording (see
    /// [`super::overflow`]); the loop compacts and tries again.
    #[error("{0}")]
    ContextOverflow(super::ContextOverflow),
    /// 404: unknown model or wrong base_url.
    #[error("{0}")]
    NotFound(String),
    /// The server or model cannot do tool calls.
    #[error("{0}")]
    NoToolSupport(String),
    /// Any other status that retrying will not fix.
    #[error("HTTP {status}: {message}")]
    Http { status: u16, message: String },
    /// 429.
    #[error("rate limited (429): {message}")]
    RateLimited {
        message: String,
        retry_after: Option<Duration>,
    },
    /// 529, 503, or an `overloaded_error` event.
    #[error("overloaded ({status}): {message}")]
    Overloaded {
        status: u16,
        message: String,
        retry_after: Option<Duration>,
    },
    /// 500, 502, 504, or an `api_error` event.
    #[error("server error {status}: {message}")]
    Server {
        status: u16,
        message: String,
        retry_after: Option<Duration>,
    },
    /// Nothing answered, or the connection failed before a response.
    #[error("{0}")]
    Connect(ConnectError),
    /// No bytes for the stall timeout.
    #[error("stream stalled: no data for {0:?}")]
    Stalled(Duration),
    /// No token within `first_token_timeout` of sending the request.
    #[error("{0}")]
    NoFirstToken(NoFirstToken),
    /// The connection closed before the response was complete.
    #[error("stream ended early: {0}")]
    Truncated(String),
    /// The server sent something that is not the protocol.
    #[error("malformed response: {0}")]
    Protocol(String),
    #[error("cancelled")]
    Cancelled,
    /// The provider cannot be built (bad config, TLS setup).
    #[error("{0}")]
    Config(String),
    /// Every allowed attempt failed with a retryable error; `last` is the last one.
    #[error("giving up after {attempts} attempts: {last}")]
    RetriesExhausted { attempts: u32, last: Box<LlmError> },
}

impl LlmError {
    /// Whether another attempt may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            LlmError::RateLimited { .. }
            | LlmError::Overloaded { .. }
            | LlmError::Server { .. }
            | LlmError::Connect(_)
            | LlmError::Stalled(_)
            | LlmError::Truncated(_) => true,
            // A server of one's own is still reading the prompt after the timeout, or
            // stuck: a second request would only queue behind the first.
            LlmError::NoFirstToken(t) => !t.local,
            LlmError::Auth(_)
            | LlmError::BadRequest(_)
            | LlmError::ContextOverflow(_)
            | LlmError::NotFound(_)
            | LlmError::NoToolSupport(_)
            | LlmError::Http { .. }
            | LlmError::Protocol(_)
            | LlmError::Cancelled
            | LlmError::Config(_)
            | LlmError::RetriesExhausted { .. } => false,
        }
    }

    /// The wait the server asked for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LlmError::RateLimited { retry_after, .. }
            | LlmError::Overloaded { retry_after, .. }
            | LlmError::Server { retry_after, .. } => *retry_after,
            LlmError::Auth(_)
            | LlmError::BadRequest(_)
            | LlmError::ContextOverflow(_)
            | LlmError::NotFound(_)
            | LlmError::NoToolSupport(_)
            | LlmError::Http { .. }
            | LlmError::Connect(_)
            | LlmError::Stalled(_)
            | LlmError::NoFirstToken(_)
            | LlmError::Truncated(_)
            | LlmError::Protocol(_)
            | LlmError::Cancelled
            | LlmError::Config(_)
            | LlmError::RetriesExhausted { .. } => None,
        }
    }

    /// Whether this is a sign the model is overloaded (counts toward fallback).
    pub fn is_overload(&self) -> bool {
        matches!(self, LlmError::Overloaded { .. })
    }

    /// Whether a server on this machine refused the connection: nothing listens
    /// there, which waiting will not change: worth one quick retry for a server that is
    /// just restarting, not five with backoff.
    pub fn is_refused_locally(&self) -> bool {
        matches!(self, LlmError::Connect(c) if c.refused_locally)
    }
}

/// No token came within `first_token_timeout`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoFirstToken {
    pub after: Duration,
    /// The `[providers.NAME]`, for the fix.
    pub provider: String,
    pub base_url: String,
    /// The server is on this machine or the local network (`config::is_local_url`).
    pub local: bool,
    /// The liveness check's URL when the server answered that neither: it accepts
    /// connections but is stopped or wedged, and `after` is the time it had.
    pub unanswered_check: Option<String>,
}

impl std::fmt::Display for NoFirstToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let after = humantime::format_duration(self.after);
        let (url, name) = (&self.base_url, &self.provider);
        if let Some(check) = &self.unanswered_check {
            write!(
                f,
                "no answer from {url} after {after}, nor to a check of {check}: the server \
                 accepts connections but does not respond (stopped, or stuck); restart it, or \
                 check base_url in [providers.{name}]; `familiar doctor` checks the setup"
            )
        } else if self.local {
            write!(
                f,
                "no answer from {url} within first_token_timeout ({after}): the server is still \
                 reading the prompt, or stuck; raise first_token_timeout in [providers.{name}], or \
                 use a smaller model or a soul with fewer tools"
            )
        } else {
            write!(
                f,
                "no answer from {url} within first_token_timeout ({after}); raise \
                 first_token_timeout in [providers.{name}] if its model thinks that long"
            )
        }
    }
}

/// Why no response came: the sentence for the user and what kind of failure it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectError {
    pub message: String,
    /// A loopback address refused the connection, or the host name does not resolve:
    /// nothing to wait for (see [`LlmError::is_refused_locally`]).
    pub refused_locally: bool,
}

impl ConnectError {
    pub fn new(message: impl Into<String>) -> Self {
        ConnectError {
            message: message.into(),
            refused_locally: false,
        }
    }

    /// The few words a retry line gives this failure (the final error says the rest).
    pub fn short(&self) -> &'static str {
        if self.message.contains("does not resolve") {
            "the host name does not resolve"
        } else if self.refused_locally {
            "connection refused"
        } else {
            "cannot connect"
        }
    }
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}
