//! A real sway, headless (`WLR_BACKENDS=headless`, software rendering), with its own
//! runtime directory, and real Wayland clients in it: what the desktop layer's tests
//! drive. sway refuses to run as root, so under root it runs as the unprivileged user
//! `familiar-desktop` (`.ci/run` creates it), and so do its clients.
//!
//! A minimal API (start, run a client, `swaymsg`); a test skips through
//! [`crate::common::skip`] when sway or the user is missing.
// A test helper: a panic here is the test's failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A process that will not stop is said on stderr, like a skip.
#![allow(clippy::print_stderr)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::skip;

/// The user sway runs as when the tests run as root.
pub const USER: &str = "familiar-desktop";
/// How long sway, or a client's window, may take to appear.
const PATIENCE: Duration = Duration::from_secs(20);

pub struct HeadlessSway {
    /// Its IPC socket (`SWAYSOCK`).
    pub socket: PathBuf,
    /// Its `XDG_RUNTIME_DIR`, with `wayland-1` in it.
    pub runtime: tempfile::TempDir,
    /// The uid and gid sway and its clients run as (`None`: the test's).
    user: Option<(u32, u32)>,
    children: Vec<Child>,
}

impl HeadlessSway {
    /// Starts sway with one 1280x720 output and returns once its IPC socket answers, or
    /// `None` (after [`skip::skip`]) when sway, or the unprivileged user root needs, is
    /// missing.
    pub fn start() -> Option<HeadlessSway> {
        skip::program("sway", "sway")?;
        let root = std::fs::metadata("/proc/self").unwrap().uid() == 0;
        let user = if root {
            let id = |flag: &str| -> Option<u32> {
                let out = Command::new("id").args([flag, USER]).output().ok()?;
                String::from_utf8(out.stdout).ok()?.trim().parse().ok()
            };
            match (id("-u"), id("-g")) {
                (Some(uid), Some(gid)) => Some((uid, gid)),
                _ => {
                    skip::skip(&format!(
                        "running as root and no user {USER} to run sway as (useradd -m {USER})"
                    ));
                    return None;
                }
            }
        } else {
            None
        };
        let runtime = tempfile::tempdir().unwrap();
        let config = runtime.path().join("sway.conf");
        std::fs::write(&config, "output HEADLESS-1 resolution 1280x720\n").unwrap();
        if let Some((uid, _)) = user {
            std::os::unix::fs::chown(runtime.path(), Some(uid), None).unwrap();
            std::os::unix::fs::chown(&config, Some(uid), None).unwrap();
        }
        let mut sway = HeadlessSway {
            socket: PathBuf::new(),
            runtime,
            user,
            children: Vec::new(),
        };
        let log = std::fs::File::create(
            std::env::temp_dir().join(format!("familiar-sway-{}.log", std::process::id())),
        )
        .unwrap();
        let mut cmd = sway.command("sway");
        cmd.arg("-c")
            .arg(&config)
            .env("WLR_BACKENDS", "headless")
            .env("WLR_LIBINPUT_NO_DEVICES", "1")
            .env("WLR_RENDERER", "pixman")
            .stderr(log);
        sway.children.push(cmd.spawn().expect("start sway"));
        sway.socket =
            wait_for(|| find_socket(sway.runtime.path())).expect("sway's IPC socket within 20 s");
        Some(sway)
    }

    /// `program` as sway's user (switched in the child before exec, so the handle we
    /// keep is the program's own and killing it leaves no orphan), with sway's runtime
    /// dir and nothing else of the test's environment (the test's `SWAYSOCK` or
    /// `WAYLAND_DISPLAY` must not leak).
    fn command(&self, program: &str) -> Command {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(program);
        if let Some((uid, gid)) = self.user {
            cmd.gid(gid).uid(uid);
        }
        cmd.env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("HOME", self.runtime.path())
            .env("XDG_RUNTIME_DIR", self.runtime.path())
            .current_dir(self.runtime.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    }

    /// Starts a Wayland client on sway's display; it is killed with sway.
    pub fn run_client(&mut self, program: &str, args: &[&str]) {
        let mut cmd = self.command(program);
        cmd.args(args).env("WAYLAND_DISPLAY", "wayland-1");
        self.children.push(cmd.spawn().expect("start the client"));
    }

    /// `swaymsg ARGS` against this sway; its stdout.
    pub fn swaymsg(&self, args: &[&str]) -> String {
        let out = Command::new("swaymsg")
            .env("SWAYSOCK", &self.socket)
            .args(args)
            .output()
            .expect("swaymsg");
        assert!(
            out.status.success(),
            "swaymsg {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// The tree (`swaymsg -t get_tree`), parsed.
    pub fn tree(&self) -> serde_json::Value {
        serde_json::from_str(&self.swaymsg(&["-t", "get_tree"])).unwrap()
    }

    /// Waits until a window of `app_id` is in the tree; returns its container id and
    /// workspace's name.
    pub fn wait_for_window(&self, app_id: &str) -> (u64, String) {
        wait_for(|| window_in(&self.tree(), app_id, None))
            .unwrap_or_else(|| panic!("no {app_id} window within 20 s"))
    }
}

impl Drop for HeadlessSway {
    fn drop(&mut self) {
        // Clients first, then sway, each by its own pid: SIGTERM, so a terminal ends
        // the program it runs too, then reaped.
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        for child in self.children.iter_mut().rev() {
            let pid = Pid::from_raw(child.id() as i32);
            if let Err(e) = kill(pid, Signal::SIGTERM) {
                eprintln!("stopping a sway test process: {e}");
            }
            let _status = child.wait();
        }
    }
}

/// `(container id, workspace)` of the first window of `app_id` under `node`.
pub fn window_in(
    node: &serde_json::Value,
    app_id: &str,
    workspace: Option<&str>,
) -> Option<(u64, String)> {
    let ws = match node["type"].as_str() {
        Some("workspace") => node["name"].as_str(),
        _ => workspace,
    };
    if node["app_id"].as_str() == Some(app_id) {
        return Some((node["id"].as_u64()?, ws?.to_owned()));
    }
    ["nodes", "floating_nodes"]
        .iter()
        .filter_map(|k| node[*k].as_array())
        .flatten()
        .find_map(|child| window_in(child, app_id, ws))
}

fn find_socket(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("sway-ipc."))
                && std::os::unix::net::UnixStream::connect(p).is_ok()
        })
}

/// Polls `probe` until it gives a value or [`PATIENCE`] runs out: sway and its clients
/// say nothing when they are ready, so their sockets and tree are watched.
fn wait_for<T>(mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    while start.elapsed() < PATIENCE {
        if let Some(v) = probe() {
            return Some(v);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}
