//! The daemon end to end: a private `dbus-daemon` per test, the daemon served on it
//! with a runtime wired to the loopback model, driven by the zbus proxy and by real
//! clients (`busctl`, `gdbus`, the `familiar` binary). Tests wait for signals, never
//! for time.

mod bar;
mod cli;
mod data_dir;
mod doctor;
mod follow;
mod grants;
mod menus;
mod name;
mod notifications;
mod pinned;
mod reload;
mod resources;
mod service;
mod steering;
mod systemd;
mod unit_hardening;
mod user_manager;
mod warm;
mod when;

use crate::common::PATIENCE;
use crate::common::bus::TestBus;
use crate::common::fixture::{Fixture, TEST_SOUL, Watch};

/// The D-Bus error name of a failed call.
pub fn error_name(r: Result<impl std::fmt::Debug, familiar_protocol::Error>) -> String {
    match r.expect_err("the call should fail") {
        familiar_protocol::Error::ZBus(e) => {
            familiar_protocol::proxy::method_error(&e)
                .unwrap_or_else(|| panic!("not an error reply: {e:?}"))
                .0
        }
        ours => zbus::DBusError::name(&ours).to_string(),
    }
}

/// Sends SIGTERM to `pid`, as systemd does to stop the unit.
pub fn sigterm(pid: u32) {
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
}

/// Stops a daemon started as a child process with SIGTERM and returns its exit code.
pub async fn stop_daemon(mut child: std::process::Child) -> Option<i32> {
    sigterm(child.id());
    tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap()
        .code()
}
