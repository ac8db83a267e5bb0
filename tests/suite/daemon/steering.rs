//! Steering a running task: `Steer` over the bus, driven by the proxy,
//! `busctl` and `gdbus`; the message joins at the next step without changing what the
//! model saw before, and a message the task did not read opens the session's next task.

use familiar_protocol::ids::SessionId;
use serde_json::{Value, json};

use super::service::gated_reply;
use super::*;
use crate::common::harness::{text_reply, tools_reply};
use crate::common::llm_server::Reply;
use crate::common::llm_server::{Gate, Step};

/// `reply`, held back until `gate` opens.
fn gated(gate: &Gate, mut reply: Reply) -> Reply {
    reply.steps.insert(0, Step::Wait(gate.clone()));
    reply
}

fn messages(body: &Value) -> Vec<Value> {
    body["messages"].as_array().cloned().unwrap_or_default()
}

/// `familiar`'s D-Bus method called by a command-line client: its stdout, or its
/// stderr when it failed.
fn call(tool: &str, address: &str, method: &str, args: &[&str]) -> (bool, String) {
    let mut cmd = std::process::Command::new(tool);
    match tool {
        "busctl" => cmd.args([
            "--address",
            address,
            "call",
            "dev.familiar.Agent1",
            "/dev/familiar/Agent1",
            "dev.familiar.Agent1",
            method,
        ]),
        _ => cmd
            .args([
                "call",
                "--address",
                address,
                "--dest",
                "dev.familiar.Agent1",
            ])
            .args(["--object-path", "/dev/familiar/Agent1"])
            .args(["--method", &format!("dev.familiar.Agent1.{method}")]),
    };
    let out = cmd.args(args).output().unwrap();
    let text = if out.status.success() {
        out.stdout
    } else {
        out.stderr
    };
    (
        out.status.success(),
        String::from_utf8_lossy(&text).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steered_message_joins_at_the_next_step_and_keeps_the_prefix() {
    let gate = Gate::new();
    let f = Fixture::new(vec![
        gated(
            &gate,
            tools_reply(&[("c1", "list_dir", json!({"path": "."}))]),
        ),
        text_reply("done, and the logs look fine"),
    ])
    .await;
    let mut w = Watch::new(&f.proxy).await;
    let (task, _) = f.submit("test", "look around").await.unwrap();
    // The request is on the wire and the model holds its answer: the message waits
    // for the next step.
    f.harness.server.wait_requests(1).await;
    f.proxy.steer(&task, "also check the logs").await.unwrap();
    let (ok, out) = call(
        "busctl",
        &f.bus.address,
        "Steer",
        &["ss", &task, "and be brief"],
    );
    assert!(ok, "{out}");
    gate.open();
    let events = w.events(&task).await;
    let steered: Vec<&Value> = events
        .iter()
        .filter(|(k, _)| k == "steering_received")
        .map(|(_, p)| p)
        .collect();
    assert_eq!(steered.len(), 2, "{events:?}");
    assert_eq!(steered[0]["message"], "also check the logs");
    let (kind, finished) = events.last().unwrap();
    assert_eq!(kind, "task_finished");
    assert_eq!(finished["status"], "completed");
    assert_eq!(finished["pending_steering"], 0);

    let requests = f.harness.server.requests();
    assert_eq!(requests.len(), 2);
    let (first, second) = (messages(&requests[0].body), messages(&requests[1].body));
    // Nothing the model saw changed: the first request's messages open the second.
    assert_eq!(second[..first.len()], first[..], "the prefix changed");
    let tail = serde_json::to_string(&second[first.len()..]).unwrap();
    assert!(tail.contains("also check the logs"), "{tail}");
    assert!(tail.contains("and be brief"), "{tail}");
    assert!(
        !serde_json::to_string(&first)
            .unwrap()
            .contains("also check")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_the_task_did_not_read_opens_the_next_task() {
    let gate = Gate::new();
    let f = Fixture::new(vec![gated_reply(&gate, "the answer"), text_reply("noted")]).await;
    let mut w = Watch::new(&f.proxy).await;
    let (task, session) = f.submit("test", "a question").await.unwrap();
    f.harness.server.wait_requests(1).await;
    f.proxy.steer(&task, "one more thing").await.unwrap();
    gate.open();
    // The answer ended the task before another step: the message is kept.
    let finished = w.event(&task, "task_finished").await;
    assert_eq!(finished["pending_steering"], 1, "{finished}");
    // The session is free once the daemon says the task finished.
    assert_eq!(w.finished(&task).await.0, "completed");
    let id = SessionId::new(&session).unwrap();
    let ctx = f.harness.store.load_context(&id).unwrap().unwrap();
    assert_eq!(ctx.pending_steering, ["one more thing"]);

    // A steer after the end is refused, not silently dropped.
    let err = f.proxy.steer(&task, "too late").await;
    assert!(error_name(err).ends_with("TaskNotRunning"));

    let opts =
        std::collections::HashMap::from([("session", zbus::Variant::from(session.as_str()))]);
    let (next, _) = f.proxy.submit("test", "go on", opts).await.unwrap();
    assert_eq!(w.finished(&next).await.0, "completed");
    let requests = f.harness.server.requests();
    let last = messages(&requests[1].body);
    let opening = serde_json::to_string(last.last().unwrap()).unwrap();
    let (steer_at, prompt_at) = (
        opening.find("one more thing").unwrap(),
        opening.find("go on").unwrap(),
    );
    assert!(steer_at < prompt_at, "{opening}");
    let ctx = f.harness.store.load_context(&id).unwrap().unwrap();
    assert!(ctx.pending_steering.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steer_errors_are_typed_for_every_client() {
    if crate::common::skip::program("gdbus", "libglib2.0-bin").is_none() {
        return;
    }
    let f = Fixture::new(vec![]).await;
    let (ok, err) = call(
        "gdbus",
        &f.bus.address,
        "Steer",
        &["t-000000000000", "hello"],
    );
    assert!(!ok);
    assert!(
        err.contains("dev.familiar.Agent1.Error.UnknownTask"),
        "{err}"
    );
    let (ok, err) = call("busctl", &f.bus.address, "Steer", &["ss", "not an id", "x"]);
    assert!(!ok);
    // busctl prints the error's message: the one a person reads.
    assert!(err.contains("no task `not an id`"), "{err}");
    let e = f.proxy.steer("t-000000000000", "  ").await;
    assert!(error_name(e).ends_with("InvalidArgument"));
}

/// `familiar steer` and `familiar ask --session` on a busy session, as a person runs
/// them: both reach the running task (`--detach` prints the task the ask joined).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_steers_with_steer_and_with_ask_on_a_busy_session() {
    let gate = Gate::new();
    let f = Fixture::new(vec![
        gated(
            &gate,
            tools_reply(&[("c1", "list_dir", json!({"path": "."}))]),
        ),
        text_reply("all done"),
    ])
    .await;
    let mut w = Watch::new(&f.proxy).await;
    let (task, session) = f.submit("test", "look around").await.unwrap();
    f.harness.server.wait_requests(1).await;
    let home = &f.harness.home;
    let out = super::cli::familiar(home, &f.bus, &["steer", &task, "from", "steer"], &[]).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "message sent to task {task}: it joins at the task's next step, or opens the session's next task\n"
        )
    );
    let out = super::cli::familiar(
        home,
        &f.bus,
        &["ask", "--detach", "--session", &session, "from ask"],
        &[],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("busy with task {task}")),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with(&task));
    gate.open();
    let events = w.events(&task).await;
    let messages: Vec<&Value> = events
        .iter()
        .filter(|(k, _)| k == "steering_received")
        .map(|(_, p)| &p["message"])
        .collect();
    assert_eq!(messages, [&json!("from steer"), &json!("from ask")]);
    let out = super::cli::familiar(home, &f.bus, &["steer", &task, "late"], &[]).await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "a finished task: TaskNotRunning"
    );
}
