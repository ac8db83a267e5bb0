//! The session bus going away under the real daemon: it exits non-zero (so systemd's
//! `Restart=on-failure` brings it back on the new bus) and does not spin meanwhile.

use super::*;
use crate::common::harness::text_reply;

/// The daemon used to live on after its bus died, unreachable and never
/// restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_exits_non_zero_when_its_bus_goes_away_and_never_spins() {
    let server = LlmServer::start(vec![text_reply("hi")]).await;
    let home = TestHome::new();
    write_config(&home, &server, "");
    let mut bus = TestBus::start();
    let daemon = RealDaemon::start(&bus, &home).await;
    let proxy = familiar_protocol::proxy::Agent1Proxy::new(&bus.connect().await)
        .await
        .unwrap();
    assert_eq!(proxy.active_tasks().await.unwrap(), 0);
    let cpu_before = cpu_seconds(daemon.pid());
    bus.stop();
    let log_path = daemon.stderr.clone();
    let (code, cpu) = daemon.wait_exit().await;
    let log = std::fs::read_to_string(log_path).unwrap_or_default();
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("lost the session bus"), "{log}");
    // Start-up costs a fraction of a second of CPU; a spinning reconnect loop would
    // burn everything it had until PATIENCE ran out.
    eprintln!("daemon CPU: {cpu_before:.2}s before the bus went, {cpu:.2}s at exit");
    assert!(
        cpu - cpu_before < 2.0,
        "the daemon spun: {cpu_before} → {cpu} s"
    );
}
