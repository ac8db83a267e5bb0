//! [`ContextOverflow`]: "the request is too long for this model", recognised in every
//! server's own words, with the server's real limit when the answer states it.
//!
//! What servers send (HTTP 400 unless noted):
//! - OpenAI: `error.code = "context_length_exceeded"`, message "This model's maximum
//!   context length is 128000 tokens. However, your messages resulted in …".
//! - Anthropic: `error.type = "invalid_request_error"`, message "prompt is too long:
//!   208310 tokens > 200000 maximum".
//! - llama.cpp's `llama-server`: `error.type = "exceed_context_size_error"` with
//!   `n_prompt_tokens` and `n_ctx` beside the message "request (9873 tokens) exceeds the
//!   available context size (8192 tokens)" (older builds: "the request exceeds the
//!   available context size, try increasing it").
//! - vLLM (and OpenRouter): "This model's maximum context length is 4096 tokens.
//!   However, you requested 5000 tokens (…)" or "… your request has 3500 input tokens",
//!   either under `error` or at the top level (`{"object": "error", "message": …}`).
//! - Ollama's native API, when it refuses instead of cutting: "input length exceeds the
//!   context length".
//!
//! Ollama's OpenAI-compatible endpoint cannot be told its context size per request (no
//! `options` field): it cuts the prompt silently, which only `num_ctx` on the server
//! side prevents (docs/providers.md).

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

/// The request did not fit the model's context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextOverflow {
    /// The server's context size in tokens, when it said.
    pub limit: Option<u64>,
    /// How many tokens the server counted for the request, when it said.
    pub requested: Option<u64>,
    /// The server's message (scrubbed, cut).
    pub message: String,
}

impl std::fmt::Display for ContextOverflow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request does not fit the model's context")?;
        match (self.requested, self.limit) {
            (Some(r), Some(l)) => write!(f, " ({r} tokens, the server's limit is {l})")?,
            (None, Some(l)) => write!(f, " (the server's limit is {l} tokens)")?,
            (Some(r), None) => write!(f, " ({r} tokens)")?,
            (None, None) => {}
        }
        write!(f, ": {}", self.message)
    }
}

/// `N tokens > M maximum` (Anthropic).
static ANTHROPIC: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?i)prompt is too long:\s*(\d+)\s*tokens\s*>\s*(\d+)").ok());
/// `maximum context length is N tokens` (OpenAI, vLLM, OpenRouter).
static MAX_CONTEXT: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?i)maximum context length is\s*(\d+)").ok());
/// What the request came to, in the same messages.
static REQUESTED: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"(?i)(?:resulted in|you requested(?: about)?|request has|contains at least)\s*(\d+)\s*(?:input\s*)?tokens",
    )
    .ok()
});
/// `request (N tokens) exceeds the available context size (M tokens)` (llama.cpp).
static LLAMA: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?i)\((\d+)\s*tokens\)\s*exceeds the available context size\s*\((\d+)").ok()
});

fn capture(re: &LazyLock<Option<Regex>>, text: &str, group: usize) -> Option<u64> {
    let caps = re.as_ref()?.captures(text)?;
    caps.get(group)?.as_str().parse().ok()
}

/// Recognises a context overflow in an error answer: `status` and the raw `body`
/// (JSON or not), or `message` alone (an error event inside a stream). `message` is
/// the already-extracted, scrubbed text kept in the error.
pub fn classify(status: Option<u16>, body: &str, message: &str) -> Option<ContextOverflow> {
    if matches!(status, Some(s) if s != 400 && s != 413 && s != 422) {
        return None;
    }
    let json = serde_json::from_str::<Value>(body).ok();
    let err = json.as_ref().map(|v| v.get("error").unwrap_or(v));
    let field = |name: &str| err.and_then(|e| e.get(name));
    let str_field = |name: &str| field(name).and_then(Value::as_str).unwrap_or("");
    let num_field = |name: &str| field(name).and_then(Value::as_u64);
    let lower = message.to_ascii_lowercase();

    let typed = str_field("code") == "context_length_exceeded"
        || str_field("type") == "exceed_context_size_error";
    let worded = lower.contains("prompt is too long")
        || lower.contains("maximum context length")
        || lower.contains("exceeds the available context size")
        || lower.contains("exceeds the context length")
        || lower.contains("context_length_exceeded")
        || lower.contains("context window of this model");
    if !typed && !worded {
        return None;
    }
    let limit = num_field("n_ctx")
        .or_else(|| capture(&ANTHROPIC, message, 2))
        .or_else(|| capture(&LLAMA, message, 2))
        .or_else(|| capture(&MAX_CONTEXT, message, 1));
    let requested = num_field("n_prompt_tokens")
        .or_else(|| capture(&ANTHROPIC, message, 1))
        .or_else(|| capture(&LLAMA, message, 1))
        .or_else(|| capture(&REQUESTED, message, 1));
    Some(ContextOverflow {
        limit,
        requested,
        message: message.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::http::server_message;

    fn check(body: &str) -> Option<ContextOverflow> {
        classify(Some(400), body, &server_message(body))
    }

    #[test]
    fn openai_context_length_exceeded() {
        let body = r#"{"error": {"message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 130532 tokens. Please reduce the length of the messages.", "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}"#;
        let o = check(body).unwrap();
        assert_eq!((o.limit, o.requested), (Some(128_000), Some(130_532)));
        // The newer wording states no numbers; the code alone is enough.
        let body = r#"{"error": {"message": "Your input exceeds the context window of this model. Please adjust your input and try again.", "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}}"#;
        let o = check(body).unwrap();
        assert_eq!((o.limit, o.requested), (None, None));
    }

    #[test]
    fn anthropic_prompt_is_too_long() {
        let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}"#;
        let o = check(body).unwrap();
        assert_eq!((o.limit, o.requested), (Some(200_000), Some(208_310)));
    }

    #[test]
    fn llama_cpp_exceed_context_size() {
        let body = r#"{"error":{"code":400,"message":"request (9873 tokens) exceeds the available context size (8192 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9873,"n_ctx":8192}}"#;
        let o = check(body).unwrap();
        assert_eq!((o.limit, o.requested), (Some(8192), Some(9873)));
        // Older builds: no numbers in the text, but the fields are there.
        let body = r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":4476,"n_ctx":4096}}"#;
        let o = check(body).unwrap();
        assert_eq!((o.limit, o.requested), (Some(4096), Some(4476)));
        // The text alone (an error chunk without the fields).
        let o = classify(
            None,
            "",
            "request (9873 tokens) exceeds the available context size (8192 tokens)",
        )
        .unwrap();
        assert_eq!((o.limit, o.requested), (Some(8192), Some(9873)));
    }

    #[test]
    fn vllm_maximum_context_length() {
        let body = r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#;
        let o = check(body).unwrap();
        assert_eq!((o.limit, o.requested), (Some(4096), Some(5000)));
        let body = r#"{"error":{"message":"This model's maximum context length is 2048 tokens. However, your request has 3000 input tokens. Please reduce the length of the input messages. None","type":"BadRequestError","param":null,"code":400}}"#;
        let o = check(body).unwrap();
        assert_eq!((o.limit, o.requested), (Some(2048), Some(3000)));
    }

    #[test]
    fn other_errors_are_not_overflows() {
        assert_eq!(
            check(
                r#"{"error":{"message":"max_tokens: too large","type":"invalid_request_error"}}"#
            ),
            None
        );
        let body = r#"{"error":{"message":"prompt is too long: 9 tokens > 8 maximum"}}"#;
        assert_eq!(classify(Some(500), body, &server_message(body)), None);
        assert!(
            check(r#"{"error":"the input length exceeds the context length"}"#).is_some(),
            "Ollama's native wording"
        );
    }
}
