//! Helpers shared by the integration tests: the fixtures (`harness.rs`: a runtime on
//! the loopback model; `fixture.rs`: the daemon on a private bus, `bus.rs`), the
//! loopback model server, fakes of the desktop's services, the sandbox's and the
//! desktop's harnesses, skips.
#![allow(dead_code)]

pub mod bus;
pub mod fake_hyprland;
pub mod fake_logind;
pub mod fake_niri;
pub mod fake_portal;
pub mod fake_secrets;
pub mod fixture;
pub mod harness;
pub mod llama;
pub mod llm_server;
pub mod sandbox;
pub mod skip;
pub mod sway;

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Upper bound on any one wait: a safety net so a broken test fails instead of hanging,
/// never a timing assertion.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A throwaway home directory with the XDG layout, so a test never reads or writes the
/// real user's config or data.
pub struct TestHome {
    pub dir: tempfile::TempDir,
}

impl TestHome {
    /// A config whose provider listens nowhere: a free port nothing is bound to, and
    /// no retries, so a task fails at its first model call. Returns the port.
    pub fn write_unreachable_provider(&self) -> u16 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        self.write_config(
            "config.toml",
            &format!(
                "[providers.local]\nbase_url = \"http://127.0.0.1:{port}/v1\"\nmax_retries = 0\n"
            ),
        );
        port
    }

    pub fn new() -> TestHome {
        let dir = tempfile::tempdir().expect("tempdir");
        for sub in [".config/familiar", ".local/state", "work"] {
            std::fs::create_dir_all(dir.path().join(sub)).expect("mkdir");
        }
        TestHome { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn config_dir(&self) -> PathBuf {
        self.path().join(".config/familiar")
    }

    pub fn data_dir(&self) -> PathBuf {
        self.path().join(".local/state/familiar")
    }

    /// Writes `rel` under the config dir.
    pub fn write_config(&self, rel: &str, contents: &str) -> PathBuf {
        let path = self.config_dir().join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&path, contents).expect("write");
        path
    }

    /// `familiar` with a cleared environment pointing at this home.
    pub fn familiar(&self) -> assert_cmd::Command {
        assert_cmd::Command::from(self.familiar_process())
    }

    /// The same as [`TestHome::familiar`], to spawn and keep running.
    pub fn familiar_process(&self) -> std::process::Command {
        self.familiar_at(Path::new(env!("CARGO_BIN_EXE_familiar")))
    }

    /// The same as [`TestHome::familiar_process`], with the binary at `program` (see
    /// [`familiar_alone`]).
    pub fn familiar_at(&self, program: &Path) -> std::process::Command {
        let mut cmd = std::process::Command::new(program);
        cmd.env_clear()
            .env("HOME", self.path())
            .env("XDG_CONFIG_HOME", self.path().join(".config"))
            .env("XDG_STATE_HOME", self.path().join(".local/state"))
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .current_dir(self.path().join("work"));
        cmd
    }
}

/// `familiar` in a directory of its own, without `familiar-sandbox` beside it: what a
/// hand install that copied one binary has. A hard link when the test's scratch
/// directory is on the same filesystem as the build (a debug `familiar` is large), else
/// a copy. Returns the directory (removed on drop) and the binary's path.
pub fn familiar_alone() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let exe = dir.path().join("familiar");
    let built = Path::new(env!("CARGO_BIN_EXE_familiar"));
    if std::fs::hard_link(built, &exe).is_err() {
        std::fs::copy(built, &exe).expect("copying familiar");
    }
    (dir, exe)
}
