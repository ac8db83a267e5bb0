//! The command as PID 1 of a PID namespace of its own, so that nothing it starts
//! outlives it and nothing it runs can signal the helper.
//!
//! The helper unshares a user namespace (its uid and gid mapped to themselves, no
//! other; `setgroups` denied) and a PID namespace before it restricts itself (the maps
//! are written to `/proc/self`, which Landlock then makes read-only); the next process
//! it starts, the command, is PID 1 there. What that gives:
//! - the helper is not in the command's namespace: no pid inside names it, so no
//!   `kill`, however the command spells it (`$PPID` is 0, `kill -1` stops at the
//!   namespace), and the command runs in a process group of its own;
//! - when PID 1 exits, the kernel kills every process left in the namespace
//!   (`setsid`, double forks and daemons included) before the helper can reap it;
//! - should the helper die anyway (the OOM killer, a SIGKILL from outside), the
//!   launcher kills what is left in the namespace it recorded
//!   (`/proc/HELPER/ns/pid_for_children`).
//!
//! A kernel or system without unprivileged user namespaces (a sysctl, an LSM) leaves
//! the command in the helper's namespace, as before: the helper still kills and reaps
//! its subtree at the end, and its report says `pid_namespace: false`.
//!
//! A new user namespace gives the helper capabilities over it until it execs, and none
//! carry over to the command (its uid is not 0 inside unless it is root outside), so
//! the command gets nothing it did not have; Landlock and the seccomp filter apply on
//! top as before.

use nix::sched::{CloneFlags, unshare};
use nix::unistd::{getgid, getuid};

/// Enters a new user and PID namespace for the children to come, and with `mounts` a
/// mount namespace for the helper itself ([`crate::cover`]); `false` (logged at debug)
/// where the system refuses, and then nothing has changed.
pub(crate) fn enter(mounts: bool) -> bool {
    let (uid, gid) = (getuid(), getgid());
    let mut flags = CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWPID;
    if mounts {
        flags |= CloneFlags::CLONE_NEWNS;
    }
    if let Err(e) = unshare(flags) {
        tracing::debug!("unshare({flags:?}): {e}");
        return false;
    }
    // Written once, as the kernel requires; `setgroups` first, or an unprivileged
    // process may not write `gid_map`.
    let maps = [
        ("/proc/self/setgroups", "deny".to_owned()),
        ("/proc/self/uid_map", format!("{uid} {uid} 1")),
        ("/proc/self/gid_map", format!("{gid} {gid} 1")),
    ];
    for (file, line) in maps {
        if let Err(e) = std::fs::write(file, line) {
            // The namespaces exist but the ids inside are unmapped (`nobody`): the
            // command would run as nobody and could not reach its own files.
            tracing::debug!("{file}: {e}");
            return false;
        }
    }
    true
}
