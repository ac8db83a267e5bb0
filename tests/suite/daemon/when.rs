//! `--when` and `--wait`: conditions read from a fake machine (UPower, logind,
//! NetworkManager on a private bus standing in for the system bus), checked before any
//! model call; an unmet one ends the task `skipped` at zero tokens, through `familiar
//! run` and through the real daemon.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use zbus::object_server::SignalEmitter;
use zbus::{OwnedObjectPath, interface};

use super::*;
use crate::common::TestHome;
use crate::common::harness::text_reply;
use crate::common::llm_server::LlmServer;

struct UPower {
    on_battery: bool,
}

#[interface(name = "org.freedesktop.UPower")]
impl UPower {
    #[zbus(property)]
    fn on_battery(&self) -> bool {
        self.on_battery
    }
}

struct DisplayDevice {
    percentage: f64,
}

#[interface(name = "org.freedesktop.UPower.Device")]
impl DisplayDevice {
    #[zbus(property)]
    fn is_present(&self) -> bool {
        true
    }
    #[zbus(property)]
    fn percentage(&self) -> f64 {
        self.percentage
    }
}

struct Logind;

#[interface(name = "org.freedesktop.login1.Manager")]
impl Logind {
    fn get_user(&self, _uid: u32) -> OwnedObjectPath {
        OwnedObjectPath::try_from("/org/freedesktop/login1/user/_1000").unwrap()
    }
}

struct User {
    /// Idle since this many seconds ago; `None`: active.
    idle_secs: Option<u64>,
}

#[interface(name = "org.freedesktop.login1.User")]
impl User {
    #[zbus(property)]
    fn idle_hint(&self) -> bool {
        self.idle_secs.is_some()
    }
    #[zbus(property)]
    fn idle_since_hint(&self) -> u64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        (now.as_secs() - self.idle_secs.unwrap_or(0)) * 1_000_000
    }
    #[zbus(property)]
    fn display(&self) -> (String, OwnedObjectPath) {
        (
            "2".to_owned(),
            OwnedObjectPath::try_from("/org/freedesktop/login1/session/_32").unwrap(),
        )
    }
}

struct Session {
    locked: bool,
}

#[interface(name = "org.freedesktop.login1.Session")]
impl Session {
    #[zbus(property)]
    fn locked_hint(&self) -> bool {
        self.locked
    }
}

struct NetworkManager {
    metered: u32,
}

#[interface(name = "org.freedesktop.NetworkManager")]
impl NetworkManager {
    #[zbus(property)]
    fn metered(&self) -> u32 {
        self.metered
    }
}

/// The machine the fakes describe.
#[derive(Clone, Copy)]
struct Machine {
    on_battery: bool,
    percentage: f64,
    idle_secs: Option<u64>,
    locked: bool,
    /// NetworkManager's NMMetered: 1 yes, 2 no.
    metered: u32,
}

const AT_REST: Machine = Machine {
    on_battery: false,
    percentage: 90.0,
    idle_secs: Some(3600),
    locked: false,
    metered: 2,
};

/// A private bus standing in for the system bus, with the fakes on it.
async fn system_bus(m: Machine) -> (TestBus, zbus::Connection) {
    let bus = TestBus::start();
    let conn = zbus::connection::Builder::address(bus.address.as_str())
        .serve_at(
            "/org/freedesktop/UPower",
            UPower {
                on_battery: m.on_battery,
            },
        )
        .serve_at(
            "/org/freedesktop/UPower/devices/DisplayDevice",
            DisplayDevice {
                percentage: m.percentage,
            },
        )
        .serve_at("/org/freedesktop/login1", Logind)
        .serve_at(
            "/org/freedesktop/login1/user/_1000",
            User {
                idle_secs: m.idle_secs,
            },
        )
        .serve_at(
            "/org/freedesktop/login1/session/_32",
            Session { locked: m.locked },
        )
        .serve_at(
            "/org/freedesktop/NetworkManager",
            NetworkManager { metered: m.metered },
        )
        .name("org.freedesktop.UPower")
        .name("org.freedesktop.login1")
        .name("org.freedesktop.NetworkManager")
        .build()
        .await
        .unwrap();
    (bus, conn)
}

fn home_for(server: &LlmServer) -> TestHome {
    let home = TestHome::new();
    home.write_config(
        "config.toml",
        &format!(
            "[providers.local]\nbase_url = \"{}/v1\"\nmodel = \"m\"\nmax_retries = 0\n",
            server.base
        ),
    );
    home
}

async fn run_when(home: &TestHome, system: &TestBus, args: &[&str]) -> std::process::Output {
    let mut cmd = home.familiar_process();
    cmd.env("DBUS_SYSTEM_BUS_ADDRESS", &system.address)
        .args(["run", "--soul", "safe_assistant"])
        .args(args);
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

/// Session files (a lock file stays behind as a lock's target, as for any session).
fn sessions(home: &TestHome) -> Vec<std::ffi::OsString> {
    std::fs::read_dir(home.data_dir().join("context"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name())
                .filter(|n| !n.to_string_lossy().ends_with(".lock"))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmet_condition_skips_the_run_before_any_model_call() {
    let server = LlmServer::start(vec![text_reply("should not be asked")]).await;
    let home = home_for(&server);
    let cases: &[(Machine, &str, &str)] = &[
        (
            Machine {
                on_battery: true,
                ..AT_REST
            },
            "ac",
            "skipped: on battery (needs ac)",
        ),
        (
            Machine {
                percentage: 20.0,
                ..AT_REST
            },
            "battery>50",
            "skipped: battery at 20% (needs >50%)",
        ),
        (
            Machine {
                idle_secs: None,
                ..AT_REST
            },
            "idle>10m",
            "skipped: the user is active (needs idle >10m)",
        ),
        (
            Machine {
                idle_secs: Some(60),
                ..AT_REST
            },
            "idle>10m",
            "skipped: idle for 1m",
        ),
        (
            Machine {
                locked: true,
                ..AT_REST
            },
            "unlocked",
            "skipped: the session is locked",
        ),
        (
            Machine {
                metered: 1,
                ..AT_REST
            },
            "ac,metered=no",
            "skipped: the network connection is metered (--when ac,metered=no)",
        ),
    ];
    for (machine, when, want) in cases {
        let (system, _fakes) = system_bus(*machine).await;
        let out = run_when(&home, &system, &["--when", when, "hello"]).await;
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // Not a failure: the run did what was asked.
        assert_eq!(out.status.code(), Some(0), "{when}: {all}");
        assert!(all.contains(want), "{when}: want {want:?} in {all}");
    }
    assert!(server.requests().is_empty(), "no token was spent");
    assert_eq!(
        sessions(&home),
        Vec::<std::ffi::OsString>::new(),
        "a skipped run leaves no session behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditions_that_hold_let_the_task_run() {
    let server = LlmServer::start(vec![text_reply("all fine")]).await;
    let home = home_for(&server);
    let (system, _fakes) = system_bus(AT_REST).await;
    let out = run_when(
        &home,
        &system,
        &[
            "--when",
            "ac,battery>50,idle>10m,unlocked,metered=no,load<100000",
            "hello",
        ],
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("all fine"), "{stdout}");
    assert_eq!(server.requests().len(), 1);
}

/// Regression: with no system bus (so no NetworkManager), `metered=no` was
/// unmet ("cannot tell whether the network is metered") and the run skipped; docs say
/// NetworkManager's absence means no metered connection is known.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metered_no_holds_without_network_manager_or_a_system_bus() {
    let server = LlmServer::start(vec![text_reply("unmetered")]).await;
    let home = home_for(&server);
    let nowhere = tempfile::tempdir().unwrap();
    let mut cmd = home.familiar_process();
    cmd.env(
        "DBUS_SYSTEM_BUS_ADDRESS",
        format!("unix:path={}", nowhere.path().join("no-bus").display()),
    )
    .args([
        "run",
        "--soul",
        "safe_assistant",
        "--when",
        "metered=no",
        "hello",
    ]);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("unmetered"), "{stdout}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_holds_the_run_until_the_battery_charges() {
    let server = LlmServer::start(vec![text_reply("charged now")]).await;
    let home = home_for(&server);
    let (system, fakes) = system_bus(Machine {
        percentage: 20.0,
        ..AT_REST
    })
    .await;
    let mut cmd = home.familiar_process();
    cmd.env("DBUS_SYSTEM_BUS_ADDRESS", &system.address)
        .args([
            "run",
            "--soul",
            "safe_assistant",
            "--when",
            "battery>50",
            "--wait",
            "1h",
            "hello",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let waiting = tokio::task::spawn_blocking(move || {
        let mut lines = BufReader::new(stderr).lines();
        let first = lines.next().unwrap().unwrap();
        (first, lines)
    })
    .await
    .unwrap();
    assert!(
        waiting
            .0
            .contains("waiting up to 1h for --when battery>50: battery at 20% (needs >50%)"),
        "{}",
        waiting.0
    );
    assert!(server.requests().is_empty());

    // The battery charges; UPower says so.
    let device = fakes
        .object_server()
        .interface::<_, DisplayDevice>("/org/freedesktop/UPower/devices/DisplayDevice")
        .await
        .unwrap();
    device.get_mut().await.percentage = 80.0;
    let emitter: &SignalEmitter<'_> = device.signal_emitter();
    device
        .get()
        .await
        .percentage_changed(emitter)
        .await
        .unwrap();

    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("charged now"), "{stdout}");
    assert_eq!(server.requests().len(), 1);
}

/// Regression: Ctrl-C while `--wait`ing printed "skipped"; it is an
/// interruption (exit 130), and no task ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_while_waiting_says_interrupted() {
    let server = LlmServer::start(vec![text_reply("should not be asked")]).await;
    let home = home_for(&server);
    let (system, _fakes) = system_bus(Machine {
        on_battery: true,
        ..AT_REST
    })
    .await;
    let mut cmd = home.familiar_process();
    cmd.env("DBUS_SYSTEM_BUS_ADDRESS", &system.address)
        .args([
            "run",
            "--soul",
            "safe_assistant",
            "--when",
            "ac",
            "--wait",
            "1h",
            "hello",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = tokio::task::spawn_blocking(move || {
        let mut lines = BufReader::new(stderr).lines();
        let first = lines.next().unwrap().unwrap();
        assert!(first.contains("waiting up to 1h for --when ac"), "{first}");
        lines
    })
    .await
    .unwrap();
    let kill = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let (status, rest) = tokio::task::spawn_blocking(move || {
        let rest: Vec<String> = lines.by_ref().map_while(Result::ok).collect();
        (child.wait().unwrap(), rest.join("\n"))
    })
    .await
    .unwrap();
    assert_eq!(status.code(), Some(130), "{rest}");
    assert!(
        rest.contains("interrupted while waiting for --when ac"),
        "{rest}"
    );
    assert!(!rest.contains("skipped"), "{rest}");
    assert!(server.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_skips_a_submitted_task_whose_conditions_do_not_hold() {
    let server = LlmServer::start(vec![text_reply("should not be asked")]).await;
    let home = home_for(&server);
    let (system, _fakes) = system_bus(Machine {
        on_battery: true,
        ..AT_REST
    })
    .await;
    let session = TestBus::start();
    let notify = home.path().join("notify");
    let mut daemon = super::systemd::spawn_daemon(
        &session,
        &home,
        &notify,
        &[("DBUS_SYSTEM_BUS_ADDRESS", &system.address)],
    );
    let conn = session.connect().await;
    let proxy = familiar_protocol::proxy::Agent1Proxy::builder(&conn)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .unwrap();
    // Activation is not set up here: wait for the daemon's name.
    let dbus = zbus::fdo::DBusProxy::new(&conn).await.unwrap();
    let mut owners = dbus.receive_name_owner_changed().await.unwrap();
    if !dbus
        .name_has_owner(familiar_protocol::NAME.try_into().unwrap())
        .await
        .unwrap()
    {
        use futures::StreamExt;
        while let Some(sig) = owners.next().await {
            if sig.args().unwrap().name() == familiar_protocol::NAME {
                break;
            }
        }
    }

    // A malformed condition is a typed error, before anything is queued.
    let bad: std::collections::HashMap<&str, zbus::Variant<'_>> =
        [("when", zbus::Variant::from("charging"))].into();
    let err = error_name(proxy.submit("safe_assistant", "hi", bad).await);
    assert!(err.contains("InvalidArgument"), "{err}");

    let mut watch = Watch::new(&proxy).await;
    let opts: std::collections::HashMap<&str, zbus::Variant<'_>> =
        [("when", zbus::Variant::from("ac"))].into();
    let (task, _) = proxy.submit("safe_assistant", "hello", opts).await.unwrap();
    let (status, result) = watch.finished(&task).await;
    assert_eq!(status, "skipped");
    assert_eq!(result, "skipped: on battery (needs ac) (--when ac)");
    assert!(server.requests().is_empty(), "no token was spent");
    let metrics = proxy.metrics().await.unwrap();
    assert_eq!(metrics["tasks_skipped"], 1, "{metrics:?}");
    assert_eq!(metrics["tasks_failed"], 0, "{metrics:?}");

    sigterm(daemon.id());
    daemon.wait().unwrap();
}
