//! Paths hidden from the command: the user's runtime directory (the session bus, the
//! user manager's private socket, the keyring's and agents' sockets) when a soul's
//! tools may open unix sockets only to reach the daemon's filtering bus proxy.
//!
//! Landlock (up to ABI 8) does not govern `connect()` on a path-named socket, and the
//! proxy can only be reached with `socket(AF_UNIX)` allowed; the same call would reach
//! `$XDG_RUNTIME_DIR/bus` unfiltered. So the helper, in the mount namespace it unshares
//! with its user and PID namespaces ([`crate::pidns::enter`]) and before its Landlock
//! ruleset, mounts an empty tmpfs over each covered directory (`/dev/null` over a
//! covered file), binds each `uncover` entry back in at its own path, and makes the
//! tmpfs read-only. A namespace made in a new user namespace gets the outside's mounts
//! as slaves, so nothing here reaches the rest of the system.
//!
//! The invariant: once [`apply`] returned `Ok`, the covered paths show the command
//! nothing but the uncovered entries, and it cannot undo that: Landlock refuses every
//! mount and unmount to a restricted process, the covering mounts were made by a more
//! privileged namespace (the kernel locks them together), and `/proc/PID/root` of a
//! process outside needs ptrace access, which Landlock denies across domains.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::fcntl::{OFlag, open};
use nix::mount::{MsFlags, mount};
use nix::sys::stat::Mode;

/// Why the paths could not be covered; the helper then refuses to run the command.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CoverError {
    #[error("opening {0} to keep it: {1}")]
    Open(PathBuf, nix::Error),
    #[error("covering {0}: {1}")]
    Mount(PathBuf, nix::Error),
    #[error("making a place for {0}: {1}")]
    Place(PathBuf, std::io::Error),
}

/// The tmpfs over a covered directory: nothing in it runs, and it holds only the
/// mount points of what is kept.
const TMPFS_FLAGS: MsFlags = MsFlags::MS_NOSUID
    .union(MsFlags::MS_NODEV)
    .union(MsFlags::MS_NOEXEC);

/// Covers `cover` but `uncover` (see the module doc). Must run in a mount namespace of
/// the helper's own, with the capabilities its user namespace gives, before Landlock.
/// A covered path that does not exist is skipped: there is nothing to hide.
pub(crate) fn apply(cover: &[PathBuf], uncover: &[PathBuf]) -> Result<(), CoverError> {
    // Opened before anything is covered: afterwards their paths lead into the tmpfs.
    let kept = uncover
        .iter()
        .map(|p| {
            open(p, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
                .map(|fd| (p.as_path(), fd))
                .map_err(|e| CoverError::Open(p.clone(), e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    for path in cover {
        let Ok(meta) = std::fs::metadata(path) else {
            continue;
        };
        if !meta.is_dir() {
            mount(
                Some("/dev/null"),
                path,
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )
            .map_err(|e| CoverError::Mount(path.clone(), e))?;
            continue;
        }
        mount(
            Some("tmpfs"),
            path,
            Some("tmpfs"),
            TMPFS_FLAGS,
            Some("mode=0755,size=64k"),
        )
        .map_err(|e| CoverError::Mount(path.clone(), e))?;
        for (inner, fd) in kept.iter().filter(|(p, _)| p.starts_with(path)) {
            bind_back(inner, fd)?;
        }
        mount(
            None::<&str>,
            path,
            None::<&str>,
            MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | TMPFS_FLAGS,
            None::<&str>,
        )
        .map_err(|e| CoverError::Mount(path.clone(), e))?;
    }
    Ok(())
}

/// Binds what `fd` opened back at `path`, inside a fresh tmpfs: its parents made, and
/// a mount point of its kind (a directory, else an empty file) at the end.
fn bind_back(path: &Path, fd: &OwnedFd) -> Result<(), CoverError> {
    let source = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    let is_dir = std::fs::metadata(&source).is_ok_and(|m| m.is_dir());
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| CoverError::Place(path.to_owned(), e))?;
    }
    let made = if is_dir {
        std::fs::create_dir(path)
    } else {
        std::fs::File::create(path).map(drop)
    };
    made.map_err(|e| CoverError::Place(path.to_owned(), e))?;
    mount(
        Some(&source),
        path,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| CoverError::Mount(path.to_owned(), e))
}
