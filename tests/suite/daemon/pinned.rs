//! The client commands' JSON, byte for byte (issue 42): `tasks --json` with a
//! delegated sub-task waiting for an approval and after it, `bar`'s waybar lines,
//! `status --json`, `ask --json` and `ask --detach --json`, against the daemon on a
//! private bus. Ids, paths, the version, pids and durations are replaced by names;
//! everything else is what a script reading the output gets.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::Arc;

use familiar::tools::Registry;
use serde_json::json;
use tokio::sync::mpsc;

use super::cli::familiar;
use super::*;
use crate::common::harness::{text_reply, tools_reply};

const ASK_WRITES: &str = "[tiers]\nread = \"allow\"\nwrite = \"ask\"\n";
const BOSS: &str = "id = \"boss\"\nprompt = \"boss\"\nmax_iterations = 4\ntools = [\"read_file\", \"write_file\", \"delegate\"]\ndelegates = [\"helper\"]\n";
const HELPER: &str = "id = \"helper\"\nprompt = \"helper\"\nmax_iterations = 4\ntools = [\"read_file\", \"write_file\"]\n";

/// `text` with each `(from, to)` replaced, then every number after one of `keys`
/// (`"pid":`) written as 0.
fn normalised(text: &str, names: &[(&str, &str)], keys: &[&str]) -> String {
    let mut text = text.to_owned();
    for (from, to) in names {
        text = text.replace(from, to);
    }
    for key in keys {
        let re = regex::Regex::new(&format!(r#""{key}":\d+"#)).unwrap();
        text = re.replace_all(&text, format!(r#""{key}":0"#)).into_owned();
    }
    text
}

/// The `landlock` and `sandbox` objects of `status --json` (they name this kernel's
/// ABI) as their keys alone.
fn kernel_free(text: &str) -> String {
    let re = regex::Regex::new(r#""(landlock|sandbox)":(\{[^}]*\})"#).unwrap();
    re.replace_all(text, |c: &regex::Captures| {
        let v: serde_json::Value = serde_json::from_str(&c[2]).unwrap();
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        format!(r#""{}":{keys:?}"#, &c[1])
    })
    .into_owned()
}

/// `familiar bar`'s lines, as they come.
fn bar_lines(f: &Fixture) -> (std::process::Child, mpsc::UnboundedReceiver<String>) {
    let mut child = f
        .harness
        .home
        .familiar_process()
        .env("DBUS_SESSION_BUS_ADDRESS", &f.bus.address)
        .arg("bar")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, lines)
}

/// The bar's lines up to and including the first whose `alt` is `alt`.
async fn bar_until(lines: &mut mpsc::UnboundedReceiver<String>, alt: &str) -> Vec<String> {
    let mut seen = Vec::new();
    let found = tokio::time::timeout(PATIENCE, async {
        while let Some(l) = lines.recv().await {
            let v: serde_json::Value = serde_json::from_str(&l).unwrap();
            seen.push(l);
            if v["alt"] == alt {
                return;
            }
        }
    })
    .await;
    assert!(found.is_ok(), "no {alt:?} line; printed {seen:?}");
    seen
}

async fn stdout(f: &Fixture, args: &[&str]) -> String {
    let out = familiar(&f.harness.home, &f.bus, args, &[]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn delegating_fixture() -> Fixture {
    let builtin = Registry::builtin();
    Fixture::builder(vec![
        tools_reply(&[(
            "d1",
            "delegate",
            json!({"soul": "helper", "prompt": "write <b>n</b>.txt"}),
        )]),
        tools_reply(&[("c1", "write_file", json!({"path": "n.txt", "content": "x"}))]),
        text_reply("not written"),
        text_reply("the helper could not write"),
        text_reply("json here"),
        text_reply("later"),
    ])
    .policy(ASK_WRITES)
    .soul("boss", BOSS)
    .soul("helper", HELPER)
    .tools(vec![Arc::clone(builtin.get("delegate").unwrap())])
    .start()
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_commands_json_is_pinned() {
    let f = delegating_fixture().await;
    let (mut bar, mut lines) = bar_lines(&f);
    bar_until(&mut lines, "idle").await;
    let mut w = Watch::new(&f.proxy).await;
    let ws = f.workspace();
    let opts = HashMap::from([("workspace", zbus::Variant::from(ws.to_str().unwrap()))]);
    let (task, session) = f.proxy.submit("boss", "go & see", opts).await.unwrap();
    let started = w.event(&task, "subagent_started").await;
    let child = started["child_task_id"].as_str().unwrap().to_owned();
    let child_session = started["child_session_id"].as_str().unwrap().to_owned();
    let (request, ..) = w.approval(&child).await;
    let home = f.harness.home.path().display().to_string();
    let names = [
        (task.as_str(), "T1"),
        (session.as_str(), "S1"),
        (child.as_str(), "T2"),
        (child_session.as_str(), "S2"),
        (request.as_str(), "R1"),
        (home.as_str(), "$HOME"),
    ];
    let waiting = normalised(&stdout(&f, &["tasks", "--json"]).await, &names, &[]);
    assert_eq!(waiting, WAITING, "{waiting}");
    let asking = bar_until(&mut lines, "asking").await;

    f.proxy.respond(&request, false).await.unwrap();
    w.finished(&task).await;
    let idle = bar_until(&mut lines, "idle").await;
    bar.kill().unwrap();
    bar.wait().unwrap();
    // The bar's signals come on several streams, so a passing line may be skipped
    // under load: every line printed is one of these, byte for byte, and the question
    // and the end are printed.
    let pinned: Vec<&str> = BAR.lines().collect();
    for line in asking.iter().chain(&idle) {
        let line = normalised(line, &names, &[]);
        assert!(pinned.contains(&line.as_str()), "{line}");
    }
    assert_eq!(
        normalised(&asking[asking.len() - 1], &names, &[]),
        pinned[3]
    );
    assert_eq!(normalised(&idle[idle.len() - 1], &names, &[]), pinned[6]);
    let ended = normalised(&stdout(&f, &["tasks", "--json"]).await, &names, &[]);
    assert_eq!(ended, ENDED, "{ended}");

    let version = env!("CARGO_PKG_VERSION");
    let names_v = [&names[..], &[(version, "$VERSION")]].concat();
    let status = stdout(&f, &["status", "--json"]).await;
    let status = kernel_free(&normalised(&status, &names_v, &["pid", "uptime_secs"]));
    assert_eq!(status, STATUS, "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asks_json_is_pinned() {
    let f = Fixture::new(vec![text_reply("json here"), text_reply("later")]).await;
    let mut w = Watch::new(&f.proxy).await;
    let out = stdout(&f, &["ask", "--json", "--soul", "test", "hi"]).await;
    let first: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    let (task, session) = (
        first["task_id"].as_str().unwrap().to_owned(),
        first["session_id"].as_str().unwrap().to_owned(),
    );
    let workspace = first["workspace"].as_str().unwrap().to_owned();
    let model = first["model"].as_str().unwrap().to_owned();
    let names = [
        (workspace.as_str(), "$WORKSPACE"),
        (task.as_str(), "T1"),
        (session.as_str(), "S1"),
        (model.as_str(), "$MODEL"),
    ];
    let events = kernel_free(&normalised(&out, &names, &[]));
    assert_eq!(events, ASK, "{events}");

    let out = stdout(&f, &["ask", "--detach", "--json", "--soul", "test", "bg"]).await;
    let ids: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let task = ids["task_id"].as_str().unwrap();
    let session = ids["session_id"].as_str().unwrap();
    w.finished(task).await;
    let detached = normalised(&out, &[(task, "T2"), (session, "S2")], &[]);
    assert_eq!(detached, "{\"session_id\":\"S2\",\"task_id\":\"T2\"}\n");
}

const WAITING: &str = concat!(
    r#"{"approvals":[],"changes":null,"id":"T1","parent_task":null,"prompt":"go & see","soul":"boss","status":"running","undoable":false}"#,
    "\n",
    r#"{"approvals":[{"request_id":"R1","summary":"write_file: n.txt\n  content: x (on behalf of task T1)","tool":"write_file"}],"changes":null,"id":"T2","parent_task":"T1","prompt":"write <b>n</b>.txt","soul":"helper","status":"running","undoable":false}"#,
    "\n",
);
const BAR: &str = concat!(
    r#"{"alt":"working","class":"working","percentage":0,"text":"working (1)","tooltip":"T1 familiar: “go &amp; see”: thinking"}"#,
    "\n",
    r#"{"alt":"working","class":"working","percentage":0,"text":"working (1)","tooltip":"T1 familiar: “go &amp; see”: running delegate: write &lt;b&gt;n&lt;/b&gt;.txt"}"#,
    "\n",
    r#"{"alt":"working","class":"working","percentage":0,"text":"working (1)","tooltip":"T1 familiar: “go &amp; see”: handing a part to helper"}"#,
    "\n",
    r#"{"alt":"asking","class":"asking","percentage":0,"text":"asking (1)","tooltip":"T1 familiar: “go &amp; see”: handing a part to helper\nclick to answer: familiar approve --dmenu"}"#,
    "\n",
    r#"{"alt":"working","class":"working","percentage":0,"text":"working (1)","tooltip":"T1 familiar: “go &amp; see”: handing a part to helper"}"#,
    "\n",
    r#"{"alt":"working","class":"working","percentage":0,"text":"working (1)","tooltip":"T1 familiar: “go &amp; see”: thinking"}"#,
    "\n",
    r#"{"alt":"idle","class":"idle","percentage":0,"text":"idle","tooltip":"familiar: nothing running"}"#,
);
const ENDED: &str = concat!(
    r#"{"approvals":[],"changes":null,"id":"T1","parent_task":null,"prompt":"go & see","soul":"boss","status":"completed","undoable":false}"#,
    "\n",
    r#"{"approvals":[],"changes":null,"id":"T2","parent_task":"T1","prompt":"write <b>n</b>.txt","soul":"helper","status":"completed","undoable":false}"#,
    "\n",
);
const STATUS: &str = concat!(
    r#"{"active_tasks":0,"client_version":"$VERSION","config":null,"daemon":{"running":true},"daemon_config":{"config":"$HOME/harness-config.toml","data_dir":"$HOME/.local/state/familiar","default_soul":"safe_assistant","model":"test-model","policy":"default","provider":"local","reload_error":null,"result_timeout_ms":30000,"warm":{}},"data_dir":"$HOME/.local/state/familiar","default_soul":"safe_assistant","landlock":["abi", "missing", "status", "unix_sockets"],"metrics":{"compactions":0,"llm_failures":0,"llm_requests":4,"permission_denials":1,"rate_limited":0,"tasks_cancelled":0,"tasks_completed":2,"tasks_failed":0,"tasks_skipped":0,"tool_executions":1,"tool_failures":0},"model":"qwen2.5:7b-instruct","pid":0,"provider":"local","sandbox":["abi", "missing", "status", "unix_sockets"],"uptime_secs":0,"version":"$VERSION"}"#,
    "\n",
);
const ASK: &str = concat!(
    r#"{"kind":"task_started","soul":"test","prompt":"hi","origin":"cli","model":"$MODEL","workspace":"$WORKSPACE","max_iterations":5,"sandbox":["abi", "missing", "status", "unix_sockets"],"task_id":"T1","session_id":"S1"}"#,
    "\n",
    r#"{"kind":"iteration_started","iteration":1,"max_iterations":5,"task_id":"T1","session_id":"S1"}"#,
    "\n",
    r#"{"kind":"text_delta","text":"json here","task_id":"T1","session_id":"S1"}"#,
    "\n",
    r#"{"kind":"task_finished","status":"completed","result":"json here","usage":{"input_tokens":100,"output_tokens":10,"cache_read_tokens":0,"cache_write_tokens":0},"iterations":1,"pending_steering":0,"session_kept":true,"task_id":"T1","session_id":"S1"}"#,
    "\n",
);
