//! Behaviours of the loop, one test each (issue: the agent loop).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use familiar::agent::TaskOutcome;
use familiar::catalog::{self, ToolInfo};
use familiar::llm::{ContentBlock, Message, Role};
use familiar::store::Context;
use familiar_protocol::events::EventPayload;
use familiar_protocol::ids::SessionId;
use familiar_protocol::task::{StepStatus, TaskStatus};
use futures::FutureExt;
use serde_json::json;
use tokio::sync::Barrier;

use crate::common::harness::*;
use crate::common::llm_server::*;

const READ_SOUL: &str = "max_iterations = 10\ntools = [\"read_file\", \"list_dir\", \"disk_usage\", \"search_files\", \"write_file\"]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_step_task_completes_and_its_context_is_saved() {
    let h = Harness::new(vec![
        tools_reply(&[("c1", "read_file", json!({"path": "notes.txt"}))]),
        tools_reply(&[("c2", "list_dir", json!({"path": "."}))]),
        text_reply("The notes say hello."),
    ])
    .await;
    write(&h.workspace().join("notes.txt"), "hello from the notes\n");
    let rt = h.runtime(builtin_plus(vec![]));
    let soul = h.soul(READ_SOUL);
    let (out, events) = h.run(rt, h.spec(soul, "what do my notes say?", None)).await;

    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);
    assert_eq!(out.result, "The notes say hello.");
    assert_eq!(out.iterations, 3);
    assert_eq!(out.usage.input_tokens, 300);

    the_model_got_the_result_delimited_and_the_environment_as_a_reminder(&h);
    the_saved_context_holds_the_whole_task(&h, &out);

    // Events, in order, and the transcript has them.
    let k = kinds(&events);
    assert_eq!(k.first(), Some(&"task_started"));
    assert_eq!(k.last(), Some(&"task_finished"));
    assert_eq!(count(&events, "iteration_started"), 3);
    assert_eq!(count(&events, "tool_call_started"), 2);
    assert_eq!(count(&events, "tool_call_finished"), 2);
    assert_eq!(count(&events, "plan_updated"), 2);
    let transcript = h.store.read_transcript(&out.session_id).unwrap();
    let messages = transcript.iter().filter(|e| e["kind"] == "message").count();
    assert_eq!(messages, 6);
    assert!(transcript.iter().any(|e| e["kind"] == "task_finished"));

    // Each tool decision is in the audit log.
    let audit = std::fs::read_to_string(h.store.audit_path()).unwrap();
    assert_eq!(audit.lines().count(), 2);
    assert!(audit.contains("\"decision\":\"allowed\""));
    assert!(
        audit.contains("soul_tools=pass"),
        "every step is in the audit log: {audit}"
    );
}

/// What the model was sent in a_multi_step_task_completes_and_its_context_is_saved: the
/// tool result, delimited, in the second request; the environment after the prompt.
fn the_model_got_the_result_delimited_and_the_environment_as_a_reminder(h: &Harness) {
    let tool_msgs = tool_messages(&h.server, 1);
    assert_eq!(tool_msgs.len(), 1);
    assert_eq!(tool_msgs[0]["tool_call_id"], "c1");
    let content = tool_msgs[0]["content"].as_str().unwrap();
    assert!(
        content.starts_with("<tool_output tool=\"read_file\" status=\"ok\">"),
        "{content}"
    );
    assert!(content.contains("hello from the notes"));
    let system = h.server.requests()[0].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(system.starts_with("You are a test soul."), "{system}");
    assert!(system.contains("# Rules in force") && !system.contains("Environment now"));
    // The environment travels as a reminder after the prompt, never in the system prompt.
    let first = h.server.requests()[0].body["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    // The task's own place opens it: it stays out of the system prompt, which every task
    // of the soul shares.
    assert!(
        first.contains(&format!(
            "\n\n<system-reminder>\nWorkspace: {}\nEnvironment now:\ntime: ",
            h.workspace().display()
        )),
        "{first}"
    );
    assert!(
        !system.contains(&h.workspace().display().to_string()),
        "{system}"
    );
}

/// The context a_multi_step_task_completes_and_its_context_is_saved leaves, field by field.
fn the_saved_context_holds_the_whole_task(h: &Harness, out: &TaskOutcome) {
    let ctx: Context = h.store.load_context(&out.session_id).unwrap().unwrap();
    assert_eq!(ctx.version, 1);
    assert_eq!(ctx.session_id, out.session_id);
    assert_eq!(ctx.soul.as_str(), "test");
    assert_eq!(ctx.title, "what do my notes say?");
    assert_eq!(ctx.summary, None);
    assert_eq!(ctx.usage.input_tokens, 300);
    assert_eq!(ctx.usage.output_tokens, 30);
    assert_eq!(ctx.tool_stats["read_file"].calls, 1);
    assert_eq!(ctx.tool_stats["list_dir"].calls, 1);
    let roles: Vec<Role> = ctx.history.iter().map(|m| m.role).collect();
    use Role::{Assistant as A, User as U};
    assert_eq!(roles, [U, A, U, A, U, A]);
    assert_eq!(
        ctx.history[5],
        Message::assistant_text("The notes say hello.")
    );
    assert_eq!(ctx.tasks.len(), 1);
    let task = &ctx.tasks[0];
    assert_eq!(task.task_id, out.task_id);
    assert_eq!(task.status, TaskStatus::Completed);
    assert_eq!(task.origin, "test");
    assert_eq!(task.result.as_deref(), Some("The notes say hello."));
    assert!(task.finished_at.is_some());
    assert_eq!(task.plan.goal, "what do my notes say?");
    let steps: Vec<_> = task
        .plan
        .steps
        .iter()
        .map(|s| (s.description.as_str(), s.status))
        .collect();
    assert_eq!(
        steps,
        [
            ("read_file: notes.txt", StepStatus::Completed),
            ("list_dir: .", StepStatus::Completed)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_call_reaches_the_model_which_then_finishes() {
    let h = Harness::new(vec![
        tools_reply(&[("c1", "read_file", json!({"path": "~/.ssh/id_ed25519"}))]),
        text_reply("I cannot read your SSH key; it is protected."),
    ])
    .await;
    write(&h.home.path().join(".ssh/id_ed25519"), "SECRET KEY");
    let rt = h.runtime(builtin_plus(vec![]));
    let (out, events) = h
        .run(rt, h.spec(h.soul(READ_SOUL), "show my key", None))
        .await;
    assert_eq!(out.status, TaskStatus::Completed);
    let msg = tool_messages(&h.server, 1)[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        msg.contains("status=\"error\"") && msg.contains("protected"),
        "{msg}"
    );
    assert!(!msg.contains("SECRET KEY"));
    let started = events
        .iter()
        .find(|e| e.kind() == "tool_call_started")
        .unwrap();
    assert!(
        matches!(&started.payload, EventPayload::ToolCallStarted { decision, .. } if decision == "deny")
    );
    assert_eq!(h.metrics.snapshot()["permission_denials"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_with_nobody_to_ask_is_denied_and_nothing_is_written() {
    let h = Harness::new(vec![
        tools_reply(&[(
            "c1",
            "write_file",
            json!({"path": "out.txt", "content": "x"}),
        )]),
        text_reply("I could not write the file."),
    ])
    .await;
    let ran = Arc::new(AtomicUsize::new(0));
    let r = Arc::clone(&ran);
    let writer = fn_tool(&catalog::WRITE_FILE, move |_, _| {
        r.fetch_add(1, Ordering::SeqCst);
        async { Ok("written".to_owned()) }.boxed()
    });
    let rt = h.runtime(builtin_plus(vec![writer]));
    let (out, events) = h.run(rt, h.spec(h.soul(READ_SOUL), "write it", None)).await;
    assert_eq!(out.status, TaskStatus::Completed);
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the write must not run");
    assert_eq!(count(&events, "approval_requested"), 1);
    let resolved = events
        .iter()
        .find(|e| e.kind() == "approval_resolved")
        .unwrap();
    assert!(matches!(
        &resolved.payload,
        EventPayload::ApprovalResolved {
            approved: false,
            ..
        }
    ));
    let msg = tool_messages(&h.server, 1)[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(msg.contains("nobody could be asked"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_call_emits_an_event_and_tells_the_model() {
    let h = Harness::new(vec![
        tools_reply(&[
            ("c1", "list_dir", json!({"path": "."})),
            ("c2", "list_dir", json!({"path": "/"})),
        ]),
        text_reply("ok"),
    ])
    .await;
    let rt = h.runtime(builtin_plus(vec![]));
    let soul = h.soul("tools = [\"list_dir\"]\n[rate_limits.tools]\nlist_dir = \"1/min\"\n");
    let (out, events) = h.run(rt, h.spec(soul, "list twice", None)).await;
    assert_eq!(out.status, TaskStatus::Completed);
    assert_eq!(count(&events, "rate_limited"), 1);
    let msgs = tool_messages(&h.server, 1);
    assert!(
        msgs[0]["content"]
            .as_str()
            .unwrap()
            .contains("status=\"ok\"")
    );
    let limited = msgs[1]["content"].as_str().unwrap();
    assert!(
        limited.contains("rate limit reached") && limited.contains("slow down"),
        "{limited}"
    );
    assert_eq!(h.metrics.snapshot()["rate_limited"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_after_a_crash_repairs_dangling_calls() {
    let h = Harness::new(vec![text_reply("resumed")]).await;
    let soul = h.soul(READ_SOUL);
    let id = SessionId::new("s-crashed").unwrap();
    let mut ctx = Context::new(id.clone(), soul.id.clone(), "first");
    ctx.history.push(Message::user_text("first"));
    ctx.history.push(Message {
        role: Role::Assistant,
        content: vec![ContentBlock::ToolUse {
            id: familiar_protocol::ids::CallId::from_provider("dangling"),
            name: "list_dir".into(),
            input: json!({"path": "."}),
        }],
    });
    h.store.save_context(&mut ctx).unwrap();
    let rt = h.runtime(builtin_plus(vec![]));
    let (out, _) = h.run(rt, h.spec(soul, "continue", Some(id.clone()))).await;
    assert_eq!(out.status, TaskStatus::Completed);
    let sent = &h.server.requests()[0].body["messages"];
    let tool = sent
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert_eq!(tool["tool_call_id"], "dangling");
    assert!(tool["content"].as_str().unwrap().contains("interrupted"));
    let saved = h.store.load_context(&id).unwrap().unwrap();
    assert_eq!(saved.history.len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_compaction_summarises_and_the_transcript_keeps_everything() {
    let h = Harness::new(vec![
        text_reply("SUMMARY:\nThe user chatted a lot.\n\nFACTS:\n- the answer is 42\n"),
        text_reply("fine"),
    ])
    .await;
    let soul = h.soul(READ_SOUL);
    let id = SessionId::new("s-long").unwrap();
    let mut ctx = Context::new(id.clone(), soul.id.clone(), "chat");
    let mut transcript = h.store.transcript(&id).unwrap();
    for i in 0..60 {
        let m = if i % 2 == 0 {
            Message::user_text(format!("question {i}"))
        } else {
            Message::assistant_text(format!("answer {i}"))
        };
        transcript
            .append(&json!({"kind": "message", "message": m}))
            .unwrap();
        ctx.history.push(m);
    }
    drop(transcript);
    h.store.save_context(&mut ctx).unwrap();
    let rt = h.runtime(builtin_plus(vec![]));
    let (out, events) = h.run(rt, h.spec(soul, "and now?", Some(id.clone()))).await;
    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);

    let reqs = h.server.requests();
    assert!(
        reqs[0]
            .body
            .to_string()
            .contains("Summarise the conversation")
    );
    assert!(
        reqs[0].body["tools"].is_null()
            || reqs[0].body["tools"]
                .as_array()
                .is_some_and(|t| t.is_empty())
    );
    // The session's memory opens the history; the system prompt stays the soul's.
    let system = reqs[1].body["messages"][0]["content"].as_str().unwrap();
    assert!(!system.contains("The user chatted a lot."), "{system}");
    let opening = reqs[1].body["messages"][1]["content"].to_string();
    assert!(
        opening.contains("<session_memory>")
            && opening.contains("The user chatted a lot.")
            && opening.contains("the answer is 42"),
        "{opening}"
    );
    let compaction = events.iter().find(|e| e.kind() == "compaction").unwrap();
    assert!(
        matches!(&compaction.payload, EventPayload::Compaction { mode, messages_before: 61, .. } if mode == "full")
    );

    let saved = h.store.load_context(&id).unwrap().unwrap();
    assert!(saved.history.len() < 20, "{}", saved.history.len());
    assert_eq!(saved.facts, ["the answer is 42"]);
    let transcript = h.store.read_transcript(&id).unwrap();
    let messages = transcript.iter().filter(|e| e["kind"] == "message").count();
    assert_eq!(messages, 62, "60 old + the prompt + the answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_run_in_parallel_and_a_write_runs_alone() {
    let h = Harness::builder(vec![
        tools_reply(&[
            ("r1", "disk_usage", json!({"path": "a"})),
            ("r2", "search_files", json!({"path": ".", "pattern": "x"})),
            (
                "w1",
                "write_file",
                json!({"path": "out.txt", "content": "x"}),
            ),
            ("r3", "disk_usage", json!({"path": "b"})),
        ]),
        text_reply("done"),
    ])
    .policy(OPEN_POLICY)
    .build()
    .await;
    let in_flight = Arc::new(AtomicUsize::new(0));
    let write_saw = Arc::new(AtomicUsize::new(usize::MAX));
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    // Both reads must be inside the barrier at once: if they ran one after the other,
    // the first would wait forever (the test would hang, not pass).
    let barrier = Arc::new(Barrier::new(2));
    let read = |info: &'static ToolInfo| {
        let (b, f, o) = (
            Arc::clone(&barrier),
            Arc::clone(&in_flight),
            Arc::clone(&order),
        );
        fn_tool(info, move |args, _| {
            let (b, f, o) = (Arc::clone(&b), Arc::clone(&f), Arc::clone(&o));
            async move {
                f.fetch_add(1, Ordering::SeqCst);
                let path = args["path"].as_str().unwrap_or("").to_owned();
                if path != "b" {
                    b.wait().await;
                }
                o.lock().unwrap().push(path);
                f.fetch_sub(1, Ordering::SeqCst);
                Ok("read".to_owned())
            }
            .boxed()
        })
    };
    let (f, w, o) = (
        Arc::clone(&in_flight),
        Arc::clone(&write_saw),
        Arc::clone(&order),
    );
    let writer = fn_tool(&catalog::WRITE_FILE, move |_, _| {
        w.store(f.load(Ordering::SeqCst), Ordering::SeqCst);
        o.lock().unwrap().push("write".to_owned());
        async { Ok("written".to_owned()) }.boxed()
    });
    let rt = h.runtime(builtin_plus(vec![
        read(&catalog::DISK_USAGE),
        read(&catalog::SEARCH_FILES),
        writer,
    ]));
    let run = h.run(rt, h.spec(h.soul(READ_SOUL), "go", None));
    let (out, _) = tokio::time::timeout(std::time::Duration::from_secs(60), run)
        .await
        .expect("the two reads never met at the barrier: they did not overlap");
    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);
    assert_eq!(
        write_saw.load(Ordering::SeqCst),
        0,
        "the write ran while another call was running"
    );
    let order = order.lock().unwrap().clone();
    assert_eq!(
        order[2], "write",
        "the write runs after both reads: {order:?}"
    );
    assert_eq!(
        order[3], "b",
        "the read after the write waits for it: {order:?}"
    );
    // Results go back in call order.
    let ids: Vec<_> = tool_messages(&h.server, 1)
        .iter()
        .map(|m| m["tool_call_id"].clone())
        .collect();
    assert_eq!(ids, ["r1", "r2", "w1", "r3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_response_does_not_run_a_finished_tool_again() {
    let gate = Gate::new();
    // First attempt: the call completes, then the stream is cut after the tool ran.
    let cut = Reply::sse_steps(vec![
        Step::Send(oa_tool_call(0, "c1", "disk_usage", "{\"path\": \".\"}").into_bytes()),
        Step::Send(oa_text("").into_bytes()),
        Step::Wait(gate.clone()),
        Step::Cut,
    ]);
    let h = Harness::new(vec![
        cut,
        tools_reply(&[("c1b", "disk_usage", json!({"path": "."}))]),
        text_reply("done"),
    ])
    .await;
    let runs = Arc::new(AtomicUsize::new(0));
    let (r, g) = (Arc::clone(&runs), gate.clone());
    let du = fn_tool(&catalog::DISK_USAGE, move |_, _| {
        r.fetch_add(1, Ordering::SeqCst);
        // The tool has run: now let the server cut the first stream.
        g.open();
        async { Ok("12K .".to_owned()) }.boxed()
    });
    let rt = h.runtime(builtin_plus(vec![du]));
    let (out, events) = h.run(rt, h.spec(h.soul(READ_SOUL), "du", None)).await;
    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the tool ran twice");
    assert_eq!(count(&events, "retry"), 1);
    let msgs = tool_messages(&h.server, 2);
    assert_eq!(msgs[0]["tool_call_id"], "c1b");
    assert!(msgs[0]["content"].as_str().unwrap().contains("12K"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kernel_refuses_what_the_policy_let_through() {
    // The policy allows every tier and protects nothing here, and the soul can read only
    // its workspace: the file tools must still stay inside it, because Landlock says so.
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.txt");
    write(&secret, "TOP SECRET");
    let escape = outside.path().join("escape.txt");
    let h = Harness::builder(vec![
        tools_reply(&[
            (
                "c1",
                "read_file",
                json!({"path": secret.display().to_string()}),
            ),
            (
                "c2",
                "write_file",
                json!({"path": escape.display().to_string(), "content": "x"}),
            ),
            (
                "c3",
                "write_file",
                json!({"path": "inside.txt", "content": "fine"}),
            ),
        ]),
        text_reply("done"),
    ])
    .policy(&format!("protected_paths = []\n{OPEN_POLICY}"))
    .build()
    .await;
    let soul = h.soul(&format!(
        "tools = [\"read_file\", \"write_file\"]\n[sandbox]\nread = [\"{}\"]\n",
        h.workspace().display()
    ));
    let rt = h.runtime(builtin_plus(vec![]));
    let (out, _) = h.run(rt, h.spec(soul, "exfiltrate", None)).await;
    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);
    let msgs = tool_messages(&h.server, 1);
    let read = msgs[0]["content"].as_str().unwrap();
    assert!(
        read.contains("Permission denied") && !read.contains("TOP SECRET"),
        "{read}"
    );
    let write_out = msgs[1]["content"].as_str().unwrap();
    assert!(write_out.contains("Permission denied"), "{write_out}");
    assert!(
        !escape.exists(),
        "the kernel let a write out of the sandbox"
    );
    assert_eq!(
        std::fs::read_to_string(h.workspace().join("inside.txt")).unwrap(),
        "fine"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soul_that_requires_the_sandbox_is_denied_on_a_partial_kernel() {
    let h = Harness::new(vec![text_reply("never asked")]).await;
    let rt = h.runtime(builtin_plus(vec![]));
    let mut rt = Arc::try_unwrap(rt).ok().unwrap();
    let services = Arc::get_mut(&mut rt.services).unwrap();
    // As on a kernel with Landlock ABI 3: no TCP rules, no signal scoping.
    services.enforcement = familiar_sandbox::status::Enforcement::for_abi(Some(3));
    let soul = h.soul("[sandbox]\nrequire = true\n");
    let (out, events) = h.run(Arc::new(rt), h.spec(soul, "go", None)).await;
    assert_eq!(out.status, TaskStatus::Denied);
    assert!(
        out.result.contains("requires a fully enforced sandbox"),
        "{}",
        out.result
    );
    assert!(out.result.contains("partial"), "{}", out.result);
    assert!(h.server.requests().is_empty(), "the model was called");
    let started = events.iter().find(|e| e.kind() == "task_started").unwrap();
    let sandbox = serde_json::to_value(&started.payload).unwrap()["sandbox"].clone();
    assert_eq!(sandbox["status"], "partial", "{sandbox}");
    assert_eq!(sandbox["abi"], 3);
}
