//! Whether a process belongs to a sandbox: the daemon's second line behind the
//! helper's seccomp filter ([`super::seccomp`]), so that a future hole in the first
//! still cannot submit, approve, steer or forget over the bus.
//!
//! A process is a sandbox's when one of its ancestors is a sandbox helper, or when it
//! sits in a task's systemd slice (`familiar-t_*.slice`, see [`super::resources`]). The
//! helper is a child subreaper that outlives everything the command starts, so a
//! double fork or `setsid` still leaves the helper among the ancestors. A helper is
//! known by its executable (`/proc/PID/exe`, which no process can point elsewhere):
//! `familiar-sandbox`, or `familiar` run as `familiar sandbox-exec`; the launcher also
//! sets [`OWNER_ENV`] in the helper's own environment (never the command's), which
//! names the task for the audit line. A task's bus proxy (`xdg-dbus-proxy`, which
//! connects to the bus as itself, [`super::busproxy`]) counts as a helper when it
//! carries [`OWNER_ENV`]: the launcher sets it on the proxies it starts, and a process
//! that sets it on itself only gets itself refused.
//!
//! Only `/proc` is read, as the user's own processes allow. The walk fails closed: a
//! process that is gone, or an ancestor whose files cannot be read, is
//! [`Verdict::Unknown`], never "outside" — a tool that connects, forks and exits
//! leaves a connection whose process is gone, and that caller is refused.

use std::path::Path;

use super::busproxy;
use super::launcher::{HELPER_NAME, HELPER_SUBCOMMAND, OWNER_ENV};

/// Ancestors looked at before giving up (a process tree is never this deep in practice).
const MAX_DEPTH: usize = 128;

/// Marks a task's slice in a cgroup path ([`super::resources`] names them).
const TASK_SLICE_MARK: &str = "/familiar-t_";

/// A process found inside a sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandboxed {
    /// The process asked about.
    pub pid: u32,
    /// Its command name, for the log.
    pub comm: String,
    /// The helper above it, when found that way.
    pub helper: Option<u32>,
    /// The helper's [`OWNER_ENV`], when it could be read.
    pub owner: Option<String>,
}

impl std::fmt::Display for Sandboxed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} ({})", self.pid, self.comm)?;
        match self.helper {
            Some(h) => write!(f, " runs under the sandbox helper pid {h}")?,
            None => write!(f, " runs in a task's slice")?,
        }
        if let Some(owner) = &self.owner {
            write!(f, " of {owner}")?;
        }
        Ok(())
    }
}

/// What the walk up from a process found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every ancestor up to pid 1 was read, and none is a sandbox's.
    Outside,
    Sandboxed(Sandboxed),
    /// The walk could not finish (the process or an ancestor is gone or unreadable):
    /// a caller the daemon cannot place is refused.
    Unknown(String),
}

/// Where `pid` runs: inside one of familiar's sandboxes, outside, or unknown (see the
/// module doc).
pub fn examine(pid: u32) -> Verdict {
    sandboxed_under(Path::new("/proc"), pid)
}

fn sandboxed_under(proc: &Path, pid: u32) -> Verdict {
    if !proc.join(pid.to_string()).join("stat").exists() {
        return Verdict::Unknown(format!(
            "the process that connected (pid {pid}) is gone; a connection handed on to another process is not accepted"
        ));
    }
    let found = |helper: Option<u32>| Sandboxed {
        pid,
        comm: read_trimmed(&proc.join(pid.to_string()).join("comm")).unwrap_or_default(),
        helper,
        owner: helper.and_then(|h| owner(proc, h)),
    };
    if in_task_slice(proc, pid) {
        return Verdict::Sandboxed(found(None));
    }
    let mut current = pid;
    for _ in 0..MAX_DEPTH {
        if current <= 1 {
            return Verdict::Outside;
        }
        if is_helper(proc, current) {
            return Verdict::Sandboxed(found(Some(current)));
        }
        let Some(next) = parent(proc, current) else {
            return Verdict::Unknown(format!(
                "the ancestors of pid {pid} could not be read (pid {current} is gone or unreadable)"
            ));
        };
        current = next;
    }
    Verdict::Unknown(format!("pid {pid} has more than {MAX_DEPTH} ancestors"))
}

/// Whether `pid`'s executable is the sandbox helper: `familiar-sandbox`, or `familiar`
/// started as `familiar sandbox-exec`.
fn is_helper(proc: &Path, pid: u32) -> bool {
    let dir = proc.join(pid.to_string());
    let Ok(exe) = std::fs::read_link(dir.join("exe")) else {
        return false;
    };
    // A binary replaced since it started reads `/path/familiar-sandbox (deleted)`.
    let name = exe.file_name().map(|n| n.to_string_lossy().into_owned());
    let name = name.as_deref().map(|n| n.trim_end_matches(" (deleted)"));
    match name {
        Some(HELPER_NAME) => true,
        Some(busproxy::PROGRAM) => owner(proc, pid).is_some(),
        Some(_) => std::fs::read(dir.join("cmdline"))
            .is_ok_and(|c| c.split(|b| *b == 0).nth(1) == Some(HELPER_SUBCOMMAND.as_bytes())),
        None => false,
    }
}

/// The helper's [`OWNER_ENV`], from its environment at exec.
fn owner(proc: &Path, helper: u32) -> Option<String> {
    let environ = std::fs::read(proc.join(helper.to_string()).join("environ")).ok()?;
    environ.split(|b| *b == 0).find_map(|var| {
        let value = var.strip_prefix(OWNER_ENV.as_bytes())?.strip_prefix(b"=")?;
        Some(String::from_utf8_lossy(value).into_owned())
    })
}

/// Whether `pid` is in a task's systemd slice.
fn in_task_slice(proc: &Path, pid: u32) -> bool {
    read_trimmed(&proc.join(pid.to_string()).join("cgroup"))
        .is_some_and(|c| c.lines().any(|l| l.contains(TASK_SLICE_MARK)))
}

/// `pid`'s parent, from the fourth field of `/proc/PID/stat`.
fn parent(proc: &Path, pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(proc.join(pid.to_string()).join("stat")).ok()?;
    // The command name may hold spaces and parentheses: the fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim_end().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes a fake `/proc/PID` with the given parent, executable and environment.
    fn fake(proc: &Path, pid: u32, ppid: u32, exe: &str, argv: &[&str], env: &[&str]) {
        let dir = proc.join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("stat"),
            format!("{pid} (a (weird) name) S {ppid} {pid} {pid} 0"),
        )
        .unwrap();
        std::fs::write(dir.join("comm"), "name\n").unwrap();
        std::os::unix::fs::symlink(exe, dir.join("exe")).unwrap();
        std::fs::write(dir.join("cmdline"), argv.join("\0") + "\0").unwrap();
        std::fs::write(dir.join("environ"), env.join("\0") + "\0").unwrap();
        std::fs::write(dir.join("cgroup"), "0::/user.slice/app.slice/x.scope\n").unwrap();
    }

    #[test]
    fn a_process_below_the_helper_is_sandboxed_however_deep() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path();
        fake(p, 10, 1, "/usr/bin/familiar", &["familiar", "daemon"], &[]);
        let owner = format!("{OWNER_ENV}=task t-1 of soul shell_only");
        fake(
            p,
            20,
            10,
            "/home/u/.local/bin/familiar-sandbox (deleted)",
            &["familiar-sandbox", "--", "sh"],
            &["A=1", &owner],
        );
        fake(p, 30, 20, "/usr/bin/bash", &["sh"], &[]);
        fake(p, 40, 30, "/usr/bin/python3", &["python3", "x.py"], &[]);
        let found = sandboxed(p, 40).unwrap();
        assert_eq!(found.helper, Some(20));
        assert_eq!(found.owner.as_deref(), Some("task t-1 of soul shell_only"));
        assert_eq!(
            sandboxed_under(p, 10),
            Verdict::Outside,
            "the daemon itself is not"
        );
        assert_eq!(sandboxed(p, 20).and_then(|s| s.helper), Some(20));
    }

    #[test]
    fn familiar_run_as_sandbox_exec_is_a_helper_but_familiar_ask_is_not() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path();
        fake(
            p,
            10,
            1,
            "/usr/bin/familiar",
            &["familiar", "run", "x"],
            &[],
        );
        fake(
            p,
            20,
            10,
            "/usr/bin/familiar",
            &["familiar", "sandbox-exec", "--", "sh"],
            &[],
        );
        fake(
            p,
            30,
            20,
            "/usr/bin/familiar",
            &["familiar", "ask", "hi"],
            &[],
        );
        fake(p, 40, 1, "/usr/bin/bash", &["bash"], &[]);
        fake(
            p,
            50,
            40,
            "/usr/bin/familiar",
            &["familiar", "ask", "hi"],
            &[],
        );
        assert_eq!(sandboxed(p, 30).map(|s| s.helper), Some(Some(20)));
        assert_eq!(
            sandboxed_under(p, 50),
            Verdict::Outside,
            "a terminal's familiar ask"
        );
    }

    #[test]
    fn a_tasks_bus_proxy_is_a_helper_but_flatpaks_is_not() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path();
        let owner = format!("{OWNER_ENV}=task t-1 of soul notifier");
        fake(p, 10, 1, "/usr/bin/familiar", &["familiar", "daemon"], &[]);
        fake(
            p,
            20,
            10,
            "/usr/bin/xdg-dbus-proxy",
            &["xdg-dbus-proxy"],
            &[&owner],
        );
        fake(
            p,
            30,
            1,
            "/usr/bin/xdg-dbus-proxy",
            &["xdg-dbus-proxy"],
            &[],
        );
        let found = sandboxed(p, 20).unwrap();
        assert_eq!(found.owner.as_deref(), Some("task t-1 of soul notifier"));
        assert_eq!(sandboxed_under(p, 30), Verdict::Outside, "flatpak's proxy");
    }

    #[test]
    fn a_process_in_a_tasks_slice_is_sandboxed_even_when_orphaned() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path();
        fake(p, 40, 1, "/usr/bin/python3", &["python3"], &[]);
        std::fs::write(
            p.join("40/cgroup"),
            "0::/user.slice/user@1000.service/familiar.slice/familiar-t_ab12.slice/x.scope\n",
        )
        .unwrap();
        let found = sandboxed(p, 40).unwrap();
        assert_eq!(found.helper, None);
        assert!(found.to_string().contains("task's slice"), "{found}");
    }

    fn sandboxed(proc: &Path, pid: u32) -> Option<Sandboxed> {
        match sandboxed_under(proc, pid) {
            Verdict::Sandboxed(s) => Some(s),
            Verdict::Outside | Verdict::Unknown(_) => None,
        }
    }

    /// Regression: a tool connected to the bus, forked and exited; its grandchild's
    /// calls were accepted because the connecting pid was gone and "not found" counted
    /// as "not sandboxed".
    #[test]
    fn a_gone_process_is_unknown_not_outside() {
        let t = tempfile::tempdir().unwrap();
        assert!(matches!(sandboxed_under(t.path(), 99), Verdict::Unknown(_)));
    }

    #[test]
    fn an_unreadable_ancestor_is_unknown_not_outside() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path();
        fake(p, 40, 30, "/usr/bin/python3", &["python3"], &[]);
        assert!(matches!(sandboxed_under(p, 40), Verdict::Unknown(_)));
    }
}
