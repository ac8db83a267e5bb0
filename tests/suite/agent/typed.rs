//! Lines typed on the terminal under `familiar run` steer the task: the
//! real binary on a pseudo-terminal made by `script(1)`, the model held back until the
//! line was taken.

use std::io::{Read, Write};
use std::process::{Command, Stdio};

use serde_json::json;

use crate::common::TestHome;
use crate::common::harness::*;
use crate::common::llm_server::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_typed_under_run_joins_the_task_at_its_next_step() {
    let gate = Gate::new();
    let mut first = tools_reply(&[("c1", "list_dir", json!({"path": "."}))]);
    first.steps.insert(0, Step::Wait(gate.clone()));
    let server = LlmServer::start(vec![first, text_reply("looked, and noted")]).await;
    let home = TestHome::new();
    home.write_config(
        "config.toml",
        &format!(
            "[providers.local]\nbase_url = \"{}/v1\"\nmodel = \"test-model\"\nmax_retries = 0\n",
            server.base
        ),
    );
    let familiar = assert_cmd::cargo::cargo_bin("familiar");
    let line = format!(
        "{} run --soul safe_assistant look around",
        familiar.display()
    );
    let mut child = Command::new("script")
        .args(["-qfec", &line, "/dev/null"])
        .env_clear()
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join(".config"))
        .env("XDG_STATE_HOME", home.path().join(".local/state"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("TERM", "dumb")
        .current_dir(home.path().join("work"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    // Everything the terminal shows, as it comes.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0
                || tx
                    .send(String::from_utf8_lossy(&buf[..n]).into_owned())
                    .is_err()
            {
                break;
            }
        }
    });
    server.wait_requests(1).await;
    stdin.write_all(b"mind the logs\n").unwrap();
    stdin.flush().unwrap();
    let mut screen = String::new();
    tokio::time::timeout(crate::common::PATIENCE, async {
        while !screen.contains("noted: your message joins") {
            screen.push_str(&rx.recv().await.expect("the terminal closed"));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the line was not taken: {screen}"));
    gate.open();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    drop(stdin);
    reader.join().unwrap();
    while let Ok(more) = rx.try_recv() {
        screen.push_str(&more);
    }
    assert!(status.success(), "{screen}");
    assert!(screen.contains("looked, and noted"), "{screen}");
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{screen}");
    let second = requests[1].body["messages"].to_string();
    assert!(second.contains("mind the logs"), "{second}");
    assert!(
        !requests[0].body["messages"]
            .to_string()
            .contains("mind the logs")
    );
}
