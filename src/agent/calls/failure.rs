//! A failed model call as the person reads it when the task ends: what failed, and what
//! they can do about it.

use crate::llm::LlmError;

/// A failed model call as a task result: what failed, and what the person can do.
pub(in crate::agent) fn model_failure(e: &LlmError) -> String {
    format!("the model call failed: {e}{}", failure_hint(e))
}

/// What to do about a failed call, when its message does not say it already. The last
/// error decides when retries ran out: a server nobody reaches is not helped by
/// `fallback_model` (a fallback is tried only for an answering server), so the advice
/// is what to start or check.
fn failure_hint(e: &LlmError) -> &'static str {
    match e {
        LlmError::RetriesExhausted { last, .. } => failure_hint(last),
        // A server on this machine refused: the message names what to start.
        LlmError::Connect(c) if c.refused_locally => "",
        LlmError::Connect(_) => {
            " (check that the server runs and that this machine reaches it at the provider's base_url; `familiar doctor` checks the setup)"
        }
        // These carry their own remedy (fix the key, the model name, the request).
        LlmError::Auth(_)
        | LlmError::BadRequest(_)
        | LlmError::ContextOverflow(_)
        | LlmError::NotFound(_)
        | LlmError::NoToolSupport(_)
        | LlmError::Config(_)
        | LlmError::NoFirstToken(_)
        | LlmError::Cancelled => "",
        LlmError::RateLimited { .. }
        | LlmError::Overloaded { .. }
        | LlmError::Server { .. }
        | LlmError::Stalled(_)
        | LlmError::Truncated(_)
        | LlmError::Protocol(_)
        | LlmError::Http { .. } => {
            " (the model provider kept failing: run the task again later, or set `fallback_model` or `fallback_provider` for it in config.toml)"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ConnectError;

    // A refused connection, retried once, must not be told to set fallback_model,
    // which never applies to a connection error.
    #[test]
    fn a_connection_error_is_never_told_to_set_a_fallback() {
        let refused = LlmError::Connect(ConnectError {
            message:
                "nothing answers at http://127.0.0.1:8080/v1 (connection refused): start Ollama"
                    .into(),
            refused_locally: true,
        });
        let after_retries = LlmError::RetriesExhausted {
            attempts: 2,
            last: Box::new(refused),
        };
        let text = model_failure(&after_retries);
        assert!(!text.contains("fallback"), "{text}");
        assert!(text.contains("start Ollama"), "{text}");

        let remote = LlmError::RetriesExhausted {
            attempts: 5,
            last: Box::new(LlmError::Connect(ConnectError::new(
                "cannot reach https://example.test/v1: dns error",
            ))),
        };
        let text = model_failure(&remote);
        assert!(!text.contains("fallback"), "{text}");
        assert!(text.contains("check that the server runs"), "{text}");

        let server = LlmError::RetriesExhausted {
            attempts: 5,
            last: Box::new(LlmError::Server {
                status: 500,
                message: "x".into(),
                retry_after: None,
            }),
        };
        assert!(model_failure(&server).contains("fallback_model"));
    }
}
