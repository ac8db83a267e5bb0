//! The machine checks: Landlock and a real sandboxed read, the session bus, the
//! daemon's name, the systemd user manager and units, the notification server,
//! the compositor's socket (Hyprland, sway, niri), the data dir.

use std::path::{Path, PathBuf};

use familiar_sandbox::fileops::{FileOp, FileReply};
use familiar_sandbox::seccomp::UnixSockets;
use familiar_sandbox::status::EnforcementStatus;
use zbus::Connection;

use super::Check;
use crate::config::ProcessEnv;
use crate::sandbox::launcher::{HELPER_NAME, HELPER_SUBCOMMAND};
use crate::sandbox::{SandboxLauncher, SandboxPolicy, SandboxSpec};

/// Below this much free space the data dir cannot hold contexts and transcripts.
const MIN_FREE_BYTES: u64 = 50 * 1024 * 1024;
/// Below this much free space a long session may run out.
const LOW_FREE_BYTES: u64 = 1024 * 1024 * 1024;

/// Which helper binary sandboxed calls start, the Landlock ABI, and a sandboxed read
/// outside the granted paths that the kernel must refuse.
pub(super) async fn sandbox_checks() -> Vec<Check> {
    let helper = helper_check();
    let enforcement = familiar_sandbox::status::probe();
    let abi = enforcement
        .abi
        .map_or_else(|| "none".to_owned(), |v| v.to_string());
    let landlock = match enforcement.status {
        EnforcementStatus::Full => Check::ok("landlock", format!("ABI {abi}: full enforcement")),
        EnforcementStatus::Partial => Check::warn(
            "landlock",
            format!(
                "ABI {abi}: partial enforcement (missing: {})",
                enforcement.missing.join(", ")
            ),
            "a newer kernel (6.10+) enforces everything; souls with `sandbox.require = true` refuse to run until then",
        ),
        EnforcementStatus::None => {
            return vec![
                helper,
                Check::fail(
                    "landlock",
                    "this kernel has no Landlock: tools would run unconfined",
                    "boot a kernel with CONFIG_SECURITY_LANDLOCK=y and `landlock` in the `lsm=` list",
                ),
            ];
        }
    };
    vec![
        helper,
        landlock,
        unix_sockets_check(&enforcement),
        enforcement_check().await,
        programs_check(),
    ]
}

/// Which file each program the daemon runs unconfined is: looked up on the system's
/// `PATH` only, where no soul can plant one ([`crate::programs`]).
fn programs_check() -> Check {
    let found: Vec<String> = crate::programs::RUN_UNCONFINED
        .iter()
        .map(|name| match crate::programs::find(name) {
            Some(path) => format!("{name} = {}", path.display()),
            None => format!("{name}: none"),
        })
        .collect();
    Check::ok(
        "unconfined_programs",
        format!(
            "the daemon runs these from the system's PATH only, never yours: {}",
            found.join(", ")
        ),
    )
}

/// The menu `ask --dmenu` and a click on an approval open, and where it was found:
/// config.toml's `[desktop] menu`, else the first installed on the system's `PATH`.
pub(super) fn menu_check(config: Option<&crate::config::Config>) -> Check {
    use crate::launcher::{LEGACY_VARIABLE, Menu, Origin};
    let menu = match config {
        Some(c) => Menu::from_config(c),
        None => Menu::new(
            &crate::config::DesktopConfig::default(),
            &crate::config::paths::home_dir(&crate::config::ProcessEnv),
        ),
    };
    let legacy = match std::env::var_os(LEGACY_VARIABLE).is_some_and(|v| !v.is_empty()) {
        true => format!(" ({LEGACY_VARIABLE} is set and not read: use [desktop] menu)"),
        false => String::new(),
    };
    match menu.program() {
        Ok((path, Origin::Configured)) => Check::ok(
            "menu",
            format!("{} (config.toml [desktop] menu){legacy}", path.display()),
        ),
        Ok((path, Origin::Installed)) => Check::ok(
            "menu",
            format!(
                "{} (the first of fuzzel, wofi, rofi, bemenu on the system's PATH, never yours){legacy}",
                path.display()
            ),
        ),
        Err(e @ crate::launcher::LauncherError::NoneFound) => Check::warn(
            "menu",
            format!("{e}{legacy}"),
            "without one, `ask --dmenu` and a click on an approval cannot open a menu (the buttons and `familiar approve ID` still answer)",
        ),
        Err(e) => Check::fail(
            "menu",
            format!("{e}{legacy}"),
            "set [desktop] menu to a program installed outside your home directory (docs/config.md)",
        ),
    }
}

/// The filtering bus proxy the souls that list `bus_talk` need
/// ([`crate::sandbox::busproxy`]): without it their tools do not run.
pub(super) fn bus_proxy_check(souls: &[&str]) -> Check {
    use crate::sandbox::busproxy::{PACKAGE, PROGRAM};
    match crate::programs::find(PROGRAM) {
        Some(path) => Check::ok(
            "bus_proxy",
            format!(
                "the tools of {} reach the session bus through {} only, filtered to the names each lists in bus_talk",
                souls.join(", "),
                path.display()
            ),
        ),
        None => Check::fail(
            "bus_proxy",
            format!(
                "{PROGRAM} is not installed: the tools of {} (bus_talk) cannot run",
                souls.join(", ")
            ),
            format!(
                "install it (Debian and Ubuntu: `apt install {PACKAGE}`), or remove bus_talk from those souls"
            ),
        ),
    }
}

/// Whether tools are kept off unix sockets (the session bus, the keyring).
fn unix_sockets_check(enforcement: &familiar_sandbox::status::Enforcement) -> Check {
    match enforcement.unix_sockets {
        UnixSockets::Blocked | UnixSockets::Granted => Check::ok(
            "unix_sockets",
            "tools cannot open unix sockets (seccomp): the session bus, keyring, user manager and display are out of reach, unless a soul names sockets in [sandbox] sockets",
        ),
        UnixSockets::Open => Check::fail(
            "unix_sockets",
            "this kernel or architecture has no seccomp filters: tools can connect to the session bus, the keyring and the display (the daemon still refuses their D-Bus calls)",
            "use a kernel with CONFIG_SECCOMP_FILTER=y on x86_64, aarch64 or riscv64",
        ),
    }
}

/// `familiar-sandbox` beside this binary (ok), or the slower `familiar sandbox-exec`.
fn helper_check() -> Check {
    match SandboxLauncher::current() {
        Ok(l) if l.pinned.problem().is_some() => Check::fail(
            "sandbox_helper",
            format!(
                "{} cannot be trusted to run tools: {}",
                l.helper.display(),
                l.pinned.problem().unwrap_or_default()
            ),
            format!(
                "make it yours or root's and writable only by its owner (`chmod go-w {}`), then restart the daemon",
                l.helper.display()
            ),
        ),
        Ok(l) if !l.subcommand => Check::ok(
            "sandbox_helper",
            format!("tools run in {}", l.helper.display()),
        ),
        Ok(l) => Check::warn(
            "sandbox_helper",
            format!(
                "no {HELPER_NAME} beside {}: tools run through `familiar {HELPER_SUBCOMMAND}`, which works but is slower per call",
                l.helper.display()
            ),
            format!(
                "copy {HELPER_NAME} from the same build into the directory of familiar (`cargo install --locked --path .` installs both), then restart the daemon"
            ),
        ),
        Err(e) => Check::fail(
            "sandbox_helper",
            e.to_string(),
            "run familiar from a path it can read back (/proc/self/exe)",
        ),
    }
}

async fn enforcement_check() -> Check {
    let fix = "report this: the sandbox helper must be able to restrict itself";
    let scratch = std::env::temp_dir().join(format!("familiar-doctor-{}", std::process::id()));
    let outside = scratch.join("outside");
    let inside = scratch.join("inside");
    let secret = outside.join("secret");
    let prepared = std::fs::create_dir_all(&outside)
        .and_then(|()| std::fs::create_dir_all(&inside))
        .and_then(|()| std::fs::write(&secret, "doctor"));
    if let Err(e) = prepared {
        return Check::warn(
            "sandbox",
            format!("not checked: cannot prepare {}: {e}", scratch.display()),
            "make the temporary directory writable",
        );
    }
    let spec = SandboxSpec {
        read: vec![],
        write: vec![],
        network: false,
        udp: false,
        require: false,
        startup: Vec::new(),
        destroy: Vec::new(),
        sockets: vec![],
        bus_talk: vec![],
    };
    let home = std::env::var_os("HOME").map_or_else(|| scratch.clone(), PathBuf::from);
    let policy = match SandboxPolicy::new(&spec, &[], &inside, &home) {
        Ok(p) => p,
        Err(e) => {
            return Check::warn(
                "sandbox",
                format!("not checked: {e}"),
                "make the temporary directory writable",
            );
        }
    };
    let op = FileOp::Read {
        path: secret,
        offset: None,
        limit: None,
    };
    let result = match SandboxLauncher::current() {
        Ok(l) => {
            l.file_op(&policy, &op, &tokio_util::sync::CancellationToken::new())
                .await
        }
        Err(e) => Err(e),
    };
    if let Err(e) = std::fs::remove_dir_all(&scratch) {
        tracing::debug!("cannot remove {}: {e}", scratch.display());
    }
    match result {
        Ok((FileReply::Error { errno, .. }, _)) if errno == Some(libc::EACCES) => Check::ok(
            "sandbox",
            "a sandboxed read outside the granted paths was refused by the kernel (EACCES)",
        ),
        Ok((FileReply::Read { .. }, _)) => Check::fail(
            "sandbox",
            "a sandboxed read outside the granted paths succeeded: the sandbox is not enforced",
            fix,
        ),
        Ok((reply, _)) => Check::fail(
            "sandbox",
            format!("unexpected answer from the sandbox helper: {reply:?}"),
            fix,
        ),
        Err(e) => Check::fail("sandbox", e.to_string(), fix),
    }
}

/// The session bus, the daemon's name, the systemd user manager and the installed
/// units, and the notification server.
pub(super) async fn bus_checks() -> Vec<Check> {
    let mut checks = vec![];
    let conn = match Connection::session().await {
        Ok(c) => c,
        Err(e) => {
            checks.push(Check::fail(
                "session_bus",
                format!("no session bus: {e}"),
                "run inside your desktop session (over ssh: `familiar run`, which needs no bus)",
            ));
            checks.push(units_check(false));
            return checks;
        }
    };
    checks.push(Check::ok("session_bus", "the session bus answers"));
    let dbus = match zbus::fdo::DBusProxy::new(&conn).await {
        Ok(p) => p,
        Err(e) => {
            checks.push(Check::fail(
                "session_bus",
                format!("the bus driver does not answer: {e}"),
                "restart your session",
            ));
            return checks;
        }
    };
    let activatable: Vec<String> = match dbus.list_activatable_names().await {
        Ok(names) => names.into_iter().map(|n| n.to_string()).collect(),
        Err(e) => {
            tracing::debug!("cannot list activatable names: {e}");
            vec![]
        }
    };
    let present = async |name: &str| -> bool {
        match zbus::names::BusName::try_from(name) {
            Ok(n) => dbus.name_has_owner(n).await.unwrap_or(false),
            Err(_) => false,
        }
    };
    let activatable = |name: &str| activatable.iter().any(|n| n == name);

    checks.push(if present(familiar_protocol::NAME).await {
        Check::ok("daemon", format!("{} is running", familiar_protocol::NAME))
    } else if activatable(familiar_protocol::NAME) {
        Check::ok(
            "daemon",
            "not running; the bus starts it on first use (D-Bus activation)",
        )
    } else {
        Check::warn(
            "daemon",
            "not running, and the bus cannot start it",
            "`familiar setup` (once), or `systemctl --user start familiar`, or `familiar daemon` in a terminal",
        )
    });
    let manager = present("org.freedesktop.systemd1").await;
    checks.push(if manager {
        Check::ok("systemd", "the systemd user manager answers")
    } else {
        Check::warn(
            "systemd",
            "no systemd user manager on this bus: no unit, timer or `systemctl --user reload`",
            "log in through systemd (a normal desktop session does); D-Bus activation and `familiar daemon` still work",
        )
    });
    checks.push(units_check(manager));
    let notifications = "org.freedesktop.Notifications";
    checks.push(if present(notifications).await {
        Check::ok("notifications", "a notification server answers")
    } else if activatable(notifications) {
        // Installed, not running: D-Bus starts it at the first notification, if the
        // session can show one (a compositor running).
        Check::ok(
            "notifications",
            "a notification server is activatable (installed, not running: D-Bus starts it at the first notification)",
        )
    } else {
        Check::warn(
            "notifications",
            "no notification server: daemon approvals are shown only to `familiar ask` on a terminal",
            "start one (mako, dunst, swaync, fnott), or answer with `familiar approve ID` / `familiar deny ID` (ids in `familiar tasks`)",
        )
    });
    checks
}

/// Whether `familiar setup` installed the units and the activation file, as this
/// binary would write them.
fn units_check(manager: bool) -> Check {
    let installed = match crate::cli::setup::installed() {
        Ok(i) => i,
        Err(e) => return Check::warn("units", format!("not checked: {e:#}"), "see the message"),
    };
    let named = |state: &str| -> Vec<String> {
        installed
            .iter()
            .filter(|(_, s)| *s == state)
            .map(|(p, _)| {
                p.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect()
    };
    let missing = named("new");
    let stale = named("updated");
    let reload = if manager {
        " (it runs `systemctl --user daemon-reload`)"
    } else {
        ""
    };
    if !missing.is_empty() {
        Check::warn(
            "units",
            format!("not installed: {}", missing.join(", ")),
            format!("`familiar setup`{reload}"),
        )
    } else if !stale.is_empty() {
        Check::warn(
            "units",
            format!(
                "installed for another binary or an older familiar: {}",
                stale.join(", ")
            ),
            format!("`familiar setup` again{reload}"),
        )
    } else {
        Check::ok(
            "units",
            "the systemd units and the D-Bus activation file are installed",
        )
    }
}

pub(super) fn desktop_check() -> Check {
    let set = |k: &str| std::env::var_os(k).is_some_and(|s| !s.is_empty());
    let named = [
        "HYPRLAND_INSTANCE_SIGNATURE",
        "SWAYSOCK",
        "I3SOCK",
        "NIRI_SOCKET",
    ]
    .into_iter()
    .find(|k| set(k));
    match crate::compositor::Compositor::detect(&ProcessEnv) {
        Some(c) => match c.desktop() {
            Ok(_) => Check::ok(
                "desktop",
                format!("{} answers at {}", c.name(), c.socket().display()),
            ),
            Err(e) => Check::fail(
                "desktop",
                format!(
                    "{}'s socket {} does not answer: {e}",
                    c.name(),
                    c.socket().display()
                ),
                "restart the compositor, or unset a stale HYPRLAND_INSTANCE_SIGNATURE, SWAYSOCK or NIRI_SOCKET",
            ),
        },
        None => match named {
            Some(var) => Check::fail(
                "desktop",
                format!("{var} is set but its socket is missing"),
                format!(
                    "export the session's value to the user manager: `dbus-update-activation-environment --systemd {var}` at the compositor's start"
                ),
            ),
            None => Check::ok(
                "desktop",
                "not in a Hyprland, sway or niri session: the desktop tools stay off",
            ),
        },
    }
}

pub(super) fn data_dir_check(dir: &Path) -> Check {
    let probe = dir.join(format!(".doctor-{}", std::process::id()));
    let written = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&probe, b"ok"))
        .and_then(|()| std::fs::remove_file(&probe));
    if let Err(e) = written {
        return Check::fail(
            "data_dir",
            format!("{} is not writable: {e}", dir.display()),
            "fix its permissions, or set `data_dir` in config.toml",
        );
    }
    let free = match nix::sys::statvfs::statvfs(dir) {
        Ok(s) => s.blocks_available().saturating_mul(s.fragment_size()),
        Err(e) => {
            return Check::warn(
                "data_dir",
                format!("{} is writable; free space unknown: {e}", dir.display()),
                "check `df` yourself",
            );
        }
    };
    let mib = free / (1024 * 1024);
    let detail = format!("{} is writable, {mib} MiB free", dir.display());
    if free < MIN_FREE_BYTES {
        Check::fail(
            "data_dir",
            detail,
            "free some space, or set `data_dir` in config.toml",
        )
    } else if free < LOW_FREE_BYTES {
        Check::warn(
            "data_dir",
            detail,
            "free some space: transcripts grow with use",
        )
    } else {
        Check::ok("data_dir", detail)
    }
}

/// Whether the daemon keeps its sessions where this shell looks (a daemon on systemd
/// before 254 once used the config dir), and whether such a daemon left data in the
/// config dir that its next start moves over.
pub(super) async fn daemon_data_check(paths: &crate::config::Paths) -> Check {
    const CHECK: &str = "daemon_data";
    let here = &paths.data_dir;
    let misplaced = paths.config_dir != *here && crate::store::holds_data(&paths.config_dir);
    let restart = "`systemctl --user restart familiar` (or stop and start `familiar daemon`): it moves the data over at start, keeping everything";
    let daemon = match daemon_configuration().await {
        Ok(Some(c)) => c,
        Ok(None) if misplaced => {
            return Check::warn(
                CHECK,
                format!(
                    "{} holds sessions a daemon wrote there (systemd before 254 gave it that dir)",
                    paths.config_dir.display()
                ),
                "`systemctl --user start familiar` (or `familiar daemon`): at start it moves them to the data dir, keeping everything",
            );
        }
        Ok(None) => {
            return Check::ok(
                CHECK,
                "the daemon is not running; it uses the same data dir",
            );
        }
        Err(e) => {
            return Check::warn(
                CHECK,
                format!("not checked: {e}"),
                "see the session_bus check",
            );
        }
    };
    let local = serde_json::json!({ "data_dir": here });
    if let Some(split) = super::super::status::data_dir_split(&local, &daemon) {
        return Check::fail(CHECK, split, restart);
    }
    if daemon["data_dir"].is_null() {
        return Check::warn(
            CHECK,
            "the daemon does not say which data dir it uses (it is older than this familiar)",
            restart,
        );
    }
    if misplaced {
        return Check::warn(
            CHECK,
            format!(
                "the daemon uses {} too, but {} still holds sessions an earlier daemon wrote there",
                here.display(),
                paths.config_dir.display()
            ),
            restart,
        );
    }
    Check::ok(CHECK, format!("the daemon uses {} too", here.display()))
}

/// The daemon's `Configuration` property, `None` when it is not running (it is not
/// started for this: reading a property of an activatable name would start it).
async fn daemon_configuration() -> Result<Option<serde_json::Value>, zbus::Error> {
    let conn = Connection::session().await?;
    let dbus = zbus::fdo::DBusProxy::new(&conn).await?;
    if !dbus
        .name_has_owner(familiar_protocol::NAME.try_into()?)
        .await?
    {
        return Ok(None);
    }
    let proxy = familiar_protocol::proxy::Agent1Proxy::new(&conn).await?;
    // A property read fails only as the bus does; the daemon's own errors are for methods.
    let text = proxy.configuration_json().await.map_err(|e| match e {
        familiar_protocol::Error::ZBus(e) => e,
        ours => zbus::Error::Failure(ours.to_string()),
    })?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| zbus::Error::Failure(format!("the daemon's Configuration is not JSON: {e}")))
}
