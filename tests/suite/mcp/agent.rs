//! MCP tools in the agent loop: a soul's `mcp:` entries, the tools offered to the model
//! (`NAME__TOOL`, sorted, the same in every request), and every call through the same
//! gate as a built-in's, against the real test server under the real kernel's Landlock.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use familiar_protocol::events::EventPayload;
use familiar_protocol::task::TaskStatus;
use serde_json::{Value, json};

use super::server;
use crate::common::harness::*;
use crate::common::sandbox::landlock_available;

/// `[mcp.files]` for the test server in `mode`: tools at the `write` tier, `echo` at
/// `read`; writable only `write`.
fn mcp_table(mode: &str, write: &Path) -> String {
    let (command, args) = server::argv();
    let exe = std::env::current_exe().unwrap();
    format!(
        "[mcp.files]\ncommand = {command:?}\nargs = {args:?}\nenv = {{ {} = {mode:?} }}\n\
         tier = \"write\"\n[mcp.files.tools]\necho = \"read\"\n[mcp.files.sandbox]\n\
         read = [{:?}]\nwrite = [{:?}]\n",
        server::MODE_ENV,
        exe.parent().unwrap().display().to_string(),
        write.display().to_string(),
    )
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| {
                    t["function"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `(tool, decision, reason)` of every `tool_call_started`.
fn decisions(
    events: &[std::sync::Arc<familiar_protocol::events::Event>],
) -> Vec<(String, String, String)> {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::ToolCallStarted {
                tool,
                decision,
                reason,
                ..
            } => Some((
                tool.clone(),
                decision.to_string(),
                reason.clone().unwrap_or_default(),
            )),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_soul_uses_a_servers_tools_under_landlock_with_a_stable_tool_list() {
    if !landlock_available() {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let allowed = scratch.path().join("allowed");
    std::fs::create_dir_all(&allowed).unwrap();
    let outside = scratch.path().join("outside.txt");
    let h = Harness::builder(vec![
        tools_reply(&[(
            "c1",
            "files__write_file",
            json!({"path": allowed.join("a.txt"), "text": "from the model"}),
        )]),
        tools_reply(&[(
            "c2",
            "files__write_file",
            json!({"path": outside, "text": "escape"}),
        )]),
        text_reply("done"),
    ])
    .provider(&mcp_table("ok", &allowed))
    .policy(OPEN_POLICY)
    .build()
    .await;
    let rt = h.runtime(builtin_plus(Vec::new()));
    let soul = h.soul("tools = [\"read_file\", \"mcp:files\"]\n");
    let (outcome, events) = h.run(rt.clone(), h.spec(soul, "write", None)).await;
    assert_eq!(outcome.status, TaskStatus::Completed, "{}", outcome.result);

    // Built-ins in the soul's order, then the server's tools sorted by name; the same
    // list, byte for byte, in every request.
    let requests = h.server.requests();
    assert_eq!(
        tool_names(&requests[0].body),
        [
            "read_file",
            "files__echo",
            "files__picture",
            "files__write_file"
        ]
    );
    for r in &requests[1..] {
        assert_eq!(r.body["tools"], requests[0].body["tools"]);
    }
    let system = requests[0].body["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("files__write_file"), "{system}");

    // The write inside its `write` tree happened; the one outside was refused by the
    // kernel inside the server, and the model read that as the tool's error.
    assert_eq!(
        std::fs::read_to_string(allowed.join("a.txt")).unwrap(),
        "from the model"
    );
    assert!(!outside.exists());
    let results = tool_messages(&h.server, 2);
    let second = results[1]["content"].as_str().unwrap();
    assert!(second.contains("status=\"error\""), "{second}");
    assert!(second.contains("errno 13"), "{second}");
    let d = decisions(&events);
    assert_eq!(d[0].0, "files__write_file");
    assert_eq!(d[0].1, "allow");

    // One server for the whole task (and for the next task of this runtime).
    let views = rt.settings.mcp.views().await;
    assert_eq!(views[0].state, familiar::mcp::ServerState::Running);
    rt.settings.mcp.shutdown().await;
}

#[tokio::test]
async fn mcp_calls_pass_the_allowlist_blocked_patterns_protected_paths_and_tiers() {
    if !landlock_available() {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let policy = "[tiers]\nread = \"allow\"\nwrite = \"deny\"\nexecute = \"allow\"\n\
                  system_critical = \"deny\"\n";
    let h = Harness::builder(vec![
        tools_reply(&[
            ("c1", "files__echo", json!({"text": "hello"})),
            ("c2", "files__echo", json!({"text": "rm -rf ~"})),
            ("c3", "files__echo", json!({"text": "~/.ssh/id_ed25519"})),
            (
                "c4",
                "files__write_file",
                json!({"path": "/tmp/x", "text": "x"}),
            ),
            ("c5", "files__picture", json!({})),
            ("c6", "other__echo", json!({"text": "hi"})),
        ]),
        text_reply("done"),
    ])
    .provider(&mcp_table("ok", scratch.path()))
    .policy(policy)
    .build()
    .await;
    let rt = h.runtime(builtin_plus(Vec::new()));
    let soul = h.soul("tools = [\"mcp:files/echo\", \"mcp:files/write_file\"]\n");
    let (outcome, events) = h.run(rt.clone(), h.spec(soul, "try", None)).await;
    assert_eq!(outcome.status, TaskStatus::Completed, "{}", outcome.result);

    // Only the listed tools are offered.
    assert_eq!(
        tool_names(&h.server.requests()[0].body),
        ["files__echo", "files__write_file"]
    );
    let d = decisions(&events);
    assert_eq!(d.len(), 6, "{d:?}");
    assert_eq!((d[0].1.as_str(), d[0].2.as_str()), ("allow", ""));
    assert_eq!(d[1].1, "deny");
    assert!(
        d[1].2
            .contains("`rm -rf ~` (runs `rm -f -r ~`) is blocked by policy"),
        "{}",
        d[1].2
    );
    assert_eq!(d[2].1, "deny");
    assert!(d[2].2.contains("is protected by policy"), "{}", d[2].2);
    assert_eq!(d[3].1, "deny");
    assert!(
        d[3].2
            .contains("`files__write_file` is a write tool and policy `test` denies write tools"),
        "{}",
        d[3].2
    );
    assert_eq!(d[4].1, "deny");
    assert!(d[4].2.contains("is not one of soul"), "{}", d[4].2);
    assert_eq!(d[5].1, "deny");

    let results = tool_messages(&h.server, 1);
    assert!(
        results[0]["content"].as_str().unwrap().contains("hello"),
        "{results:?}"
    );
    rt.settings.mcp.shutdown().await;
}

#[tokio::test]
async fn an_mcp_tool_at_an_ask_tier_is_asked_and_a_denial_is_not_run() {
    if !landlock_available() {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let target = scratch.path().join("asked.txt");
    let policy = "[tiers]\nread = \"allow\"\nwrite = \"ask\"\nexecute = \"allow\"\n\
                  system_critical = \"deny\"\n";
    let h = Harness::builder(vec![
        tools_reply(&[(
            "c1",
            "files__write_file",
            json!({"path": target, "text": "x"}),
        )]),
        text_reply("done"),
    ])
    .provider(&mcp_table("ok", scratch.path()))
    .policy(policy)
    .build()
    .await;
    let rt = h.runtime(builtin_plus(Vec::new()));
    let soul = h.soul("tools = [\"mcp:files\"]\n");
    // Nobody is there to answer: the ask ends as a denial.
    let (outcome, events) = h.run(rt.clone(), h.spec(soul, "write", None)).await;
    assert_eq!(outcome.status, TaskStatus::Completed, "{}", outcome.result);
    let d = decisions(&events);
    assert_eq!(d[0].1, "ask", "{d:?}");
    assert!(!target.exists());
    let asked = events
        .iter()
        .find_map(|e| match &e.payload {
            EventPayload::ApprovalRequested { summary, tier, .. } => Some((summary.clone(), *tier)),
            _ => None,
        })
        .unwrap();
    assert!(asked.0.starts_with("files__write_file: "), "{}", asked.0);
    assert_eq!(asked.1, "write");
    rt.settings.mcp.shutdown().await;
}

#[tokio::test]
async fn a_server_that_cannot_start_leaves_its_tools_out_and_the_model_is_told() {
    let h = Harness::builder(vec![text_reply("done")])
        .provider("[mcp.broken]\ncommand = \"/nonexistent/mcp-server\"\n")
        .policy(OPEN_POLICY)
        .build()
        .await;
    let rt = h.runtime(builtin_plus(Vec::new()));
    let soul = h.soul("tools = [\"read_file\", \"mcp:broken\", \"mcp:missing\"]\n");
    let (outcome, _) = h.run(rt.clone(), h.spec(soul, "hi", None)).await;
    assert_eq!(outcome.status, TaskStatus::Completed, "{}", outcome.result);
    let body = &h.server.requests()[0].body;
    assert_eq!(tool_names(body), ["read_file"]);
    let sent = body["messages"].to_string();
    assert!(
        sent.contains("The tools of the MCP server `broken` are not available"),
        "{sent}"
    );
    assert!(
        sent.contains("The MCP server `missing` is not configured"),
        "{sent}"
    );
}

/// Waits until process `pid` has ended (`tail --pid` watches it for us).
fn wait_gone(pid: &str) {
    let status = std::process::Command::new("tail")
        .args(["--pid", pid, "-s", "0.05", "-f", "/dev/null"])
        .status()
        .unwrap();
    assert!(status.success());
}

fn alive(pid: &str) -> bool {
    // A zombie has ended; only its parent has not looked yet.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| !r.trim_start().starts_with('Z'))
    })
}

/// A home whose `mcp` soul uses the test server `files` through `familiar run`.
fn run_home(server: &crate::common::llm_server::LlmServer) -> crate::common::TestHome {
    let home = crate::common::TestHome::new();
    let write = home.path().join("notes");
    std::fs::create_dir_all(&write).unwrap();
    home.write_config(
        "config.toml",
        &format!(
            "[providers.local]\nbase_url = \"{}/v1\"\nmodel = \"m\"\nmax_retries = 0\n{}",
            server.base,
            mcp_table("ok", &write)
        ),
    );
    home.write_config(
        "souls/mcp.toml",
        "prompt = \"You use MCP tools.\"\ntools = [\"mcp:files\"]\n",
    );
    home
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn familiar_run_offers_mcp_tools_and_its_server_ends_with_the_run() {
    if !landlock_available() {
        return;
    }
    let server = crate::common::llm_server::LlmServer::start(vec![
        tools_reply(&[("c1", "files__echo", json!({"text": "through the sandbox"}))]),
        text_reply("done"),
    ])
    .await;
    let home = run_home(&server);
    let mut cmd = home.familiar();
    cmd.args(["run", "--soul", "mcp", "echo", "something"]);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("files__echo"), "{stderr}");
    let results = tool_messages(&server, 1);
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .contains("through the sandbox"),
        "{results:?}"
    );
    let pid = std::fs::read_to_string(home.data_dir().join("mcp/files/server.pid")).unwrap();
    assert!(!alive(&pid), "the server {pid} outlived `familiar run`");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_run_takes_its_mcp_server_along() {
    if !landlock_available() {
        return;
    }
    use crate::common::llm_server::{Reply, Step};
    let server = crate::common::llm_server::LlmServer::start(vec![
        tools_reply(&[("c1", "files__echo", json!({"text": "x"}))]),
        // The run waits here, its server started, until it is killed.
        Reply::sse_steps(vec![Step::Hang]),
    ])
    .await;
    let home = run_home(&server);
    let mut cmd = home.familiar_process();
    cmd.args(["run", "--soul", "mcp", "echo"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().unwrap();
    server.wait_requests(2).await;
    let pid = std::fs::read_to_string(home.data_dir().join("mcp/files/server.pid")).unwrap();
    assert!(alive(&pid));
    // PID 1 of a namespace of its own, like a tool's command: it cannot name its helper.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let nspid = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .unwrap();
    assert_eq!(nspid.split_whitespace().last(), Some("1"), "{nspid}");
    child.kill().unwrap();
    child.wait().unwrap();
    // The helper learns of it from the kernel (PR_SET_PDEATHSIG) and stops the server.
    tokio::task::spawn_blocking(move || wait_gone(&pid))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_keeps_an_mcp_server_across_tasks_and_stops_it_when_it_stops() {
    use crate::common::fixture::{Fixture, Watch};
    if !landlock_available() {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let mut f = Fixture::builder(vec![
        tools_reply(&[("c1", "files__echo", json!({"text": "first"}))]),
        text_reply("one"),
        tools_reply(&[("c2", "files__echo", json!({"text": "second"}))]),
        text_reply("two"),
    ])
    .config(&mcp_table("ok", scratch.path()))
    .policy(OPEN_POLICY)
    .options(familiar::daemon::DaemonOptions::default())
    .soul(
        "mcp",
        "id = \"mcp\"\nprompt = \"You use MCP tools.\"\ntools = [\"mcp:files\"]\n",
    )
    .start()
    .await;
    let mut watch = Watch::new(&f.proxy).await;
    let pid_file = f.harness.store.data_dir().join("mcp/files/server.pid");
    let mut pids = Vec::new();
    for prompt in ["echo first", "echo second"] {
        let (task, _) = f.submit("mcp", prompt).await.unwrap();
        let (status, result) = watch.finished(&task).await;
        assert_eq!(status, "completed", "{result}");
        pids.push(std::fs::read_to_string(&pid_file).unwrap());
    }
    assert_eq!(pids[0], pids[1], "one server for both tasks");
    assert!(alive(&pids[0]));
    f.daemon.take().unwrap().shutdown().await;
    // Stopped and reaped by the helper before the daemon's shutdown returned.
    assert!(
        !alive(&pids[0]),
        "the server {} outlived the daemon",
        pids[0]
    );
}

/// Regression: a soul naming `mcp:probe` while config.toml has no
/// `[mcp.probe]`: the model's call of `probe__probe` was put to the user for approval
/// as a `system_critical` tool, then failed as "not available in this build". A tool
/// nothing implements is refused as unknown, before the policy, and the task goes on.
#[tokio::test]
async fn a_tool_with_no_server_is_refused_as_unknown_and_never_asked() {
    let h = Harness::builder(vec![
        tools_reply(&[("c1", "probe__probe", json!({}))]),
        text_reply("done"),
    ])
    .policy(OPEN_POLICY)
    .build()
    .await;
    let rt = h.runtime(builtin_plus(Vec::new()));
    let soul = h.soul("tools = [\"read_file\", \"mcp:probe\"]\n");
    let (outcome, events) = h.run(rt, h.spec(soul, "probe", None)).await;
    assert_eq!(outcome.status, TaskStatus::Completed, "{}", outcome.result);
    let d = decisions(&events);
    assert_eq!(d[0].0, "probe__probe");
    assert_eq!(d[0].1, "deny", "{d:?}");
    assert_eq!(
        d[0].2,
        "unknown tool `probe__probe`: this task has no such tool (its tools: read_file)"
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.payload, EventPayload::ApprovalRequested { .. })),
        "the call was put to the user"
    );
    let results = tool_messages(&h.server, 1);
    let said = results[0]["content"].as_str().unwrap();
    assert!(said.contains("unknown tool `probe__probe`"), "{said}");
}
