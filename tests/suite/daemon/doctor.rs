//! `familiar doctor` as a subprocess: a real config against the loopback model server,
//! a private bus with and without the daemon, the real kernel's Landlock.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::cli::familiar;
use super::*;
use crate::common::llm_server::LlmServer;
use crate::common::llm_server::Reply;
use crate::common::{TestHome, familiar_alone};

fn config_for(server: &LlmServer) -> String {
    format!(
        "[providers.local]\nbase_url = \"{}/v1\"\nmodel = \"main-model\"\n",
        server.base
    )
}

/// The JSON lines of a doctor run, by check name (a repeated check keeps the worst).
fn checks(stdout: &[u8]) -> BTreeMap<String, Vec<Value>> {
    let mut by_name: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for line in String::from_utf8_lossy(stdout).lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        by_name
            .entry(v["check"].as_str().unwrap().to_owned())
            .or_default()
            .push(v);
    }
    by_name
}

fn status(checks: &BTreeMap<String, Vec<Value>>, name: &str) -> String {
    checks[name][0]["status"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_passes_a_working_setup_and_warns_about_the_rest() {
    let server = LlmServer::start(vec![Reply::status(
        200,
        json!({"object": "list", "data": [{"id": "other"}, {"id": "main-model"}]}),
    )])
    .await;
    let home = TestHome::new();
    home.write_config("config.toml", &config_for(&server));
    let bus = TestBus::start();
    let out = familiar(&home, &bus, &["doctor", "--json"], &[]).await;
    let c = checks(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{c:#?}");
    for ok in [
        "config",
        "policy",
        "souls",
        "provider",
        "model",
        "sandbox_helper",
        "landlock",
        "unix_sockets",
        "sandbox",
        "session_bus",
        "desktop",
        "data_dir",
    ] {
        assert_eq!(status(&c, ok), "ok", "{ok}: {c:#?}");
    }
    // A bare bus: no daemon, no manager, no notifications; nothing installed.
    for warn in ["daemon", "systemd", "units", "notifications"] {
        assert_eq!(status(&c, warn), "warn", "{warn}: {c:#?}");
        assert!(c[warn][0]["fix"].is_string());
    }
    assert!(
        c["notifications"][0]["fix"]
            .as_str()
            .unwrap()
            .contains("familiar approve ID")
    );
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(
        (reqs[0].method.as_str(), reqs[0].path.as_str()),
        ("GET", "/v1/models")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_says_ollama_pull_for_a_missing_ollama_model() {
    let server = LlmServer::start(vec![
        Reply::status(
            200,
            json!({"object": "list", "data": [{"id": "qwen2.5:latest"}]}),
        ),
        Reply::status(
            200,
            json!({"models": [{"name": "qwen2.5:latest", "model": "qwen2.5:latest"}]}),
        ),
    ])
    .await;
    let home = TestHome::new();
    home.write_config("config.toml", &config_for(&server));
    let bus = TestBus::start();
    let out = familiar(&home, &bus, &["doctor", "--json"], &[]).await;
    let c = checks(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{c:#?}");
    assert_eq!(status(&c, "provider"), "ok");
    assert_eq!(status(&c, "model"), "fail");
    assert_eq!(
        c["model"][0]["detail"],
        format!(
            "`main-model` is not served at {}/v1 (it has: qwen2.5:latest)",
            server.base
        )
    );
    assert!(
        c["model"][0]["fix"]
            .as_str()
            .unwrap()
            .starts_with("`ollama pull main-model`")
    );
    let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/v1/models", "/api/tags"]);
}

/// Regression: llama-server answers any model name with the one model it loaded, so a
/// config naming it otherwise works; doctor said `FAIL model … is not served`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_passes_llama_server_serving_its_model_under_another_name() {
    let gguf = "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    let server = LlmServer::start(vec![Reply::status(
        200,
        json!({"object": "list", "data": [{"id": gguf, "object": "model",
            "owned_by": "llamacpp", "meta": {"n_ctx": 4096}}]}),
    )])
    .await;
    let home = TestHome::new();
    home.write_config("config.toml", &config_for(&server));
    let bus = TestBus::start();
    let out = familiar(&home, &bus, &["doctor", "--json"], &[]).await;
    let c = checks(&out.stdout);
    assert_eq!(status(&c, "provider"), "ok", "{c:#?}");
    assert_eq!(status(&c, "model"), "ok", "{c:#?}");
    let detail = c["model"][0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("llama-server") && detail.contains(gguf),
        "the note names the server and its model: {detail}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_names_a_dead_provider_and_a_broken_soul_with_their_fixes() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let home = TestHome::new();
    home.write_config(
        "config.toml",
        &format!("[providers.local]\nbase_url = \"http://127.0.0.1:{port}/v1\"\n"),
    );
    let broken = home.write_config("souls/broken.toml", "id = \"broken\"\nmax_iteratons = 3\n");
    let bus = TestBus::start();
    let out = familiar(&home, &bus, &["doctor"], &[]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let line = |check: &str| {
        stdout
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(check))
            .unwrap_or_else(|| panic!("no {check} line in {stdout}"))
            .to_owned()
    };
    assert!(line("provider").starts_with("FAIL"), "{stdout}");
    assert!(
        line("provider").ends_with(&format!(
            "nothing answers at http://127.0.0.1:{port}/v1 (connection refused)"
        )),
        "{stdout}"
    );
    // A configured provider that is down: start it, not "configure" it.
    assert!(
        stdout.contains(&format!(
            "fix: start the server at http://127.0.0.1:{port}/v1 (Ollama: `ollama serve`; \
             llama.cpp: `llama-server -m MODEL.gguf --port PORT`), or set `base_url` in \
             [providers.local] to where one runs"
        )),
        "{stdout}"
    );
    assert!(line("souls").starts_with("FAIL"), "{stdout}");
    assert!(
        line("souls").contains(&broken.display().to_string()),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "fix: correct it (`familiar souls validate {}`",
            broken.display()
        )),
        "{stdout}"
    );
    assert!(
        stdout.lines().last().unwrap().starts_with("2 failed, "),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_sees_the_running_daemon() {
    let f = Fixture::new(vec![]).await;
    let out = familiar(&f.harness.home, &f.bus, &["doctor", "--json"], &[]).await;
    let c = checks(&out.stdout);
    assert_eq!(status(&c, "daemon"), "ok", "{c:#?}");
    assert_eq!(c["daemon"][0]["detail"], "dev.familiar.Agent1 is running");
}

/// A `familiar` copied without `familiar-sandbox`: the sandbox still holds (through
/// `familiar sandbox-exec`), and doctor says what is missing and how to fix it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_warns_when_familiar_sandbox_is_not_installed_beside_familiar() {
    let home = TestHome::new();
    let (_dir, alone) = familiar_alone();
    let mut cmd = home.familiar_at(&alone);
    cmd.args(["doctor", "--json"]);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let c = checks(&out.stdout);
    assert_eq!(status(&c, "sandbox_helper"), "warn", "{c:#?}");
    assert!(
        c["sandbox_helper"][0]["fix"]
            .as_str()
            .unwrap()
            .contains("familiar-sandbox"),
        "{c:#?}"
    );
    if familiar_sandbox::status::probe().abi.is_some() {
        assert_eq!(status(&c, "sandbox"), "ok", "{c:#?}");
    }
}

/// Regression: a notification server that was only installed (activatable) was said
/// to "answer".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_activatable_notification_server_is_not_said_to_answer() {
    let server = LlmServer::start(vec![]).await;
    let home = TestHome::new();
    home.write_config("config.toml", &config_for(&server));
    let services = tempfile::tempdir().unwrap();
    std::fs::write(
        services
            .path()
            .join("org.freedesktop.Notifications.service"),
        "[D-BUS Service]\nName=org.freedesktop.Notifications\nExec=/bin/false\n",
    )
    .unwrap();
    let bus = TestBus::start_with(Some(services.path()), &[]);
    let out = familiar(&home, &bus, &["doctor", "--json"], &[]).await;
    let c = checks(&out.stdout);
    assert_eq!(status(&c, "notifications"), "ok", "{c:#?}");
    let detail = c["notifications"][0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("activatable") && !detail.contains("answers"),
        "{detail}"
    );
}

/// Regression (issue 42 §5): a broken default soul's fix said to set `default_soul`
/// in config.toml; the file to correct is the soul's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_default_soul_names_its_file_to_fix() {
    let server = LlmServer::start(vec![]).await;
    let home = TestHome::new();
    home.write_config(
        "config.toml",
        &format!("default_soul = \"mine\"\n{}", config_for(&server)),
    );
    let soul = home.write_config("souls/mine.toml", "prompt = \"p\"\nmax_iteratons = 3\n");
    let bus = TestBus::start();
    let out = familiar(&home, &bus, &["doctor", "--json"], &[]).await;
    assert_eq!(out.status.code(), Some(1));
    let c = checks(&out.stdout);
    let fixes: Vec<&str> = c["souls"]
        .iter()
        .filter_map(|v| v["fix"].as_str())
        .collect();
    let file = soul.display().to_string();
    assert!(
        fixes
            .iter()
            .any(|f| f.starts_with(&format!("correct {file} "))
                && f.ends_with("it is the default soul")),
        "{fixes:#?}"
    );
    assert!(
        !fixes.iter().any(|f| f.contains("default_soul")),
        "{fixes:#?}"
    );
}
