//! `kill -9` of the real daemon at random points of running tasks: every context still
//! parses (none moved aside as corrupt), transcripts and the audit log stay JSONL with
//! at most a torn last line, the restarted daemon marks the killed tasks interrupted,
//! and the next task in a killed session repairs its dangling calls and completes.
//!
//! The instant is drawn as "after the model received N requests" (N random), so the
//! kill lands during streaming, tool calls or saving without sleeping for it. Default:
//! a handful of rounds; `FAMILIAR_KILL_ROUNDS=200` for the long mode.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use familiar::llm::{ContentBlock, Role};
use familiar::store::{Context, Store};
use familiar_protocol::ids::SessionId;
use familiar_protocol::task::TaskStatus;
use futures::StreamExt;
use rand::Rng;
use serde_json::json;

use super::*;
use crate::common::harness::{text_reply, tools_reply};
use crate::common::llm_server::{Recorded, Reply};

const CRASH_SOUL: &str = "id = \"crash\"\ndescription = \"crash\"\nprompt = \"p\"\nmax_iterations = 20\ntools = [\"list_dir\", \"read_file\"]\n";

/// Three rounds of two list_dir calls, then an answer.
fn model(req: &Recorded) -> Reply {
    let messages = req.body["messages"].as_array().cloned().unwrap_or_default();
    let results = messages.iter().filter(|m| m["role"] == "tool").count();
    if results >= 6 {
        text_reply("done")
    } else {
        let n = results;
        tools_reply(&[
            ("a", "list_dir", json!({"path": format!("/tmp/{n}a/..")})),
            ("b", "list_dir", json!({"path": format!("/tmp/{n}b/..")})),
        ])
    }
}

/// Calls an assistant message made that no later message answers.
fn dangling(history: &[familiar::llm::Message]) -> usize {
    let mut open: HashSet<String> = HashSet::new();
    for m in history {
        for b in &m.content {
            match (m.role, b) {
                (Role::Assistant, ContentBlock::ToolUse { id, .. }) => {
                    open.insert(id.as_str().to_owned());
                }
                (_, ContentBlock::ToolResult { tool_use_id, .. }) => {
                    open.remove(tool_use_id.as_str());
                }
                _ => {}
            }
        }
    }
    open.len()
}

/// The whole data dir is sound: contexts parse, nothing was moved aside, JSONL files
/// have at most a torn last line. Returns the session ids.
fn check_data_dir(data: &Path) -> Vec<SessionId> {
    let mut ids = Vec::new();
    let store = Store::open(data).unwrap();
    for entry in std::fs::read_dir(data.join("context")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            !name.contains(".corrupt-"),
            "a context was corrupted: {name}"
        );
        if let Some(id) = name.strip_suffix(".json") {
            let id = SessionId::new(id).unwrap();
            store
                .load_context(&id)
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .unwrap();
            let t = store.read_transcript_contents(&id).unwrap();
            let lines = std::fs::read_to_string(store.transcript_path(&id))
                .map(|s| s.lines().count())
                .unwrap_or(0);
            assert!(
                t.torn_lines.is_empty() || t.torn_lines == [lines],
                "{name}: torn lines {:?} of {lines}",
                t.torn_lines
            );
            ids.push(id);
        }
    }
    let audit = store.read_audit().unwrap();
    let lines = std::fs::read_to_string(store.audit_path())
        .unwrap()
        .lines()
        .count();
    assert!(
        audit.torn_lines.is_empty() || audit.torn_lines == [lines],
        "audit: torn lines {:?} of {lines}",
        audit.torn_lines
    );
    ids
}

fn load(data: &Path, id: &SessionId) -> Context {
    Store::open(data)
        .unwrap()
        .load_context(id)
        .unwrap()
        .unwrap()
}

/// A session whose task the kill interrupted (dangling calls or not: a context is
/// saved with an iteration's calls and results together, so normally none dangle).
fn was_interrupted(ctx: &Context) -> bool {
    dangling(&ctx.history) > 0
        || ctx
            .tasks
            .iter()
            .any(|t| t.status == TaskStatus::Interrupted)
}

/// Submits a task continuing session `id` and waits for its status.
async fn continue_session(
    proxy: &familiar_protocol::proxy::Agent1Proxy<'_>,
    finished: &mut familiar_protocol::proxy::TaskFinishedStream,
    id: &SessionId,
) -> String {
    let opts = HashMap::from([("session", zbus::Variant::from(id.as_str()))]);
    let (task, _) = proxy.submit("crash", "go on", opts).await.unwrap();
    tokio::time::timeout(PATIENCE, async {
        while let Some(sig) = finished.next().await {
            let a = sig.args().unwrap();
            if a.task_id == task {
                return a.status.to_string();
            }
        }
        panic!("signal stream ended")
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_random_instants_loses_at_most_the_step_in_flight() {
    let rounds = env_count("FAMILIAR_KILL_ROUNDS", 3);
    let server = LlmServer::start(vec![]).await;
    server.set_responder(std::sync::Arc::new(model));
    let home = TestHome::new();
    write_config(&home, &server, "");
    home.write_config("souls/crash.toml", CRASH_SOUL);
    let bus = TestBus::start();
    let data = home.data_dir();
    let mut rng = rand::rng();
    let mut interrupted_total = 0;
    let mut repaired_total = 0;
    let mut dangling_total = 0;
    let mut done_with: HashSet<SessionId> = HashSet::new();
    for round in 0..rounds {
        let mut daemon = RealDaemon::start(&bus, &home).await;
        let proxy = familiar_protocol::proxy::Agent1Proxy::new(&bus.connect().await)
            .await
            .unwrap();
        // The previous round's killed sessions: continuing one repairs it.
        let previous = check_data_dir(&data);
        let mut finished = proxy.receive_task_finished().await.unwrap();
        let mut continued = None;
        // A session whose task the kill interrupted (dangling calls or not: a context is
        // saved with an iteration's calls and results together, so normally none dangle).
        if let Some(id) = previous
            .iter()
            .find(|id| !done_with.contains(*id) && was_interrupted(&load(&data, id)))
        {
            let dangled = dangling(&load(&data, id).history) > 0;
            let status = continue_session(&proxy, &mut finished, id).await;
            assert_eq!(status, "completed");
            if dangled {
                dangling_total += 1;
            }
            assert_eq!(dangling(&load(&data, id).history), 0, "{id} still dangles");
            repaired_total += 1;
            continued = Some(id.clone());
            done_with.insert(id.clone());
        }
        // New tasks, then the kill at a random point of their progress.
        let seen = server.requests().len();
        for i in 0..3 {
            proxy
                .submit(
                    "crash",
                    &format!("round {round} task {i}"),
                    Default::default(),
                )
                .await
                .unwrap();
        }
        let at = seen + rng.random_range(1..=12);
        server.wait_requests(at).await;
        daemon.child.kill().unwrap();
        daemon.child.wait().unwrap();
        server.forget_requests();
        let ids = check_data_dir(&data);
        let store = Store::open(&data).unwrap();
        for id in ids {
            let ctx = store.load_context(&id).unwrap().unwrap();
            if continued.as_ref() == Some(&id) {
                continue;
            }
            interrupted_total += ctx
                .tasks
                .iter()
                .filter(|t| t.status == TaskStatus::Running)
                .count();
        }
        drop(daemon);
    }
    // The last round's kills are repaired by one more start.
    let _daemon = RealDaemon::start(&bus, &home).await;
    let store = Store::open(&data).unwrap();
    for id in check_data_dir(&data) {
        let ctx = store.load_context(&id).unwrap().unwrap();
        assert!(
            ctx.tasks.iter().all(|t| t.status != TaskStatus::Running),
            "{id}: a task is still running after the restart"
        );
    }
    eprintln!(
        "{rounds} kill -9 rounds: {interrupted_total} tasks caught running, {repaired_total} interrupted sessions continued to completion, {dangling_total} of them with dangling calls"
    );
}
