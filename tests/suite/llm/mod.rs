//! LLM providers against recorded fixtures and the scripted loopback server, for both
//! wire formats: `decode` (fixtures, chunk-boundary invariance), `faults` (what is sent,
//! retries, fallback, stalls, cuts, cancellation). Shared here: [`Wire`], which builds
//! the same scripted response in either format.
// Test helpers: a failed setup step should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod decode;
mod fallback;
mod faults;
mod first_contact;
mod ollama;
mod prefill;
mod requests;

use std::collections::BTreeMap;
use std::time::Duration;

use familiar::config::{ApiKeySource, ProviderConfig, ProviderKind};
use familiar::llm::{
    ClientEvent, ContentBlock, FinishReason, LlmClient, LlmError, Message, Request, RetryPolicy,
    Role, Sleeper, StreamEvent, ToolDef,
};
use familiar_protocol::ids::CallId;
use futures::StreamExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common::llm_server::*;

const KEY_VAR: &str = "FAMILIAR_TEST_KEY";
const KEY: &str = "sk-test-secret-0123456789";

/// The two wire formats, so every behaviour is checked for both.
#[derive(Debug, Clone, Copy)]
enum Wire {
    OpenAi,
    Anthropic,
}

const WIRES: [Wire; 2] = [Wire::OpenAi, Wire::Anthropic];

impl Wire {
    fn config(self, server: &LlmServer) -> ProviderConfig {
        let (kind, base_url) = match self {
            Wire::OpenAi => (ProviderKind::Openai, format!("{}/v1", server.base)),
            Wire::Anthropic => (ProviderKind::Anthropic, server.base.clone()),
        };
        ProviderConfig {
            name: "test".into(),
            kind,
            base_url,
            model: "main-model".into(),
            api_key: ApiKeySource::Env(KEY_VAR.into()),
            context_window: 32_768,
            context_window_configured: true,
            fallback_model: None,
            fallback_provider: None,
            stall_timeout: Duration::from_secs(10),
            first_token_timeout: Duration::from_secs(10),
            keep_alive: None,
            max_retries: 4,
            max_output_tokens: 100,
            temperature: None,
            vision: false,
        }
    }

    fn path(self) -> &'static str {
        match self {
            Wire::OpenAi => "/v1/chat/completions",
            Wire::Anthropic => "/v1/messages",
        }
    }

    fn overload_status(self) -> u16 {
        match self {
            Wire::OpenAi => 503,
            Wire::Anthropic => 529,
        }
    }

    fn text(self, text: &str) -> String {
        match self {
            Wire::OpenAi => sse(vec![
                oa_text(text),
                oa_finish("stop"),
                oa_usage(10, 2),
                oa_done(),
            ]),
            Wire::Anthropic => sse(vec![
                an_message_start(10),
                an_text(0, text),
                an_message_delta("end_turn", 2),
                an_message_stop(),
            ]),
        }
    }

    /// The start of a response: some text and a tool call whose arguments are cut.
    fn partial_tool(self, id: &str, args_prefix: &str) -> String {
        match self {
            Wire::OpenAi => sse(vec![
                oa_text("let me look"),
                oa_tool_call(0, id, "read_file", args_prefix),
            ]),
            Wire::Anthropic => sse(vec![
                an_message_start(10),
                an_text(0, "let me look"),
                an_tool_start(1, id, "read_file"),
                an_tool_json(1, args_prefix),
            ]),
        }
    }

    /// A whole response with one tool call whose arguments are `args` verbatim.
    fn tool(self, id: &str, args: &str) -> String {
        match self {
            Wire::OpenAi => sse(vec![
                oa_text("let me look"),
                oa_tool_call(0, id, "read_file", args),
                oa_finish("tool_calls"),
                oa_usage(10, 5),
                oa_done(),
            ]),
            Wire::Anthropic => sse(vec![
                an_message_start(10),
                an_text(0, "let me look"),
                an_tool(1, id, "read_file", args),
                an_message_delta("tool_use", 5),
                an_message_stop(),
            ]),
        }
    }
}

fn env() -> BTreeMap<String, String> {
    BTreeMap::from([(KEY_VAR.to_owned(), KEY.to_owned())])
}

fn client(cfg: &ProviderConfig) -> LlmClient {
    LlmClient::from_config(cfg, &env(), &|_| None)
        .unwrap()
        .with_retry(RetryPolicy {
            max_retries: cfg.max_retries,
            sleeper: Sleeper::none(),
            ..RetryPolicy::default()
        })
}

fn request(cfg: &ProviderConfig) -> Request {
    let read_file = ToolDef {
        name: "read_file".into(),
        description: "Read a file".into(),
        input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}},
            "required": ["path"]}),
    };
    let notify = ToolDef {
        name: "notify".into(),
        description: "Show a notification".into(),
        input_schema: json!({"type": "object", "properties": {"summary": {"type": "string"}}}),
    };
    let history = vec![
        Message::user_text("what is in /tmp/x?"),
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "read it".into(),
                    signature: Some("sig".into()),
                },
                ContentBlock::Text {
                    text: "reading".into(),
                },
                ContentBlock::ToolUse {
                    id: CallId::from_provider("c1"),
                    name: "read_file".into(),
                    input: json!({"path": "/tmp/x"}),
                },
            ],
        },
        Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: CallId::from_provider("c1"),
                content: "hello".into(),
                is_error: false,
            }],
        },
    ];
    Request::new(cfg, "You are terse.", history, vec![read_file, notify])
}

/// Every event until the stream ends, and the error it ended with, if any.
async fn run(client: &mut LlmClient, req: &Request) -> (Vec<ClientEvent>, Option<LlmError>) {
    let mut events = Vec::new();
    let mut stream = client.stream(req, CancellationToken::new());
    while let Some(item) = stream.next().await {
        match item {
            Ok(ev) => events.push(ev),
            Err(e) => return (events, Some(e)),
        }
    }
    (events, None)
}

fn text_of(events: &[ClientEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            ClientEvent::Event(StreamEvent::TextDelta { text }) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn retries(events: &[ClientEvent]) -> Vec<(u32, Duration)> {
    events
        .iter()
        .filter_map(|e| match e {
            ClientEvent::Retry { attempt, delay, .. } => Some((*attempt, *delay)),
            _ => None,
        })
        .collect()
}

fn finish() -> ClientEvent {
    ClientEvent::Event(StreamEvent::Finish {
        reason: FinishReason::Stop,
    })
}
