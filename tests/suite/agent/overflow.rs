//! A context overflow never ends a task that can fit: against a loopback server that
//! counts tokens its own way and refuses a prompt past its context in llama.cpp's words
//! (HTTP 400, `exceed_context_size_error` with `n_prompt_tokens` and `n_ctx`), a short
//! history of huge tool outputs is trimmed, head and tail kept, and the task completes.
// Test helpers: a failed setup step should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use familiar_protocol::task::TaskStatus;
use serde_json::{Value, json};

use crate::common::harness::*;
use crate::common::llm_server::*;

const READ_SOUL: &str = "max_iterations = 8\ntools = [\"read_file\"]\n";
/// The server's context, in its own tokens.
const N_CTX: u64 = 8192;

/// The server's count: a byte in three, denser than familiar's four characters a token
/// (so the estimate is wrong until the server's numbers calibrate it).
fn server_tokens(r: &Recorded) -> u64 {
    r.raw.len() as u64 / 3
}

fn is_summary_request(body: &Value) -> bool {
    body["messages"][0]["content"]
        .as_str()
        .is_some_and(|s| s.starts_with("You write concise"))
}

/// llama.cpp's answers: an overflow past `N_CTX`; else a summary, a `read_file` call for
/// each of three files, then "done".
fn model(r: &Recorded) -> Reply {
    let tokens = server_tokens(r);
    if tokens > N_CTX {
        return Reply::status(
            400,
            json!({"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": tokens, "n_ctx": N_CTX}}),
        );
    }
    // Usage in the server's count, as llama.cpp reports it.
    let text = |t: &str| {
        Reply::sse(sse(vec![
            oa_text(t),
            oa_finish("stop"),
            oa_usage(tokens, 10),
            oa_done(),
        ]))
    };
    if is_summary_request(&r.body) {
        return text("SUMMARY: read three big files.\nFACTS:\n- they are long");
    }
    let results = r.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .count();
    if results < 3 {
        let args = json!({ "path": format!("big{results}.txt") }).to_string();
        Reply::sse(sse(vec![
            oa_tool_call(0, &format!("c{results}"), "read_file", &args),
            oa_finish("tool_calls"),
            oa_usage(tokens, 10),
            oa_done(),
        ]))
    } else {
        text("done")
    }
}

// Regression: three long tool outputs in fewer messages than a full compaction keeps
// failed the task in 2 s ("does not fit … even after compacting": nothing was cut).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_history_of_huge_tool_outputs_is_trimmed_and_the_task_completes() {
    // The configured window is the default (32 768): the server's 8 192 is learned from
    // its refusal.
    let h = Harness::builder(Vec::new())
        .provider("max_output_tokens = 512\n")
        .policy(OPEN_POLICY)
        .build()
        .await;
    h.server.set_responder(Arc::new(model));
    std::fs::create_dir_all(h.workspace()).unwrap();
    for i in 0..3 {
        let text: String = (0..400)
            .map(|l| format!("{i}:{l:04} {}\n", "lorem ipsum dolor sit amet ".repeat(3)))
            .collect();
        std::fs::write(h.workspace().join(format!("big{i}.txt")), text).unwrap();
    }
    let rt = h.runtime(builtin_plus(vec![]));
    let (out, events) = h
        .run(
            Arc::clone(&rt),
            h.spec(h.soul(READ_SOUL), "read the three files", None),
        )
        .await;
    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);
    assert_eq!(out.result, "done");

    let reqs = h.server.requests();
    let refused: Vec<u64> = reqs
        .iter()
        .map(server_tokens)
        .filter(|&t| t > N_CTX)
        .collect();
    assert!(!refused.is_empty(), "the history overflowed the server");
    // The trim's numbers are whole requests in the server's tokens: its "before" is the
    // refused request as the server counted it.
    let trims = compactions(&events, "trim");
    assert!(!trims.is_empty(), "a trim ran");
    let (before, after) = trims[0];
    assert!(
        before.abs_diff(refused[0]) <= refused[0] / 50,
        "the trim's before ({before}) is the server's count ({})",
        refused[0]
    );
    assert!(after < before, "{trims:?}");
    assert!(after <= N_CTX, "{trims:?}");
    // The last request fit, with head and tail of each output and a marker that says
    // how to read the rest.
    let last = reqs.last().unwrap();
    assert!(server_tokens(last) <= N_CTX);
    let text = String::from_utf8_lossy(&last.raw);
    assert!(text.contains("[familiar cut "), "{text}");
    assert!(text.contains("read_file's offset and limit"));
    for i in 0..3 {
        assert!(
            text.contains(&format!("{i}:0000 ")),
            "head of big{i}.txt kept"
        );
    }

    // The next task, in a session of its own, starts from what this one learned (the
    // server's context and token ratio): its requests are sized before they are sent,
    // and the server refuses none.
    h.server.forget_requests();
    let (out, _) = h
        .run(rt, h.spec(h.soul(READ_SOUL), "read them again", None))
        .await;
    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);
    let sizes: Vec<u64> = h.server.requests().iter().map(server_tokens).collect();
    assert!(sizes.iter().all(|&t| t <= N_CTX), "{sizes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_that_alone_overflows_fails_saying_what_was_tried() {
    let h = Harness::builder(Vec::new())
        .provider("max_output_tokens = 512\n")
        .policy(OPEN_POLICY)
        .build()
        .await;
    h.server.set_responder(Arc::new(model));
    let rt = h.runtime(builtin_plus(vec![]));
    let prompt = "please ".repeat(30_000);
    let (out, _) = h.run(rt, h.spec(h.soul(READ_SOUL), &prompt, None)).await;
    assert_eq!(out.status, TaskStatus::Failed);
    for part in [
        "8192 tokens",
        "no tool result was left to trim",
        "no older history to summarise",
        "of the task's prompt",
        "context_window",
    ] {
        assert!(out.result.contains(part), "{part}: {}", out.result);
    }
}
