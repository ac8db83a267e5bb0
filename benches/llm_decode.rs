//! Benchmark: decoding a large recorded response stream, per provider wire format.
//!
//! Builds a ~8 MB body of text deltas with a tool call every 50 deltas, splits it into
//! 16 KiB chunks (what a socket read hands over), and times bytes → SSE → events.
//! Prints the median MB/s over repeated runs. Run: `cargo bench --bench llm_decode`.

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use bytes::Bytes;
use familiar::config::ProviderKind;
use familiar::llm::decode_recorded;
use serde_json::json;

const TARGET_BYTES: usize = 8 << 20;
const CHUNK: usize = 16 << 10;
const RUNS: usize = 9;

fn openai_body() -> String {
    let mut s = String::new();
    let mut i = 0u32;
    let mut calls = 0u32;
    while s.len() < TARGET_BYTES {
        let delta = if i % 50 == 49 {
            calls += 1;
            json!({"tool_calls": [{"index": calls - 1, "id": format!("call_{calls}"), "type": "function",
                "function": {"name": "read_file", "arguments": "{\"path\": \"/home/user/notes.txt\"}"}}]})
        } else {
            json!({"content": "The quick brown fox jumps over the lazy dog. "})
        };
        let chunk = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": "gpt-4o-mini", "choices": [{"index": 0, "delta": delta, "finish_reason": null}]});
        s.push_str(&format!("data: {chunk}\n\n"));
        i += 1;
    }
    s.push_str(&format!(
        "data: {}\n\ndata: [DONE]\n\n",
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    ));
    s
}

fn anthropic_body() -> String {
    let ev = |name: &str, v: serde_json::Value| format!("event: {name}\ndata: {v}\n\n");
    let mut s = ev(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
            "content": [], "model": "claude", "usage": {"input_tokens": 100, "output_tokens": 1}}}),
    );
    let mut index = 0u32;
    while s.len() < TARGET_BYTES {
        s.push_str(&ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "text", "text": ""}}),
        ));
        for _ in 0..49 {
            s.push_str(&ev("content_block_delta", json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "text_delta", "text": "The quick brown fox jumps over the lazy dog. "}})));
        }
        s.push_str(&ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
        s.push_str(&ev("content_block_start", json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "id": format!("toolu_{index}"), "name": "read_file", "input": {}}})));
        for part in ["{\"path\": ", "\"/home/user/", "notes.txt\"}"] {
            s.push_str(&ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "input_json_delta", "partial_json": part}}),
            ));
        }
        s.push_str(&ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    s.push_str(&ev(
        "message_delta",
        json!({"type": "message_delta",
        "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 5000}}),
    ));
    s.push_str(&ev("message_stop", json!({"type": "message_stop"})));
    s
}

fn chunks(body: &str) -> Vec<Bytes> {
    body.as_bytes()
        .chunks(CHUNK)
        .map(Bytes::copy_from_slice)
        .collect()
}

fn bench(name: &str, kind: ProviderKind, body: &str) {
    let mut times: Vec<Duration> = Vec::with_capacity(RUNS);
    let mut events = 0;
    for _ in 0..RUNS {
        let input = chunks(body);
        let start = Instant::now();
        let out = decode_recorded(kind, input);
        times.push(start.elapsed());
        assert!(out.iter().all(Result::is_ok), "{name}: decode failed");
        events = out.len();
    }
    times.sort();
    let median = times[RUNS / 2];
    let mb = body.len() as f64 / 1e6;
    println!(
        "{name:<10} {mb:>6.2} MB, {events:>7} events: median {:>8.2} ms, {:>7.1} MB/s (best {:.1} MB/s)",
        median.as_secs_f64() * 1e3,
        mb / median.as_secs_f64(),
        mb / times[0].as_secs_f64(),
    );
}

fn main() {
    bench("openai", ProviderKind::Openai, &openai_body());
    bench("anthropic", ProviderKind::Anthropic, &anthropic_body());
}
