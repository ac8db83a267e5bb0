//! `familiar setup [--dry-run] [--uninstall]`: install (or remove) the systemd user
//! units and the D-Bus activation file for this user, pointing at the running binary,
//! and say what was done.
//!
//! Invariant: only files under `$XDG_DATA_HOME/systemd/user` and
//! `$XDG_DATA_HOME/dbus-1/services` are written or removed, and nothing at all with
//! `--dry-run`. A `systemctl --user` step that fails is reported; the exit code is 1
//! only when nothing can start the daemon (no user manager and no session bus that
//! activates it); the files are still right, so running the commands later is enough.
//! `--uninstall` likewise exits 1 only when a user manager answered and a step failed.
//! It ends with the binding lines for the compositor this session runs.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;

use super::{Exit, Out};

/// The shipped units; `ExecStart=` names this placeholder, replaced by the binary.
const UNITS: &[(&str, &str)] = &[
    (
        "familiar.service",
        include_str!("../../systemd/familiar.service"),
    ),
    (
        "familiar-maintenance.service",
        include_str!("../../systemd/familiar-maintenance.service"),
    ),
    (
        "familiar-maintenance.timer",
        include_str!("../../systemd/familiar-maintenance.timer"),
    ),
];
const UNIT_PLACEHOLDER: &str = "%h/.cargo/bin/familiar";
const ACTIVATION_FILE: (&str, &str) = (
    "dev.familiar.Agent1.service",
    include_str!("../../systemd/dev.familiar.Agent1.service"),
);
const ACTIVATION_PLACEHOLDER: &str = "/usr/bin/familiar";

/// One file setup installs.
struct Planned {
    path: PathBuf,
    contents: String,
}

/// The files setup installs for the running binary (the binary's path in them).
fn plan() -> anyhow::Result<(String, PathBuf, PathBuf, Vec<Planned>)> {
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .context("cannot find the path of this familiar binary")?;
    let exe_str = exe
        .to_str()
        .filter(|s| !s.chars().any(|c| c.is_whitespace() || c == '"' || c == '\\'))
        .with_context(|| {
            format!(
                "the binary's path {} has spaces, quotes or backslashes; install familiar somewhere plainer (e.g. ~/.local/bin)",
                exe.display()
            )
        })?
        .to_owned();
    let data_home = data_home()?;
    let unit_dir = data_home.join("systemd/user");
    let dbus_dir = data_home.join("dbus-1/services");
    // `%` starts a specifier in unit files.
    let in_unit = exe_str.replace('%', "%%");
    let mut plan: Vec<Planned> = UNITS
        .iter()
        .map(|(name, text)| Planned {
            path: unit_dir.join(name),
            contents: text.replace(UNIT_PLACEHOLDER, &in_unit),
        })
        .collect();
    plan.push(Planned {
        path: dbus_dir.join(ACTIVATION_FILE.0),
        contents: ACTIVATION_FILE.1.replace(ACTIVATION_PLACEHOLDER, &exe_str),
    });
    Ok((exe_str, unit_dir, dbus_dir, plan))
}

/// Each file setup installs and its state: `new` (missing), `updated` (differs: from
/// another binary or an older familiar) or `unchanged`. For `familiar doctor`.
pub(super) fn installed() -> anyhow::Result<Vec<(PathBuf, &'static str)>> {
    let (_, _, _, plan) = plan()?;
    Ok(plan.iter().map(|p| (p.path.clone(), state(p))).collect())
}

/// Runs each command, saying what happened; false if any failed.
fn run_commands(commands: &[&[&str]], out: &mut Out) -> anyhow::Result<bool> {
    let mut all_ok = true;
    for c in commands {
        match Command::new(c[0]).args(&c[1..]).output() {
            Ok(o) if o.status.success() => writeln!(out, "ran: {}", c.join(" "))?,
            Ok(o) => {
                all_ok = false;
                writeln!(out, "{}", failed_command(c, &o))?;
            }
            Err(e) => {
                all_ok = false;
                writeln!(out, "could not run `{}`: {e}", c.join(" "))?;
            }
        }
    }
    Ok(all_ok)
}

/// The compositor this session runs, from the variables each sets for its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compositor {
    Hyprland,
    Sway,
    Niri,
    Other,
}

impl Compositor {
    fn detect(var: impl Fn(&str) -> bool) -> Compositor {
        if var("HYPRLAND_INSTANCE_SIGNATURE") {
            Compositor::Hyprland
        } else if var("SWAYSOCK") {
            Compositor::Sway
        } else if var("NIRI_SOCKET") {
            Compositor::Niri
        } else {
            Compositor::Other
        }
    }

    /// What to add to the compositor's config: the lines the README gives, each ready
    /// to paste.
    fn hint(self) -> &'static str {
        match self {
            Compositor::Hyprland => HYPRLAND_HINT,
            Compositor::Sway => SWAY_HINT,
            Compositor::Niri => NIRI_HINT,
            Compositor::Other => OTHER_HINT,
        }
    }
}

const HYPRLAND_HINT: &str = "On Hyprland, add to ~/.config/hypr/hyprland.conf (a key to ask, one to answer approvals,\nand the session's environment for the daemon):\n  exec-once = dbus-update-activation-environment --systemd HYPRLAND_INSTANCE_SIGNATURE WAYLAND_DISPLAY\n  bind = SUPER, A, exec, familiar ask --dmenu --notify\n  bind = SUPER SHIFT, A, exec, familiar approve --dmenu";
const SWAY_HINT: &str = "On sway, add to ~/.config/sway/config (a key to ask, one to answer approvals, and the\nsession's environment for the daemon):\n  exec dbus-update-activation-environment --systemd WAYLAND_DISPLAY SWAYSOCK\n  bindsym $mod+a exec familiar ask --dmenu --notify\n  bindsym $mod+Shift+a exec familiar approve --dmenu";
const NIRI_HINT: &str = "On niri, add to ~/.config/niri/config.kdl (the two keys inside binds { }):\n  spawn-at-startup \"dbus-update-activation-environment\" \"--systemd\" \"NIRI_SOCKET\" \"WAYLAND_DISPLAY\"\n  Mod+A { spawn \"familiar\" \"ask\" \"--dmenu\" \"--notify\"; }\n  Mod+Shift+A { spawn \"familiar\" \"approve\" \"--dmenu\"; }";
const OTHER_HINT: &str = "Bind a key to `familiar ask --dmenu --notify` (ask) and one to `familiar approve --dmenu`\n(answer approvals); README.md has the lines for Hyprland, sway and niri.";

/// Whether the session bus can start the daemon now (it lists the name as
/// activatable, once told to re-read its service files).
fn activation_works() -> bool {
    let checked = super::client::block_on(async {
        let conn = zbus::Connection::session().await?;
        let dbus = zbus::fdo::DBusProxy::new(&conn).await?;
        // A bus that started before the file was written may not have seen it yet.
        if let Err(e) = dbus.reload_config().await {
            tracing::debug!("ReloadConfig: {e}");
        }
        let names = dbus.list_activatable_names().await?;
        Ok::<_, zbus::Error>(names.iter().any(|n| n.as_str() == familiar_protocol::NAME))
    });
    match checked {
        Ok(Ok(works)) => works,
        Ok(Err(e)) => {
            tracing::debug!("checking D-Bus activation: {e}");
            false
        }
        Err(e) => {
            tracing::debug!("checking D-Bus activation: {e}");
            false
        }
    }
}

/// The line for a command that ran and failed: its exit status and what it said on
/// stderr (systemctl's reason), else on stdout, else that it said nothing.
fn failed_command(command: &[&str], o: &std::process::Output) -> String {
    let status = match o.status.code() {
        Some(code) => format!("exit {code}"),
        None => "killed by a signal".to_owned(),
    };
    let said = [&o.stderr, &o.stdout]
        .into_iter()
        .map(|b| String::from_utf8_lossy(b).trim().to_owned())
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| "no message".to_owned());
    format!("failed: `{}` ({status}): {said}", command.join(" "))
}

/// A binary under a cargo `target/` directory, or built without optimisations: a
/// unit pointing at it breaks at the next `cargo clean` and runs slowly meanwhile.
fn is_development_build(exe: &Path) -> bool {
    cfg!(debug_assertions)
        || exe
            .components()
            .any(|c| c.as_os_str() == std::ffi::OsStr::new("target"))
}

pub fn setup(dry_run: bool, uninstall: bool, out: &mut Out) -> anyhow::Result<Exit> {
    if uninstall {
        return self::uninstall(dry_run, out);
    }
    let (exe_str, unit_dir, dbus_dir, plan) = plan()?;
    if is_development_build(Path::new(&exe_str)) {
        writeln!(
            std::io::stderr().lock(),
            "familiar: warning: {exe_str} is a development build; the units will point at it. Install a release build (`cargo install --locked --path .` or your distribution's package) and run `familiar setup` from there."
        )?;
    }
    let commands: [&[&str]; 2] = [
        &["systemctl", "--user", "daemon-reload"],
        &[
            "systemctl",
            "--user",
            "enable",
            "--now",
            "familiar-maintenance.timer",
        ],
    ];

    if dry_run {
        writeln!(
            out,
            "familiar setup --dry-run: would install, for {exe_str}:"
        )?;
        for p in &plan {
            writeln!(out, "  {} ({})", p.path.display(), state(p))?;
        }
        writeln!(out, "and run:")?;
        for c in commands {
            writeln!(out, "  {}", c.join(" "))?;
        }
        return Ok(Exit::Completed);
    }

    for dir in [&unit_dir, &dbus_dir] {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    for p in &plan {
        let what = state(p);
        if what != "unchanged" {
            std::fs::write(&p.path, &p.contents)
                .with_context(|| format!("cannot write {}", p.path.display()))?;
        }
        writeln!(out, "{what}: {}", p.path.display())?;
    }
    let manager_ok = run_commands(&commands, out)?;
    writeln!(
        out,
        "\nThe daemon now starts on first use (`familiar ask …` activates it over D-Bus);\nstart it now with `systemctl --user start familiar`, follow it with `journalctl --user -u familiar -f`."
    )?;
    let exit = if manager_ok {
        Exit::Completed
    } else if activation_works() {
        writeln!(
            out,
            "No systemd user manager answered: D-Bus activation starts the daemon without one (the\nsession bus can start dev.familiar.Agent1 now). The weekly timer needs the manager: run\nthe commands above once it runs."
        )?;
        Exit::Completed
    } else {
        writeln!(
            out,
            "No systemd user manager answered, and the session bus cannot start dev.familiar.Agent1\n(none runs here: ssh, a tty?): nothing can start the daemon now. Run the commands above\nin your desktop session, or `familiar daemon` in a terminal."
        )?;
        Exit::Failed
    };
    let compositor = Compositor::detect(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()));
    writeln!(out, "\n{}", compositor.hint())?;
    Ok(exit)
}

/// `familiar setup --uninstall`: stop and disable what setup enabled, remove the files
/// it wrote, reload. Sessions, config and the audit log stay (they are the user's).
fn uninstall(dry_run: bool, out: &mut Out) -> anyhow::Result<Exit> {
    let data_home = data_home()?;
    let files: Vec<PathBuf> = UNITS
        .iter()
        .map(|(name, _)| data_home.join("systemd/user").join(name))
        .chain(std::iter::once(
            data_home.join("dbus-1/services").join(ACTIVATION_FILE.0),
        ))
        .collect();
    let stop: [&[&str]; 2] = [
        &[
            "systemctl",
            "--user",
            "disable",
            "--now",
            "familiar-maintenance.timer",
        ],
        &["systemctl", "--user", "stop", "familiar.service"],
    ];
    let reload: [&[&str]; 1] = [&["systemctl", "--user", "daemon-reload"]];
    if dry_run {
        writeln!(out, "familiar setup --uninstall --dry-run: would run:")?;
        for c in stop {
            writeln!(out, "  {}", c.join(" "))?;
        }
        writeln!(out, "remove:")?;
        for f in &files {
            let state = if f.exists() { "present" } else { "absent" };
            writeln!(out, "  {} ({state})", f.display())?;
        }
        writeln!(out, "and run:\n  {}", reload[0].join(" "))?;
        return Ok(Exit::Completed);
    }
    // Already uninstalled (a second run): systemctl would only fail on the units it
    // no longer knows; nothing to do is success.
    if !files.iter().any(|f| f.exists()) {
        writeln!(
            out,
            "familiar setup --uninstall: nothing to remove, the units and the activation file are not installed"
        )?;
        return Ok(Exit::Completed);
    }
    let stopped = run_commands(&stop, out)?;
    for f in &files {
        match std::fs::remove_file(f) {
            Ok(()) => writeln!(out, "removed: {}", f.display())?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                writeln!(out, "absent: {}", f.display())?
            }
            Err(e) => return Err(e).with_context(|| format!("cannot remove {}", f.display())),
        }
    }
    let reloaded = run_commands(&reload, out)?;
    writeln!(
        out,
        "\nSessions, config and the audit log are kept (~/.local/state/familiar, ~/.config/familiar)."
    )?;
    if stopped && reloaded {
        return Ok(Exit::Completed);
    }
    // As for `setup`: without a user manager nothing of familiar runs under one, and
    // with the files gone nothing can start the daemon: the uninstall is done.
    if !manager_answers() {
        writeln!(
            out,
            "No systemd user manager answered: nothing runs under one, and with the files removed\nnothing starts the daemon any more."
        )?;
        return Ok(Exit::Completed);
    }
    Ok(Exit::Failed)
}

/// Whether a systemd user manager answers `systemctl --user` here.
fn manager_answers() -> bool {
    Command::new("systemctl")
        .args(["--user", "show-environment"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn state(p: &Planned) -> &'static str {
    match std::fs::read_to_string(&p.path) {
        Ok(old) if old == p.contents => "unchanged",
        Ok(_) => "updated",
        Err(_) => "new",
    }
}

/// `$XDG_DATA_HOME`, or `~/.local/share`.
fn data_home() -> anyhow::Result<PathBuf> {
    if let Some(d) = std::env::var_os("XDG_DATA_HOME").map(PathBuf::from)
        && d.is_absolute()
    {
        return Ok(d);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .context("HOME is not set to an absolute path")?;
    Ok(Path::new(&home).join(".local/share"))
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    // Regression: the hint's `exec-once` line lacked WAYLAND_DISPLAY, unlike the README.
    #[test]
    fn each_compositors_lines_are_the_readme_s() {
        let readme = include_str!("../../README.md");
        for hint in [HYPRLAND_HINT, SWAY_HINT, NIRI_HINT] {
            let lines: Vec<&str> = hint.lines().filter_map(|l| l.strip_prefix("  ")).collect();
            assert!(lines.len() >= 2, "{hint}");
            for line in lines {
                assert!(
                    readme.lines().any(|l| l.trim() == line),
                    "not in the README: {line}"
                );
            }
        }
    }

    #[test]
    fn the_compositor_is_the_one_whose_variable_is_set() {
        let only = |name: &'static str| move |v: &str| v == name;
        assert_eq!(
            Compositor::detect(only("HYPRLAND_INSTANCE_SIGNATURE")),
            Compositor::Hyprland
        );
        assert_eq!(Compositor::detect(only("SWAYSOCK")), Compositor::Sway);
        assert_eq!(Compositor::detect(only("NIRI_SOCKET")), Compositor::Niri);
        assert_eq!(Compositor::detect(|_| false), Compositor::Other);
    }

    // Regression: a failed step showed only stderr, empty when systemctl said why on
    // stdout.
    #[test]
    fn a_failed_step_says_its_exit_code_and_what_it_said() {
        let output = |code: i32, stdout: &str, stderr: &str| std::process::Output {
            status: std::process::ExitStatus::from_raw(code << 8),
            stdout: stdout.as_bytes().to_vec(),
            stderr: stderr.as_bytes().to_vec(),
        };
        let cmd = ["systemctl", "--user", "daemon-reload"];
        assert_eq!(
            failed_command(&cmd, &output(1, "", "Failed to connect to bus\n")),
            "failed: `systemctl --user daemon-reload` (exit 1): Failed to connect to bus"
        );
        assert_eq!(
            failed_command(&cmd, &output(5, "Unit x not loaded.\n", "")),
            "failed: `systemctl --user daemon-reload` (exit 5): Unit x not loaded."
        );
        assert_eq!(
            failed_command(&cmd, &output(1, "", "")),
            "failed: `systemctl --user daemon-reload` (exit 1): no message"
        );
    }
}
