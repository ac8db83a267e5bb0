//! Model faults through the daemon: each faulted task ends with a clear status (or
//! recovers), and the daemon serves the next task. The wire-level behaviour of each
//! fault is in `suite::llm::faults`; this is the same fault one layer up.

use serde_json::json;

use crate::common::fixture::{Fixture, Watch};
use crate::common::harness::{text_reply, tools_reply};
use crate::common::llm_server::*;

/// One faulted task: what the model sends, and how the task must end.
struct Case {
    name: &'static str,
    script: Vec<Reply>,
    status: &'static str,
    /// A piece of the result (for a failure: what failed).
    result_has: &'static str,
}

fn openai_tool_raw(id: &str, name: &str, raw_args: &str) -> Reply {
    Reply::sse(sse(vec![
        oa_tool_call(0, id, name, raw_args),
        oa_finish("tool_calls"),
        oa_done(),
    ]))
}

fn cases() -> Vec<Case> {
    let error = |status: u16, msg: &str| Reply::status(status, json!({"error": {"message": msg}}));
    vec![
        Case {
            name: "429 with Retry-After",
            script: vec![
                error(429, "slow down").header("retry-after", "1"),
                text_reply("after the 429"),
            ],
            status: "completed",
            result_has: "after the 429",
        },
        Case {
            name: "500 until the retries run out",
            script: vec![error(500, "boom"), error(500, "boom"), error(500, "boom")],
            status: "failed",
            result_has: "500",
        },
        Case {
            name: "529 until the retries run out",
            script: vec![
                error(529, "overloaded"),
                error(529, "overloaded"),
                error(529, "overloaded"),
            ],
            status: "failed",
            result_has: "529",
        },
        Case {
            name: "a stream that stalls mid-way",
            script: vec![
                Reply::sse_steps(vec![
                    Step::Send(sse(vec![oa_text("let me th")]).into_bytes()),
                    Step::Hang,
                ]),
                text_reply("after the stall"),
            ],
            status: "completed",
            result_has: "after the stall",
        },
        Case {
            name: "a stream cut mid tool call",
            script: vec![
                Reply::sse_steps(vec![
                    Step::Send(sse(vec![oa_tool_call(0, "c1", "read_file", "{\"pa")]).into_bytes()),
                    Step::Cut,
                    Step::Send(b"never sent".to_vec()),
                ]),
                text_reply("after the cut"),
            ],
            status: "completed",
            result_has: "after the cut",
        },
        Case {
            name: "invalid JSON tool arguments",
            script: vec![
                openai_tool_raw("c1", "read_file", "{\"path\": \"/etc/hostname\""),
                text_reply("fixed my arguments"),
            ],
            status: "completed",
            result_has: "fixed my arguments",
        },
        Case {
            name: "a model that never stops calling tools",
            // Different arguments each time, so it is the iteration limit (5 in the
            // test soul) that stops it, not the loop detector.
            script: (0..8)
                .map(|i| tools_reply(&[("c", "list_dir", json!({"path": format!("/{i}")}))]))
                .collect(),
            status: "max_iterations",
            result_has: "",
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_model_fault_ends_in_a_status_and_the_daemon_serves_the_next_task() {
    let cases = cases();
    let mut script = Vec::new();
    for c in &cases {
        script.extend(c.script.iter().cloned());
        // After each fault a plain task, which must complete.
        script.push(text_reply("still here"));
    }
    let f = Fixture::builder(script)
        .config("stall_timeout = \"300ms\"\n")
        .start()
        .await;
    let mut w = Watch::new(&f.proxy).await;
    for c in &cases {
        let (task, _) = f.submit("test", c.name).await.unwrap();
        let events = w.events(&task).await;
        let (_, finished) = events.last().unwrap();
        let status = finished["status"].as_str().unwrap();
        let result = finished["result"].as_str().unwrap();
        assert_eq!(status, c.status, "{}: {result}", c.name);
        assert!(result.contains(c.result_has), "{}: {result}", c.name);
        if c.status == "failed" {
            // A failure says what failed and what to do.
            assert!(
                result.contains("the model call failed") && result.contains("config.toml"),
                "{}: the failure does not say what failed and what to do: {result}",
                c.name
            );
        }
        if c.name.starts_with("429") {
            let retry = events.iter().find(|(k, _)| k == "retry").unwrap();
            assert_eq!(retry.1["delay_ms"], 1000, "Retry-After honoured");
        }
        let (next, _) = f.submit("test", "are you there?").await.unwrap();
        let (status, result) = w.finished(&next).await;
        assert_eq!(
            (status.as_str(), result.as_str()),
            ("completed", "still here"),
            "after {}",
            c.name
        );
    }
}

/// A single enormous response (50 MB) is abandoned at the size cap instead of taking
/// the daemon's memory with it: the next iteration gets a normal answer, and the daemon serves
/// the next task. A response used to have no size limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_50_mb_response_is_abandoned_and_the_daemon_serves_the_next_task() {
    let chunk = "x".repeat(64 * 1024);
    let frames: Vec<String> = (0..800).map(|_| oa_text(&chunk)).collect();
    let mut body = sse(frames);
    body.push_str(&sse(vec![oa_finish("stop"), oa_done()]));
    assert!(body.len() >= 50 << 20);
    let f = Fixture::new(vec![Reply::sse(body), text_reply("a short answer")]).await;
    f.harness.server.set_default(text_reply("still here"));
    let mut w = Watch::new(&f.proxy).await;
    let (task, _) = f.submit("test", "say a lot").await.unwrap();
    let events = w.events(&task).await;
    let (_, done) = events.last().unwrap();
    assert_eq!(done["status"], "completed", "{}", done["status"]);
    assert_eq!(done["result"], "a short answer");
    // The abandoned response cost one iteration; the next one answered.
    assert_eq!(done["iterations"], 2, "{done}");
    let (next, _) = f.submit("test", "are you there?").await.unwrap();
    assert_eq!(w.finished(&next).await.0, "completed");
}
