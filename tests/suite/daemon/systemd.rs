//! systemd integration: `familiar setup`, the units verify, and the real binary's
//! READY=1 / STOPPING=1 protocol on a notify socket, with SIGTERM.

use std::os::unix::net::UnixDatagram;
use std::process::Command;

use familiar_protocol::proxy::Agent1Proxy;

use super::*;
use crate::common::TestHome;

/// `familiar daemon` on `bus`, in `home`, telling systemd things through `notify`.
pub(super) fn spawn_daemon(
    bus: &TestBus,
    home: &TestHome,
    notify: &std::path::Path,
    extra_env: &[(&str, &str)],
) -> std::process::Child {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("familiar"));
    cmd.env_clear()
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join(".config"))
        .env("XDG_STATE_HOME", home.path().join(".local/state"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
        .env("NOTIFY_SOCKET", notify)
        .arg("daemon")
        .stderr(std::process::Stdio::null());
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn setup_dry_run_changes_nothing_and_setup_installs_units_for_this_binary() {
    let home = TestHome::new();
    let data = home.path().join(".local/share");
    let out = home
        .familiar()
        .args(["setup", "--dry-run"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains("systemd/user/familiar.service (new)"),
        "{said}"
    );
    assert!(
        said.contains("dbus-1/services/dev.familiar.Agent1.service (new)"),
        "{said}"
    );
    assert!(!data.exists(), "dry run wrote files");

    let out = home.familiar().arg("setup").output().unwrap();
    // No user manager answers here: the files are written, the systemctl steps fail,
    // and setup says so with exit 1.
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let exe = std::fs::canonicalize(assert_cmd::cargo::cargo_bin("familiar")).unwrap();
    let exe = exe.to_str().unwrap();
    let unit = std::fs::read_to_string(data.join("systemd/user/familiar.service")).unwrap();
    assert!(unit.contains(&format!("ExecStart={exe} daemon")), "{unit}");
    let act =
        std::fs::read_to_string(data.join("dbus-1/services/dev.familiar.Agent1.service")).unwrap();
    assert!(
        act.contains(&format!("Exec={exe} daemon"))
            && act.contains("SystemdService=familiar.service"),
        "{act}"
    );
    for f in ["familiar-maintenance.service", "familiar-maintenance.timer"] {
        assert!(data.join("systemd/user").join(f).is_file(), "{f}");
    }
    // Without a user manager it says so.
    assert!(
        text(&out.stdout).contains("No systemd user manager answered"),
        "{}",
        text(&out.stdout)
    );
    let again = home.familiar().arg("setup").output().unwrap();
    assert!(
        text(&again.stdout).contains("unchanged: "),
        "{}",
        text(&again.stdout)
    );
}

#[test]
fn the_installed_units_pass_systemd_analyze_verify() {
    let home = TestHome::new();
    let out = home.familiar().arg("setup").output().unwrap();
    // 1: the files are written, no user manager answered the systemctl steps.
    assert!(matches!(out.status.code(), Some(0 | 1)));
    let units = home.path().join(".local/share/systemd/user");
    let runtime = tempfile::tempdir().unwrap();
    let out = Command::new("systemd-analyze")
        .args(["--user", "verify"])
        .args([
            "familiar.service",
            "familiar-maintenance.service",
            "familiar-maintenance.timer",
        ])
        .current_dir(&units)
        .env("XDG_RUNTIME_DIR", runtime.path())
        .env("HOME", home.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "", "systemd-analyze has complaints");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_is_ready_only_once_its_name_is_owned_and_stops_on_sigterm() {
    let bus = TestBus::start();
    let home = TestHome::new();
    let sock_dir = tempfile::tempdir().unwrap();
    let sock_path = sock_dir.path().join("notify");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut child = spawn_daemon(&bus, &home, &sock_path, &[]);
    let (sock, ready) = tokio::task::spawn_blocking(move || {
        let mut buf = [0u8; 512];
        let n = sock.recv(&mut buf).expect("a notification from the daemon");
        let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
        (sock, msg)
    })
    .await
    .unwrap();
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready}");
    let conn = bus.connect().await;
    let dbus = zbus::fdo::DBusProxy::new(&conn).await.unwrap();
    assert!(
        dbus.name_has_owner(familiar_protocol::NAME.try_into().unwrap())
            .await
            .unwrap()
    );
    let proxy = Agent1Proxy::new(&conn).await.unwrap();
    assert_eq!(proxy.active_tasks().await.unwrap(), 0);

    sigterm(child.id());
    let stopping = tokio::task::spawn_blocking(move || {
        let mut buf = [0u8; 512];
        loop {
            let n = sock.recv(&mut buf).expect("STOPPING=1");
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            if msg.lines().any(|l| l == "STOPPING=1") {
                return msg;
            }
        }
    })
    .await
    .unwrap();
    assert!(stopping.contains("STOPPING=1"));
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

/// Regression: a blocking sd_notify send stalled the supervisor once the notify
/// socket's queue (10 datagrams) was full, and SIGTERM then never finished. Here nobody
/// reads the socket after READY=1 while tasks come and go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unread_notify_socket_never_stalls_the_daemon() {
    let bus = TestBus::start();
    let home = TestHome::new();
    // Tasks fail at once: nothing listens on port 9.
    home.write_config(
        "config.toml",
        "[providers.local]\nbase_url = \"http://127.0.0.1:9/v1\"\nmax_retries = 0\n",
    );
    let sock_dir = tempfile::tempdir().unwrap();
    let sock_path = sock_dir.path().join("notify");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(PATIENCE)).unwrap();
    let child = spawn_daemon(&bus, &home, &sock_path, &[]);
    let sock = tokio::task::spawn_blocking(move || {
        let mut buf = [0u8; 512];
        let n = sock.recv(&mut buf).expect("READY=1");
        assert!(String::from_utf8_lossy(&buf[..n]).contains("READY=1"));
        sock
    })
    .await
    .unwrap();
    let conn = bus.connect().await;
    let proxy = Agent1Proxy::new(&conn).await.unwrap();
    for i in 0..12 {
        proxy
            .submit("", &format!("task {i}"), std::collections::HashMap::new())
            .await
            .unwrap();
    }
    assert_eq!(stop_daemon(child).await, Some(0));
    drop(sock);
}

/// After `familiar setup`, the first `familiar ask` starts the daemon through
/// D-Bus activation. (Without a systemd user manager on the test bus, dbus-daemon runs
/// the activation file's `Exec=` line itself; under systemd it asks for
/// `SystemdService=familiar.service` instead.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn familiar_ask_starts_the_daemon_through_dbus_activation() {
    let home = TestHome::new();
    home.write_config(
        "config.toml",
        "[providers.local]\nbase_url = \"http://127.0.0.1:9/v1\"\nmax_retries = 0\n",
    );
    let out = home.familiar().arg("setup").output().unwrap();
    // 1: the files are written, no user manager answered the systemctl steps.
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        text(&out.stderr)
    );
    let services = home.path().join(".local/share/dbus-1/services");
    assert!(services.join("dev.familiar.Agent1.service").exists());

    let path = std::env::var_os("PATH").unwrap_or_default();
    let bus = TestBus::start_with(
        Some(&services),
        &[
            ("HOME", home.path().as_os_str()),
            ("XDG_CONFIG_HOME", home.path().join(".config").as_os_str()),
            (
                "XDG_STATE_HOME",
                home.path().join(".local/state").as_os_str(),
            ),
            ("PATH", &path),
        ],
    );
    let conn = bus.connect().await;
    let dbus = zbus::fdo::DBusProxy::new(&conn).await.unwrap();
    let name: zbus::names::BusName<'_> = familiar_protocol::NAME.try_into().unwrap();
    assert!(!dbus.name_has_owner(name.clone()).await.unwrap());

    let mut ask = home.familiar();
    ask.env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
        .args(["ask", "--detach", "hello"]);
    let out = tokio::task::spawn_blocking(move || ask.output().unwrap())
        .await
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("t-"), "{}", text(&out.stdout));
    assert!(dbus.name_has_owner(name.clone()).await.unwrap());

    // Stop the activated daemon (a child of the bus) before the bus goes away.
    let pid = dbus.get_connection_unix_process_id(name).await.unwrap();
    sigterm(pid);
}

/// STATUS= follows the task count and WATCHDOG=1 is sent when systemd asks
/// for it (`WATCHDOG_USEC`). Waits for the datagrams; no timing is asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_follows_tasks_and_the_watchdog_is_pinged() {
    let bus = TestBus::start();
    let home = TestHome::new();
    home.write_config(
        "config.toml",
        "[providers.local]\nbase_url = \"http://127.0.0.1:9/v1\"\nmax_retries = 0\n",
    );
    let sock_dir = tempfile::tempdir().unwrap();
    let sock_path = sock_dir.path().join("notify");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(PATIENCE)).unwrap();
    let child = spawn_daemon(&bus, &home, &sock_path, &[("WATCHDOG_USEC", "100000")]);
    let (sock, _) = tokio::task::spawn_blocking(move || {
        let mut buf = [0u8; 512];
        loop {
            let n = sock.recv(&mut buf).expect("READY=1");
            if String::from_utf8_lossy(&buf[..n]).contains("READY=1") {
                return (sock, ());
            }
        }
    })
    .await
    .unwrap();
    let conn = bus.connect().await;
    let proxy = Agent1Proxy::new(&conn).await.unwrap();
    proxy
        .submit("", "count me", std::collections::HashMap::new())
        .await
        .unwrap();
    let (seen_status, seen_watchdog) = tokio::task::spawn_blocking(move || {
        let mut buf = [0u8; 512];
        let (mut status, mut watchdog) = (None, false);
        while status.is_none() || !watchdog {
            let n = sock.recv(&mut buf).expect("STATUS= and WATCHDOG=1");
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            watchdog |= msg.lines().any(|l| l == "WATCHDOG=1");
            if let Some(l) = msg
                .lines()
                .find(|l| l.starts_with("STATUS=") && l.contains("running"))
            {
                status = Some(l.to_owned());
            }
        }
        (status, watchdog)
    })
    .await
    .unwrap();
    assert!(seen_status.is_some_and(|s| s.contains("1 running") || s.contains("0 running")));
    assert!(seen_watchdog);
    assert_eq!(stop_daemon(child).await, Some(0));
}

/// `systemctl --user reload familiar` sends SIGHUP: the daemon says RELOADING=1, re-reads
/// the souls and is READY=1 again, still owning its name (SIGHUP's default would
/// have ended it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_souls_and_the_daemon_stays() {
    let bus = TestBus::start();
    let home = TestHome::new();
    let sock_dir = tempfile::tempdir().unwrap();
    let sock_path = sock_dir.path().join("notify");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut child = spawn_daemon(&bus, &home, &sock_path, &[]);
    let wait_for = |sock: UnixDatagram, line: &'static str| {
        tokio::task::spawn_blocking(move || {
            let mut buf = [0u8; 512];
            loop {
                let n = sock.recv(&mut buf).expect(line);
                if String::from_utf8_lossy(&buf[..n])
                    .lines()
                    .any(|l| l == line)
                {
                    return sock;
                }
            }
        })
    };
    let sock = wait_for(sock, "READY=1").await.unwrap();
    home.write_config(
        "souls/extra.toml",
        &TEST_SOUL.replace("id = \"test\"", "id = \"extra\""),
    );
    let kill = Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let sock = wait_for(sock, "RELOADING=1").await.unwrap();
    let _sock = wait_for(sock, "READY=1").await.unwrap();
    let proxy = Agent1Proxy::new(&bus.connect().await).await.unwrap();
    let souls = proxy.list_souls().await.unwrap();
    assert!(souls.iter().any(|s| s.id == "extra"), "{souls:?}");
    child.kill().ok();
    child.wait().ok();
}
