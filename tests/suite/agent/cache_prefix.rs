//! Against the loopback server: every request of a task repeats the previous
//! request's bytes up to its last message (system, tools and every earlier message
//! identical, reminders included), for both wire formats; and a context overflow in
//! each server's wording is recovered by a full compaction and a retry.
// Test helpers: a failed setup step should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use familiar_protocol::events::EventPayload;
use familiar_protocol::task::TaskStatus;
use serde_json::{Value, json};

use crate::common::harness::*;
use crate::common::llm_server::*;

const LIST_SOUL: &str = "max_iterations = 12\ntools = [\"list_dir\", \"read_file\"]\n";
/// An Anthropic provider on the loopback server; any non-empty variable works as the
/// key, and the harness environment has `HOME`.
const ANTHROPIC: &str = "kind = \"anthropic\"\napi_key_env = \"HOME\"\n";

/// Distinct calls (the loop detector stops a task that repeats itself).
fn args(i: usize) -> Value {
    json!({"path": format!("d{i}")})
}

fn an_tools_reply(id: &str, i: usize) -> Reply {
    Reply::sse(sse(vec![
        an_message_start(100),
        an_tool(0, id, "list_dir", &args(i).to_string()),
        an_message_delta("tool_use", 10),
        an_message_stop(),
    ]))
}

fn an_text_reply(text: &str) -> Reply {
    Reply::sse(sse(vec![
        an_message_start(100),
        an_text(0, text),
        an_message_delta("end_turn", 10),
        an_message_stop(),
    ]))
}

/// The bytes of `raw` before its last message.
fn prefix_before_last_message(raw: &[u8], body: &Value) -> usize {
    let last = body["messages"].as_array().unwrap().last().unwrap();
    let needle = serde_json::to_vec(last).unwrap();
    raw.windows(needle.len())
        .rposition(|w| w == needle.as_slice())
        .expect("the last message is in the body")
}

async fn ten_iterations(anthropic: bool) {
    let mut script: Vec<Reply> = (1..10)
        .map(|i| {
            let id = format!("c{i}");
            if anthropic {
                an_tools_reply(&id, i)
            } else {
                tools_reply(&[(id.as_str(), "list_dir", args(i))])
            }
        })
        .collect();
    script.push(if anthropic {
        an_text_reply("done")
    } else {
        text_reply("done")
    });
    let h = Harness::builder(script)
        .provider(if anthropic { ANTHROPIC } else { "" })
        .policy(OPEN_POLICY)
        .build()
        .await;
    for i in 0..10 {
        std::fs::create_dir_all(h.workspace().join(format!("d{i}"))).unwrap();
    }
    let rt = h.runtime(builtin_plus(vec![]));
    let (out, _) = h
        .run(rt, h.spec(h.soul(LIST_SOUL), "list it ten times", None))
        .await;
    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);
    let reqs = h.server.requests();
    assert_eq!(reqs.len(), 10);
    let wire = if anthropic { "anthropic" } else { "openai" };
    for n in 1..reqs.len() {
        let (prev, next) = (&reqs[n - 1], &reqs[n]);
        let keep = prefix_before_last_message(&prev.raw, &prev.body);
        assert!(
            next.raw.starts_with(&prev.raw[..keep]),
            "{wire}: request {} does not repeat request {n}'s prefix",
            n + 1
        );
        // The prefix holds the system prompt and the tools, not just the settings.
        let text = String::from_utf8_lossy(&prev.raw[..keep]);
        assert!(text.contains("# Rules in force") && text.contains("list_dir"));
        println!(
            "{wire} request {:>2}: {:>6} bytes, {:>6} repeat request {n}'s ({:.1}%), {:>5} new",
            n + 1,
            next.raw.len(),
            keep,
            keep as f64 * 100.0 / next.raw.len() as f64,
            next.raw.len() - keep
        );
    }
    // The reminders are stored as sent, marked as reminders.
    let ctx = h.store.load_context(&out.session_id).unwrap().unwrap();
    let reminders = ctx
        .history
        .iter()
        .flat_map(|m| &m.content)
        .filter(|b| matches!(b, familiar::llm::ContentBlock::Reminder { .. }))
        .count();
    assert_eq!(reminders, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_repeats_the_previous_one_openai() {
    ten_iterations(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_repeats_the_previous_one_anthropic() {
    ten_iterations(true).await;
}

/// A long conversation, then an overflow in `body`'s words: one full compaction (its
/// summary request), then the same iteration succeeds.
async fn recovers_from(body: Value) {
    let mut script: Vec<Reply> = (1..8)
        .map(|i| tools_reply(&[(format!("c{i}").as_str(), "list_dir", args(i))]))
        .collect();
    script.push(Reply::status(400, body.clone()));
    script.push(text_reply(
        "SUMMARY: listed the workspace often.\nFACTS:\n- it is empty",
    ));
    script.push(text_reply("done"));
    let h = Harness::builder(script).policy(OPEN_POLICY).build().await;
    for i in 0..10 {
        std::fs::create_dir_all(h.workspace().join(format!("d{i}"))).unwrap();
    }
    let rt = h.runtime(builtin_plus(vec![]));
    let (out, events) = h.run(rt, h.spec(h.soul(LIST_SOUL), "list it", None)).await;
    assert_eq!(out.status, TaskStatus::Completed, "{body}: {}", out.result);
    assert_eq!(out.result, "done");
    assert!(
        events.iter().any(|e| matches!(&e.payload,
            EventPayload::Compaction { mode, .. } if mode == "full")),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_overflow_is_compacted_and_retried_for_every_wording() {
    let bodies = [
        json!({"error": {"message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. Please reduce the length of the messages.", "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 9000 tokens > 8192 maximum"}}),
        json!({"error": {"code": 400, "message": "request (9873 tokens) exceeds the available context size (8192 tokens)", "type": "exceed_context_size_error", "n_prompt_tokens": 9873, "n_ctx": 8192}}),
        json!({"object": "error", "message": "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens (8000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.", "type": "BadRequestError", "param": null, "code": 400}),
    ];
    for body in bodies {
        recovers_from(body).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overflow_that_cannot_be_compacted_names_the_limit_and_the_setting() {
    let body = json!({"error": {"code": 400, "message": "request (9873 tokens) exceeds the available context size (8192 tokens)", "type": "exceed_context_size_error", "n_prompt_tokens": 9873, "n_ctx": 8192}});
    let h = Harness::builder(vec![Reply::status(400, body)])
        .policy(OPEN_POLICY)
        .build()
        .await;
    let rt = h.runtime(builtin_plus(vec![]));
    let (out, _) = h.run(rt, h.spec(h.soul(LIST_SOUL), "hi", None)).await;
    assert_eq!(out.status, TaskStatus::Failed);
    assert!(
        out.result.contains("8192 tokens")
            && out.result.contains("context_window")
            && out.result.contains("no older history to summarise"),
        "{}",
        out.result
    );
}

/// A call cut off by the output limit and a denied call are reported like
/// any call (started, then finished), the cut call is stored with what arrived, and an
/// empty final answer is recorded so roles keep alternating.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_and_denied_calls_finish_and_an_empty_answer_is_recorded() {
    let cut = Reply::sse(sse(vec![
        oa_tool_call(0, "c1", "read_file", r#"{"path": "no"#),
        oa_finish("length"),
        oa_usage(100, 10),
        oa_done(),
    ]));
    let denied = tools_reply(&[("c2", "read_file", json!({"path": "~/.ssh/id_ed25519"}))]);
    let empty = Reply::sse(sse(vec![oa_finish("stop"), oa_usage(100, 0), oa_done()]));
    let h = Harness::builder(vec![cut, denied, empty]).build().await;
    let rt = h.runtime(builtin_plus(vec![]));
    let (out, events) = h.run(rt, h.spec(h.soul(LIST_SOUL), "read", None)).await;
    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);
    assert_eq!(out.result, "(empty answer)");
    for id in ["c1", "c2"] {
        let started = events.iter().any(|e| {
            matches!(&e.payload, EventPayload::ToolCallStarted { call_id, decision, .. }
                if call_id == id && decision == "deny")
        });
        let finished = events.iter().any(|e| {
            matches!(&e.payload, EventPayload::ToolCallFinished { call_id, ok, .. }
                if call_id == id && !ok)
        });
        assert!(started && finished, "{id}");
    }
    let ctx = h.store.load_context(&out.session_id).unwrap().unwrap();
    let input = ctx
        .history
        .iter()
        .flat_map(|m| &m.content)
        .find_map(|b| match b {
            familiar::llm::ContentBlock::ToolUse { id, input, .. } if id.as_str() == "c1" => {
                Some(input.clone())
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(input, json!({"received": r#"{"path": "no"#}));
    let last = ctx.history.last().unwrap();
    assert_eq!(last.role, familiar::llm::Role::Assistant);
    assert_eq!(
        last.content,
        vec![familiar::llm::ContentBlock::Text {
            text: "(empty answer)".into()
        }]
    );
}

/// The bytes of `raw` before its first user message: the settings, the system prompt
/// and the tools, the prefix every task of a soul shares.
fn prefix_before_first_user_message(raw: &[u8], body: &Value) -> usize {
    let first = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user")
        .unwrap();
    let needle = serde_json::to_vec(first).unwrap();
    raw.windows(needle.len())
        .position(|w| w == needle.as_slice())
        .expect("the first user message is in the body")
}

/// Two tasks of one soul, each in a session (and workspace) of its own,
/// send byte-identical system prompts and tools; what names the session (its id, its
/// workspace) travels in the first user message's reminder instead.
async fn two_sessions(anthropic: bool) {
    let reply = |text: &str| {
        if anthropic {
            an_text_reply(text)
        } else {
            text_reply(text)
        }
    };
    let h = Harness::builder(vec![reply("one"), reply("two")])
        .provider(if anthropic { ANTHROPIC } else { "" })
        .policy(OPEN_POLICY)
        .build()
        .await;
    let rt = h.runtime(builtin_plus(vec![]));
    let soul = h.soul(LIST_SOUL);
    let mut outcomes = Vec::new();
    for prompt in ["first task", "second task"] {
        let mut spec = h.spec(std::sync::Arc::clone(&soul), prompt, None);
        // The store's own workspace per session, which names the session.
        spec.workspace = None;
        let (out, _) = h.run(std::sync::Arc::clone(&rt), spec).await;
        assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);
        outcomes.push(out);
    }
    assert_ne!(outcomes[0].session_id, outcomes[1].session_id);
    let reqs = h.server.requests();
    assert_eq!(reqs.len(), 2);
    let wire = if anthropic { "anthropic" } else { "openai" };
    let keep: Vec<usize> = reqs
        .iter()
        .map(|r| prefix_before_first_user_message(&r.raw, &r.body))
        .collect();
    assert_eq!(
        String::from_utf8_lossy(&reqs[0].raw[..keep[0]]),
        String::from_utf8_lossy(&reqs[1].raw[..keep[1]]),
        "{wire}: the two tasks' system prompts and tools differ"
    );
    let prefix = String::from_utf8_lossy(&reqs[0].raw[..keep[0]]).into_owned();
    assert!(prefix.contains("# Rules in force") && prefix.contains("list_dir"));
    for (out, req) in outcomes.iter().zip(&reqs) {
        let id = out.session_id.as_str();
        assert!(
            !prefix.contains(id),
            "{wire}: the session id is in the prefix"
        );
        assert!(
            !prefix.contains("workspaces"),
            "{wire}: a workspace is in the prefix"
        );
        let first_user = String::from_utf8_lossy(&req.raw[keep[0].min(req.raw.len())..]);
        let reminder = &first_user[first_user.find("<system-reminder>").unwrap()..];
        assert!(
            reminder.contains(&format!("workspaces/{id}\\n")),
            "{wire}: {reminder}"
        );
    }
    if anthropic {
        // The breakpoint ends the shared prefix: Anthropic caches tools, then system,
        // then messages, so a breakpoint on the system block covers both, and the second
        // task's first request reads what the first task wrote.
        for r in &reqs {
            assert_eq!(
                r.body["system"][0]["cache_control"],
                json!({"type": "ephemeral"})
            );
            assert_eq!(r.body["system"].as_array().unwrap().len(), 1);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_in_other_sessions_share_the_prefix_openai() {
    two_sessions(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_in_other_sessions_share_the_prefix_anthropic() {
    two_sessions(true).await;
}
