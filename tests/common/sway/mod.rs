//! A real Wayland desktop for tests: a private session bus, a headless sway, mako
//! on that bus and the user's programs (fuzzel, wtype, grim), all run as an
//! unprivileged user (sway refuses to run as root; dbus-daemon needs a passwd entry).
//! When the tests run as root that is the user `familiar-desktop` (`.ci/run` creates
//! it); otherwise the user running the tests.
//!
//! [`Desktop::start`] returns `None` after a skip (a program or the user missing; a
//! failure under `FAMILIAR_TEST_STRICT=1`). A session is torn down on drop. What a
//! test can do: run a command inside the session as its user ([`Desktop::command`]),
//! read mako's notifications and answer them as mako's own bindings do (`mako.rs`),
//! start a Wayland client and find its window in sway's tree (`windows.rs`), type on a
//! virtual keyboard ([`Desktop::keyboard`]) and wait for a window to show at the
//! output's centre ([`Desktop::wait_window`]). Every wait polls with a bounded deadline
//! ([`PATIENCE`]) for the thing itself, never for a time.
//!
//! fuzzel 1.8 exits when a new keyboard appears, so a test makes its keyboard first
//! (one `wtype` process, reading what to type from a pipe), then opens the launcher,
//! then types into it.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::skip;

mod a11y;
mod mako;
mod windows;

pub use mako::Notification;
pub use windows::window_in;

/// The user sessions run as when the tests run as root.
pub const TEST_USER: &str = "familiar-desktop";
/// Upper bound on any one wait: a broken test fails instead of hanging.
pub const PATIENCE: Duration = Duration::from_secs(60);
/// The headless output's size; the launcher opens at its centre.
const OUTPUT: (u32, u32) = (800, 600);

/// Who the session runs as.
#[derive(Debug, Clone)]
pub struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

impl User {
    /// The unprivileged user to run as: this one, or [`TEST_USER`] under root.
    fn find() -> Option<User> {
        let uid = text(&Command::new("id").arg("-u").output().ok()?.stdout);
        if uid != "0" {
            let name = text(&Command::new("id").arg("-un").output().ok()?.stdout);
            let gid = text(&Command::new("id").arg("-g").output().ok()?.stdout);
            return Some(User {
                name,
                uid: uid.parse().ok()?,
                gid: gid.parse().ok()?,
            });
        }
        let entry = Command::new("getent")
            .args(["passwd", TEST_USER])
            .output()
            .ok()?;
        let line = text(&entry.stdout);
        let fields: Vec<&str> = line.split(':').collect();
        if fields.len() < 4 {
            skip::skip(&format!(
                "running as root and there is no user {TEST_USER} to run sway as (`useradd -m {TEST_USER}`; .ci/run makes it)"
            ));
            return None;
        }
        Some(User {
            name: TEST_USER.to_owned(),
            uid: fields[2].parse().ok()?,
            gid: fields[3].parse().ok()?,
        })
    }

    fn is_me(&self) -> bool {
        text(
            &Command::new("id")
                .arg("-u")
                .output()
                .map(|o| o.stdout)
                .unwrap_or_default(),
        ) == self.uid.to_string()
    }
}

/// What the session is started with.
#[derive(Debug, Default, Clone)]
pub struct Options {
    /// Lines added to sway's config (bindings).
    pub sway_config: String,
    /// Programs put on the session's PATH (linked, else copied, into a directory of
    /// the session's: the tests' own build may sit where the user cannot read).
    pub programs: Vec<PathBuf>,
}

/// A running session: bus, sway, mako.
pub struct Desktop {
    pub user: User,
    dir: tempfile::TempDir,
    runtime: PathBuf,
    home: PathBuf,
    path: String,
    bus: String,
    wayland: String,
    swaysock: PathBuf,
    children: Vec<Child>,
    /// The accessibility bus's launcher, stopped first and gently (`a11y.rs`).
    a11y: Option<Child>,
}

impl Desktop {
    /// Starts a session, or `None` after a skip.
    pub fn start(options: &Options) -> Option<Desktop> {
        for (program, package) in [
            ("sway", "sway"),
            ("mako", "mako-notifier"),
            ("makoctl", "mako-notifier"),
            ("fuzzel", "fuzzel"),
            ("wtype", "wtype"),
            ("grim", "grim"),
            ("dbus-daemon", "dbus"),
            ("setpriv", "util-linux"),
        ] {
            skip::program(program, package)?;
        }
        let user = User::find()?;
        let dir = tempfile::tempdir().expect("tempdir");
        let runtime = dir.path().join("runtime");
        let home = dir.path().join("home");
        for d in [&runtime, &home] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).ok();
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).ok();
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).expect("mkdir");
        for program in &options.programs {
            let to = bin.join(program.file_name().expect("a program's name"));
            if std::fs::hard_link(program, &to).is_err() {
                std::fs::copy(program, &to).expect("copying a program into the session");
            }
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).ok();
        }
        let mut desktop = Desktop {
            user,
            runtime,
            home,
            path: format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display()),
            bus: String::new(),
            wayland: String::new(),
            swaysock: PathBuf::new(),
            children: Vec::new(),
            a11y: None,
            dir,
        };
        desktop.write_files(options);
        desktop.start_bus();
        desktop.start_sway();
        desktop.start_mako();
        Some(desktop)
    }

    /// The session user's home (files written here belong to the user once
    /// [`Desktop::give`] is called).
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// Makes `path` (and what is under it) the session user's.
    pub fn give(&self, path: &Path) {
        if self.user.is_me() {
            return;
        }
        let status = Command::new("chown")
            .args(["-R", &format!("{}:{}", self.user.uid, self.user.gid)])
            .arg(path)
            .status()
            .expect("chown");
        assert!(status.success(), "chown {}", path.display());
    }

    /// Writes `text` to `rel` under the home, the user's.
    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.home.join(rel);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(&path, text).expect("write");
        self.give(&self.home);
        path
    }

    /// The session's environment, as its programs see it.
    pub fn env(&self) -> Vec<(String, String)> {
        let home = self.home.display().to_string();
        let mut env = vec![
            ("HOME".to_owned(), home.clone()),
            ("USER".to_owned(), self.user.name.clone()),
            ("PATH".to_owned(), self.path.clone()),
            (
                "XDG_RUNTIME_DIR".to_owned(),
                self.runtime.display().to_string(),
            ),
            ("XDG_CONFIG_HOME".to_owned(), format!("{home}/.config")),
            ("XDG_DATA_HOME".to_owned(), format!("{home}/.local/share")),
            ("XDG_STATE_HOME".to_owned(), format!("{home}/.local/state")),
            ("DBUS_SESSION_BUS_ADDRESS".to_owned(), self.bus.clone()),
            ("LANG".to_owned(), "C.UTF-8".to_owned()),
        ];
        if !self.wayland.is_empty() {
            env.push(("WAYLAND_DISPLAY".to_owned(), self.wayland.clone()));
            env.push(("SWAYSOCK".to_owned(), self.swaysock.display().to_string()));
        }
        env
    }

    /// `program` run inside the session as its user, with the session's environment
    /// and nothing else.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = if self.user.is_me() {
            Command::new(program)
        } else {
            let mut c = Command::new("setpriv");
            c.args([
                &format!("--reuid={}", self.user.uid),
                &format!("--regid={}", self.user.gid),
                "--init-groups",
                "--",
                program,
            ]);
            c
        };
        cmd.env_clear().envs(self.env()).current_dir(&self.home);
        cmd
    }

    /// Runs `program ARGS` in the session and waits for it.
    pub fn run(&self, program: &str, args: &[&str]) -> Output {
        self.command(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running {program}: {e}"))
    }

    /// Polls `f` until it returns something, at most [`PATIENCE`].
    pub fn wait_until<T>(&self, mut f: impl FnMut() -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(v) = f() {
                return Some(v);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A virtual keyboard (one `wtype` process) that presses `keys` (wtype's
    /// arguments, e.g. `["-M", "logo", "-k", "a", "-m", "logo"]`) at once, then types
    /// what [`Keyboard::type_text`] gives it.
    pub fn keyboard(&self, keys: &[&str]) -> Keyboard {
        let child = self
            .command("wtype")
            .args(keys)
            .arg("-")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("wtype");
        Keyboard { child }
    }

    /// A picture of the output's centre, where a launcher opens.
    pub fn centre(&self) -> Vec<u8> {
        let (w, h) = OUTPUT;
        let geometry = format!("{},{} 200x100", w / 2 - 150, h / 2 - 50);
        let out = self.run("grim", &["-g", &geometry, "-t", "ppm", "-"]);
        assert!(out.status.success(), "grim: {}", text(&out.stderr));
        out.stdout
    }

    /// Waits until the output's centre differs from `before`: a window (the
    /// launcher) is shown there, and has the keyboard.
    #[track_caller]
    pub fn wait_window(&self, before: &[u8]) {
        self.wait_until(|| (self.centre() != before).then_some(()))
            .expect("no window showed at the output's centre");
    }

    /// What sway's children wrote to stdout (a keybinding's command writes there).
    pub fn compositor_stdout(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sway.out")).unwrap_or_default()
    }

    fn write_files(&self, options: &Options) {
        let (w, h) = OUTPUT;
        std::fs::write(
            self.dir.path().join("sway.conf"),
            format!(
                "output HEADLESS-1 resolution {w}x{h}\n{}\n",
                options.sway_config
            ),
        )
        .expect("sway config");
        std::fs::write(
            self.dir.path().join("bus.conf"),
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={}/bus</listen>
  <auth>EXTERNAL</auth>
  <standard_session_servicedirs/>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"#,
                self.runtime.display()
            ),
        )
        .expect("bus config");
        for f in ["sway.conf", "bus.conf"] {
            std::fs::set_permissions(
                self.dir.path().join(f),
                std::fs::Permissions::from_mode(0o644),
            )
            .ok();
        }
        self.give(&self.runtime);
        self.give(&self.home);
    }

    fn start_bus(&mut self) {
        let mut child = self
            .command("dbus-daemon")
            .arg(format!(
                "--config-file={}",
                self.dir.path().join("bus.conf").display()
            ))
            .args(["--nofork", "--print-address"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("dbus-daemon");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the bus's address");
        self.bus = line.trim().to_owned();
        assert!(!self.bus.is_empty(), "dbus-daemon printed no address");
        self.children.push(child);
    }

    fn start_sway(&mut self) {
        let out = std::fs::File::create(self.dir.path().join("sway.out")).expect("sway.out");
        let err = std::fs::File::create(self.dir.path().join("sway.err")).expect("sway.err");
        let child = self
            .command("sway")
            .arg("-c")
            .arg(self.dir.path().join("sway.conf"))
            .env("WLR_BACKENDS", "headless")
            .env("WLR_LIBINPUT_NO_DEVICES", "1")
            .env("WLR_RENDERER", "pixman")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("sway");
        self.children.push(child);
        let runtime = self.runtime.clone();
        let sockets = self.wait_until(|| {
            let names: Vec<String> = std::fs::read_dir(&runtime)
                .ok()?
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect();
            let wayland = names
                .iter()
                .find(|n| n.starts_with("wayland-") && !n.ends_with(".lock"))?;
            let ipc = names.iter().find(|n| n.starts_with("sway-ipc."))?;
            Some((wayland.clone(), runtime.join(ipc)))
        });
        let (wayland, swaysock) = sockets.unwrap_or_else(|| {
            panic!(
                "sway did not start: {}",
                std::fs::read_to_string(self.dir.path().join("sway.err")).unwrap_or_default()
            )
        });
        self.wayland = wayland;
        self.swaysock = swaysock;
        // What a session's `dbus-update-activation-environment` does: services the bus
        // starts (the familiar daemon) find the display.
        let out = self.run(
            "dbus-update-activation-environment",
            &[
                &format!("WAYLAND_DISPLAY={}", self.wayland),
                &format!("SWAYSOCK={}", self.swaysock.display()),
            ],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
    }

    fn start_mako(&mut self) {
        let child = self
            .command("mako")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mako");
        self.children.push(child);
        self.wait_until(|| {
            self.run("makoctl", &["list"])
                .status
                .success()
                .then_some(())
        })
        .expect("mako did not take the notification bus name");
    }
}

impl Drop for Desktop {
    fn drop(&mut self) {
        if let Some(launcher) = self.a11y.take() {
            a11y::stop(launcher);
        }
        // What the session started goes with it: a launcher with sway, the familiar
        // daemon with its bus.
        for child in self.children.iter_mut().rev() {
            child.kill().ok();
            child.wait().ok();
        }
    }
}

/// A virtual keyboard: see [`Desktop::keyboard`].
pub struct Keyboard {
    child: Child,
}

impl Keyboard {
    /// Types `text` (`\n` is Enter).
    pub fn type_text(&mut self, text: &str) {
        let stdin: &mut ChildStdin = self.child.stdin.as_mut().expect("wtype's stdin");
        stdin.write_all(text.as_bytes()).expect("typing");
        stdin.flush().expect("typing");
    }

    /// Removes the keyboard once everything is typed.
    pub fn finish(mut self) {
        drop(self.child.stdin.take());
        let out = self.child.wait_with_output().expect("wtype");
        assert!(out.status.success(), "wtype: {}", text(&out.stderr));
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).trim().to_owned()
}
