//! Against a real llama.cpp server and a real model (SmolLM2-135M-Instruct), what does
//! not depend on the model's wording (issue 25 §8): llama.cpp's prefill progress, and
//! the prompt cache as the server counts it. Temperature 0 and a few output tokens keep
//! each test to seconds on two cores. Skipped without the venv (tests/README.md).
// Test helpers: a failed setup step should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use familiar::config::{ApiKeySource, ProviderConfig, ProviderKind};
use familiar::llm::{ClientEvent, LlmClient, Message, Request, RetryPolicy, StreamEvent, Usage};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::common::llama::LlamaServer;

fn config(server: &LlamaServer) -> ProviderConfig {
    ProviderConfig {
        name: "llamacpp".into(),
        kind: ProviderKind::Openai,
        base_url: format!("{}/v1", server.base),
        model: "smollm2".into(),
        api_key: ApiKeySource::None,
        context_window: 4096,
        context_window_configured: true,
        fallback_model: None,
        fallback_provider: None,
        stall_timeout: Duration::from_secs(30),
        first_token_timeout: Duration::from_secs(300),
        keep_alive: None,
        max_retries: 0,
        max_output_tokens: 4,
        temperature: Some(0.0),
    }
}

/// A system prompt of roughly `words` tokens that reads like a soul's.
fn system(words: usize) -> String {
    (0..words)
        .map(|i| {
            [
                "You", "help", "on", "a", "Linux", "desktop", "with", "care.",
            ][i % 8]
        })
        .collect::<Vec<_>>()
        .join(" ")
}

async fn run(client: &mut LlmClient, req: &Request) -> (Vec<(u64, u64, u64)>, Usage) {
    let mut progress = Vec::new();
    let mut usage = Usage::default();
    let mut stream = client.stream(req, CancellationToken::new());
    while let Some(item) = stream.next().await {
        match item.unwrap() {
            ClientEvent::Event(StreamEvent::PromptProgress {
                processed,
                total,
                cached,
            }) => progress.push((processed, total, cached)),
            ClientEvent::Event(StreamEvent::Usage { usage: u }) => usage = u,
            _ => {}
        }
    }
    (progress, usage)
}

fn client(cfg: &ProviderConfig) -> LlmClient {
    LlmClient::from_config(cfg, &BTreeMap::<String, String>::new(), &|_| None)
        .unwrap()
        .with_retry(RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefill_reports_progress_and_a_continued_request_reuses_the_cache() {
    // Batches of 128 tokens: a ~900-token prompt reports its prefill several times.
    let Some(server) = LlamaServer::start(4096, 128).await else {
        return;
    };
    let cfg = config(&server);
    let mut client = client(&cfg);
    let first = Request::new(
        &cfg,
        system(700),
        vec![Message::user_text("Say hi.")],
        vec![],
    );
    let (progress, usage) = run(&mut client, &first).await;
    assert!(progress.len() >= 3, "progress per batch: {progress:?}");
    let (last, total, _) = *progress.last().unwrap();
    assert_eq!(last, total, "the last report is the whole prompt");
    assert!(
        progress.windows(2).all(|w| w[0].0 <= w[1].0),
        "{progress:?}"
    );
    assert_eq!(usage.input_tokens, total);

    // The same prefix with one more turn: the server re-reads only the new part.
    let mut messages = first.messages.clone();
    messages.push(Message::assistant_text("Hi."));
    messages.push(Message::user_text("And now say bye."));
    let second = Request::new(&cfg, first.system.clone(), messages, vec![]);
    let (progress, usage) = run(&mut client, &second).await;
    let cached = usage.cache_read_tokens;
    assert!(
        cached * 10 >= total * 9,
        "≥ 90 % of the first prompt ({total} tokens) reused, the server says {cached}"
    );
    assert!(
        progress.iter().all(|&(_, _, c)| c == cached),
        "progress counts the same cache: {progress:?}"
    );
}
