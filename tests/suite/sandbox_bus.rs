//! The session bus through the filtering proxy (`[sandbox] bus_talk`, issue 39 item 4):
//! on a private `dbus-daemon` with a fake notification server and an activatable
//! witness service, a tool reaches the names its soul lists and nothing else; it
//! cannot call `UpdateActivationEnvironment` (a later activated service has no
//! `LD_PRELOAD`), cannot reach the real bus socket though unix sockets are open to it,
//! and the proxy is gone once stopped. A raw `sockets` grant of the bus is refused at
//! load.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use familiar::error::FileError;
use familiar::policy::{Policy, builtin_source};
use familiar::sandbox::SandboxPolicy;
use familiar::sandbox::busproxy::{BusProxy, SessionBus};
use familiar::soul::{PromptSource, SoulOrigin, parse};
use familiar_sandbox::seccomp::UnixSockets;
use tokio::sync::mpsc;
use zbus::interface;
use zbus::zvariant::OwnedVariant;

use crate::common::bus::TestBus;
use crate::common::sandbox::{SandboxHome, alive, landlock_available, sh};

/// The activatable witness: writes the environment the bus gave it, then fails
/// without taking its name (the activation fails once it has written).
const WITNESS: &str = "org.familiar.test.Witness";

struct FakeNotifications {
    shown: mpsc::UnboundedSender<String>,
}

#[interface(name = "org.freedesktop.Notifications")]
impl FakeNotifications {
    #[allow(clippy::too_many_arguments)]
    fn notify(
        &mut self,
        _app_name: String,
        _replaces_id: u32,
        _app_icon: String,
        summary: String,
        _body: String,
        _actions: Vec<String>,
        _hints: std::collections::HashMap<String, OwnedVariant>,
        _expire_timeout: i32,
    ) -> u32 {
        self.shown.send(summary).unwrap();
        7
    }
}

/// A private bus that activates the witness (its environment to `env_file`).
fn bus_with_witness(dir: &Path, env_file: &Path) -> TestBus {
    let services = dir.join("services");
    std::fs::create_dir_all(&services).unwrap();
    let script = dir.join("witness.sh");
    std::fs::write(
        &script,
        // A failed exit makes the bus answer at once (a clean one, only after its
        // service_start_timeout).
        format!("#!/bin/sh\nenv > '{}'\nexit 1\n", env_file.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(
        services.join(format!("{WITNESS}.service")),
        format!(
            "[D-BUS Service]\nName={WITNESS}\nExec={}\n",
            script.display()
        ),
    )
    .unwrap();
    TestBus::start_with(Some(&services), &[])
}

/// A soul's `[sandbox]` from its lines, parsed by the real soul parser.
fn soul_sandbox(
    h: &SandboxHome,
    sandbox: &str,
) -> Result<familiar::sandbox::SandboxSpec, FileError> {
    let policy =
        Policy::from_toml("default.toml", builtin_source("default").unwrap(), &h.home).unwrap();
    let src = format!("description = \"t\"\nprompt = \"t\"\n[sandbox]\n{sandbox}\n");
    parse(
        "t.toml",
        "t",
        &src,
        PromptSource::BuiltIn,
        &h.home,
        Some(&policy),
        SoulOrigin::BuiltIn,
    )
    .map(|s| s.sandbox.clone())
}

/// What a tool would put into every service the bus starts later.
const UPDATE: &str = "\"{'LD_PRELOAD': '/tmp/evil.so'}\"";

/// A `gdbus call` command line (`bus` is `--session` or `--address ADDR`). gdbus, not
/// busctl: sd-bus's clients do not get through xdg-dbus-proxy 0.1.4 at all (docs/sandbox.md).
fn gdbus_call(bus: &str, dest: &str, path: &str, method: &str, args: &str) -> String {
    format!("gdbus call {bus} --dest {dest} --object-path {path} --method {method} {args}")
}

/// Runs `busctl` outside any sandbox on `address`; its exit status.
fn busctl_outside(address: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new("busctl")
        .arg(format!("--address={address}"))
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_talks_to_the_listed_names_only_and_cannot_reach_the_bus_itself() {
    if !landlock_available()
        || crate::common::skip::program("xdg-dbus-proxy", "xdg-dbus-proxy").is_none()
        || crate::common::skip::program("gdbus", "libglib2.0-bin").is_none()
        || crate::common::skip::program("busctl", "systemd").is_none()
    {
        return;
    }
    let h = SandboxHome::new();
    let outside = tempfile::tempdir().unwrap();
    let env_file = outside.path().join("witness.env");
    let bus = bus_with_witness(outside.path(), &env_file);
    let (tx, mut shown) = mpsc::unbounded_channel();
    let _notifications = zbus::connection::Builder::address(bus.address.as_str())
        .serve_at(
            "/org/freedesktop/Notifications",
            FakeNotifications { shown: tx },
        )
        .name("org.freedesktop.Notifications")
        .build()
        .await
        .unwrap();

    let spec = soul_sandbox(
        &h,
        "read = [\"~\"]\nbus_talk = [\"org.freedesktop.Notifications\"]",
    )
    .unwrap();
    assert_eq!(spec.bus_talk, vec!["org.freedesktop.Notifications"]);
    // The runtime directory of this test's user: private, with a decoy `bus` socket
    // standing for the real one's usual place.
    let runtime = tempfile::tempdir().unwrap();
    let _decoy = std::os::unix::net::UnixListener::bind(runtime.path().join("bus")).unwrap();
    let proxy = Arc::new(
        BusProxy::new(
            spec.bus_talk.clone(),
            "task t-bus of soul t",
            SessionBus {
                address: Some(bus.address.clone()),
                runtime_dir: runtime.path().to_owned(),
            },
        )
        .unwrap(),
    );
    let policy = SandboxPolicy::new(&spec, &[], &h.workspace, &h.home)
        .unwrap()
        .with_bus(Arc::clone(&proxy));
    assert_eq!(proxy.pid().await, None, "started by the first command only");

    // Listed: Notify reaches the server.
    let notify = sh(
        &policy,
        "gdbus call --session --dest org.freedesktop.Notifications \
         --object-path /org/freedesktop/Notifications \
         --method org.freedesktop.Notifications.Notify familiar 0 '' hello body '[]' '{}' 5000",
    )
    .await;
    assert_eq!(notify.exit_code, Some(0), "{notify:?}");
    assert_eq!(notify.stdout.trim(), "(uint32 7,)", "{notify:?}");
    assert_eq!(shown.recv().await.as_deref(), Some("hello"));
    assert_eq!(notify.enforcement.unix_sockets, UnixSockets::Granted);
    let pid = proxy.pid().await.expect("the proxy runs");

    the_bus_answers_its_basics_but_not_an_environment_update(&policy).await;
    names_not_listed_are_unreachable_and_not_activated(&policy, &env_file).await;
    the_real_bus_and_its_sockets_are_hidden(&policy, &bus, runtime.path(), &proxy).await;
    later_activated_services_get_no_ld_preload(&bus, &env_file);

    // The task's end: the proxy is gone, reaped.
    assert!(alive(i32::try_from(pid).unwrap()));
    proxy.stop().await;
    assert!(
        !alive(i32::try_from(pid).unwrap()),
        "the proxy outlived its task"
    );
}

/// The bus itself through the proxy: the basics answer, UpdateActivationEnvironment does not.
async fn the_bus_answers_its_basics_but_not_an_environment_update(policy: &SandboxPolicy) {
    let basics = sh(
        policy,
        &gdbus_call(
            "--session",
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus.GetId",
            "",
        ),
    )
    .await;
    assert_eq!(basics.exit_code, Some(0), "{basics:?}");
    let update = sh(
        policy,
        &gdbus_call(
            "--session",
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus.UpdateActivationEnvironment",
            UPDATE,
        ),
    )
    .await;
    assert_ne!(update.exit_code, Some(0), "{update:?}");
    assert!(update.stderr.contains("AccessDenied"), "{update:?}");
}

/// Names the soul does not list: unreachable, and not activated either.
async fn names_not_listed_are_unreachable_and_not_activated(
    policy: &SandboxPolicy,
    env_file: &Path,
) {
    for name in [WITNESS, "dev.familiar.Agent1", "org.freedesktop.systemd1"] {
        let call = sh(
            policy,
            &gdbus_call("--session", name, "/", "org.freedesktop.DBus.Peer.Ping", ""),
        )
        .await;
        assert_ne!(call.exit_code, Some(0), "{name}: {call:?}");
    }
    assert!(!env_file.exists(), "a name not listed was activated");
}

/// The real bus and the runtime directory's sockets are hidden, though unix sockets are
/// open to the command: only the proxy's directory is there.
async fn the_real_bus_and_its_sockets_are_hidden(
    policy: &SandboxPolicy,
    bus: &TestBus,
    runtime: &Path,
    proxy: &BusProxy,
) {
    for raw in [
        gdbus_call(
            &format!("--address '{}'", bus.address),
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus.UpdateActivationEnvironment",
            UPDATE,
        ),
        gdbus_call(
            &format!("--address unix:path={}/bus", runtime.display()),
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus.GetId",
            "",
        ),
    ] {
        let out = sh(policy, &raw).await;
        assert_ne!(out.exit_code, Some(0), "{raw}: {out:?}");
    }
    let seen = sh(
        policy,
        &format!(
            "for p in '{}' '{}' '{}'; do test -e \"$p\" && echo \"$p\"; done; true",
            runtime.join("bus").display(),
            proxy.socket().display(),
            bus.socket_path().display()
        ),
    )
    .await;
    // The bus's own socket is covered by /dev/null: it exists, as no socket.
    assert_eq!(
        seen.stdout,
        format!(
            "{}\n{}\n",
            proxy.socket().display(),
            bus.socket_path().display()
        ),
        "{seen:?}"
    );
    let kind = sh(
        policy,
        &format!(
            "test -S '{}' || echo not a socket",
            bus.socket_path().display()
        ),
    )
    .await;
    assert_eq!(kind.stdout, "not a socket\n", "{kind:?}");
}

/// A service the bus activates after the tool's update has no LD_PRELOAD. Control: an
/// update made outside any sandbox does reach it, so the witness would show one.
fn later_activated_services_get_no_ld_preload(bus: &TestBus, env_file: &Path) {
    let control = busctl_outside(
        &bus.address,
        &[
            "call",
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "UpdateActivationEnvironment",
            "a{ss}",
            "1",
            "FAMILIAR_WITNESS",
            "outside",
        ],
    );
    assert!(control.status.success(), "{control:?}");
    // Fails once the witness exits without its name; by then it wrote its file.
    busctl_outside(
        &bus.address,
        &[
            "call",
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "StartServiceByName",
            "su",
            WITNESS,
            "0",
        ],
    );
    let env = std::fs::read_to_string(env_file).unwrap();
    assert!(env.contains("FAMILIAR_WITNESS=outside"), "{env}");
    assert!(!env.contains("LD_PRELOAD"), "{env}");
}

#[test]
fn a_raw_grant_of_the_session_bus_is_refused_at_load_pointing_to_bus_talk() {
    let h = SandboxHome::new();
    // The bus as this process resolves it (`$DBUS_SESSION_BUS_ADDRESS`, else
    // `$XDG_RUNTIME_DIR/bus`), as the daemon would.
    let bus: PathBuf = SessionBus::from_env().sockets().into_iter().next().unwrap();
    let err = soul_sandbox(
        &h,
        &format!("read = [\"~\"]\nsockets = [\"{}\"]", bus.display()),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("t.toml:5"), "{err}");
    assert!(err.contains("bus_talk"), "{err}");
}

#[test]
fn a_malformed_bus_name_is_an_error_naming_the_line() {
    let h = SandboxHome::new();
    for bad in [
        "Notifications",
        "dev.familiar.Agent1",
        "org.freedesktop.DBus",
    ] {
        let err = soul_sandbox(&h, &format!("bus_talk = [\"{bad}\"]"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("t.toml:4"), "{bad}: {err}");
    }
}
