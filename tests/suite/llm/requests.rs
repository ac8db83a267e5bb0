//! What goes over the wire, byte for byte: temperature, and bodies whose bytes repeat
//! the previous request's up to its last message (prompt caches depend on it).
// Test helpers: a failed setup step should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use familiar::llm::{ContentBlock, Message, Role};
use serde_json::Value;

use super::*;
use crate::common::llm_server::*;

/// The bytes of `raw` before its last message (`body.messages`' last element, which
/// the server saw serialised exactly like this: same `serde_json` key order).
pub fn prefix_before_last_message(raw: &[u8], body: &Value) -> Vec<u8> {
    let last = body["messages"].as_array().unwrap().last().unwrap();
    let needle = serde_json::to_vec(last).unwrap();
    let at = raw
        .windows(needle.len())
        .rposition(|w| w == needle.as_slice())
        .expect("the last message is in the body");
    raw[..at].to_vec()
}

#[tokio::test]
async fn the_provider_temperature_is_sent() {
    for wire in WIRES {
        let server = LlmServer::start(vec![Reply::sse(wire.text("hi"))]).await;
        let mut cfg = wire.config(&server);
        cfg.temperature = Some(0.2);
        let (_, err) = run(&mut client(&cfg), &request(&cfg)).await;
        assert_eq!(err, None, "{wire:?}");
        let raw = String::from_utf8(server.requests()[0].raw.clone()).unwrap();
        assert!(raw.contains(r#""temperature":0.2,"#), "{wire:?}: {raw}");
    }
}

#[tokio::test]
async fn a_growing_history_repeats_the_previous_request_bytes() {
    for wire in WIRES {
        let server =
            LlmServer::start(vec![Reply::sse(wire.text("a")), Reply::sse(wire.text("b"))]).await;
        let cfg = wire.config(&server);
        let mut c = client(&cfg);
        let first = request(&cfg);
        run(&mut c, &first).await;
        let mut second = first.clone();
        second
            .messages
            .push(Message::assistant_text("it says hello"));
        second.messages.push(Message {
            role: Role::User,
            content: vec![ContentBlock::Text {
                text: "thanks".into(),
            }],
        });
        run(&mut c, &second).await;
        let reqs = server.requests();
        let prefix = prefix_before_last_message(&reqs[0].raw, &reqs[0].body);
        assert!(
            reqs[1].raw.starts_with(&prefix),
            "{wire:?}:\n{}\n{}",
            String::from_utf8_lossy(&reqs[0].raw),
            String::from_utf8_lossy(&reqs[1].raw)
        );
        // Everything that must stay put comes before the messages.
        let text = String::from_utf8_lossy(&prefix);
        let messages_at = text.find(r#""messages":["#).unwrap();
        assert!(text.find(r#""tools":["#).unwrap() < messages_at, "{text}");
        assert!(text.contains("You are terse."));
    }
}
