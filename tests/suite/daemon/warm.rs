//! The warmed prefix through the real `familiar daemon`: once it serves, and again after
//! a reload, it sends the default soul's prefix to its loopback model server with one
//! token of output, reports `warming` and `warm`, shows it in `familiar status`, and
//! the prefix is the one a real task's first request starts with.

use familiar::dbus::proxy::Agent1Proxy;

use super::super::agent::harness::text_reply;
use super::super::reliability::RealDaemon;
use super::{PATIENCE, TestBus, Watch};
use crate::common::TestHome;
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
