//! Slow prefills are not stalls: until the first token only
//! `first_token_timeout` bounds the wait, llama.cpp's `prompt_progress` chunks become
//! `PromptProgress` events, and a local server that never answers gets one request.
//!
//! The clock is tokio's paused test clock: the server "reads the prompt" for virtual
//! minutes, so nothing here waits in real time and nothing depends on a machine's speed.

use super::*;

fn progress(events: &[ClientEvent]) -> Vec<(u64, u64, u64)> {
    events
        .iter()
        .filter_map(|e| match e {
            ClientEvent::Event(StreamEvent::PromptProgress {
                processed,
                total,
                cached,
            }) => Some((*processed, *total, *cached)),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_prefill_longer_than_the_stall_timeout_completes_without_a_retry() {
    let gate = Gate::new();
    let server = LlmServer::start(vec![Reply::sse_steps(vec![
        Step::Send(oa_progress(0, 2471, 0).into_bytes()),
        Step::Wait(gate.clone()),
        Step::Send(
            sse(vec![
                oa_progress(2471, 2471, 0),
                oa_text("done"),
                oa_finish("stop"),
                oa_usage(2471, 1),
                oa_done(),
            ])
            .into_bytes(),
        ),
    ])])
    .await;
    let mut cfg = Wire::OpenAi.config(&server);
    cfg.stall_timeout = Duration::from_secs(30);
    cfg.first_token_timeout = Duration::from_secs(600);
    // The scenario, not a synchronisation: the server reads the prompt for three
    // stall timeouts of the paused clock before its first token.
    let reading = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(90)).await;
        gate.open();
    });
    let (events, err) = run(&mut client(&cfg), &request(&cfg)).await;
    reading.await.unwrap();
    assert_eq!(err, None);
    assert_eq!(text_of(&events), "done");
    assert_eq!(progress(&events), vec![(0, 2471, 0), (2471, 2471, 0)]);
    assert!(retries(&events).is_empty(), "{events:?}");
    assert_eq!(server.requests().len(), 1);
    assert_eq!(
        server.requests()[0].body["return_progress"],
        json!(true),
        "a server on this machine is asked for its progress"
    );
}

#[tokio::test(start_paused = true)]
async fn a_local_server_that_never_answers_gets_one_request() {
    let server = LlmServer::start(vec![
        Reply::sse_steps(vec![
            Step::Send(oa_progress(0, 9000, 0).into_bytes()),
            Step::Hang,
        ]),
        Reply::sse(Wire::OpenAi.text("a second request")),
    ])
    .await;
    let mut cfg = Wire::OpenAi.config(&server);
    cfg.first_token_timeout = Duration::from_secs(600);
    let (events, err) = run(&mut client(&cfg), &request(&cfg)).await;
    let Some(LlmError::NoFirstToken(t)) = err else {
        panic!("{err:?}");
    };
    assert!(t.local);
    assert_eq!(t.after, Duration::from_secs(600));
    assert!(
        t.to_string().contains("first_token_timeout"),
        "names the setting: {t}"
    );
    assert!(retries(&events).is_empty(), "{events:?}");
    server.wait_closed(1).await;
    assert_eq!(
        server.requests().len(),
        1,
        "no second request queued behind it"
    );
}

#[tokio::test(start_paused = true)]
async fn once_the_answer_streams_a_gap_is_a_stall() {
    let server = LlmServer::start(vec![
        Reply::sse_steps(vec![
            Step::Send(sse(vec![oa_progress(10, 10, 0), oa_text("half")]).into_bytes()),
            Step::Hang,
        ]),
        Reply::sse(Wire::OpenAi.text("second try")),
    ])
    .await;
    let mut cfg = Wire::OpenAi.config(&server);
    cfg.stall_timeout = Duration::from_secs(30);
    cfg.first_token_timeout = Duration::from_secs(600);
    let (events, err) = run(&mut client(&cfg), &request(&cfg)).await;
    assert_eq!(err, None);
    assert!(matches!(&retries(&events)[..], [(1, _)]), "{events:?}");
    assert!(events.iter().any(|e| matches!(e,
        ClientEvent::Retry { reason, .. } if reason.contains("stalled"))));
}
