//! The client commands (`ask`, `status`, `tasks`, `cancel`) as subprocesses against the
//! daemon on a private bus.

use std::process::Output;

use familiar::daemon::DaemonOptions;
use futures::StreamExt;

use super::*;
use crate::common::TestHome;
use crate::common::harness::text_reply;

/// Runs `familiar ARGS` against `bus` off the runtime's threads (the daemon under test
/// runs on them).
pub(super) async fn familiar(
    home: &TestHome,
    bus: &TestBus,
    args: &[&str],
    env: &[(&str, &str)],
) -> Output {
    let mut cmd = home.familiar();
    cmd.env("DBUS_SESSION_BUS_ADDRESS", &bus.address).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_streams_the_answer_and_exits_with_the_task_status() {
    let f = Fixture::new(vec![text_reply("The answer is 42.")]).await;
    let out = familiar(
        &f.harness.home,
        &f.bus,
        &["ask", "--soul", "test", "what is the answer?"],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "The answer is 42.");
    assert!(
        text(&out.stderr).contains("completed"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_json_prints_one_object_per_event_ending_with_task_finished() {
    let f = Fixture::new(vec![text_reply("json here")]).await;
    let out = familiar(
        &f.harness.home,
        &f.bus,
        &["ask", "--json", "--soul", "test", "hi"],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let lines: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.first().unwrap()["kind"], "task_started");
    let last = lines.last().unwrap();
    assert_eq!(last["kind"], "task_finished");
    assert_eq!(last["status"], "completed");
    assert!(last["task_id"].as_str().unwrap().starts_with("t-"));
    assert!(last["session_id"].as_str().unwrap().starts_with("s-"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_detach_prints_the_ids_and_the_task_runs_on() {
    let f = Fixture::new(vec![text_reply("later")]).await;
    let mut w = Watch::new(&f.proxy).await;
    let out = familiar(
        &f.harness.home,
        &f.bus,
        &["ask", "--detach", "--soul", "test", "in the background"],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let ids: Vec<&str> = stdout.split_whitespace().collect();
    assert_eq!(ids.len(), 2, "{stdout}");
    assert!(
        ids[0].starts_with("t-") && ids[1].starts_with("s-"),
        "{stdout}"
    );
    // Regression: the ids came bare, with no word on what to do with them.
    assert_eq!(
        text(&out.stderr),
        format!(
            "familiar: task {t} runs in the background: `familiar tasks` lists it, `familiar steer {t} MESSAGE` adds to it, `familiar cancel {t}` stops it, `familiar sessions show {s}` shows its answer\n",
            t = ids[0],
            s = ids[1]
        )
    );
    assert_eq!(w.finished(ids[0]).await.0, "completed");
    let out = familiar(&f.harness.home, &f.bus, &["cancel", ids[0]], &[]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!(
            "task {} had already ended (completed): nothing to cancel\n",
            ids[0]
        )
    );

    let out = familiar(&f.harness.home, &f.bus, &["tasks"], &[]).await;
    assert!(text(&out.stdout).contains(ids[0]), "{}", text(&out.stdout));
    let out = familiar(&f.harness.home, &f.bus, &["status", "--json"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let status: serde_json::Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(status["active_tasks"], 0);
    assert_eq!(status["metrics"]["tasks_completed"], 1);
    // The daemon says which config, provider and model it runs with.
    assert_eq!(status["daemon_config"]["provider"], "local");
    assert!(status["daemon_config"]["model"].is_string(), "{status}");
    assert!(status["daemon_config"]["policy"].is_string(), "{status}");
    let out = familiar(&f.harness.home, &f.bus, &["status"], &[]).await;
    let human = text(&out.stdout);
    assert!(human.contains("daemon provider: local, model "), "{human}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_reads_the_prompt_from_the_configured_menu() {
    let f = Fixture::new(vec![text_reply("from the menu")]).await;
    // The client's config.toml (the daemon of the fixture has its own).
    f.harness.home.write_config(
        "config.toml",
        "[desktop]\nmenu = \"echo what is my uptime\"\n",
    );
    let mut w = Watch::new(&f.proxy).await;
    let out = familiar(
        &f.harness.home,
        &f.bus,
        &["ask", "--dmenu", "--detach", "--soul", "test"],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let task = text(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    w.finished(&task).await;
    let got: serde_json::Value =
        serde_json::from_str(&f.proxy.get_task_json(&task).await.unwrap()).unwrap();
    assert_eq!(got["prompt"], "what is my uptime");
    assert_eq!(got["origin"], "dmenu");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_daemon_errors_map_to_exit_codes() {
    let f = Fixture::new(vec![]).await;
    let out = familiar(
        &f.harness.home,
        &f.bus,
        &["ask", "--soul", "nope", "hi"],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    // The message a person acts on, without the error's name trailing it.
    let err = text(&out.stderr);
    assert!(
        err.contains("unknown soul `nope`") && !err.contains("[Unknown"),
        "{err}"
    );
    // An unknown id is the same exit code whichever command names it.
    let out = familiar(&f.harness.home, &f.bus, &["cancel", "t-nope"], &[]).await;
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("t-nope") && !err.contains("[Unknown"), "{err}");
    for cmd in ["approve", "deny"] {
        let out = familiar(&f.harness.home, &f.bus, &[cmd, "r-nope"], &[]).await;
        assert_eq!(out.status.code(), Some(2), "{cmd}: {}", text(&out.stderr));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_passes_model_and_provider_and_warns_about_config() {
    let f = Fixture::new(vec![text_reply("ok")]).await;
    let out = familiar(
        &f.harness.home,
        &f.bus,
        &[
            "--config",
            "/nonexistent/config.toml",
            "ask",
            "--soul",
            "test",
            "--provider",
            "local",
            "--model",
            "asked-model",
            "hi",
        ],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("the daemon reads its own config"), "{err}");
    assert_eq!(f.harness.server.requests()[0].body["model"], "asked-model");
    // An unknown provider is a typed error, exit 2.
    let out = familiar(
        &f.harness.home,
        &f.bus,
        &["ask", "--provider", "nope", "hi"],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("unknown provider `nope`"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_daemon_is_exit_3_with_how_to_start_it() {
    let bus = TestBus::start();
    let home = TestHome::new();
    for args in [&["ask", "hello"][..], &["status"], &["tasks"]] {
        let out = familiar(&home, &bus, args, &[]).await;
        assert_eq!(out.status.code(), Some(3), "{args:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains("familiar setup") && err.contains("systemctl --user start familiar"),
            "{err}"
        );
    }
    // No session bus at all is the same answer.
    let out = familiar(
        &home,
        &bus,
        &["status"],
        &[("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/bus")],
    )
    .await;
    assert_eq!(out.status.code(), Some(3));
}

// Regression: with no notification server, `ask` printed the tool line but neither the
// request id nor how to answer, and `tasks` showed nothing pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_notifications_ask_and_tasks_show_the_request_and_how_to_answer() {
    use crate::common::harness::tools_reply;
    let f = Fixture::builder(vec![
        tools_reply(&[(
            "c1",
            "write_file",
            serde_json::json!({"path": "note.txt", "content": "hi"}),
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
    let ask = {
        let mut cmd = f.harness.home.familiar();
        cmd.env("DBUS_SESSION_BUS_ADDRESS", &f.bus.address).args([
            "ask",
            "--soul",
            "test",
            "--workspace",
            ws.to_str().unwrap(),
            "write a note",
        ]);
        tokio::task::spawn_blocking(move || cmd.output().unwrap())
    };
    let (request, task) = tokio::time::timeout(PATIENCE, async {
        let sig = w.approvals.next().await.unwrap();
        let a = sig.args().unwrap();
        (a.request_id.clone(), a.task_id.clone())
    })
    .await
    .unwrap();

    let got: serde_json::Value =
        serde_json::from_str(&f.proxy.get_task_json(&task).await.unwrap()).unwrap();
    assert_eq!(got["approvals"][0]["request_id"], request.as_str());
    assert_eq!(got["approvals"][0]["tool"], "write_file");
    let tasks = familiar(&f.harness.home, &f.bus, &["tasks"], &[]).await;
    let listed = text(&tasks.stdout);
    assert!(
        listed.contains(&format!("waits for approval {request}: write_file")),
        "{listed}"
    );
    assert!(
        listed.contains(&format!(
            "`familiar approve {request}` or `familiar deny {request}`"
        )),
        "{listed}"
    );
    let json = familiar(&f.harness.home, &f.bus, &["tasks", "--json"], &[]).await;
    let line: serde_json::Value =
        serde_json::from_str(text(&json.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(line["approvals"][0]["request_id"], request.as_str());

    let approved = familiar(&f.harness.home, &f.bus, &["approve", &request], &[]).await;
    assert_eq!(
        approved.status.code(),
        Some(0),
        "{}",
        text(&approved.stderr)
    );
    assert_eq!(
        text(&approved.stdout),
        format!("approved request {request}: the call runs\n")
    );
    let out = ask.await.unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "waiting for approval {request}: run `familiar approve {request}` or `familiar deny {request}`"
        )),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(ws.join("note.txt")).unwrap(), "hi");
    let got: serde_json::Value =
        serde_json::from_str(&f.proxy.get_task_json(&task).await.unwrap()).unwrap();
    assert_eq!(got["approvals"], serde_json::json!([]));
}

/// A stand-in for the daemon that, before it answers `Submit`, emits more of other
/// tasks' events than a zbus stream queues (64): what a busy daemon does while many
/// clients submit at once.
struct FloodingAgent;

/// Other tasks' events sent before the `Submit` reply.
const FLOOD: usize = 300;

#[zbus::interface(name = "dev.familiar.Agent1")]
impl FloodingAgent {
    async fn submit(
        &self,
        #[zbus(signal_emitter)] emitter: zbus::object_server::SignalEmitter<'_>,
        _soul: &str,
        _prompt: &str,
        _options: std::collections::HashMap<String, zbus::OwnedVariant>,
    ) -> zbus::fdo::Result<(String, String)> {
        for _ in 0..FLOOD {
            Self::task_event(&emitter, "t-0ther", "text_delta", r#"{"text":"x"}"#).await?;
        }
        Ok(("t-000000000001".to_owned(), "s-000000000001".to_owned()))
    }

    #[zbus(signal)]
    async fn task_event(
        emitter: &zbus::object_server::SignalEmitter<'_>,
        task_id: &str,
        kind: &str,
        payload_json: &str,
    ) -> zbus::Result<()>;
}

/// Regression: with 100 `familiar ask` at once, some never returned: their signal
/// streams, subscribed before `Submit`, filled with other tasks' events while the
/// client waited for the reply, and zbus stopped reading the socket, reply included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_gets_its_submit_reply_while_other_tasks_flood_the_bus() {
    let bus = TestBus::start();
    let home = TestHome::new();
    let _server = zbus::connection::Builder::address(bus.address.as_str())
        .name(familiar_protocol::NAME)
        .serve_at(familiar_protocol::PATH, FloodingAgent)
        .build()
        .await
        .unwrap();
    let out = familiar(&home, &bus, &["ask", "--detach", "hello"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "t-000000000001 s-000000000001");
}

/// Regression (issue 42 §5): `familiar status` started the daemon by D-Bus activation
/// where docs/cli.md says it exits 3 when the daemon is not running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_does_not_start_the_daemon_by_activation() {
    let home = TestHome::new();
    let services = tempfile::tempdir().unwrap();
    let started = services.path().join("started");
    std::fs::write(
        services.path().join("dev.familiar.Agent1.service"),
        format!(
            "[D-BUS Service]\nName=dev.familiar.Agent1\nExec=/usr/bin/touch {}\n",
            started.display()
        ),
    )
    .unwrap();
    let bus = TestBus::start_with(Some(services.path()), &[]);
    let out = familiar(&home, &bus, &["status"], &[]).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("daemon: not running"));
    assert!(
        text(&out.stderr).contains("the familiar daemon is not running"),
        "{}",
        text(&out.stderr)
    );
    // An activation would have run the Exec line before the bus answered.
    assert!(!started.exists(), "status activated the daemon");
}
