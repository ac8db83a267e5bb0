//! The service contract: Submit and its signals, typed errors, the queue, sessions,
//! cancel, approvals over D-Bus, shutdown, crash repair, introspection.

use std::collections::HashMap;

use familiar::daemon::DaemonOptions;
use familiar::store::Context;
use familiar_protocol::ids::SessionId;
use familiar_protocol::proxy::Agent1Proxy;
use familiar_protocol::task::TaskStatus;
use serde_json::json;
use zbus::Variant;

use super::*;
use crate::common::harness::{text_reply, tools_reply};
use crate::common::llm_server::Reply;
use crate::common::llm_server::{Gate, Step, oa_done, oa_finish, oa_text, oa_usage, sse};

/// A text reply that waits for `gate` before sending anything.
pub(super) fn gated_reply(gate: &Gate, text: &str) -> Reply {
    Reply::sse_steps(vec![
        Step::Wait(gate.clone()),
        Step::Send(
            sse(vec![
                oa_text(text),
                oa_finish("stop"),
                oa_usage(10, 2),
                oa_done(),
            ])
            .into_bytes(),
        ),
    ])
}

const E: &str = "dev.familiar.Agent1.Error.";

#[tokio::test]
async fn submit_streams_every_event_then_task_finished() {
    let f = Fixture::new(vec![text_reply("hello from the model")]).await;
    let mut w = Watch::new(&f.proxy).await;
    let (task, session) = f.submit("", "say hello").await.unwrap();
    let events = w.events(&task).await;
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds.first(), Some(&"task_started"));
    assert_eq!(kinds.last(), Some(&"task_finished"));
    assert!(kinds.contains(&"text_delta"), "{kinds:?}");
    assert_eq!(
        events[0].1["soul"], "safe_assistant",
        "empty soul = default soul"
    );
    let (status, result) = w.finished(&task).await;
    assert_eq!(status, "completed");
    assert!(result.contains("hello from the model"), "{result}");

    let got: serde_json::Value =
        serde_json::from_str(&f.proxy.get_task_json(&task).await.unwrap()).unwrap();
    assert_eq!(got["id"], task.as_str());
    assert_eq!(got["session_id"], session.as_str());
    assert_eq!(got["status"], "completed");
    assert_eq!(got["prompt"], "say hello");
    for key in ["plan", "usage", "result", "soul"] {
        assert!(got.get(key).is_some(), "GetTask lacks {key}: {got}");
    }
    let tasks = f.proxy.list_tasks().await.unwrap();
    assert_eq!(
        tasks,
        vec![familiar_protocol::query::TaskRow {
            id: task.clone(),
            soul: "safe_assistant".into(),
            status: "completed".into(),
            prompt: "say hello".into()
        }]
    );
    let sessions = f.proxy.list_sessions().await.unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].id, session);
    assert_eq!(f.proxy.active_tasks().await.unwrap(), 0);
    assert_eq!(f.proxy.metrics().await.unwrap()["tasks_completed"], 1);
    assert_eq!(f.proxy.version().await.unwrap(), env!("CARGO_PKG_VERSION"));
    let souls = f.proxy.list_souls().await.unwrap();
    assert!(
        souls
            .iter()
            .any(|s| s.id == "test" && s.max_iterations == 5),
        "{souls:?}"
    );
    let snap: serde_json::Value = serde_json::from_str(&f.proxy.snapshot().await.unwrap()).unwrap();
    assert!(snap.is_object());
    // The default workspace is the session's scratch dir, never the caller's home.
    let ws = events[0].1["workspace"].as_str().unwrap().to_owned();
    assert!(ws.ends_with(&format!("workspaces/{session}")), "{ws}");
}

#[tokio::test]
async fn bad_arguments_are_typed_errors_and_the_daemon_stays_up() {
    let f = Fixture::new(vec![text_reply("still here")]).await;
    let p = &f.proxy;
    assert_eq!(
        error_name(f.submit("nope", "hi").await),
        format!("{E}UnknownSoul")
    );
    assert_eq!(
        error_name(f.submit("", "   ").await),
        format!("{E}InvalidArgument")
    );
    let huge = "x".repeat(10 * 1024 * 1024);
    assert_eq!(
        error_name(f.submit("", &huge).await),
        format!("{E}InvalidArgument")
    );
    let opts = |k: &'static str, v: Variant<'static>| HashMap::from([(k, v)]);
    for (key, value, want) in [
        (
            "workspace",
            Variant::from("relative/dir"),
            "InvalidArgument",
        ),
        ("workspace", Variant::from(7u32), "InvalidArgument"),
        ("max_iterations", Variant::from("ten"), "InvalidArgument"),
        ("max_iterations", Variant::from(0u32), "InvalidArgument"),
        ("colour", Variant::from("blue"), "InvalidArgument"),
        (
            "session",
            Variant::from("no-such-session"),
            "UnknownSession",
        ),
        ("session", Variant::from("../../etc"), "InvalidArgument"),
        (
            "context",
            Variant::from(std::collections::BTreeMap::from([("screen", "pixels")])),
            "InvalidArgument",
        ),
        ("context", Variant::from("selection"), "InvalidArgument"),
    ] {
        let r = p.submit("", "hi", opts(key, value)).await;
        assert_eq!(error_name(r), format!("{E}{want}"), "option {key}");
    }
    assert_eq!(
        error_name(p.cancel("t-nope").await),
        format!("{E}UnknownTask")
    );
    assert_eq!(
        error_name(p.get_task_json("../x").await),
        format!("{E}UnknownTask")
    );
    assert_eq!(
        error_name(p.respond("r-nope", true).await),
        format!("{E}InvalidArgument")
    );

    // Still serving, and a good call works.
    let mut w = Watch::new(p).await;
    let (task, _) = f.submit("test", "hi").await.unwrap();
    assert_eq!(w.finished(&task).await.0, "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gdbus_sees_the_error_names_and_busctl_introspects() {
    if crate::common::skip::program("gdbus", "libglib2.0-bin").is_none() {
        return;
    }
    let f = Fixture::new(vec![]).await;
    let out = std::process::Command::new("gdbus")
        .args([
            "call",
            "--address",
            &f.bus.address,
            "--dest",
            "dev.familiar.Agent1",
        ])
        .args(["--object-path", "/dev/familiar/Agent1"])
        .args(["--method", "dev.familiar.Agent1.Submit", "nope", "hi", "{}"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("dev.familiar.Agent1.Error.UnknownSoul"),
        "{err}"
    );

    let out = std::process::Command::new("busctl")
        .args([
            "--address",
            &f.bus.address,
            "introspect",
            "dev.familiar.Agent1",
            "/dev/familiar/Agent1",
            "dev.familiar.Agent1",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (member, sig) in [
        (".Submit", "ssa{sv}"),
        (".Cancel", "s"),
        (".Respond", "sb"),
        (".GetTask", "s"),
        (".ListTasks", "-"),
        (".ListSouls", "-"),
        (".ListSessions", "-"),
        (".Snapshot", "-"),
        (".TaskEvent", "sss"),
        (".ApprovalRequested", "sssss"),
        (".TaskFinished", "sss"),
        (".ActiveTasks", "u"),
        (".Metrics", "a{st}"),
        (".Version", "s"),
    ] {
        let line = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(member))
            .unwrap_or_else(|| panic!("{member} missing:\n{text}"));
        assert_eq!(line.split_whitespace().nth(2), Some(sig), "{line}");
    }
    for (member, ret) in [
        (".Submit", "ss"),
        (".ListTasks", "a(ssss)"),
        (".ListSouls", "a(sssu)"),
        (".ListSessions", "a(ssst)"),
    ] {
        let line = text.lines().find(|l| l.starts_with(member)).unwrap();
        assert_eq!(line.split_whitespace().nth(3), Some(ret), "{line}");
    }

    // busctl drives a method end to end too.
    let out = std::process::Command::new("busctl")
        .args([
            "--address",
            &f.bus.address,
            "call",
            "dev.familiar.Agent1",
            "/dev/familiar/Agent1",
            "dev.familiar.Agent1",
            "ListTasks",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "a(ssss) 0");
}

#[tokio::test]
async fn one_task_per_session_and_cancel_while_running() {
    let gate = Gate::new();
    let f = Fixture::new(vec![gated_reply(&gate, "never sent")]).await;
    let mut w = Watch::new(&f.proxy).await;
    let (task, session) = f.submit("test", "first").await.unwrap();
    w.event(&task, "iteration_started").await;
    let again = HashMap::from([("session", Variant::from(session.as_str()))]);
    let r = f.proxy.submit("test", "second", again).await;
    assert_eq!(error_name(r), format!("{E}SessionBusy"));
    assert_eq!(f.proxy.active_tasks().await.unwrap(), 1);
    f.proxy.cancel(&task).await.unwrap();
    let (status, _) = w.finished(&task).await;
    assert_eq!(status, "cancelled");
    // The partial context was persisted with the status.
    let ctx = f
        .harness
        .store
        .load_context(&SessionId::new(&session).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(ctx.tasks[0].status, TaskStatus::Cancelled);
    // Cancelled is not failed.
    let metrics = f.proxy.metrics().await.unwrap();
    assert_eq!(metrics["tasks_cancelled"], 1, "{metrics:?}");
    assert_eq!(metrics["tasks_failed"], 0, "{metrics:?}");
}

#[tokio::test]
async fn the_pool_is_bounded_and_the_queue_is_fifo_and_bounded() {
    let gate = Gate::new();
    let f = Fixture::builder(vec![gated_reply(&gate, "one"), text_reply("three")])
        .config("\n[daemon]\nmax_concurrent_tasks = 1\nqueue_limit = 2\n")
        .start()
        .await;
    let mut w = Watch::new(&f.proxy).await;
    let (t1, _) = f.submit("test", "one").await.unwrap();
    w.event(&t1, "iteration_started").await;
    let (t2, _) = f.submit("test", "two").await.unwrap();
    let (t3, _) = f.submit("test", "three").await.unwrap();
    let r = f.submit("test", "four").await;
    assert_eq!(
        error_name(r),
        format!("{E}RateLimited"),
        "the queue is full"
    );
    let statuses: Vec<String> = f
        .proxy
        .list_tasks()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.status)
        .collect();
    assert_eq!(statuses, ["running", "queued", "queued"]);
    assert_eq!(f.proxy.active_tasks().await.unwrap(), 3);
    // Cancelling a queued task ends it without running it.
    f.proxy.cancel(&t2).await.unwrap();
    assert_eq!(
        w.finished(&t2).await,
        ("cancelled".into(), "cancelled before it started".into())
    );
    gate.open();
    assert_eq!(w.finished(&t1).await.0, "completed");
    assert_eq!(w.finished(&t3).await.0, "completed");
    // t3 ran only after t1: the model saw t1's request first.
    let prompts: Vec<String> = f
        .harness
        .server
        .requests()
        .iter()
        .map(|r| r.body["messages"].to_string())
        .collect();
    assert_eq!(prompts.len(), 2);
    assert!(prompts[0].contains("one") && prompts[1].contains("three"));
}

#[tokio::test]
async fn submit_is_rate_limited_per_caller() {
    let options = DaemonOptions {
        submit_rate: "2/h".parse().unwrap(),
        ..DaemonOptions::default()
    };
    let f = Fixture::builder(vec![text_reply("a"), text_reply("b")])
        .options(options)
        .start()
        .await;
    f.submit("test", "one").await.unwrap();
    f.submit("test", "two").await.unwrap();
    assert_eq!(
        error_name(f.submit("test", "three").await),
        format!("{E}RateLimited")
    );
    // Counted by the metrics hook like every other refusal over a limit.
    assert_eq!(f.proxy.metrics().await.unwrap()["rate_limited"], 1);
    // Another caller has its own budget.
    let other = Agent1Proxy::new(&f.bus.connect().await).await.unwrap();
    other.list_tasks().await.unwrap();
}

#[tokio::test]
async fn an_approval_is_answered_with_respond() {
    let f = Fixture::builder(vec![
        tools_reply(&[(
            "c1",
            "write_file",
            json!({"path": "note.txt", "content": "hi"}),
        )]),
        text_reply("written"),
    ])
    .policy("[tiers]\nread = \"allow\"\nwrite = \"ask\"\n")
    .options(DaemonOptions {
        notifications: false,
        ..DaemonOptions::default()
    })
    .start()
    .await;
    let mut w = Watch::new(&f.proxy).await;
    let ws = f.workspace();
    let opts = HashMap::from([("workspace", Variant::from(ws.to_str().unwrap()))]);
    let (task, _) = f.proxy.submit("test", "write a note", opts).await.unwrap();
    let (request, tool, summary, tier) = w.approval(&task).await;
    assert_eq!((tool.as_str(), tier.as_str()), ("write_file", "write"));
    assert!(summary.contains("note.txt"), "{summary}");
    f.proxy.respond(&request, true).await.unwrap();
    // The first answer wins; a second one is refused.
    assert_eq!(
        error_name(f.proxy.respond(&request, false).await),
        format!("{E}InvalidArgument")
    );
    assert_eq!(w.finished(&task).await.0, "completed");
    assert_eq!(std::fs::read_to_string(ws.join("note.txt")).unwrap(), "hi");
    // The person's answer time is reported apart from the tool's own time.
    let done = w.event(&task, "tool_call_finished").await;
    assert!(done["approval_wait_ms"].is_u64(), "{done}");
    assert!(done["duration_ms"].is_u64(), "{done}");
}

#[tokio::test]
async fn shutdown_cancels_running_tasks_and_persists_them() {
    let gate = Gate::new();
    let mut f = Fixture::new(vec![gated_reply(&gate, "never")]).await;
    let mut w = Watch::new(&f.proxy).await;
    let (task, session) = f.submit("test", "long job").await.unwrap();
    w.event(&task, "iteration_started").await;
    let daemon = f.daemon.take().unwrap();
    let stopping = tokio::spawn(daemon.shutdown());
    assert_eq!(w.finished(&task).await.0, "cancelled");
    stopping.await.unwrap();
    let ctx = f
        .harness
        .store
        .load_context(&SessionId::new(&session).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(ctx.tasks[0].status, TaskStatus::Cancelled);
    // The name is released: the bus no longer routes to a daemon.
    let r = f.proxy.list_tasks().await;
    assert!(r.is_err());
}

#[tokio::test]
async fn tasks_a_crash_left_running_are_marked_interrupted_at_start() {
    let f = Fixture::new(vec![]).await;
    let store = &f.harness.store;
    let id = SessionId::generate();
    let mut ctx = Context::new(
        id.clone(),
        familiar_protocol::ids::SoulId::new("test").unwrap(),
        "crashy",
    );
    let mut rec: familiar::store::TaskRecord = serde_json::from_value(json!({
        "task_id": "t-crashed", "prompt": "crashy", "status": "running", "origin": "cli",
        "started_at": "2026-01-01T00:00:00Z"
    }))
    .unwrap_or_else(|e| panic!("task record fixture: {e}"));
    rec.status = TaskStatus::Running;
    ctx.tasks.push(rec);
    store.save_context(&mut ctx).unwrap();
    assert_eq!(familiar::daemon::mark_interrupted(store), 1);
    let ctx = store.load_context(&id).unwrap().unwrap();
    assert_eq!(ctx.tasks[0].status, TaskStatus::Interrupted);
    assert_eq!(familiar::daemon::mark_interrupted(store), 0, "idempotent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_of_another_user_are_refused() {
    if !std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout == b"0\n")
    {
        // Changing uid needs root; the check itself is exercised by every other test.
        return;
    }
    let f = Fixture::new(vec![]).await;
    let address = f.bus.address.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "busctl"])
            .args([
                "--address",
                &address,
                "call",
                "dev.familiar.Agent1",
                "/dev/familiar/Agent1",
            ])
            .args(["dev.familiar.Agent1", "Submit", "ssa{sv}", "", "hi", "0"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("familiar serves only its own user"), "{err}");
    assert!(
        f.proxy.list_tasks().await.unwrap().is_empty(),
        "nothing was submitted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_200_submits_is_rate_limited_and_the_daemon_stays_responsive() {
    // The default per-caller limit; the model never answers (no script), so tasks fail.
    let f = Fixture::new(vec![]).await;
    let mut accepted = 0;
    let mut limited = 0;
    for i in 0..200 {
        match f.submit("", &format!("burst {i}")).await {
            Ok(_) => accepted += 1,
            Err(e) => {
                assert_eq!(error_name(Err::<(), _>(e)), format!("{E}RateLimited"));
                limited += 1;
            }
        }
    }
    assert!(
        accepted > 0 && limited > 0,
        "{accepted} accepted, {limited} limited"
    );
    assert_eq!(accepted + limited, 200);
    // Still answering, at once.
    assert!(!f.proxy.version().await.unwrap().is_empty());
    f.proxy.list_tasks().await.unwrap();
}

// A soul file added while the daemon ran was listed by `familiar souls`
// but refused with UnknownSoul until a restart.
#[tokio::test]
async fn soul_changes_are_picked_up_and_a_broken_file_keeps_its_previous_version() {
    let f = Fixture::new(vec![
        text_reply("one"),
        text_reply("two"),
        text_reply("three"),
    ])
    .await;
    let home = &f.harness.home;
    let extra = TEST_SOUL.replace("id = \"test\"", "id = \"extra\"");
    home.write_config("souls/extra.toml", &extra);
    // Added while running: picked up at the next Submit, no signal needed.
    let mut w = Watch::new(&f.proxy).await;
    let (task, _) = f.submit("extra", "hi").await.unwrap();
    assert_eq!(w.finished(&task).await.0, "completed");

    // Broken now: reported, and the previous version stays in force.
    home.write_config("souls/extra.toml", "id = \"extra\"\nmax_iteratons = 3\n");
    let kept = f.daemon.as_ref().unwrap().reload().unwrap_err().to_string();
    assert!(kept.contains("previous version stays in force"), "{kept}");
    let (task, _) = f.submit("extra", "still there?").await.unwrap();
    assert_eq!(w.finished(&task).await.0, "completed");

    // A policy that does not load keeps the previous policy and souls.
    home.write_config("policies/default.toml", "tiers = 3\n");
    let err = f.daemon.as_ref().unwrap().reload().unwrap_err();
    assert!(
        err.to_string()
            .contains("previous policy and souls stay in force"),
        "{err}"
    );
    let (task, _) = f.submit("extra", "and now?").await.unwrap();
    assert_eq!(w.finished(&task).await.0, "completed");
}
