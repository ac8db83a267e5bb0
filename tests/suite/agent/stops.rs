//! How a task stops: iteration, token and wall-clock budgets, loop detection, and
//! cancellation mid-stream or mid-tool, each leaving nothing dangling.

use familiar::catalog::{self};
use familiar::llm::ContentBlock;
use familiar::tools::ToolError;
use familiar_protocol::task::{StepStatus, TaskStatus};
use futures::FutureExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common::harness::*;
use crate::common::llm_server::*;

const READ_SOUL: &str = "max_iterations = 10\ntools = [\"read_file\", \"list_dir\", \"disk_usage\", \"search_files\", \"write_file\"]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_iterations_stops_the_task_and_keeps_the_work() {
    let h = Harness::new(vec![
        tools_reply(&[("c1", "list_dir", json!({"path": "."}))]),
        tools_reply(&[("c2", "list_dir", json!({"path": "/"}))]),
    ])
    .await;
    let rt = h.runtime(builtin_plus(vec![]));
    let soul = h.soul("max_iterations = 2\ntools = [\"list_dir\"]\n");
    let (out, _) = h.run(rt, h.spec(soul, "list forever", None)).await;
    assert_eq!(out.status, TaskStatus::MaxIterations);
    assert_eq!(out.iterations, 2);
    let ctx = h.store.load_context(&out.session_id).unwrap().unwrap();
    assert_eq!(ctx.tasks[0].status, TaskStatus::MaxIterations);
    assert_eq!(ctx.tasks[0].plan.steps.len(), 2);
    assert_eq!(ctx.history.len(), 5, "prompt + two tool turns");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeating_the_same_call_warns_at_three_and_stops_at_five() {
    let same = || tools_reply(&[("c", "list_dir", json!({"path": "."}))]);
    let h = Harness::new((0..5).map(|_| same()).collect()).await;
    let rt = h.runtime(builtin_plus(vec![]));
    let soul = h.soul("max_iterations = 10\ntools = [\"list_dir\"]\n");
    let (out, events) = h.run(rt, h.spec(soul, "loop", None)).await;
    assert_eq!(out.status, TaskStatus::LoopDetected);
    assert_eq!(out.iterations, 5);
    assert_eq!(count(&events, "loop_warning"), 1);
    // The steering note reached the model with the 4th request.
    let fourth = h.server.requests()[3].body.to_string();
    assert!(fourth.contains("same tool call 3 times"), "{fourth}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_budget_stops_the_task() {
    let big = Reply::sse(sse(vec![
        oa_tool_call(0, "c1", "list_dir", "{\"path\": \".\"}"),
        oa_finish("tool_calls"),
        oa_usage(900, 200),
        oa_done(),
    ]));
    let h = Harness::new(vec![big]).await;
    let rt = h.runtime(builtin_plus(vec![]));
    let soul = h.soul("max_tokens = 1000\ntools = [\"list_dir\"]\n");
    let (out, _) = h.run(rt, h.spec(soul, "spend", None)).await;
    assert_eq!(out.status, TaskStatus::BudgetExceeded);
    assert!(out.result.contains("1100 tokens"), "{}", out.result);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wall_clock_stops_a_hung_model() {
    let hung = Reply::sse_steps(vec![
        Step::Send(oa_text("thinking…").into_bytes()),
        Step::Hang,
    ]);
    let h = Harness::new(vec![hung]).await;
    let rt = h.runtime(builtin_plus(vec![]));
    let soul = h.soul("max_wall_clock = \"200ms\"\n");
    let (out, _) = h.run(rt, h.spec(soul, "hang", None)).await;
    assert_eq!(out.status, TaskStatus::Timeout);
    let ctx = h.store.load_context(&out.session_id).unwrap().unwrap();
    assert_eq!(ctx.tasks[0].status, TaskStatus::Timeout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_mid_stream_ends_cancelled_and_keeps_the_partial_answer_marked_as_cut() {
    let hung = Reply::sse_steps(vec![
        Step::Send(oa_text("partial answer").into_bytes()),
        Step::Hang,
    ]);
    let h = Harness::new(vec![hung]).await;
    let rt = h.runtime(builtin_plus(vec![]));
    let (out, _) = h
        .run_with(
            rt,
            h.spec(h.soul(READ_SOUL), "go", None),
            CancellationToken::new(),
            |e, c| {
                if e.kind() == "text_delta" {
                    c.cancel();
                }
            },
        )
        .await;
    assert_eq!(out.status, TaskStatus::Cancelled);
    h.server.wait_closed(1).await;
    let ctx = h.store.load_context(&out.session_id).unwrap().unwrap();
    assert_eq!(ctx.tasks[0].status, TaskStatus::Cancelled);
    // What streamed is the session's (a next task can refer to it), marked as cut.
    assert_eq!(ctx.history.len(), 2, "{:?}", ctx.history);
    let kept = serde_json::to_string(&ctx.history[1]).unwrap();
    assert!(
        kept.contains("partial answer") && kept.contains("[familiar cut this answer here"),
        "{kept}"
    );
    assert!(
        out.result.contains("tokens of its answer kept"),
        "{}",
        out.result
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_mid_tool_stops_the_tool_and_records_its_result() {
    let h = Harness::new(vec![tools_reply(&[(
        "c1",
        "disk_usage",
        json!({"path": "."}),
    )])])
    .await;
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    let started_tx = std::sync::Mutex::new(Some(started_tx));
    let slow = fn_tool(&catalog::DISK_USAGE, move |_, ctx| {
        if let Some(tx) = started_tx.lock().unwrap().take() {
            tx.send(()).unwrap();
        }
        async move {
            ctx.cancel.cancelled().await;
            Err(ToolError::model("stopped"))
        }
        .boxed()
    });
    let rt = h.runtime(builtin_plus(vec![slow]));
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        started_rx.await.unwrap();
        c.cancel();
    });
    let (out, _) = h
        .run_with(rt, h.spec(h.soul(READ_SOUL), "du", None), cancel, |_, _| {})
        .await;
    assert_eq!(out.status, TaskStatus::Cancelled);
    let ctx = h.store.load_context(&out.session_id).unwrap().unwrap();
    let last = ctx.history.last().unwrap();
    assert!(
        matches!(
            &last.content[0],
            ContentBlock::ToolResult { is_error: true, .. }
        ),
        "{last:?}"
    );
    assert_eq!(ctx.tasks[0].plan.steps[0].status, StepStatus::Failed);
}

/// A small model streamed 4,096 tokens of the same sentence for minutes.
/// The guard cuts it after a few copies: the connection is closed (the server stops
/// generating), the answer keeps one copy and a marker, and the loop goes on like
/// after any cut-off answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeating_answer_is_cut_and_the_loop_goes_on() {
    let line = "I will check the disk usage of your home folder now.\n";
    let repeating = Reply::sse_steps(vec![
        Step::Send(sse((0..40).map(|_| oa_text(line)).collect::<Vec<_>>()).into_bytes()),
        // A server that would go on generating: only a closed connection stops it.
        Step::Hang,
    ]);
    let h = Harness::new(vec![repeating, text_reply("Your home folder uses 3 GB.")]).await;
    let rt = h.runtime(builtin_plus(vec![]));
    let soul = h.soul("max_iterations = 4\n");
    let (out, events) = h.run(rt, h.spec(soul, "how big is ~?", None)).await;
    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);
    assert_eq!(out.result, "Your home folder uses 3 GB.");
    h.server.wait_closed(1).await;
    let cut = events
        .iter()
        .find(|e| e.kind() == "degenerate_output")
        .expect("a degenerate_output event");
    let payload: serde_json::Value = serde_json::from_str(&cut.payload_json()).unwrap();
    assert_eq!(
        payload["unit"].as_str().unwrap().trim_end(),
        line.trim_end()
    );
    let repeats = payload["repeats"].as_u64().unwrap();
    assert!(
        (8..40).contains(&repeats),
        "cut within a few copies: {repeats}"
    );
    // The second request carries the first answer: one copy, the marker, the note.
    let second = h.server.requests()[1].body.to_string();
    assert_eq!(
        second.matches("I will check the disk usage").count(),
        1,
        "{second}"
    );
    assert!(second.contains("familiar cut this answer here"), "{second}");
    assert!(second.contains("kept repeating the same text"), "{second}");
}

/// Regression (issue 42 §5): after answers the guard cut, the task ended with "hit
/// the output limit again … raise max_output_tokens" and 0 tokens, though ~1,000
/// tokens of text had streamed. It says the answer kept repeating, and counts them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_cut_by_the_repetition_guard_end_in_its_words_with_their_tokens() {
    let line = "I will check the disk usage of your home folder now.\n";
    let repeating = || {
        Reply::sse_steps(vec![
            Step::Send(sse((0..40).map(|_| oa_text(line)).collect::<Vec<_>>()).into_bytes()),
            Step::Hang,
        ])
    };
    let h = Harness::new(vec![repeating(), repeating(), repeating()]).await;
    let rt = h.runtime(builtin_plus(vec![]));
    let soul = h.soul("max_iterations = 6\n");
    let (out, _) = h.run(rt, h.spec(soul, "how big is ~?", None)).await;
    h.server.wait_closed(3).await;
    assert_eq!(out.status, TaskStatus::Failed, "{}", out.result);
    assert!(
        out.result
            .starts_with("stopped: the answer kept repeating the same passage (")
            && !out.result.contains("max_output_tokens"),
        "{}",
        out.result
    );
    // Each cut answer streamed at least its 8 copies (~12 tokens each), and its
    // request was read: none of it is free.
    assert!(out.usage.output_tokens >= 3 * 8 * 10, "{:?}", out.usage);
    assert!(out.usage.input_tokens > 0, "{:?}", out.usage);
}

/// A task that failed before the model answered left its prompt as the
/// session's last message, so the next task sent `user, user`, which templates that
/// enforce alternation reject for every later task of the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_task_leaves_the_session_alternating() {
    let h = Harness::new(vec![
        text_reply("first answer"),
        Reply::status(400, json!({"error": {"message": "bad request"}})),
        text_reply("third answer"),
    ])
    .await;
    let rt = h.runtime(builtin_plus(vec![]));
    let soul = h.soul("max_iterations = 3\n");
    let (first, _) = h.run(rt.clone(), h.spec(soul.clone(), "first", None)).await;
    let session = Some(first.session_id.clone());
    let (failed, _) = h
        .run(rt.clone(), h.spec(soul.clone(), "second", session.clone()))
        .await;
    assert_eq!(failed.status, TaskStatus::Failed, "{}", failed.result);
    let (second, _) = h.run(rt, h.spec(soul, "third", session)).await;
    assert_eq!(second.status, TaskStatus::Completed, "{}", second.result);
    let sent = &h.server.requests()[2].body["messages"];
    let roles: Vec<&str> = sent
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .filter(|r| *r != "system")
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "user", "assistant", "user"],
        "{sent}"
    );
    let ctx = h.store.load_context(&second.session_id).unwrap().unwrap();
    let roles: Vec<_> = ctx.history.iter().map(|m| m.role).collect();
    assert!(roles.windows(2).all(|w| w[0] != w[1]), "{roles:?}");
}
