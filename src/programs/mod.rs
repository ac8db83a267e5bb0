//! The programs the daemon itself runs outside any sandbox (`xdg-open` or `gio` for
//! `open`, `systemd-run` to start them as units, `journalctl` for `journal` and the
//! pre-check, the launcher menus of [`crate::launcher`], what `desktop_dispatch launch`
//! starts through the compositor: [`argv`], `xdg-dbus-proxy` for a soul's `bus_talk`,
//! `wtype` for `type_text`),
//! found on a fixed system `PATH`, never the daemon's own.
//!
//! A soul that may write a directory early on the user's `PATH` (`~/.local/bin`,
//! `~/bin`) could otherwise plant an `xdg-open` there that the daemon would run
//! unconfined at the next `open`. The directories below are the system's (root's to
//! write on every distribution); NixOS's profile and wrappers are among them.

pub mod argv;

use std::path::PathBuf;

/// Where the daemon looks for a program it runs, in order.
pub const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:\
                               /run/wrappers/bin:/run/current-system/sw/bin";

/// The programs the daemon may run unconfined, for `familiar doctor` (which lists the
/// menus, [`crate::launcher::MENUS`], beside them).
pub const RUN_UNCONFINED: &[&str] = &[
    "xdg-open",
    "gio",
    "systemd-run",
    "journalctl",
    "xdg-dbus-proxy",
    "wtype",
];

/// `name` on [`SYSTEM_PATH`], if it is there as an executable file. Neither the
/// daemon's `PATH` nor its working directory counts.
pub fn find(name: &str) -> Option<PathBuf> {
    which::which_in_global(name, Some(SYSTEM_PATH)).ok()?.next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_system_directories_are_searched() {
        for dir in SYSTEM_PATH.split(':') {
            assert!(dir.starts_with('/'), "{dir}");
            assert!(!dir.contains("home") && !dir.contains('~'), "{dir}");
        }
        // Whatever the daemon's own PATH says.
        assert_eq!(find("sh").map(|p| p.is_absolute()), Some(true));
        assert_eq!(find("familiar-no-such-program"), None);
    }
}
