//! Reliability: faults injected at every boundary, load, leaks and crash
//! safety, each ending in a clear status or a recovery while the daemon keeps serving.
//!
//! The default run keeps every scenario small; the long versions read counts from the
//! environment (`FAMILIAR_LOAD=full`, `FAMILIAR_LEAK_TASKS`, `FAMILIAR_SOAK_SECS`,
//! `FAMILIAR_KILL_ROUNDS`): see tests/README.md. Measurements (latencies, RSS and fd
//! series) are printed, never asserted on wall clock.
// Measurements go to stderr (shown with --nocapture).
#![allow(clippy::print_stderr)]

mod bus;
mod crash;
mod disk;
mod load;
mod model;
mod stuck;

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::common::PATIENCE;
use crate::common::TestHome;
use crate::common::bus::TestBus;
use crate::common::llm_server::LlmServer;

/// A count from the environment, else `default`.
pub fn env_count(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Whether the long versions of the load tests were asked for.
pub fn full_load() -> bool {
    std::env::var("FAMILIAR_LOAD").is_ok_and(|v| v == "full")
}

/// `config.toml` for the real binary against `server` (no retries: a fault is final;
/// no warm request: the scripted server answers the tasks' requests only).
pub fn write_config(home: &TestHome, server: &LlmServer, extra: &str) {
    home.write_config(
        "config.toml",
        &format!(
            "[warm]\nenabled = false\n[providers.local]\nbase_url = \"{}/v1\"\nmodel = \"test-model\"\nmax_retries = 0\n{extra}",
            server.base
        ),
    );
}

/// The real `familiar daemon` on a private bus, ready (its name owned, READY=1 sent).
pub struct RealDaemon {
    pub child: Child,
    pub stderr: PathBuf,
    _notify_dir: tempfile::TempDir,
}

impl RealDaemon {
    pub async fn start(bus: &TestBus, home: &TestHome) -> RealDaemon {
        RealDaemon::start_with(bus, home, &[]).await
    }

    /// [`RealDaemon::start`] with `env` added to its (otherwise minimal) environment.
    pub async fn start_with(bus: &TestBus, home: &TestHome, env: &[(&str, &str)]) -> RealDaemon {
        let notify_dir = tempfile::tempdir().unwrap();
        let sock_path = notify_dir.path().join("notify");
        let sock = UnixDatagram::bind(&sock_path).unwrap();
        sock.set_read_timeout(Some(PATIENCE)).unwrap();
        let stderr = home.path().join("daemon.log");
        let child = Command::new(assert_cmd::cargo::cargo_bin("familiar"))
            .env_clear()
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", home.path().join(".config"))
            .env("XDG_STATE_HOME", home.path().join(".local/state"))
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
            .env("NOTIFY_SOCKET", &sock_path)
            .envs(env.iter().copied())
            // To compare allocator settings: the daemon puts these after its own.
            .envs(std::env::vars_os().filter(|(k, _)| k == "GLIBC_TUNABLES"))
            .arg("daemon")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        tokio::task::spawn_blocking(move || {
            let mut buf = [0u8; 512];
            loop {
                let n = sock.recv(&mut buf).expect("READY=1 from the daemon");
                if String::from_utf8_lossy(&buf[..n])
                    .lines()
                    .any(|l| l == "READY=1")
                {
                    return;
                }
            }
        })
        .await
        .unwrap();
        RealDaemon {
            child,
            stderr,
            _notify_dir: notify_dir,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Resident set size, KiB.
    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.pid())
    }

    /// Anonymous resident memory (the heap and stacks, not the binary's pages).
    pub fn anon_kib(&self) -> u64 {
        status_kib(self.pid(), "RssAnon:")
    }

    /// Threads of the process.
    pub fn threads(&self) -> u64 {
        status_kib(self.pid(), "Threads:")
    }

    /// Open file descriptors.
    pub fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// Waits for the process to exit without reaping it, reads the CPU time it used
    /// (a zombie keeps its `/proc/PID/stat`), then reaps it: (exit code, CPU seconds).
    pub async fn wait_exit(mut self) -> (Option<i32>, f64) {
        let pid = nix::unistd::Pid::from_raw(self.pid() as i32);
        let waited = tokio::time::timeout(
            PATIENCE,
            tokio::task::spawn_blocking(move || {
                nix::sys::wait::waitid(
                    nix::sys::wait::Id::Pid(pid),
                    nix::sys::wait::WaitPidFlag::WEXITED | nix::sys::wait::WaitPidFlag::WNOWAIT,
                )
            }),
        )
        .await;
        assert!(
            waited.is_ok(),
            "the daemon did not exit within {PATIENCE:?}:\n{}",
            self.log()
        );
        let cpu = cpu_seconds(self.pid());
        let status = self.child.wait().unwrap();
        (status.code(), cpu)
    }
}

impl Drop for RealDaemon {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// A `kB` figure of /proc/PID/status.
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// User plus system CPU time of `pid` (fields 14 and 15 of `/proc/PID/stat`).
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name may hold spaces: fields are counted after its closing paren.
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|i| fields.get(*i).and_then(|v| v.parse::<u64>().ok()))
        .sum();
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100);
    ticks as f64 / hz as f64
}

/// A small tmpfs mounted over `dir` (root only), unmounted on drop; `None` when this
/// machine cannot mount (not root, no mount namespace rights).
pub struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    pub fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700")])
            .arg("tmpfs")
            .arg(dir)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs {
            dir: dir.to_owned(),
        })
    }

    /// Remounts read-only or read-write.
    pub fn remount(&self, read_only: bool) {
        let opt = if read_only {
            "remount,ro"
        } else {
            "remount,rw"
        };
        let st = Command::new("mount")
            .args(["-o", opt])
            .arg(&self.dir)
            .status()
            .unwrap();
        assert!(st.success(), "mount -o {opt}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        Command::new("umount")
            .arg("-l")
            .arg(&self.dir)
            .status()
            .ok();
    }
}

/// Fills the filesystem holding `dir` to the last byte.
pub fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 4096];
    while f.write(&chunk).is_ok_and(|n| n > 0) {}
    // Whatever sub-page room is left.
    while f.write(&[0u8]).is_ok_and(|n| n > 0) {}
    path
}
