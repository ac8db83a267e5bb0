//! `kind = "ollama"` against a loopback server speaking Ollama's `/api/chat` NDJSON and
//! `/api/show`: what is sent (`options.num_ctx`, `keep_alive`, tool
//! messages by name), what is read back, the context length looked up when none is
//! configured, and a prompt too long for `num_ctx` refused or reported, never answered.

use super::*;

fn config(server: &LlmServer) -> ProviderConfig {
    let mut cfg = Wire::OpenAi.config(server);
    cfg.kind = ProviderKind::Ollama;
    cfg.base_url = server.base.clone();
    cfg.api_key = ApiKeySource::None;
    cfg.context_window = 16_384;
    cfg.keep_alive = Some("30m".into());
    cfg
}

#[tokio::test]
async fn a_tool_call_streams_over_api_chat_with_num_ctx() {
    let server = LlmServer::start(vec![Reply::ndjson(ndjson(vec![
        ol_text("let me "),
        ol_text("look"),
        ol_tool_call("read_file", json!({"path": "/tmp/y"})),
        ol_done("stop", 120, 9),
    ]))])
    .await;
    let cfg = config(&server);
    let (events, err) = run(&mut client(&cfg), &request(&cfg)).await;
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "let me look");
    assert!(events.iter().any(|e| matches!(e,
        ClientEvent::Event(StreamEvent::ToolCallComplete { name, input: Ok(v), .. })
            if name == "read_file" && v == &json!({"path": "/tmp/y"}))));
    assert!(events.contains(&ClientEvent::Event(StreamEvent::Finish {
        reason: FinishReason::ToolUse
    })));
    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/api/chat");
    assert_eq!(sent.body["options"]["num_ctx"], json!(16_384));
    assert_eq!(sent.body["options"]["num_predict"], json!(100));
    assert_eq!(sent.body["keep_alive"], json!("30m"));
    assert_eq!(sent.body["stream"], json!(true));
    let messages = sent.body["messages"].as_array().unwrap();
    assert_eq!(
        messages[0],
        json!({"role": "system", "content": "You are terse."})
    );
    assert_eq!(
        messages[2]["tool_calls"][0]["function"],
        json!({"name": "read_file", "arguments": {"path": "/tmp/x"}})
    );
    assert_eq!(
        messages[3],
        json!({"role": "tool", "tool_name": "read_file", "content": "hello"})
    );
    assert_eq!(
        sent.body["tools"][0]["function"]["name"],
        json!("read_file")
    );
}

#[tokio::test]
async fn without_context_window_the_model_s_own_is_read_from_api_show() {
    let server = LlmServer::start(vec![
        Reply::status(
            200,
            json!({"parameters": "stop \"<|im_end|>\"",
                   "model_info": {"llama.context_length": 8192}}),
        ),
        Reply::ndjson(ndjson(vec![ol_text("hi"), ol_done("stop", 50, 1)])),
        Reply::ndjson(ndjson(vec![ol_text("again"), ol_done("stop", 60, 1)])),
    ])
    .await;
    let mut cfg = config(&server);
    cfg.context_window_configured = false;
    let mut client = client(&cfg);
    assert_eq!(run(&mut client, &request(&cfg)).await.1, None);
    assert_eq!(run(&mut client, &request(&cfg)).await.1, None);
    let sent = server.requests();
    assert_eq!(sent[0].path, "/api/show");
    assert_eq!(sent[0].body["model"], json!("main-model"));
    assert_eq!(sent[1].body["options"]["num_ctx"], json!(8192));
    assert_eq!(sent[2].path, "/api/chat", "looked up once per provider");
    assert_eq!(sent[2].body["options"]["num_ctx"], json!(8192));
}

#[tokio::test]
async fn a_request_far_past_num_ctx_is_an_overflow_before_it_is_sent() {
    let server = LlmServer::start(vec![]).await;
    let mut cfg = config(&server);
    cfg.context_window = 512;
    let mut req = request(&cfg);
    req.messages[0] = Message::user_text("word ".repeat(2000));
    let (_, err) = run(&mut client(&cfg), &req).await;
    let Some(LlmError::ContextOverflow(o)) = err else {
        panic!("{err:?}");
    };
    assert_eq!(o.limit, Some(512));
    assert!(
        server.requests().is_empty(),
        "Ollama would have cut it silently"
    );
}

#[tokio::test]
async fn a_prompt_ollama_cut_to_fit_is_reported_not_answered() {
    // Ollama read the whole context: it dropped the start of a longer prompt.
    let server = LlmServer::start(vec![Reply::ndjson(ndjson(vec![
        ol_text("I have no instructions"),
        ol_done("stop", 1024, 4),
    ]))])
    .await;
    let mut cfg = config(&server);
    cfg.context_window = 1024;
    let mut req = request(&cfg);
    req.messages[0] = Message::user_text("word ".repeat(900));
    let (_, err) = run(&mut client(&cfg), &req).await;
    let Some(LlmError::ContextOverflow(o)) = err else {
        panic!("{err:?}");
    };
    assert_eq!(o.limit, Some(1024));
    assert!(o.message.contains("cut the beginning"), "{}", o.message);
}

#[tokio::test]
async fn an_error_line_mid_stream_fails_the_attempt() {
    let server = LlmServer::start(vec![
        Reply::ndjson(ndjson(vec![
            ol_text("par"),
            json!({"error": "runner crashed"}),
        ])),
        Reply::ndjson(ndjson(vec![ol_text("whole"), ol_done("stop", 50, 1)])),
    ])
    .await;
    let cfg = config(&server);
    let (events, err) = run(&mut client(&cfg), &request(&cfg)).await;
    assert_eq!(err, None);
    assert!(events.contains(&ClientEvent::AttemptDiscarded));
    let after = events
        .iter()
        .position(|e| *e == ClientEvent::AttemptDiscarded)
        .unwrap();
    assert_eq!(text_of(&events[after..]), "whole");
}
