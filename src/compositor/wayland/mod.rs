//! The compositor's Wayland display, which grim (`screenshot`) and wtype (`type_text`)
//! connect to, and which [`idle`] asks whether the user is at the keyboard: the
//! compositor's own, found beside its IPC socket, so a daemon started by systemd without
//! `WAYLAND_DISPLAY` (or with one left from an earlier session) still reaches the session
//! the desktop tools speak to.
//!
//! Order: `$WAYLAND_DISPLAY` when it names a live socket in the compositor's runtime
//! directory; else the display niri's socket names (`niri.wayland-1.PID.sock`); else
//! the newest `wayland-N` socket in that directory. The result is an absolute path,
//! which libwayland takes as it is.

pub mod idle;

use std::path::{Path, PathBuf};

use crate::compositor::Compositor;

/// The socket a Wayland client should use for `c`, `None` when none is found.
pub fn display(c: &Compositor, env_display: Option<&str>) -> Option<PathBuf> {
    let socket = c.socket();
    let runtime = match c {
        // `RUNTIME/hypr/SIGNATURE/.socket.sock`
        Compositor::Hyprland(_) => socket.ancestors().nth(3)?,
        Compositor::Sway(_) | Compositor::Niri(_) => socket.parent()?,
    };
    if let Some(name) = env_display.filter(|n| !n.is_empty()) {
        let path = runtime.join(name);
        if is_socket(&path) {
            return Some(path);
        }
    }
    if let Compositor::Niri(_) = c
        && let Some(name) = niri_display(socket)
        && is_socket(&runtime.join(&name))
    {
        return Some(runtime.join(name));
    }
    newest_wayland(runtime)
}

/// `wayland-1` of `niri.wayland-1.1234.sock`.
fn niri_display(socket: &Path) -> Option<String> {
    let name = socket.file_name()?.to_str()?;
    let rest = name.strip_prefix("niri.")?;
    let (display, _) = rest.split_once('.')?;
    Some(display.to_owned())
}

fn is_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

fn newest_wayland(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("wayland-") && !n.ends_with(".lock"))
        })
        .filter(|e| is_socket(&e.path()))
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .map(|e| e.path())
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixListener;

    use super::*;
    use crate::compositor::{Niri, Sway};

    #[test]
    fn the_display_is_found_beside_the_compositors_socket() {
        let dir = tempfile::tempdir().unwrap();
        let _ipc = UnixListener::bind(dir.path().join("sway-ipc.1.2.sock")).unwrap();
        let _w = UnixListener::bind(dir.path().join("wayland-1")).unwrap();
        std::fs::write(dir.path().join("wayland-1.lock"), "").unwrap();
        let sway = Compositor::Sway(Sway::at(dir.path().join("sway-ipc.1.2.sock")));
        assert_eq!(display(&sway, None), Some(dir.path().join("wayland-1")));
        // A stale variable falls back to what is there.
        assert_eq!(
            display(&sway, Some("wayland-9")),
            Some(dir.path().join("wayland-1"))
        );
        let _w2 = UnixListener::bind(dir.path().join("wayland-2")).unwrap();
        assert_eq!(
            display(&sway, Some("wayland-2")),
            Some(dir.path().join("wayland-2"))
        );
        let niri = Compositor::Niri(Niri::at(dir.path().join("niri.wayland-1.77.sock")));
        assert_eq!(display(&niri, None), Some(dir.path().join("wayland-1")));
    }
}
