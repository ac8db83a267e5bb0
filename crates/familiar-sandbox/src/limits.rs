//! Resource limits of a sandboxed call, applied by the helper to itself before it
//! starts the command (rlimits and cgroup membership are inherited).
//!
//! The invariant: the number of processes the command can have at once is bounded.
//! `RLIMIT_NPROC` counts every process of the user, not of the command, so it is set
//! to the user's current count plus [`Limits::max_processes`] (a fork racing us can
//! shift the bound by a few); root ignores it entirely. Where a pids cgroup can be made
//! (cgroup v1 `pids` hierarchy or a delegated v2 subtree, writable by us), the helper
//! moves itself into a fresh one with `pids.max`, which bounds exactly the command's
//! processes, root's included, and lets the launcher kill whatever is left in it.
//! Counting the user's tasks walks all of `/proc` (~140 processes on a desktop: the
//! largest part of a call's syscalls; one `lstat` per process, and one more per process
//! of the user for its thread count), so it is done only when the count is what bounds
//! the command: not in a pids cgroup, and not as root, whom `RLIMIT_NPROC` does not
//! bind anyway.

use std::path::{Path, PathBuf};

use nix::sys::resource::{Resource, setrlimit};
use nix::unistd::{Uid, getpid};

use crate::spec::Limits;

#[derive(Debug, thiserror::Error)]
pub(crate) enum LimitsError {
    #[error("setrlimit {resource}: {source}")]
    Rlimit {
        resource: &'static str,
        source: nix::Error,
    },
}

/// Sets `RLIMIT_FSIZE`, `RLIMIT_CPU`, `RLIMIT_CORE` (0: a crashing tool must not leave
/// a core dump of what it read), `RLIMIT_DATA` when the limits have one, and, unless `in_pids_cgroup` already bounds the
/// processes exactly, `RLIMIT_NPROC` on the calling process.
pub(crate) fn apply_rlimits(limits: &Limits, in_pids_cgroup: bool) -> Result<(), LimitsError> {
    let set = |resource: Resource, name: &'static str, soft: u64, hard: u64| {
        setrlimit(resource, soft, hard).map_err(|source| LimitsError::Rlimit {
            resource: name,
            source,
        })
    };
    let uid = Uid::current();
    if !in_pids_cgroup && !uid.is_root() {
        let nproc = user_task_count(uid).saturating_add(limits.max_processes);
        set(Resource::RLIMIT_NPROC, "RLIMIT_NPROC", nproc, nproc)?;
    }
    set(
        Resource::RLIMIT_FSIZE,
        "RLIMIT_FSIZE",
        limits.max_file_size,
        limits.max_file_size,
    )?;
    // The soft limit sends SIGXCPU, the hard one a second later SIGKILL.
    set(
        Resource::RLIMIT_CPU,
        "RLIMIT_CPU",
        limits.cpu_seconds,
        limits.cpu_seconds.saturating_add(1),
    )?;
    if let Some(data) = limits.max_data {
        set(Resource::RLIMIT_DATA, "RLIMIT_DATA", data, data)?;
    }
    set(Resource::RLIMIT_CORE, "RLIMIT_CORE", 0, 0)
}

/// Tasks (threads included, as `RLIMIT_NPROC` counts them) owned by `uid`.
fn user_task_count(uid: Uid) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return 0;
    };
    procs
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .filter(|e| e.metadata().is_ok_and(|m| m.uid() == uid.as_raw()))
        .map(|e| threads(&e.path().join("task")))
        .sum()
}

/// The threads of a process, from its `/proc/PID/task`: the kernel gives that directory
/// a link count of two plus the number of threads (`proc_task_getattr`), so one `lstat`
/// answers what listing it would (a listing makes a dentry per thread: a browser has
/// hundreds). A count outside that rule is listed instead; a process gone meanwhile
/// counts as one, as before.
fn threads(task_dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    match task_dir.symlink_metadata() {
        Ok(m) if m.is_dir() && m.nlink() > 2 => m.nlink() - 2,
        Ok(_) | Err(_) => std::fs::read_dir(task_dir).map_or(1, |t| t.count() as u64),
    }
}

/// Moves the calling process into a new pids cgroup capped at `max`, when the
/// hierarchy lets us. Returns the cgroup's directory, which the launcher removes once
/// the call is over.
pub(crate) fn enter_pids_cgroup(max: u64) -> Option<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let name = format!("familiar-sandbox-{}", getpid());
    candidates(&own)
        .into_iter()
        .find_map(|parent| try_enter(&parent.join(&name), max))
}

/// Directories our cgroup lives in, per hierarchy that has the pids controller.
fn candidates(proc_self_cgroup: &str) -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    proc_self_cgroup
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let rel = path.trim_start_matches('/');
            if controllers.split(',').any(|c| c == "pids") {
                Some(root.join("pids").join(rel))
            } else if controllers.is_empty() {
                let dir = root.join(rel);
                let enabled = std::fs::read_to_string(dir.join("cgroup.subtree_control"))
                    .is_ok_and(|s| s.split_whitespace().any(|c| c == "pids"));
                enabled.then_some(dir)
            } else {
                None
            }
        })
        .collect()
}

fn try_enter(dir: &Path, max: u64) -> Option<PathBuf> {
    std::fs::create_dir(dir).ok()?;
    let entered = std::fs::write(dir.join("pids.max"), max.to_string())
        .and_then(|()| std::fs::write(dir.join("cgroup.procs"), getpid().to_string()));
    match entered {
        Ok(()) => Some(dir.to_owned()),
        Err(e) => {
            tracing::debug!("no pids cgroup at {}: {e}", dir.display());
            if let Err(e) = std::fs::remove_dir(dir) {
                tracing::debug!("removing {}: {e}", dir.display());
            }
            None
        }
    }
}

/// Kills whatever is left in `cgroup` and removes it. Best effort: the helper has
/// normally reaped everything already; this catches a helper that was killed.
pub fn remove_cgroup(cgroup: &Path) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    for _ in 0..200 {
        let procs = std::fs::read_to_string(cgroup.join("cgroup.procs")).unwrap_or_default();
        let pids: Vec<i32> = procs.lines().filter_map(|l| l.parse().ok()).collect();
        for pid in &pids {
            if let Err(e) = kill(Pid::from_raw(*pid), Signal::SIGKILL) {
                tracing::debug!("kill {pid} in {}: {e}", cgroup.display());
            }
        }
        match std::fs::remove_dir(cgroup) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            // Killed processes leave the cgroup once the kernel has torn them down.
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
        }
    }
    tracing::warn!("sandbox cgroup {} could not be removed", cgroup.display());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_pids_line_names_the_pids_hierarchy() {
        let got = candidates("8:pids:/user.slice\n4:memory:/x\n");
        assert_eq!(got, [PathBuf::from("/sys/fs/cgroup/pids/user.slice")]);
    }

    #[test]
    fn user_task_count_counts_at_least_this_thread() {
        assert!(user_task_count(Uid::current()) >= 1);
    }

    #[test]
    fn threads_come_from_the_task_directorys_link_count() {
        let mut sleep = std::process::Command::new("sleep")
            .arg("1000")
            .spawn()
            .unwrap();
        let task = PathBuf::from(format!("/proc/{}/task", sleep.id()));
        assert_eq!(threads(&task), 1);
        sleep.kill().unwrap();
        sleep.wait().unwrap();
        // The rule is two plus one per subdirectory; outside it, the entries are listed.
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(threads(dir.path()), 0);
        for t in ["1", "2", "3"] {
            std::fs::create_dir(dir.path().join(t)).unwrap();
        }
        assert_eq!(threads(dir.path()), 3);
        assert_eq!(threads(&dir.path().join("gone")), 1);
    }
}
