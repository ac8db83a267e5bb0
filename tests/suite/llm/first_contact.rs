//! A server that accepts the connection and never answers is told from a busy one
//! within seconds: after a short silence a liveness check (`GET /models`, Ollama's
//! `/api/tags`) runs, and only a server that answers neither fails the request, with
//! what to check. A server that answers the check is reading a long prompt and keeps
//! its whole `first_token_timeout`.
//!
//! The clock is tokio's paused test clock: nothing waits in real time.

use tokio::net::TcpListener;

use super::*;

/// A server that is stopped or wedged: the kernel completes the handshakes into the
/// listen backlog, and nothing ever reads a request or answers one.
async fn wedged() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    (listener, base)
}

#[tokio::test(start_paused = true)]
async fn a_wedged_local_server_fails_fast_with_what_to_check() {
    let (_listener, base) = wedged().await;
    let unused = LlmServer::start(vec![]).await;
    let mut cfg = Wire::OpenAi.config(&unused);
    cfg.base_url = format!("{base}/v1");
    cfg.first_token_timeout = Duration::from_secs(600);
    let (events, err) = run(&mut client(&cfg), &request(&cfg)).await;
    let Some(LlmError::NoFirstToken(t)) = err else {
        panic!("{err:?}");
    };
    assert_eq!(
        t.after,
        Duration::from_secs(15),
        "10 s of silence, 5 s of check"
    );
    assert_eq!(
        t.to_string(),
        format!(
            "no answer from {base}/v1 after 15s, nor to a check of {base}/v1/models: the server \
             accepts connections but does not respond (stopped, or stuck); restart it, or check \
             base_url in [providers.test]; `familiar doctor` checks the setup"
        )
    );
    assert!(retries(&events).is_empty(), "{events:?}");
}

#[tokio::test(start_paused = true)]
async fn a_wedged_ollama_is_checked_at_api_tags() {
    let (_listener, base) = wedged().await;
    let unused = LlmServer::start(vec![]).await;
    let mut cfg = Wire::OpenAi.config(&unused);
    cfg.kind = ProviderKind::Ollama;
    cfg.base_url = base.clone();
    cfg.api_key = ApiKeySource::None;
    cfg.first_token_timeout = Duration::from_secs(600);
    let (_, err) = run(&mut client(&cfg), &request(&cfg)).await;
    let Some(LlmError::NoFirstToken(t)) = err else {
        panic!("{err:?}");
    };
    assert_eq!(t.unanswered_check, Some(format!("{base}/api/tags")));
}

#[tokio::test(start_paused = true)]
async fn a_server_that_answers_the_check_keeps_its_first_token_timeout() {
    let gate = Gate::new();
    let server = LlmServer::start(vec![
        // No headers until the prompt is read (a server without progress reports).
        Reply::sse_steps(vec![
            Step::Hold(gate.clone()),
            Step::Send(Wire::OpenAi.text("done").into_bytes()),
        ]),
        Reply::status(200, json!({"object": "list", "data": []})),
    ])
    .await;
    let mut cfg = Wire::OpenAi.config(&server);
    cfg.first_token_timeout = Duration::from_secs(600);
    // The scenario, not a synchronisation: the prompt takes two minutes to read.
    let reading = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(120)).await;
        gate.open();
    });
    let (events, err) = run(&mut client(&cfg), &request(&cfg)).await;
    reading.await.unwrap();
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "done");
    let asked: Vec<_> = server
        .requests()
        .iter()
        .map(|r| (r.method.clone(), r.path.clone()))
        .collect();
    assert_eq!(
        asked,
        vec![
            ("POST".to_owned(), "/v1/chat/completions".to_owned()),
            ("GET".to_owned(), "/v1/models".to_owned()),
        ]
    );
}
