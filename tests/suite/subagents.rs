//! `delegate` end to end against the loopback model: the child runs under the stricter
//! of both souls, shares the parent's budget, is cancelled with it, cannot delegate
//! further, and reports under its own task id.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use familiar::soul::{PromptSource, Soul, SoulOrigin, SoulSet, parse};
use familiar::tools::Registry;
use familiar_protocol::events::{Event, EventPayload};
use familiar_protocol::ids::SessionId;
use familiar_protocol::task::TaskStatus;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common::harness::{Harness, OPEN_POLICY, builtin_plus, text_reply, tools_reply};
use crate::common::llm_server::{Gate, Reply, Step, oa_text};

/// A parent `boss` that may read and delegate to `helper`, but not write; a `helper`
/// that may write and read (and names `delegate` itself, to test the depth limit).
const BOSS: &str = "prompt = \"boss\"\nmax_iterations = 6\ntools = [\"read_file\", \"delegate\"]\ndelegates = [\"helper\"]\n[permissions]\nwrite = \"deny\"\n";
const HELPER: &str = "prompt = \"helper\"\nmax_iterations = 10\ntools = [\"read_file\", \"write_file\", \"delegate\"]\ndelegates = [\"boss\"]\n";

fn soul(h: &Harness, id: &str, src: &str) -> Soul {
    parse(
        &format!("{id}.toml"),
        id,
        src,
        PromptSource::BuiltIn,
        h.home.path(),
        None,
        SoulOrigin::BuiltIn,
    )
    .unwrap()
}

fn souls(h: &Harness, boss: &str) -> SoulSet {
    let mut set = SoulSet::default();
    set.souls
        .insert("boss".into(), std::sync::Arc::new(soul(h, "boss", boss)));
    set.souls.insert(
        "helper".into(),
        std::sync::Arc::new(soul(h, "helper", HELPER)),
    );
    set
}

fn tools() -> Registry {
    let builtin = Registry::builtin();
    builtin_plus(vec![Arc::clone(builtin.get("delegate").unwrap())])
}

fn delegate(prompt: &str) -> Reply {
    tools_reply(&[(
        "d1",
        "delegate",
        json!({"soul": "helper", "prompt": prompt}),
    )])
}

fn payloads<'a>(events: &'a [Arc<Event>], kind: &str) -> Vec<&'a Arc<Event>> {
    events.iter().filter(|e| e.kind() == kind).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_runs_under_the_stricter_rules_and_reports_under_its_own_id() {
    let h = Harness::builder(vec![
        delegate("write the notes"),
        tools_reply(&[
            (
                "w1",
                "write_file",
                json!({"path": "notes.txt", "content": "x"}),
            ),
            ("d2", "delegate", json!({"soul": "boss", "prompt": "again"})),
        ]),
        text_reply("could not write"),
        text_reply("the helper could not write"),
    ])
    .policy(OPEN_POLICY)
    .build()
    .await;
    let set = souls(&h, BOSS);
    let boss = Arc::clone(&set.souls["boss"]);
    let rt = h.runtime_with_souls(tools(), set);
    let spec = h.spec(boss, "get the notes written", None);
    let parent = spec.task_id.clone();
    let (out, events) = h.run(rt, spec).await;
    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);
    assert_eq!(out.result, "the helper could not write");

    let started = payloads(&events, "subagent_started");
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].task_id, parent);
    let EventPayload::SubagentStarted {
        child_task_id,
        child_session_id,
        soul,
        ..
    } = &started[0].payload
    else {
        panic!()
    };
    assert_eq!(soul, "helper");
    // The child's events carry its own ids.
    let child_calls: Vec<_> = events
        .iter()
        .filter(|e| e.task_id.as_str() == child_task_id)
        .filter_map(|e| match &e.payload {
            EventPayload::ToolCallStarted {
                tool,
                decision,
                reason,
                ..
            } => Some((tool.clone(), *decision, reason.clone())),
            _ => None,
        })
        .collect();
    // write_file is in the helper's allowlist but not the boss's: refused.
    assert_eq!(child_calls[0].0, "write_file");
    assert_eq!(child_calls[0].1, "deny", "{child_calls:?}");
    assert!(!h.workspace().join("notes.txt").exists());
    // A delegate of a delegate fails with a tool error that says why.
    assert_eq!(child_calls[1].0, "delegate");
    let child_results = crate::common::harness::tool_messages(&h.server, 2);
    let depth_error = child_results[1]["content"].as_str().unwrap();
    assert!(
        depth_error.contains("cannot delegate further"),
        "{depth_error}"
    );

    // The parent got the child's answer with its status.
    let parent_results = crate::common::harness::tool_messages(&h.server, 3);
    let answer = parent_results[0]["content"].as_str().unwrap();
    assert!(answer.contains("completed]"), "{answer}");
    assert!(answer.contains("could not write"), "{answer}");
    let finished = payloads(&events, "subagent_finished");
    assert!(
        matches!(
            &finished[0].payload,
            EventPayload::SubagentFinished {
                status: TaskStatus::Completed,
                iterations: 2,
                ..
            }
        ),
        "{:?}",
        finished[0].payload
    );

    // Its own session, linked to the parent's.
    let ctx = h
        .store
        .load_context(&SessionId::new(child_session_id.as_str()).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(ctx.parent_session.as_ref(), Some(&out.session_id));
    assert_eq!(ctx.parent_task.as_ref(), Some(&parent));
    assert_eq!(ctx.tasks[0].prompt, "write the notes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_iterations_come_out_of_the_parents_budget() {
    let looping =
        (0..6).map(|i| tools_reply(&[("r", "read_file", json!({"path": format!("/nope/{i}")}))]));
    let script = std::iter::once(delegate("loop"))
        .chain(looping)
        .collect::<Vec<_>>();
    let h = Harness::builder(script).policy(OPEN_POLICY).build().await;
    let boss = BOSS.replace("max_iterations = 6", "max_iterations = 3");
    let set = souls(&h, &boss);
    let boss = Arc::clone(&set.souls["boss"]);
    let rt = h.runtime_with_souls(tools(), set);
    let (out, events) = h.run(rt, h.spec(boss, "go", None)).await;
    // The child got the 2 calls the parent had left, then the parent was out too.
    let EventPayload::SubagentStarted { max_iterations, .. } =
        &payloads(&events, "subagent_started")[0].payload
    else {
        panic!()
    };
    assert_eq!(*max_iterations, 2);
    let EventPayload::SubagentFinished {
        status, iterations, ..
    } = &payloads(&events, "subagent_finished")[0].payload
    else {
        panic!()
    };
    assert_eq!((*status, *iterations), (TaskStatus::MaxIterations, 2));
    assert_eq!(out.status, TaskStatus::MaxIterations, "{}", out.result);
    assert_eq!(out.iterations, 1, "the parent itself made one call");
    assert_eq!(h.server.requests().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_parent_cancels_the_child() {
    let gate = Gate::new();
    let hang = Reply::sse_steps(vec![
        Step::Send(oa_text("thinking").into_bytes()),
        Step::Wait(gate.clone()),
        Step::Hang,
    ]);
    let h = Harness::builder(vec![delegate("wait"), hang])
        .policy(OPEN_POLICY)
        .build()
        .await;
    let set = souls(&h, BOSS);
    let boss = Arc::clone(&set.souls["boss"]);
    let rt = h.runtime_with_souls(tools(), set);
    let spec = h.spec(boss, "go", None);
    let parent = spec.task_id.clone();
    let (out, events) = h
        .run_with(rt, spec, CancellationToken::new(), move |e, cancel| {
            // The child is streaming: stop the parent.
            if e.task_id != parent && matches!(e.payload, EventPayload::TextDelta { .. }) {
                cancel.cancel();
            }
        })
        .await;
    assert_eq!(out.status, TaskStatus::Cancelled);
    let EventPayload::SubagentFinished { status, .. } =
        &payloads(&events, "subagent_finished")[0].payload
    else {
        panic!()
    };
    assert_eq!(*status, TaskStatus::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_lists_a_sub_task_under_its_parent_and_signals_its_events() {
    use familiar_protocol::proxy::Agent1Proxy;

    use crate::common::bus::TestBus;
    use crate::common::fixture::Watch;

    let h = Harness::builder(vec![
        delegate("look around"),
        text_reply("nothing here"),
        text_reply("the helper found nothing"),
    ])
    .policy(OPEN_POLICY)
    .build()
    .await;
    let bus = TestBus::start();
    let rt = h.runtime_with_souls(tools(), souls(&h, BOSS));
    let daemon = familiar::daemon::Daemon::start(
        rt,
        zbus::connection::Builder::address(bus.address.as_str()),
        familiar::daemon::DaemonOptions::default(),
    )
    .await
    .unwrap();
    let proxy = Agent1Proxy::new(&bus.connect().await).await.unwrap();
    let mut w = Watch::new(&proxy).await;
    let (task, _) = proxy
        .submit("boss", "go", Default::default())
        .await
        .unwrap();
    let started = w.event(&task, "subagent_started").await;
    let child = started["child_task_id"].as_str().unwrap().to_owned();
    // The child's own events are signalled under its id.
    let child_end = w.event(&child, "task_finished").await;
    assert_eq!(child_end["status"], "completed");
    assert_eq!(w.finished(&task).await.0, "completed");

    let listed: Vec<String> = proxy
        .list_tasks()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(listed, [task.clone(), child.clone()]);
    let parent: serde_json::Value =
        serde_json::from_str(&proxy.get_task_json(&task).await.unwrap()).unwrap();
    assert_eq!(parent["children"], json!([child]));
    let sub: serde_json::Value =
        serde_json::from_str(&proxy.get_task_json(&child).await.unwrap()).unwrap();
    assert_eq!(sub["parent_task"], task.as_str());
    assert_eq!(sub["parent_session"], parent["session_id"]);
    assert_eq!(sub["status"], "completed");
    assert_eq!(sub["soul"], "helper");
    assert_eq!(
        super::daemon::error_name(proxy.cancel(&child).await),
        "dev.familiar.Agent1.Error.InvalidArgument"
    );
    daemon.shutdown().await;
}
