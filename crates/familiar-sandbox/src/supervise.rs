//! The command under the helper: started with no signal blocked, in a process group of
//! its own, supervised as the helper's child (the helper is a child subreaper, so
//! every orphan comes back to it, and in a PID namespace ([`crate::pidns`]) the command
//! is PID 1, whose exit takes everything in the namespace along), and once it exits
//! every remaining descendant is killed and reaped. On SIGTERM the
//! descendants get SIGTERM, then SIGKILL [`TERM_GRACE_SECS`] later.
//!
//! PID 1 of a namespace is spared every signal it has no handler for, so a command
//! there (a tool, an MCP server) that leaves SIGTERM at its default would ignore the
//! stop until the SIGKILL. The helper does what the default action would have done:
//! a command that neither catches nor ignores SIGTERM is killed at once, and the
//! helper ends as if by SIGTERM ([`default_action_of`]).

use std::io::Write;
use std::process::ExitCode;

use nix::errno::Errno;
use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, alarm, getpid};

use crate::spec::HelperSpec;

/// The command could not be started (like a shell's 127).
pub const EXIT_SPAWN_FAILED: u8 = 127;
/// Between SIGTERM and SIGKILL for the command's processes. The launcher waits longer
/// before it SIGKILLs the helper itself, so the helper always gets to clean up.
pub const TERM_GRACE_SECS: u32 = 1;

/// Runs `argv` as our child, then kills and reaps everything it left behind;
/// `pid_namespace`: the child is PID 1 of its own PID namespace.
pub(super) fn supervise(policy: &HelperSpec, argv: &[String], pid_namespace: bool) -> ExitCode {
    let mut signals = SigSet::empty();
    for s in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGALRM,
    ] {
        signals.add(s);
    }
    // Blocked here so `wait` can take them one at a time; the command starts with
    // none blocked (`spawn_unblocked`).
    if let Err(e) = signals.thread_block() {
        return spawn_failed(&format!("blocking signals: {e}"));
    }
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        return spawn_failed(&format!("PR_SET_CHILD_SUBREAPER: {e}"));
    }
    let Some((program, args)) = argv.split_first() else {
        return spawn_failed("no command given");
    };
    let main = match spawn_unblocked(policy, program, args) {
        Ok(pid) => pid,
        Err(e) => return spawn_failed(&e.to_string()),
    };

    let mut main_status = None;
    let mut terminating = false;
    // Killed for a SIGTERM it would have died of: its end is reported as that.
    let mut killed_for_term = false;
    loop {
        match reap_exited(main) {
            Reaped::Main(status) => main_status = Some(status),
            Reaped::Others => {}
            Reaped::NoChildren => break,
        }
        if main_status.is_some() {
            signal_descendants(Signal::SIGKILL);
            match waitpid(None, None) {
                Ok(_) | Err(Errno::EINTR) => continue,
                Err(_) => break,
            }
        }
        match signals.wait() {
            Ok(Signal::SIGTERM | Signal::SIGINT | Signal::SIGHUP) if !terminating => {
                terminating = true;
                signal_descendants(Signal::SIGTERM);
                if pid_namespace && main_status.is_none() && default_action_of(main) {
                    killed_for_term = kill(main, Signal::SIGKILL).is_ok();
                }
                alarm::set(TERM_GRACE_SECS);
            }
            Ok(Signal::SIGALRM) => signal_descendants(Signal::SIGKILL),
            Ok(_) | Err(_) => {}
        }
    }
    exit_like(match main_status {
        Some(WaitStatus::Signaled(pid, Signal::SIGKILL, core)) if killed_for_term => {
            Some(WaitStatus::Signaled(pid, Signal::SIGTERM, core))
        }
        other => other,
    })
}

/// Whether `pid` leaves SIGTERM at its default action (it neither catches nor ignores
/// it: `SigCgt` and `SigIgn` of `/proc/PID/status`). Unreadable: `false`, and the
/// grace's SIGKILL stops it as before.
fn default_action_of(pid: Pid) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    let bit = 1u64 << (Signal::SIGTERM as u32 - 1);
    let handled = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
            .map(|mask| mask & bit != 0)
    };
    matches!(
        (handled("SigCgt:"), handled("SigIgn:")),
        (Some(false), Some(false))
    )
}

/// Starts `program` with `args`, the spec's environment and working directory, no
/// signal blocked and SIGPIPE at its default. A child inherits its parent's signal mask
/// through fork and exec, and std's `Command` leaves it as it is: an MCP server started
/// with the helper's mask (SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGALRM blocked) ignored
/// every stop until the SIGKILL a second later. `posix_spawn` sets the
/// child's mask as the child is created, so no moment exists in which the helper itself
/// runs unblocked and a SIGTERM could end it before it can pass the signal on.
fn spawn_unblocked(policy: &HelperSpec, program: &str, args: &[String]) -> Result<Pid, SpawnError> {
    use nix::spawn::{PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags, posix_spawn};
    use std::ffi::CString;

    let c = |s: &str| {
        CString::new(s).map_err(|_| SpawnError::Nul {
            program: program.to_owned(),
            arg: s.to_owned(),
        })
    };
    let argv = std::iter::once(program)
        .chain(args.iter().map(String::as_str))
        .map(c)
        .collect::<Result<Vec<_>, _>>()?;
    let envp = policy
        .env
        .iter()
        .map(|(k, v)| c(&format!("{k}={v}")))
        .collect::<Result<Vec<_>, _>>()?;
    let os = |what: &str, e: Errno| SpawnError::Os {
        what: what.to_owned(),
        err: std::io::Error::from(e),
    };
    let mut attr = PosixSpawnAttr::init().map_err(|e| os("posix_spawnattr_init", e))?;
    let mut pipe = SigSet::empty();
    pipe.add(Signal::SIGPIPE);
    // A process group of its own (pgid = its pid): `kill 0` from the command reaches
    // its own group, never the helper's.
    attr.set_sigmask(&SigSet::empty())
        .and_then(|()| attr.set_sigdefault(&pipe))
        .and_then(|()| attr.set_pgroup(Pid::from_raw(0)))
        .and_then(|()| {
            attr.set_flags(
                PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK
                    | PosixSpawnFlags::POSIX_SPAWN_SETSIGDEF
                    | PosixSpawnFlags::POSIX_SPAWN_SETPGROUP,
            )
        })
        .map_err(|e| os("posix_spawnattr", e))?;
    // POSIX has no working-directory action (glibc's `addchdir_np` is not in nix): the
    // helper moves itself, and nothing it does afterwards reads a relative path.
    std::env::set_current_dir(&policy.cwd).map_err(|err| SpawnError::Cwd {
        path: policy.cwd.clone(),
        err,
    })?;
    let actions = PosixSpawnFileActions::init().map_err(|e| os("posix_spawn_file_actions", e))?;
    // As execvp does: a candidate the kernel refuses (EACCES: say a `PATH` entry
    // outside the sandbox, like a version manager's shims) passes to the next one.
    let mut refused = None;
    for path in candidates(program, &policy.env) {
        match posix_spawn(path.as_path(), &actions, &attr, &argv, &envp) {
            Ok(pid) => return Ok(pid),
            Err(e @ (Errno::EACCES | Errno::ENOENT | Errno::ENOTDIR)) => {
                refused = Some(refused.map_or(e, |r| if r == Errno::EACCES { r } else { e }));
            }
            Err(e) => return Err(os(program, e)),
        }
    }
    Err(os(program, refused.unwrap_or(Errno::ENOENT)))
}

/// Why the command could not be started (the helper exits [`EXIT_SPAWN_FAILED`]).
#[derive(Debug, thiserror::Error)]
enum SpawnError {
    #[error("{program}: {arg:?} holds a NUL byte")]
    Nul { program: String, arg: String },
    #[error("{what}: {err}")]
    Os { what: String, err: std::io::Error },
    #[error("{}: {err}", path.display())]
    Cwd {
        path: std::path::PathBuf,
        err: std::io::Error,
    },
}

/// Where to look for `program`: itself when it names a path, else each directory of
/// the command's `PATH` in order (as std's `Command` looks it up in the child's
/// environment), passing over what this sandbox cannot run. Landlock grants execute
/// with read, so a file the helper cannot open is one the kernel would not exec
/// (a version manager's shim outside the sandbox): it is skipped here rather than by
/// a failed spawn, because in a PID namespace the first child is its init, and once
/// that has exited no other can be started there.
fn candidates(program: &str, env: &[(String, String)]) -> Vec<std::path::PathBuf> {
    if program.contains('/') {
        return vec![program.into()];
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or("/usr/local/bin:/usr/bin:/bin", |(_, v)| v.as_str());
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| std::path::Path::new(d).join(program))
        .filter(|p| p.is_file() && std::fs::File::open(p).is_ok())
        .collect()
}

enum Reaped {
    Main(WaitStatus),
    Others,
    NoChildren,
}

/// Reaps every child that has exited, without blocking.
fn reap_exited(main: Pid) -> Reaped {
    let mut found = Reaped::Others;
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => return found,
            Ok(status) if status.pid() == Some(main) => found = Reaped::Main(status),
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => {
                return match found {
                    Reaped::Main(s) => Reaped::Main(s),
                    Reaped::Others | Reaped::NoChildren => Reaped::NoChildren,
                };
            }
        }
    }
}

/// Sends `signal` to every process below the helper ([`descendants`]).
fn signal_descendants(signal: Signal) {
    for pid in descendants(getpid()) {
        if let Err(e) = kill(pid, signal) {
            // Gone already, or exiting: either way it will be reaped.
            tracing::trace!("kill {pid}: {e}");
        }
    }
}

/// Every process below `root`, down the kernel's own child lists
/// (`/proc/PID/task/TID/children`, one per thread): a few reads for the subtree instead
/// of reading every process's `stat` on the machine. A kernel without those files
/// (`CONFIG_PROC_CHILDREN`) gets the walk of all of `/proc`. Either way a child forked
/// while we look may be missed; the caller looks again after each child it reaps, and
/// an orphan comes back to the helper, its subreaper.
fn descendants(root: Pid) -> Vec<Pid> {
    let root = root.as_raw();
    if !std::path::Path::new(&format!("/proc/{root}/task/{root}/children")).exists() {
        return descendants_by_walk(root);
    }
    let mut found = vec![root];
    let mut i = 0;
    while let Some(&pid) = found.get(i) {
        for child in children(pid) {
            // A pid reused while we look must not send us round in a circle.
            if !found.contains(&child) {
                found.push(child);
            }
        }
        i += 1;
    }
    found.into_iter().skip(1).map(Pid::from_raw).collect()
}

/// The children of every thread of `pid` (none when it is gone).
fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

/// [`descendants`] by reading the parent of every process in `/proc`.
fn descendants_by_walk(root: i32) -> Vec<Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parents: Vec<(i32, i32)> = entries
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // The command name may contain spaces and parentheses; ppid follows the last ')'.
            let after = &stat[stat.rfind(')')? + 1..];
            let ppid = after.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut found = vec![root];
    let mut i = 0;
    while let Some(&parent) = found.get(i) {
        found.extend(
            parents
                .iter()
                .filter(|(_, ppid)| *ppid == parent)
                .map(|(pid, _)| *pid),
        );
        i += 1;
    }
    found.into_iter().skip(1).map(Pid::from_raw).collect()
}

fn spawn_failed(msg: &str) -> ExitCode {
    let mut err = std::io::stderr().lock();
    if let Err(e) = writeln!(err, "familiar-sandbox: {msg}") {
        tracing::debug!("stderr: {e}");
    }
    ExitCode::from(EXIT_SPAWN_FAILED)
}

/// Exits with the command's code, or dies of the command's signal.
fn exit_like(status: Option<WaitStatus>) -> ExitCode {
    match status {
        Some(WaitStatus::Exited(_, code)) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Some(WaitStatus::Signaled(_, signal, _)) => {
            if let Err(e) = SigSet::all().thread_unblock() {
                tracing::debug!("unblocking signals: {e}");
            }
            // std ignores SIGPIPE in our process: then fall through to the shell's code.
            if let Err(e) = nix::sys::signal::raise(signal) {
                tracing::debug!("raise {signal}: {e}");
            }
            ExitCode::from(128u8.saturating_add(signal as u8))
        }
        Some(_) | None => ExitCode::from(EXIT_SPAWN_FAILED),
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    #[test]
    fn descendants_are_found_down_the_child_lists_as_by_the_walk() {
        use std::io::BufRead;
        // A shell with two background children, and a grandchild under one of them.
        let mut sh = Command::new("sh")
            .args([
                "-c",
                "sleep 1000 & sh -c 'sleep 1000 & echo $!; wait' & wait",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut grandchild = String::new();
        std::io::BufReader::new(sh.stdout.take().unwrap())
            .read_line(&mut grandchild)
            .unwrap();
        let grandchild = Pid::from_raw(grandchild.trim().parse().unwrap());
        let root = Pid::from_raw(sh.id().cast_signed());
        let mut below = descendants(root);
        let mut walked = descendants_by_walk(root.as_raw());
        below.sort();
        walked.sort();
        assert_eq!(below.len(), 3, "{below:?}");
        assert!(below.contains(&grandchild), "{below:?}");
        assert_eq!(below, walked);
        for pid in below {
            kill(pid, Signal::SIGKILL).unwrap();
        }
        sh.wait().unwrap();
    }
}
