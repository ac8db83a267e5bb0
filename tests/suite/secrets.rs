//! API keys from the Secret Service (`api_key_secret`, `familiar setup --store-key`)
//! against a fake `org.freedesktop.secrets` on a private bus: the key reaches the model
//! server's headers from `familiar run` and from the daemon; a locked keyring, a
//! missing item and a missing service fail with a sentence naming the provider and the
//! fix; the key itself is never printed, logged or persisted.

use std::collections::{BTreeMap, HashMap};

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::reliability::RealDaemon;
use crate::common::PATIENCE;
use crate::common::TestHome;
use crate::common::bus::TestBus;
use crate::common::fake_secrets::FakeSecrets;
use crate::common::harness::text_reply;
use crate::common::llm_server::*;

const KEY: &str = "sk-from-the-keyring-6d1f";

/// A config whose default provider `cloud` reads its key from the Secret Service.
fn config(home: &TestHome, server: &LlmServer, kind: &str) {
    home.write_config(
        "config.toml",
        &format!(
            "default_provider = \"cloud\"\n\n[providers.cloud]\nkind = \"{kind}\"\nbase_url = \"{}{}\"\nmodel = \"test-model\"\napi_key_secret = \"cloud\"\nmax_retries = 0\n",
            server.base,
            if kind == "openai" { "/v1" } else { "" }
        ),
    );
}

async fn output(mut cmd: assert_cmd::Command) -> (Option<i32>, String, String) {
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every file under `dir`, as text where it is text.
fn all_text_under(dir: &std::path::Path) -> String {
    let mut text = String::new();
    for entry in walkdir::WalkDir::new(dir).into_iter().flatten() {
        if entry.file_type().is_file() {
            text.push_str(&String::from_utf8_lossy(
                &std::fs::read(entry.path()).unwrap_or_default(),
            ));
        }
    }
    text
}

/// `familiar run` with the test bus as its session bus (trace logging on, so a key in
/// any log line would show).
fn run(home: &TestHome, bus: &TestBus) -> assert_cmd::Command {
    let mut cmd = home.familiar();
    cmd.env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
        .args(["-vv", "run", "--json", "hello"]);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn familiar_run_sends_the_key_from_the_secret_service() {
    let bus = TestBus::start();
    let secrets = FakeSecrets::start(&bus.address).await;
    secrets.insert("cloud", KEY);
    let server = LlmServer::start(vec![text_reply("hi")]).await;
    let home = TestHome::new();
    config(&home, &server, "openai");
    let (code, stdout, stderr) = output(run(&home, &bus)).await;
    assert_eq!(code, Some(0), "{stderr}");
    let sent = &server.requests()[0];
    assert_eq!(sent.headers["authorization"], format!("Bearer {KEY}"));
    // Trace logging (the HTTP client's included) was on, and never showed the key.
    assert!(stderr.contains(" TRACE "), "{stderr}");
    assert!(!stdout.contains(KEY) && !stderr.contains(KEY));
    assert!(!all_text_under(&home.data_dir()).contains(KEY));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_sends_the_key_from_the_secret_service() {
    let bus = TestBus::start();
    let secrets = FakeSecrets::start(&bus.address).await;
    secrets.insert("cloud", KEY);
    let server = LlmServer::start(vec![Reply::sse(sse(vec![
        an_message_start(10),
        an_text(0, "hi"),
        an_message_delta("end_turn", 1),
        an_message_stop(),
    ]))])
    .await;
    let home = TestHome::new();
    config(&home, &server, "anthropic");
    let daemon = RealDaemon::start(&bus, &home).await;
    let proxy = familiar_protocol::proxy::Agent1Proxy::new(&bus.connect().await)
        .await
        .unwrap();
    let mut finished = proxy.receive_task_finished().await.unwrap();
    let (task, _) = proxy
        .submit("safe_assistant", "hello", HashMap::new())
        .await
        .unwrap();
    let status = tokio::time::timeout(PATIENCE, async {
        while let Some(sig) = finished.next().await {
            let a = sig.args().unwrap();
            if a.task_id == task {
                return (a.status.clone(), a.result.clone());
            }
        }
        panic!("signal stream ended")
    })
    .await
    .unwrap();
    assert_eq!(status, ("completed".to_owned(), "hi".to_owned()));
    assert_eq!(server.requests()[0].headers["x-api-key"], KEY);
    drop(daemon);
    assert!(!all_text_under(home.path()).contains(KEY));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_keyring_fails_the_task_naming_the_provider_and_how_to_unlock() {
    let bus = TestBus::start();
    let secrets = FakeSecrets::start(&bus.address).await;
    secrets.insert("cloud", KEY);
    secrets.set_locked(true);
    let server = LlmServer::start(vec![text_reply("never sent")]).await;
    let home = TestHome::new();
    config(&home, &server, "openai");
    let (code, stdout, stderr) = output(run(&home, &bus)).await;
    assert_eq!(code, Some(1), "{stderr}");
    let last: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let result = last["result"].as_str().unwrap();
    assert!(
        result.contains(
            "no API key for provider `cloud` from the Secret Service: the keyring is locked; \
             unlock it (log in to the desktop, or run `secret-tool lookup application familiar \
             provider cloud`, which prompts) and retry"
        ),
        "{result}"
    );
    assert!(server.requests().is_empty());
    // The daemon's path never shows a prompt: nobody may be there to answer it.
    assert_eq!(secrets.prompts_shown(), 0);
    assert!(!stdout.contains(KEY) && !stderr.contains(KEY));
}

/// A provider built in this process, its session bus named by `env` (not the process
/// environment, which other tests share): the first request's error.
async fn first_request_error(bus: &TestBus, item: &str) -> String {
    let env = BTreeMap::from([("DBUS_SESSION_BUS_ADDRESS".to_owned(), bus.address.clone())]);
    let src = format!(
        "default_provider = \"cloud\"\n[providers.cloud]\nbase_url = \"http://127.0.0.1:9/v1\"\napi_key_secret = \"{item}\"\n"
    );
    let config = familiar::config::Config::from_toml("config.toml", &src, &env).unwrap();
    let cfg = &config.providers["cloud"];
    let provider = familiar::llm::build(cfg, &env).unwrap();
    let req = familiar::llm::Request::new(cfg, "system", vec![], vec![]);
    let mut stream = provider.stream(&req, CancellationToken::new());
    match stream.next().await {
        Some(Err(e @ familiar::llm::LlmError::Auth(_))) => e.to_string(),
        other => panic!("expected an auth error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_missing_item_says_how_to_store_it() {
    let bus = TestBus::start();
    let secrets = FakeSecrets::start(&bus.address).await;
    secrets.insert("other", KEY);
    let err = first_request_error(&bus, "cloud").await;
    assert_eq!(
        err,
        "no API key for provider `cloud` from the Secret Service: no item in the keyring has \
         the attributes application=familiar provider=cloud; store the key with `familiar setup \
         --store-key cloud` (or `secret-tool store --label='familiar API key: cloud' application \
         familiar provider cloud`)"
    );
}

#[tokio::test]
async fn no_secret_service_on_the_bus_names_the_alternatives() {
    let bus = TestBus::start();
    let err = first_request_error(&bus, "cloud").await;
    assert!(
        err.starts_with(
            "no API key for provider `cloud` from the Secret Service: no Secret Service on the \
             session bus (nothing owns org.freedesktop.secrets)"
        ),
        "{err}"
    );
    assert!(
        err.contains("or set api_key_env or api_key_file in [providers.cloud] instead"),
        "{err}"
    );
}

fn store_key(home: &TestHome, bus: &TestBus, stdin: &str) -> assert_cmd::Command {
    let mut cmd = home.familiar();
    cmd.env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
        .args(["setup", "--store-key", "cloud"])
        .write_stdin(stdin.to_owned());
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_key_reads_piped_stdin_and_stores_an_item_a_lookup_finds() {
    let bus = TestBus::start();
    let secrets = FakeSecrets::start(&bus.address).await;
    let home = TestHome::new();
    let (code, stdout, stderr) = output(store_key(&home, &bus, &format!("{KEY}\n"))).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains(
            "label: familiar API key: cloud\n  attributes: application=familiar provider=cloud"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("Add to [providers.cloud] in ")
            && stdout.contains("api_key_secret = \"cloud\""),
        "{stdout}"
    );
    assert!(!stdout.contains(KEY) && !stderr.contains(KEY));
    let items = secrets.items();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].label, "familiar API key: cloud");
    assert_eq!(
        items[0].attributes,
        HashMap::from([
            ("application".to_owned(), "familiar".to_owned()),
            ("provider".to_owned(), "cloud".to_owned()),
        ])
    );
    let bus_at = familiar::secrets::Bus {
        address: Some(bus.address.clone()),
    };
    let found = familiar::secrets::lookup(&bus_at, "cloud").await.unwrap();
    assert_eq!(found.expose(), KEY);
    // Storing again replaces the item rather than adding a second one.
    let (code, _, stderr) = output(store_key(&home, &bus, "sk-rotated")).await;
    assert_eq!(code, Some(0), "{stderr}");
    let found = familiar::secrets::lookup(&bus_at, "cloud").await.unwrap();
    assert_eq!(found.expose(), "sk-rotated");
    assert_eq!(secrets.items().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_key_unlocks_a_locked_keyring_through_its_prompt() {
    let bus = TestBus::start();
    let secrets = FakeSecrets::start(&bus.address).await;
    secrets.set_locked(true);
    secrets.answer_prompts(true);
    let home = TestHome::new();
    let (code, _, stderr) = output(store_key(&home, &bus, KEY)).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(secrets.prompts_shown(), 1);
    assert_eq!(secrets.items().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_key_fails_when_the_unlock_prompt_is_dismissed() {
    let bus = TestBus::start();
    let secrets = FakeSecrets::start(&bus.address).await;
    secrets.set_locked(true);
    let home = TestHome::new();
    let (code, _, stderr) = output(store_key(&home, &bus, KEY)).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "cannot store the key for provider `cloud` in the Secret Service: the unlock prompt \
             was dismissed; unlock the keyring"
        ),
        "{stderr}"
    );
    assert!(secrets.items().is_empty());
    assert!(!stderr.contains(KEY));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_key_without_a_secret_service_names_the_alternatives() {
    let bus = TestBus::start();
    let home = TestHome::new();
    let (code, _, stderr) = output(store_key(&home, &bus, KEY)).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("no Secret Service on the session bus"),
        "{stderr}"
    );
    assert!(
        stderr.contains("api_key_env") && stderr.contains("api_key_file"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_key_sources_in_one_table_name_file_line_and_key() {
    let home = TestHome::new();
    let path = home.write_config(
        "config.toml",
        "[providers.cloud]\napi_key_env = \"KEY\"\napi_key_secret = \"cloud\"\n",
    );
    let mut cmd = home.familiar();
    cmd.args(["run", "hello"]);
    let (code, _, stderr) = output(cmd).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}:3: key `providers.cloud.api_key_secret`: set only one of api_key_env, \
             api_key_file and api_key_secret",
            path.display()
        )),
        "{stderr}"
    );
}
