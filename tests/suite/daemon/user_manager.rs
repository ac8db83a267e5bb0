//! A private `systemd --user` for a test: on the test's own session bus, with its own
//! runtime directory, stopped (with its units) when dropped.
//!
//! A user manager runs only where systemd booted the machine (`/run/systemd/system`);
//! CI creates that directory (.ci/run); under FAMILIAR_TEST_STRICT=1 (.ci/run) a
//! manager that cannot start is a failure instead of a skip (tests/common/skip.rs).

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::sigterm;
use crate::common::PATIENCE;
use crate::common::TestHome;
use crate::common::bus::TestBus;

const SYSTEMD: &str = "/usr/lib/systemd/systemd";

/// A private `systemd --user` for `home`, on `bus`; stopped on drop.
pub struct UserManager {
    child: Child,
    pub runtime_dir: PathBuf,
}

impl UserManager {
    /// None (with the reason on stderr) where no user manager can run here.
    pub fn start(home: &TestHome, bus: &TestBus) -> Option<UserManager> {
        let skip = crate::common::skip::skip;
        if !Path::new("/run/systemd/system").is_dir() || !Path::new(SYSTEMD).exists() {
            skip("this machine was not booted with systemd: no user manager can run");
            return None;
        }
        let runtime_dir = home.path().join("run");
        std::fs::create_dir_all(&runtime_dir).unwrap();
        std::fs::set_permissions(
            &runtime_dir,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        // The manager says READY=1 on this socket once it has started up.
        let sock_path = runtime_dir.join("manager-notify");
        let sock = UnixDatagram::bind(&sock_path).unwrap();
        sock.set_read_timeout(Some(PATIENCE)).unwrap();
        let child = Command::new(SYSTEMD)
            .arg("--user")
            .env_clear()
            .env("HOME", home.path())
            .env("XDG_RUNTIME_DIR", &runtime_dir)
            .env("XDG_CONFIG_HOME", home.path().join(".config"))
            .env("XDG_DATA_HOME", home.path().join(".local/share"))
            .env("XDG_STATE_HOME", home.path().join(".local/state"))
            .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("NOTIFY_SOCKET", &sock_path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut manager = UserManager { child, runtime_dir };
        let mut buf = [0u8; 1024];
        loop {
            match sock.recv(&mut buf) {
                Ok(n)
                    if String::from_utf8_lossy(&buf[..n])
                        .lines()
                        .any(|l| l == "READY=1") =>
                {
                    return Some(manager);
                }
                Ok(_) => continue,
                Err(e) => {
                    let exited = manager.child.try_wait().ok().flatten();
                    skip(&format!(
                        "the user manager did not start ({e}; exited: {exited:?})"
                    ));
                    return None;
                }
            }
        }
    }

    /// Has the manager join `bus` and waits until it owns its name there. A user
    /// manager connects to its session bus once it sees its `dbus.service` running (on
    /// a desktop, from login on); the bus it then connects to is the one its
    /// environment names, `bus`.
    pub async fn on_bus(&self, bus: &TestBus) {
        let started = self.systemctl(&["start", "dbus.service"]);
        assert!(started.status.success(), "{}", text(&started.stderr));
        let conn = bus.connect().await;
        let dbus = zbus::fdo::DBusProxy::new(&conn).await.unwrap();
        let mut owners = dbus
            .receive_name_owner_changed_with_args(&[(0, "org.freedesktop.systemd1")])
            .await
            .unwrap();
        let name = zbus::names::BusName::try_from("org.freedesktop.systemd1").unwrap();
        if dbus.name_has_owner(name).await.unwrap() {
            return;
        }
        tokio::time::timeout(PATIENCE, futures::StreamExt::next(&mut owners))
            .await
            .expect("the user manager never joined the bus");
    }

    pub fn systemctl(&self, args: &[&str]) -> std::process::Output {
        Command::new("systemctl")
            .arg("--user")
            .args(args)
            .env("XDG_RUNTIME_DIR", &self.runtime_dir)
            .output()
            .unwrap()
    }

    pub fn show(&self, unit: &str, property: &str) -> String {
        let out = self.systemctl(&["show", unit, "-p", property, "--value"]);
        text(&out.stdout).trim().to_owned()
    }
}

impl Drop for UserManager {
    fn drop(&mut self) {
        // Stops its units (the daemon) on the way out.
        sigterm(self.child.id());
        self.child.wait().ok();
    }
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
