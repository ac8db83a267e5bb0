//! Behaviour against the scripted server, every test run for both wire formats.
// Test helpers: a failed setup step should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use familiar::llm::{ClientEvent, FinishReason, LlmError, StreamEvent};
use familiar_protocol::ids::CallId;
use futures::StreamExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::common::llm_server::*;

#[tokio::test]
async fn requests_carry_prompt_tools_history_and_key() {
    for wire in WIRES {
        let server = LlmServer::start(vec![Reply::sse(wire.text("hi"))]).await;
        let cfg = wire.config(&server);
        let (events, err) = run(&mut client(&cfg), &request(&cfg)).await;
        assert_eq!(err, None, "{wire:?}");
        assert_eq!(text_of(&events), "hi");
        assert_eq!(events.last(), Some(&finish()));
        let reqs = server.requests();
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].path, wire.path());
        match wire {
            Wire::OpenAi => {
                assert_eq!(reqs[0].headers["authorization"], format!("Bearer {KEY}"));
            }
            Wire::Anthropic => {
                assert_eq!(reqs[0].headers["x-api-key"], KEY);
                assert_eq!(reqs[0].headers["anthropic-version"], "2023-06-01");
            }
        }
        insta::assert_json_snapshot!(format!("request_{wire:?}"), reqs[0].body);
    }
}

#[tokio::test]
async fn tool_calls_complete_before_the_response_ends() {
    for wire in WIRES {
        let gate = Gate::new();
        let (head, tail) = match wire {
            Wire::OpenAi => (
                sse(vec![
                    oa_tool_call(0, "c1", "read_file", r#"{"path":"/a"}"#),
                    oa_tool_call(1, "c2", "notify", "{}"),
                ]),
                sse(vec![oa_finish("tool_calls"), oa_done()]),
            ),
            Wire::Anthropic => (
                sse(vec![
                    an_message_start(3),
                    an_tool(0, "c1", "read_file", r#"{"path":"/a"}"#),
                ]),
                sse(vec![
                    an_tool(1, "c2", "notify", ""),
                    an_message_delta("tool_use", 4),
                    an_message_stop(),
                ]),
            ),
        };
        let server = LlmServer::start(vec![Reply::sse_steps(vec![
            Step::Send(head.into_bytes()),
            Step::Wait(gate.clone()),
            Step::Send(tail.into_bytes()),
        ])])
        .await;
        let cfg = wire.config(&server);
        let mut client = client(&cfg);
        let req = request(&cfg);
        let mut stream = client.stream(&req, CancellationToken::new());
        // The first call completes while the server still holds the rest back.
        loop {
            match stream.next().await.unwrap().unwrap() {
                ClientEvent::Event(StreamEvent::ToolCallComplete { id, input, .. }) => {
                    assert_eq!(id.as_str(), "c1");
                    assert_eq!(input, Ok(json!({"path": "/a"})));
                    break;
                }
                ClientEvent::Event(StreamEvent::ToolCallStarted { .. }) => {}
                other => panic!("{wire:?}: unexpected {other:?}"),
            }
        }
        gate.open();
        let rest: Vec<_> = stream.map(|r| r.unwrap()).collect().await;
        assert!(
            rest.contains(&ClientEvent::Event(StreamEvent::ToolCallComplete {
                id: CallId::from_provider("c2"),
                name: "notify".into(),
                input: Ok(json!({})),
            })),
            "{wire:?}: {rest:?}"
        );
        assert_eq!(
            rest.last(),
            Some(&ClientEvent::Event(StreamEvent::Finish {
                reason: FinishReason::ToolUse
            }))
        );
    }
}

#[tokio::test]
async fn rate_limit_waits_as_long_as_retry_after_says() {
    for wire in WIRES {
        let server = LlmServer::start(vec![
            Reply::status(429, json!({"error": {"message": "slow down"}}))
                .header("retry-after", "7"),
            Reply::sse(wire.text("ok")),
        ])
        .await;
        let cfg = wire.config(&server);
        let (events, err) = run(&mut client(&cfg), &request(&cfg)).await;
        assert_eq!(err, None, "{wire:?}");
        assert_eq!(retries(&events), vec![(1, Duration::from_secs(7))]);
        assert_eq!(text_of(&events), "ok");
        assert_eq!(server.requests().len(), 2);
    }
}

#[tokio::test]
async fn server_errors_give_up_after_max_retries() {
    for wire in WIRES {
        let fail = Reply::status(500, json!({"error": {"message": "boom"}}));
        let server = LlmServer::start(vec![fail.clone(), fail.clone(), fail]).await;
        let mut cfg = wire.config(&server);
        cfg.max_retries = 2;
        let (events, err) = run(&mut client(&cfg), &request(&cfg)).await;
        let err = err.unwrap();
        assert!(
            matches!(&err, LlmError::RetriesExhausted { attempts: 3, last }
                if matches!(**last, LlmError::Server { status: 500, .. })),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "giving up after 3 attempts: server error 500: boom"
        );
        let delays = retries(&events);
        assert_eq!(delays.len(), 2);
        // Exponential backoff with jitter: retry n waits within [2^(n-1)/2, 2^(n-1)] s.
        for (n, d) in delays {
            let full = Duration::from_secs(1 << (n - 1));
            assert!(d >= full / 2 && d <= full, "retry {n}: {d:?}");
        }
        assert_eq!(server.requests().len(), 3);
    }
}

#[tokio::test]
async fn a_stalled_stream_is_abandoned_and_retried() {
    for wire in WIRES {
        let server = LlmServer::start(vec![
            Reply::sse_steps(vec![
                Step::Send(wire.partial_tool("c1", r#"{"pa"#).into_bytes()),
                Step::Hang,
            ]),
            Reply::sse(wire.text("second try")),
        ])
        .await;
        let mut cfg = wire.config(&server);
        // Long enough that a loaded machine (CI on two busy cores) never stalls between
        // the server's write and our read; the hung step waits it out once per wire.
        cfg.stall_timeout = Duration::from_millis(600);
        let (events, err) = run(&mut client(&cfg), &request(&cfg)).await;
        assert_eq!(err, None, "{wire:?}");
        let discarded = events
            .iter()
            .position(|e| *e == ClientEvent::AttemptDiscarded)
            .unwrap();
        assert!(matches!(&events[discarded + 1],
            ClientEvent::Retry { attempt: 1, reason, .. } if reason.contains("stalled")));
        assert_eq!(text_of(&events[discarded..]), "second try");
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, ClientEvent::Event(StreamEvent::ToolCallComplete { .. })))
        );
        server.wait_closed(1).await;
    }
}

#[tokio::test]
async fn a_cut_stream_never_completes_its_tool_call() {
    for wire in WIRES {
        let server = LlmServer::start(vec![
            Reply::sse_steps(vec![
                Step::Send(wire.partial_tool("c1", r#"{"path": "/tm"#).into_bytes()),
                Step::Cut,
                Step::Send(b"never sent".to_vec()),
            ]),
            Reply::sse(wire.tool("c9", r#"{"path": "/tmp/x"}"#)),
        ])
        .await;
        let cfg = wire.config(&server);
        let (events, err) = run(&mut client(&cfg), &request(&cfg)).await;
        assert_eq!(err, None, "{wire:?}");
        let discarded = events
            .iter()
            .position(|e| *e == ClientEvent::AttemptDiscarded)
            .unwrap();
        let completed: Vec<_> = events
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match e {
                ClientEvent::Event(StreamEvent::ToolCallComplete { id, input, .. }) => {
                    Some((i, id.as_str().to_owned(), input.clone()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(completed.len(), 1, "{wire:?}: {events:?}");
        assert!(completed[0].0 > discarded);
        assert_eq!(completed[0].1, "c9");
        assert_eq!(completed[0].2, Ok(json!({"path": "/tmp/x"})));

        // With no retries left the cut is the error.
        let server = LlmServer::start(vec![Reply::sse_steps(vec![
            Step::Send(wire.partial_tool("c1", "{").into_bytes()),
            Step::Cut,
            Step::Send(b"never sent".to_vec()),
        ])])
        .await;
        let mut cfg = wire.config(&server);
        cfg.max_retries = 0;
        let (events, err) = run(&mut client(&cfg), &request(&cfg)).await;
        assert!(
            matches!(&err, Some(LlmError::RetriesExhausted { last, .. }) if matches!(**last, LlmError::Truncated(_))),
            "{wire:?}: {err:?}"
        );
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, ClientEvent::Event(StreamEvent::ToolCallComplete { .. })))
        );
    }
}

#[tokio::test]
async fn invalid_tool_arguments_go_back_to_the_model() {
    for wire in WIRES {
        let server =
            LlmServer::start(vec![Reply::sse(wire.tool("c1", r#"{"path": "/tmp/x""#))]).await;
        let cfg = wire.config(&server);
        let (events, err) = run(&mut client(&cfg), &request(&cfg)).await;
        assert_eq!(err, None, "{wire:?}");
        let input = events
            .iter()
            .find_map(|e| match e {
                ClientEvent::Event(StreamEvent::ToolCallComplete { input, .. }) => {
                    Some(input.clone())
                }
                _ => None,
            })
            .unwrap();
        let err = input.unwrap_err();
        assert_eq!(err.raw, r#"{"path": "/tmp/x""#);
        assert!(
            err.to_string().starts_with("invalid arguments: EOF"),
            "{err}"
        );
        assert_eq!(
            events.last(),
            Some(&ClientEvent::Event(StreamEvent::Finish {
                reason: FinishReason::ToolUse
            }))
        );
    }
}

#[tokio::test]
async fn unknown_events_are_ignored() {
    for wire in WIRES {
        let noise = match wire {
            Wire::OpenAi => sse(vec![
                "event: future\ndata: {\"choices\": [], \"novel\": true}\n\n".into(),
                ": comment\n\n".into(),
                oa_text("hi"),
                oa_finish("stop"),
                oa_done(),
            ]),
            Wire::Anthropic => sse(vec![
                an_message_start(1),
                "event: future_event\ndata: {\"type\": \"future_event\", \"x\": 1}\n\n".into(),
                an_ping(),
                "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"server_tool_use\",\"id\":\"s\"}}\n\n".into(),
                "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"citations_delta\"}}\n\n".into(),
                an_block_stop(0),
                an_text(1, "hi"),
                an_message_delta("end_turn", 1),
                an_message_stop(),
            ]),
        };
        let server = LlmServer::start(vec![Reply::sse(noise)]).await;
        let cfg = wire.config(&server);
        let (events, err) = run(&mut client(&cfg), &request(&cfg)).await;
        assert_eq!(err, None, "{wire:?}");
        assert_eq!(text_of(&events), "hi");
        assert_eq!(events.last(), Some(&finish()));
    }
}

#[tokio::test]
async fn a_rejected_key_is_not_retried_and_not_repeated() {
    for wire in WIRES {
        let server = LlmServer::start(vec![Reply::status(
            401,
            json!({"error": {"message": format!("Incorrect API key provided: {KEY}")}}),
        )])
        .await;
        let cfg = wire.config(&server);
        let (_, err) = run(&mut client(&cfg), &request(&cfg)).await;
        let err = err.unwrap();
        assert!(matches!(err, LlmError::Auth(_)), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("the API key in ${KEY_VAR} was rejected")),
            "{msg}"
        );
        assert!(!msg.contains(KEY), "{msg}");
        assert!(!format!("{err:?}").contains(KEY));
        assert_eq!(server.requests().len(), 1);
    }
}

#[tokio::test]
async fn not_found_and_bad_request_say_what_to_fix() {
    for wire in WIRES {
        let server = LlmServer::start(vec![
            Reply::status(404, json!({"error": "model 'main-model' not found"})),
            Reply::status(400, json!({"error": {"message": "max_tokens: too large"}})),
        ])
        .await;
        let cfg = wire.config(&server);
        let req = request(&cfg);
        let mut client = client(&cfg);
        let (_, err) = run(&mut client, &req).await;
        assert_eq!(
            err.unwrap().to_string(),
            format!(
                "model `main-model` does not exist at {} (or this key may not use it): set `model` in [providers.test] (or the soul's `model`) to a model the server lists; `familiar doctor` shows them (server said: model 'main-model' not found)",
                cfg.base_url
            )
        );
        let (_, err) = run(&mut client, &req).await;
        assert!(
            matches!(&err, Some(LlmError::BadRequest(m)) if m.ends_with("max_tokens: too large"))
        );
        assert_eq!(server.requests().len(), 2);
    }
}

#[tokio::test]
async fn a_missing_model_names_the_fix() {
    let server = LlmServer::start(vec![
        // Ollama's OpenAI-compatible endpoint.
        Reply::status(
            404,
            json!({"error": {"message": "model \"main-model\" not found, try pulling it first",
                "type": "api_error", "param": null, "code": null}}),
        ),
        // OpenAI.
        Reply::status(
            404,
            json!({"error": {"message": "The model `main-model` does not exist or you do not have access to it.",
                "type": "invalid_request_error", "param": null, "code": "model_not_found"}}),
        ),
        // Anything else a 404 can mean.
        Reply::status(404, json!({"error": "no route"})),
    ])
    .await;
    let cfg = Wire::OpenAi.config(&server);
    let req = request(&cfg);
    let mut client = client(&cfg);
    let (_, err) = run(&mut client, &req).await;
    let msg = err.unwrap().to_string();
    assert!(
        msg.starts_with("model `main-model` is not installed in Ollama at "),
        "{msg}"
    );
    assert!(msg.contains("run `ollama pull main-model`"), "{msg}");
    let (_, err) = run(&mut client, &req).await;
    let err = err.unwrap();
    assert!(matches!(err, LlmError::NotFound(_)), "{err:?}");
    assert!(
        err.to_string()
            .contains("set `model` in [providers.test] (or the soul's `model`)"),
        "{err}"
    );
    let (_, err) = run(&mut client, &req).await;
    assert!(
        err.unwrap()
            .to_string()
            .starts_with("unknown model `main-model` or wrong base_url"),
    );
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn a_server_without_tool_support_is_named() {
    let server = LlmServer::start(vec![Reply::status(
        400,
        json!({"error": {"message": "registry.ollama.ai/library/gemma:2b does not support tools"}}),
    )])
    .await;
    let cfg = Wire::OpenAi.config(&server);
    let (_, err) = run(&mut client(&cfg), &request(&cfg)).await;
    let err = err.unwrap();
    assert!(matches!(err, LlmError::NoToolSupport(_)), "{err:?}");
    assert!(err.to_string().contains("model `main-model`"), "{err}");
}

// With nothing on Ollama's port, `familiar run` took 12 s (five attempts
// with backoff) and printed the nested reqwest chain each time.
#[tokio::test]
async fn nothing_listening_fails_fast_with_one_clear_message() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let server = LlmServer::start(vec![]).await;
    for host in ["127.0.0.1", "localhost"] {
        let mut cfg = Wire::OpenAi.config(&server);
        cfg.base_url = format!("http://{host}:{port}/v1");
        cfg.max_retries = 4;
        let (events, err) = run(&mut client(&cfg), &request(&cfg)).await;
        assert_eq!(
            retries(&events),
            vec![(1, familiar::llm::REFUSED_RETRY_DELAY)],
            "{host}"
        );
        assert!(events.iter().all(|e| match e {
            ClientEvent::Retry { reason, .. } => reason == "connection refused",
            _ => true,
        }));
        let err = err.unwrap();
        assert!(
            matches!(&err, LlmError::RetriesExhausted { attempts: 2, last } if last.is_refused_locally()),
            "{err:?}"
        );
        let msg = err.to_string();
        assert_eq!(msg.matches(&cfg.base_url).count(), 1, "{msg}");
        assert!(!msg.contains("error sending request"), "{msg}");
        assert!(msg.contains("(connection refused)"), "{msg}");
        assert!(
            msg.contains(&format!("start a model server on port {port}")),
            "{msg}"
        );
        assert!(msg.contains("`familiar doctor`"), "{msg}");
    }
}

// Regression: a host name that does not resolve was retried 4 times with the same
// 250-character line; a refused connection gives up after 1.
#[tokio::test]
async fn a_host_that_does_not_resolve_gives_up_like_a_refused_connection() {
    let server = LlmServer::start(vec![]).await;
    let mut cfg = Wire::OpenAi.config(&server);
    cfg.base_url = "http://familiar-test.invalid:8080/v1".to_owned();
    cfg.max_retries = 4;
    let (events, err) = run(&mut client(&cfg), &request(&cfg)).await;
    assert_eq!(retries(&events).len(), 1, "{events:?}");
    assert!(events.iter().all(|e| match e {
        ClientEvent::Retry { reason, .. } => reason == "the host name does not resolve",
        _ => true,
    }));
    let msg = err.unwrap().to_string();
    assert!(msg.contains("its host name does not resolve"), "{msg}");
    assert!(!msg.contains("error sending request"), "{msg}");
}

#[tokio::test]
async fn cancelling_stops_reading_and_closes_the_connection() {
    for wire in WIRES {
        let head = match wire {
            Wire::OpenAi => oa_text("partial"),
            Wire::Anthropic => sse(vec![an_message_start(1), an_text(0, "partial")]),
        };
        let never = Gate::new();
        let server = LlmServer::start(vec![Reply::sse_steps(vec![
            Step::Send(head.into_bytes()),
            Step::Wait(never),
            Step::Send(wire.text("rest").into_bytes()),
        ])])
        .await;
        let cfg = wire.config(&server);
        let mut client = client(&cfg);
        let req = request(&cfg);
        let cancel = CancellationToken::new();
        let mut stream = client.stream(&req, cancel.clone());
        assert_eq!(
            stream.next().await.unwrap().unwrap(),
            ClientEvent::Event(StreamEvent::TextDelta {
                text: "partial".into()
            })
        );
        cancel.cancel();
        assert_eq!(stream.next().await, Some(Err(LlmError::Cancelled)));
        assert_eq!(stream.next().await, None);
        drop(stream);
        server.wait_closed(1).await;
    }
}
