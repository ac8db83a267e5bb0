//! Bounded input and output: a prompt on stdin past the limit is refused, naming the
//! limit, instead of cut short without a word; an answer the wall clock cuts is kept,
//! marked and counted.

use std::io::Write;
use std::process::Stdio;

use crate::common::TestHome;
use crate::common::harness::text_reply;
use crate::common::llm_server::{LlmServer, Reply, Step, oa_text, sse};

/// Ten times the limit.
const HUGE: usize = 10 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_megabyte_prompt_on_stdin_is_refused_naming_the_limit() {
    let server = LlmServer::start(vec![text_reply("never asked")]).await;
    let home = TestHome::new();
    home.write_config(
        "config.toml",
        &format!(
            "[providers.local]\nbase_url = \"{}/v1\"\nmodel = \"test-model\"\nmax_retries = 0\n",
            server.base
        ),
    );
    for command in ["run", "ask"] {
        let mut cmd = home.familiar_process();
        cmd.args([command, "-"])
            // `ask` would say the daemon is unreachable, had it read no prompt first.
            .env("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/bus")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let out = tokio::task::spawn_blocking(move || {
            let mut child = cmd.spawn().unwrap();
            let mut stdin = child.stdin.take().unwrap();
            // familiar stops reading past the limit: the rest of the write fails (EPIPE).
            let writer = std::thread::spawn(move || stdin.write_all(&vec![b'a'; HUGE]).is_ok());
            let out = child.wait_with_output().unwrap();
            assert!(!writer.join().unwrap(), "familiar read all 10 MB");
            out
        })
        .await
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command}: {stderr}");
        assert!(
            stderr.contains("longer than the limit of 1048576 bytes (1 MiB)"),
            "{command}: {stderr}"
        );
    }
    assert!(server.requests().is_empty());
}

// Regression: a model still answering at the wall clock was cut with `timeout after 1
// step, 0 tokens`, and the session kept none of what had streamed, so `-c` could not
// refer to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_cut_by_the_wall_clock_is_kept_marked_and_counted() {
    let server = LlmServer::start(vec![
        Reply::sse_steps(vec![
            Step::Send(sse(vec![oa_text("The first part of a long answer, ")]).into_bytes()),
            Step::Send(sse(vec![oa_text("and more of it.")]).into_bytes()),
            Step::Hang,
        ]),
        text_reply("Going on."),
    ])
    .await;
    let home = TestHome::new();
    home.write_config(
        "config.toml",
        &format!(
            "[providers.local]\nbase_url = \"{}/v1\"\nmodel = \"test-model\"\nmax_retries = 0\n",
            server.base
        ),
    );
    home.write_config(
        "souls/slow.toml",
        "prompt = \"You ramble.\"\nmax_wall_clock = \"2s\"\n",
    );
    let out = home
        .familiar()
        .args(["run", "--soul", "slow", "tell me everything"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.contains("the model was still answering after 2s; ")
            && err.contains(" tokens of its answer kept in the session"),
        "{err}"
    );
    assert!(!err.contains(" 0 tokens"), "{err}");
    let out = home
        .familiar()
        .args(["run", "-c", "go on"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("WARN"), "{err}");
    let sent = serde_json::to_string(&server.requests()[1].body["messages"]).unwrap();
    assert!(
        sent.contains("The first part of a long answer, and more of it.")
            && sent.contains("[familiar cut this answer here"),
        "{sent}"
    );
}

// Regression: `run -c` on a session whose task was stopped before any answer printed a
// log line, `WARN paired 1 user messages left without an answer`: an expected repair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continuing_a_session_stopped_before_any_answer_prints_no_warning() {
    let server = LlmServer::start(vec![
        Reply::sse_steps(vec![Step::Hang]),
        text_reply("Going on."),
    ])
    .await;
    let home = TestHome::new();
    home.write_config(
        "config.toml",
        &format!(
            "[providers.local]\nbase_url = \"{}/v1\"\nmodel = \"test-model\"\nmax_retries = 0\n",
            server.base
        ),
    );
    home.write_config(
        "souls/slow.toml",
        "prompt = \"p\"\nmax_wall_clock = \"1s\"\n",
    );
    let out = home
        .familiar()
        .args(["run", "--soul", "slow", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let out = home
        .familiar()
        .args(["run", "-c", "go on"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("WARN"), "{err}");
}
