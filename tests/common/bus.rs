//! A private `dbus-daemon --session` per test ([`TestBus`]), on its own socket in a
//! temporary directory, killed when dropped: no test touches the user's session bus.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use zbus::Connection;

/// A private session bus, killed on drop.
pub struct TestBus {
    child: Child,
    pub address: String,
    _dir: tempfile::TempDir,
}

impl TestBus {
    pub fn start() -> TestBus {
        TestBus::start_with(None, &[])
    }

    /// A bus that activates services from `servicedir`, started with `env` (what an
    /// activated service inherits besides the bus address).
    pub fn start_with(
        servicedir: Option<&std::path::Path>,
        env: &[(&str, &std::ffi::OsStr)],
    ) -> TestBus {
        let dir = tempfile::tempdir().unwrap();
        // Reachable by other users: the test of the uid check connects as `nobody`.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let config = dir.path().join("bus.conf");
        std::fs::write(
            &config,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={}/bus</listen>
  <auth>EXTERNAL</auth>
  {}
  <policy context="default">
    <allow user="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"#,
                dir.path().display(),
                servicedir
                    .map(|d| format!("<servicedir>{}</servicedir>", d.display()))
                    .unwrap_or_default()
            ),
        )
        .unwrap();
        let mut cmd = Command::new("dbus-daemon");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("dbus-daemon must be installed for the daemon tests");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        TestBus {
            child,
            address: line.trim().to_owned(),
            _dir: dir,
        }
    }

    /// Stops the bus daemon now (SIGKILL), as a crashed or restarted bus would go.
    pub fn stop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }

    /// The bus's socket, from its `unix:path=…` address.
    pub fn socket_path(&self) -> PathBuf {
        let rest = self.address.strip_prefix("unix:path=").unwrap_or_default();
        PathBuf::from(rest.split(',').next().unwrap_or_default())
    }

    pub async fn connect(&self) -> Connection {
        zbus::connection::Builder::address(self.address.as_str())
            .build()
            .await
            .unwrap()
    }
}

impl Drop for TestBus {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}
