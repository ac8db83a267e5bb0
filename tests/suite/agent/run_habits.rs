//! `familiar run` with the habits of its peers: sessions continued under their own
//! soul, `-c`, `--ephemeral`, `--model`/`--provider`, `sessions rm`/`prune`, Ctrl-C
//! exiting 130, and no empty session left by a task the model never answered.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::TestHome;
use crate::common::harness::*;
use crate::common::llm_server::*;

fn config(home: &TestHome, server: &LlmServer) {
    home.write_config(
        "config.toml",
        &format!(
            "[providers.local]\nbase_url = \"{}/v1\"\nmodel = \"test-model\"\nmax_retries = 0\n\n[providers.other]\nkind = \"openai\"\nbase_url = \"{}/v1\"\nmodel = \"other-default\"\nmax_retries = 0\n",
            server.base, server.base
        ),
    );
}

async fn run(home: &TestHome, args: &[&str]) -> std::process::Output {
    let mut cmd = home.familiar();
    cmd.args(args);
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The JSON events of a `--json` run.
fn events(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The sessions' `.lock` files in the data dir's `context/` (not the memory's own).
fn lock_files(home: &TestHome) -> Vec<String> {
    std::fs::read_dir(home.data_dir().join("context"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".lock") && !n.starts_with('.'))
        .collect()
}

fn sessions(home: &TestHome) -> Vec<Value> {
    let out = home
        .familiar()
        .args(["sessions", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_continues_under_its_own_soul_and_c_continues_the_latest() {
    let server = LlmServer::start(vec![
        text_reply("one"),
        text_reply("two"),
        text_reply("three"),
    ])
    .await;
    let home = TestHome::new();
    config(&home, &server);
    let out = run(
        &home,
        &["run", "--json", "--soul", "research_agent", "first"],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let session = events(&out)[0]["session_id"].as_str().unwrap().to_owned();

    // No --soul: the session's soul, not default_soul.
    let out = run(&home, &["run", "--json", "--session", &session, "second"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let started = &events(&out)[0];
    assert_eq!(started["kind"], "task_started");
    assert_eq!(started["soul"], "research_agent", "{started}");

    // Another soul on that session is refused, naming both.
    let out = run(
        &home,
        &["run", "--session", &session, "--soul", "system_admin", "x"],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("runs under the soul `research_agent`, not `system_admin`"),
        "{err}"
    );

    // -c continues the most recent session (the model sees the earlier turns).
    let out = run(&home, &["run", "--json", "-c", "third"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(events(&out)[0]["session_id"], session.as_str());
    let sent = &server.requests()[2].body["messages"];
    assert!(sent.to_string().contains("first"), "{sent}");
    assert_eq!(sessions(&home).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_and_provider_apply_to_one_run_and_ephemeral_keeps_nothing() {
    let server = LlmServer::start(vec![text_reply("a"), text_reply("b"), text_reply("c")]).await;
    let home = TestHome::new();
    config(&home, &server);
    let out = run(
        &home,
        &["run", "--ephemeral", "--model", "picked-model", "hi"],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(server.requests()[0].body["model"], "picked-model");
    assert!(
        sessions(&home).is_empty(),
        "an ephemeral run left a session"
    );
    // The footer named the removed session, and its lock file stayed.
    let err = stderr(&out);
    assert!(err.contains("(no session kept)"), "{err}");
    assert!(!err.contains("(session s-"), "{err}");
    assert_eq!(lock_files(&home), Vec::<String>::new());
    let ws = home.data_dir().join("workspaces");
    assert_eq!(std::fs::read_dir(&ws).unwrap().count(), 0, "workspace kept");

    // A provider without a model: that provider's own default.
    let out = run(&home, &["run", "--provider", "other", "hi"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(server.requests()[1].body["model"], "other-default");

    let out = run(&home, &["run", "--provider", "nope", "hi"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("unknown provider `nope`"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_rm_and_prune_remove_what_they_name() {
    let server = LlmServer::start(vec![text_reply("a"), text_reply("b")]).await;
    let home = TestHome::new();
    config(&home, &server);
    let mut ids = Vec::new();
    for p in ["old one", "new one"] {
        let out = run(&home, &["run", "--json", p]).await;
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        ids.push(events(&out)[0]["session_id"].as_str().unwrap().to_owned());
    }
    // Age the first session by its recorded update time.
    let path = home.data_dir().join(format!("context/{}.json", ids[0]));
    let mut ctx: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    ctx["updated_at"] = "2001-01-01T00:00:00Z".into();
    std::fs::write(&path, ctx.to_string()).unwrap();

    let out = run(
        &home,
        &["sessions", "prune", "--older-than", "30d", "--dry-run"],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("would remove {}", ids[0])));
    assert_eq!(sessions(&home).len(), 2);

    let out = run(&home, &["sessions", "prune", "--older-than", "30d"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let left = sessions(&home);
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["id"], ids[1].as_str());
    assert!(!path.exists());

    let out = run(&home, &["sessions", "rm", &ids[1]]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(sessions(&home).is_empty());
    // 82 lock files were left after everything was removed.
    assert_eq!(lock_files(&home), Vec::<String>::new());
    // An unknown id is a usage error.
    let out = run(&home, &["sessions", "rm", &ids[1]]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no session"), "{}", stderr(&out));
    assert_eq!(lock_files(&home), Vec::<String>::new());

    // A lock file an older familiar left behind goes with the next prune.
    let orphan = home.data_dir().join("context/s-orphan.lock");
    std::fs::write(&orphan, "").unwrap();
    let out = run(&home, &["sessions", "prune", "--older-than", "30d"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!orphan.exists(), "prune left an orphan lock file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_the_model_never_answered_leaves_no_session() {
    let home = TestHome::new();
    home.write_unreachable_provider();
    let out = run(&home, &["run", "hello"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(sessions(&home).is_empty(), "an empty session was left");
    // The footer named the removed session, and its lock file stayed.
    let err = stderr(&out);
    assert!(err.contains("(no session kept)"), "{err}");
    assert!(!err.contains("(session s-"), "{err}");
    assert_eq!(lock_files(&home), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_cancels_the_run_and_exits_130() {
    let gate = Gate::new();
    let server = LlmServer::start(vec![Reply::sse_steps(vec![Step::Wait(gate.clone())])]).await;
    let home = TestHome::new();
    config(&home, &server);
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("familiar"));
    cmd.env_clear()
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join(".config"))
        .env("XDG_STATE_HOME", home.path().join(".local/state"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(home.path().join("work"))
        .args(["run", "--json", "wait for me"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let pid = child.id();
    let status = tokio::task::spawn_blocking(move || {
        // Interrupt once the model has been asked (the task is under way).
        for line in BufReader::new(stdout).lines() {
            if line.unwrap().contains("\"iteration_started\"") {
                let kill = Command::new("kill")
                    .args(["-INT", &pid.to_string()])
                    .status()
                    .unwrap();
                assert!(kill.success());
            }
        }
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    gate.open();
    assert_eq!(status.status.code(), Some(130));
    // The plain line `ask` prints too, not a log line.
    let err = String::from_utf8_lossy(&status.stderr);
    assert!(
        err.contains("familiar: Ctrl-C: cancelling task t-") && !err.contains("WARN"),
        "{err}"
    );
}
