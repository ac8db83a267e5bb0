//! The warmed prefix through the real `familiar daemon`: once it serves, and again after
//! a reload, it sends the default soul's prefix to its loopback model server with one
//! token of output, reports `warming` and `warm`, shows it in `familiar status`, and
//! the prefix is the one a real task's first request starts with.

use familiar_protocol::proxy::Agent1Proxy;

use super::super::reliability::RealDaemon;
use crate::common::PATIENCE;
use crate::common::TestHome;
use crate::common::bus::TestBus;
use crate::common::fixture::Watch;
use crate::common::harness::text_reply;
use crate::common::llm_server::LlmServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_warms_the_default_soul_at_start_and_after_a_reload_with_the_real_prefix() {
    let server = LlmServer::start(vec![]).await;
    server.set_default(text_reply("ok"));
    let home = TestHome::new();
    // No [warm] table: on by default for a loopback server, the default soul.
    home.write_config(
        "config.toml",
        &format!(
            "[providers.local]\nbase_url = \"{}/v1\"\nmodel = \"test-model\"\nmax_retries = 0\n",
            server.base
        ),
    );
    let bus = TestBus::start();
    let daemon = RealDaemon::start(&bus, &home).await;
    tokio::time::timeout(PATIENCE, server.wait_requests(1))
        .await
        .unwrap_or_else(|_| panic!("no warm request after start:\n{}", daemon.log()));
    let warm = server.requests()[0].body.clone();
    assert_eq!(warm["max_tokens"], 1, "{warm}");
    let proxy = Agent1Proxy::new(&bus.connect().await).await.unwrap();
    let mut watch = Watch::new(&proxy).await;

    // A reload (SIGHUP) warms it again, with its events.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.pid() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    let warming = watch.event("", "warming").await;
    assert_eq!(warming["soul"], "safe_assistant", "{warming}");
    let warmed = watch.event("", "warm").await;
    assert_eq!(warmed["outcome"], "warm", "{warmed}");
    assert_eq!(warmed["prompt_tokens"], 100, "the server's count: {warmed}");

    let status = home
        .familiar()
        .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
        .args(["status", "--json"])
        .output()
        .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(
        status["daemon_config"]["warm"]["safe_assistant"]["state"], "warm",
        "{status}"
    );

    // A real task's first request: the same system prompt and tools, byte for byte.
    let (task, _) = proxy.submit("", "hi", Default::default()).await.unwrap();
    let (outcome, _) = watch.finished(&task).await;
    assert_eq!(outcome, "completed");
    let requests = server.requests();
    let real = &requests.last().unwrap().body;
    assert_ne!(real["max_tokens"], 1);
    assert_eq!(real["messages"][0], warm["messages"][0]);
    assert_eq!(real["tools"], warm["tools"]);
    assert!(
        !warm["messages"][0]["content"]
            .as_str()
            .unwrap_or("")
            .is_empty()
    );
}

/// With a real llama.cpp server and model: the first task after the daemon warmed the
/// default soul evaluates only its own part of the prompt; the prefix is read from the
/// server's cache (its own count, in the `model_progress` events).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_real_server_the_first_task_after_warming_reuses_the_prefix() {
    let Some(llama) = crate::common::llama::LlamaServer::start(8192, 512).await else {
        return;
    };
    let home = TestHome::new();
    home.write_config(
        "config.toml",
        &format!(
            "[providers.local]\nbase_url = \"{}/v1\"\nmodel = \"smollm2\"\ncontext_window = 8192\n\
             max_output_tokens = 4\ntemperature = 0.0\nmax_retries = 0\n",
            llama.base
        ),
    );
    let bus = TestBus::start();
    let daemon = RealDaemon::start(&bus, &home).await;
    let proxy = Agent1Proxy::new(&bus.connect().await).await.unwrap();
    let mut watch = Watch::new(&proxy).await;
    // The warm request reads the whole prefix: minutes at worst on a loaded CI machine.
    let warmed = tokio::time::timeout(std::time::Duration::from_secs(600), watch.event("", "warm"))
        .await
        .unwrap_or_else(|_| panic!("not warmed:\n{}", daemon.log()));
    assert_eq!(warmed["outcome"], "warm", "{warmed}");
    let prefix = warmed["prompt_tokens"].as_u64().unwrap();
    assert!(
        prefix > 1000,
        "a soul's prefix is a couple of thousand tokens: {warmed}"
    );

    let (task, _) = proxy
        .submit("", "Which apps are open?", Default::default())
        .await
        .unwrap();
    let events = watch.events(&task).await;
    let (total, cached) = events
        .iter()
        .find(|(kind, p)| kind == "model_progress" && p["processed"] == p["total"])
        .map(|(_, p)| (p["total"].as_u64().unwrap(), p["cached"].as_u64().unwrap()))
        .unwrap_or_else(|| panic!("no model_progress: {events:?}"));
    assert!(
        cached + 8 >= prefix && cached < total,
        "the first request reused the warmed prefix: {cached} of {total} tokens cached, prefix {prefix}"
    );
    assert!(
        (total - cached) * 100 / total < 20,
        "only the task's own part is read: {} of {total}",
        total - cached
    );
}
