//! The session's accessibility bus: `at-spi-bus-launcher` (at-spi2-core) started on
//! the session's private bus, as a desktop session starts it, so GTK windows in the
//! session register their controls with its registry. The launcher is stopped first
//! when the session ends, with SIGTERM, so it takes its bus along ([`stop`]).

use std::process::Stdio;

use super::{Desktop, skip, text};

/// Where Debian installs the launcher.
const LAUNCHER: &str = "/usr/libexec/at-spi-bus-launcher";

impl Desktop {
    /// Starts the accessibility bus and returns its address, or `None` after a skip
    /// (at-spi2-core missing).
    pub fn start_a11y(&mut self) -> Option<String> {
        if !std::path::Path::new(LAUNCHER).exists() {
            skip::skip("at-spi-bus-launcher is not installed (apt-get install at-spi2-core)");
            return None;
        }
        skip::program("gdbus", "libglib2.0-bin")?;
        let child = self
            .command(LAUNCHER)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("at-spi-bus-launcher");
        self.a11y = Some(child);
        let address = self.wait_until(|| {
            let out = self.run(
                "gdbus",
                &[
                    "call",
                    "--session",
                    "-d",
                    "org.a11y.Bus",
                    "-o",
                    "/org/a11y/bus",
                    "-m",
                    "org.a11y.Bus.GetAddress",
                ],
            );
            // `('unix:path=…,guid=…',)`
            let reply = text(&out.stdout);
            let address = reply.strip_prefix("('")?.strip_suffix("',)")?;
            out.status.success().then(|| address.to_owned())
        });
        Some(address.expect("the accessibility bus did not start"))
    }

    /// Starts a Wayland client whose exit and output the test reads; GTK on the
    /// session's display and accessibility bus.
    pub fn spawn_gtk(&self, program: &str, args: &[&str]) -> std::process::Child {
        self.command(program)
            .args(args)
            .env("GDK_BACKEND", "wayland")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {program}: {e}"))
    }
}

/// Stops the launcher with SIGTERM and waits: it then stops the accessibility bus it
/// started. SIGKILL (what the session's other children get) would leave that
/// `dbus-daemon` running after the test, one per session.
pub(super) fn stop(mut launcher: std::process::Child) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let pid = Pid::from_raw(i32::try_from(launcher.id()).expect("a pid"));
    if kill(pid, Signal::SIGTERM).is_err() {
        launcher.kill().ok();
    }
    launcher.wait().ok();
}
