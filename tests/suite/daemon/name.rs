//! One daemon per bus name: a second `familiar daemon` is refused with the first one's
//! pid and leaves it serving; a daemon that loses its name cancels its tasks and ends
//! with an error (so the binary exits non-zero and systemd restarts it).

use std::os::unix::net::UnixDatagram;

use familiar::daemon::DaemonError;
use familiar_protocol::ids::SessionId;
use familiar_protocol::proxy::Agent1Proxy;
use familiar_protocol::task::TaskStatus;

use super::service::gated_reply;
use super::systemd::spawn_daemon;
use super::*;
use crate::common::TestHome;
use crate::common::llm_server::Gate;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_daemon_is_refused_and_the_first_keeps_the_name() {
    let bus = TestBus::start();
    let home = TestHome::new();
    let sock_dir = tempfile::tempdir().unwrap();
    let sock_path = sock_dir.path().join("notify");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(PATIENCE)).unwrap();
    let first = spawn_daemon(&bus, &home, &sock_path, &[]);
    tokio::task::spawn_blocking(move || {
        let mut buf = [0u8; 512];
        loop {
            let n = sock.recv(&mut buf).expect("READY=1");
            if String::from_utf8_lossy(&buf[..n]).contains("READY=1") {
                return;
            }
        }
    })
    .await
    .unwrap();

    let mut second = home.familiar();
    second
        .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
        .arg("daemon");
    let out = tokio::task::spawn_blocking(move || second.output().unwrap())
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("already running as pid {}", first.id())),
        "{stderr}"
    );
    assert!(!stderr.contains("serving dev.familiar.Agent1"), "{stderr}");

    // The first daemon still owns the name and answers.
    let conn = bus.connect().await;
    let dbus = zbus::fdo::DBusProxy::new(&conn).await.unwrap();
    let name: zbus::names::BusName<'_> = familiar_protocol::NAME.try_into().unwrap();
    assert_eq!(
        dbus.get_connection_unix_process_id(name).await.unwrap(),
        first.id()
    );
    let proxy = Agent1Proxy::new(&conn).await.unwrap();
    assert_eq!(proxy.active_tasks().await.unwrap(), 0);

    assert_eq!(stop_daemon(first).await, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_that_loses_its_name_cancels_its_tasks_and_fails() {
    let gate = Gate::new();
    let mut f = Fixture::new(vec![gated_reply(&gate, "never sent")]).await;
    let mut w = Watch::new(&f.proxy).await;
    let (task, session) = f.submit("test", "a long job").await.unwrap();
    w.event(&task, "iteration_started").await;

    let daemon = f.daemon.take().unwrap();
    let daemon_conn = daemon.connection().clone();
    let serving = tokio::spawn(daemon.serve_until(std::future::pending(), false));
    // Without replacement allowed nobody can take the name, so the bus sends
    // NameLost only when the name is released from under the daemon: do that on its
    // own connection.
    let dbus = zbus::fdo::DBusProxy::new(&daemon_conn).await.unwrap();
    let name: zbus::names::WellKnownName<'_> = familiar_protocol::NAME.try_into().unwrap();
    dbus.release_name(name).await.unwrap();

    let result = tokio::time::timeout(PATIENCE, serving)
        .await
        .expect("the daemon stops after NameLost")
        .unwrap();
    match &result {
        Err(DaemonError::BusLost(why)) => {
            assert!(why.contains("took the name dev.familiar.Agent1"), "{why}")
        }
        other => panic!("expected BusLost, got {other:?}"),
    }
    // Stopped taking work: its queue was closed, and the running task was cancelled
    // and persisted as such.
    let ctx = f
        .harness
        .store
        .load_context(&SessionId::new(&session).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(ctx.tasks[0].status, TaskStatus::Cancelled);
    let unique = daemon_conn.unique_name().unwrap().to_string();
    let client = f.bus.connect().await;
    let direct = Agent1Proxy::builder(&client)
        .destination(unique)
        .build()
        .await
        .unwrap();
    assert!(
        direct
            .submit("test", "more", Default::default())
            .await
            .is_err()
    );
}

/// Regression: the daemon re-executes itself (trim.rs) through
/// `/proc/self/exe`, and the kernel named it `exe`: `ps`, `pgrep -x familiar`,
/// `systemctl status` and busctl showed that. Its name is the binary's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_process_is_named_familiar() {
    let bus = TestBus::start();
    let home = TestHome::new();
    let (_sock_dir, sock_path, sock) = super::data_dir::notify_socket();
    let child = spawn_daemon(&bus, &home, &sock_path, &[]);
    let _sock = super::data_dir::ready(sock).await;
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", child.id())).unwrap();
    assert_eq!(comm.trim(), "familiar");
    assert_eq!(stop_daemon(child).await, Some(0));
}
