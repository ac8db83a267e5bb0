//! `familiar run` end to end: the real binary against the loopback model.

use serde_json::{Value, json};

use crate::common::harness::*;
use crate::common::llm_server::*;
use crate::common::{TestHome, familiar_alone};

fn config(home: &TestHome, server: &LlmServer) {
    home.write_config(
        "config.toml",
        &format!(
            "[providers.local]\nbase_url = \"{}/v1\"\nmodel = \"test-model\"\nmax_retries = 0\n",
            server.base
        ),
    );
}

async fn run(cmd: assert_cmd::Command) -> std::process::Output {
    let mut cmd = cmd;
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn familiar_run_completes_and_prints_json_events() {
    let server = LlmServer::start(vec![
        tools_reply(&[("c1", "list_dir", json!({"path": "."}))]),
        text_reply("Your disk is fine."),
    ])
    .await;
    let home = TestHome::new();
    config(&home, &server);
    let mut cmd = home.familiar();
    cmd.args([
        "run",
        "--json",
        "--soul",
        "safe_assistant",
        "what",
        "is",
        "using",
        "my",
        "disk?",
    ]);
    let out = run(cmd).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["kind"], "task_started");
    let last = lines.last().unwrap();
    assert_eq!(last["kind"], "task_finished");
    assert_eq!(last["status"], "completed");
    assert_eq!(last["result"], "Your disk is fine.");
    for l in &lines {
        assert!(
            l["task_id"].is_string() && l["session_id"].is_string(),
            "{l}"
        );
    }
    // The prompt reached the model as the user's message.
    let sent = &server.requests()[0].body["messages"];
    let text = sent[1]["content"].as_str().unwrap();
    assert!(
        text.starts_with("what is using my disk?\n\n<system-reminder>\n"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn familiar_run_exits_4_at_max_iterations_and_human_output_goes_to_the_right_stream() {
    let replies = (0..10)
        .map(|i| tools_reply(&[("c", "list_dir", json!({"path": format!("/{i}")}))]))
        .collect();
    let server = LlmServer::start(replies).await;
    let home = TestHome::new();
    config(&home, &server);
    home.write_config(
        "souls/short.toml",
        "prompt = \"p\"\nmax_iterations = 2\ntools = [\"list_dir\"]\n",
    );
    let mut cmd = home.familiar();
    cmd.args(["run", "--soul", "short", "loop"]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(4));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("→ list_dir: /0"), "{stderr}");
    assert!(
        stderr.contains("— max_iterations after 2 steps"),
        "{stderr}"
    );
    // The session is on disk, listed, and shown with its plan.
    let session = stderr
        .split("(session ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap()
        .to_owned();
    let mut cmd = home.familiar();
    cmd.arg("sessions");
    let out = run(cmd).await;
    assert!(String::from_utf8_lossy(&out.stdout).contains(&session));
    let mut cmd = home.familiar();
    cmd.args(["sessions", "show", &session]);
    let out = run(cmd).await;
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("[max_iterations] loop"), "{shown}");
    assert!(shown.contains("- [failed] list_dir: /0"), "{shown}");
    assert!(shown.contains("← error: /0:"), "{shown}");
    let mut cmd = home.familiar();
    cmd.args(["sessions", "--json", "show", &session]);
    let out = run(cmd).await;
    let ctx: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ctx["tasks"][0]["status"], "max_iterations");
    assert_eq!(ctx["version"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn familiar_run_reads_the_prompt_from_stdin_and_rejects_an_empty_one() {
    let server = LlmServer::start(vec![text_reply("hi")]).await;
    let home = TestHome::new();
    config(&home, &server);
    let mut cmd = home.familiar();
    cmd.args(["run", "-"]).write_stdin("hello from stdin\n");
    let out = run(cmd).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "hi");
    let sent = server.requests()[0].body["messages"][1]["content"].clone();
    assert!(
        sent.as_str()
            .unwrap()
            .starts_with("hello from stdin\n\n<system-reminder>"),
        "{sent}"
    );

    let mut cmd = home.familiar();
    cmd.args(["run", "-"]).write_stdin("   \n");
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the prompt is empty"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn familiar_run_says_what_to_do_when_no_model_answers() {
    let home = TestHome::new();
    let port = home.write_unreachable_provider();
    let mut cmd = home.familiar();
    cmd.args(["run", "hello"]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("127.0.0.1:{port}")), "{stderr}");
}

/// A `familiar` installed without `familiar-sandbox` beside it (someone copied one
/// binary) still runs its sandboxed tools, through its own `familiar sandbox-exec`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn familiar_copied_alone_runs_sandboxed_tools_through_its_own_subcommand() {
    let home = TestHome::new();
    let marker = home.path().join("work/marker.txt");
    std::fs::write(&marker, "read through the fallback helper\n").unwrap();
    let server = LlmServer::start(vec![
        tools_reply(&[("c1", "read_file", json!({"path": marker}))]),
        text_reply("done"),
    ])
    .await;
    config(&home, &server);
    let (_dir, alone) = familiar_alone();
    let mut cmd = home.familiar_at(&alone);
    cmd.args(["-v", "run", "--soul", "safe_assistant", "read the marker"]);
    let out = run(assert_cmd::Command::from(cmd)).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // Said once (at info, shown with -v), and the call went through the fallback.
    assert_eq!(
        stderr.matches("no familiar-sandbox beside").count(),
        1,
        "{stderr}"
    );
    let tool = tool_messages(&server, 1);
    let content = tool[0]["content"].as_str().unwrap();
    assert!(
        content.contains("read through the fallback helper"),
        "{content}"
    );
}
