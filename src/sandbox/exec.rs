//! The sandbox helper: restricts itself and then runs the command (or performs a file
//! operation) under the restriction. Installed as its own small binary,
//! `familiar-sandbox [--op KIND] [-- ARGV...]` (src/bin/familiar-sandbox.rs), and
//! reachable as `familiar sandbox-exec` with the same arguments when only `familiar` is
//! installed; both call [`main`], which parses the arguments by hand ([`HelperArgs`]).
//!
//! The daemon is multi-threaded and must never be restricted, so it starts this
//! helper, which does everything on its one thread: `setsid()`,
//! `PR_SET_NO_NEW_PRIVS`, pids cgroup, rlimits, Landlock. It then reports what is
//! enforced as the first line of its stderr ([`REPORT_PREFIX`] + JSON, written before
//! the command exists, so it cannot be forged or reordered by it) and either refuses
//! ([`EXIT_REFUSED`]) or starts the command.
//!
//! The invariant: nothing the command starts outlives it. The helper is a child
//! subreaper, so every orphan (`sleep 1000 &`, `setsid sleep 1000`, double forks) is
//! re-parented to it; it forks the command instead of exec'ing it, and once the command
//! exits it SIGKILLs every remaining descendant and reaps until it has no child left.
//! On SIGTERM (the launcher's timeout or cancel) it passes SIGTERM to every
//! descendant and SIGKILLs them [`TERM_GRACE_SECS`] later. The helper then exits the
//! way the command did (same code, or same signal).
//!
//! The spec ([`HelperSpec`]: the daemon's ready Landlock plan, limits, environment)
//! comes first on stdin, framed by its length ([`frame`]); the helper reads exactly that
//! much, unbuffered, so what follows (a file operation's request, the command's input)
//! is left for whoever reads stdin next. Stdin needs no extra file descriptor plumbing
//! through tokio's spawn (which would take an `unsafe` `pre_exec`), has no size limit
//! (an environment variable has 128 KiB, less than a carved home's plan may need), and
//! the spec never reaches the command, whose environment is the spec's.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitCode;

use nix::errno::Errno;
use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, alarm, getpid};
use serde::{Deserialize, Serialize};

use super::fileops::{self, FileOpKind};
use super::limits;
use super::ruleset::{effective_abi, restrict_self};
use super::seccomp::{self, UnixSockets};
use super::spec::HelperSpec;
use super::status::{Enforcement, EnforcementStatus, TEST_ABI_ENV};

/// A spec larger than this on stdin is refused (a plan is a few hundred KiB at most).
pub const MAX_SPEC_BYTES: u64 = 64 * 1024 * 1024;
/// Starts the helper's first stderr line, followed by a JSON [`HelperReport`].
pub const REPORT_PREFIX: &str = "familiar-sandbox: ";
/// The spec was unreadable or the restriction could not be set up.
pub const EXIT_SETUP_FAILED: u8 = 121;
/// `require_full` and the kernel enforces less.
pub const EXIT_REFUSED: u8 = 122;
/// The command could not be started (like a shell's 127).
pub const EXIT_SPAWN_FAILED: u8 = 127;
/// Between SIGTERM and SIGKILL for the command's processes. The launcher waits longer
/// before it SIGKILLs the helper itself, so the helper always gets to clean up.
pub const TERM_GRACE_SECS: u32 = 1;

/// What the helper tells the launcher before anything else.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HelperReport {
    pub enforcement: Option<Enforcement>,
    /// The pids cgroup the helper entered, for the launcher to remove.
    pub cgroup: Option<std::path::PathBuf>,
    pub outcome: ReportOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportOutcome {
    Running,
    Refused,
    SetupFailed(String),
}

/// How the helper is called, after its name (`familiar-sandbox`) or subcommand
/// (`familiar sandbox-exec`).
pub const USAGE: &str = "[--op read|list|write|edit|search] [--] [COMMAND ARGS...]";

/// The helper's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelperArgs {
    /// Perform this file operation (request as JSON on stdin) instead of a command.
    pub op: Option<FileOpKind>,
    /// The command to run, with its arguments.
    pub argv: Vec<String>,
}

impl HelperArgs {
    /// Parses `[--op KIND | --op=KIND] [--] [ARGV...]`: the first argument that is not
    /// an option, or everything after `--`, starts the command, whose own arguments
    /// are never read as ours. By hand, so the helper binary carries no clap.
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<HelperArgs, String> {
        let mut args = args.into_iter().map(|a| {
            a.into_string()
                .map_err(|a| format!("argument {a:?} is not valid UTF-8"))
        });
        let mut op = None;
        let mut argv = Vec::new();
        while let Some(arg) = args.next() {
            let arg = arg?;
            let kind = match arg.as_str() {
                "--" => break,
                "--op" => args.next().ok_or("--op needs a value")??,
                a if a.starts_with("--op=") => a["--op=".len()..].to_owned(),
                a if a.starts_with('-') => return Err(format!("unexpected argument {a:?}")),
                _ => {
                    argv.push(arg);
                    break;
                }
            };
            if op.is_some() {
                return Err("--op given twice".to_owned());
            }
            op = Some(
                serde_json::from_value(serde_json::Value::String(kind.clone()))
                    .map_err(|_| format!("unknown --op {kind:?}"))?,
            );
        }
        for arg in args {
            argv.push(arg?);
        }
        Ok(HelperArgs { op, argv })
    }
}

/// The helper's entry point, given its arguments (without the program name or the
/// `sandbox-exec` subcommand). A malformed command line is reported like any other
/// setup failure, before the spec is read.
pub fn main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    name_self();
    match HelperArgs::parse(args) {
        Ok(HelperArgs { op, argv }) => run(op, &argv),
        Err(e) => setup_failed(format!("{e} (usage: familiar-sandbox {USAGE})")),
    }
}

/// Takes the name of `argv[0]`: the launcher executes its pinned binary as
/// `/proc/self/fd/N`, which the kernel would show as `N` in `ps`, `top` and `pgrep`.
fn name_self() {
    use std::os::unix::ffi::OsStrExt;
    let Some(arg0) = std::env::args_os().next() else {
        return;
    };
    let name = std::path::Path::new(&arg0)
        .file_name()
        .map(|n| n.as_bytes().to_vec())
        .unwrap_or_default();
    if let Ok(name) = std::ffi::CString::new(name)
        && let Err(e) = nix::sys::prctl::set_name(&name)
    {
        tracing::debug!("PR_SET_NAME: {e}");
    }
}

/// Writes the report line to stderr.
fn report(r: &HelperReport) {
    let line = serde_json::to_string(r).unwrap_or_default();
    let mut err = std::io::stderr().lock();
    if let Err(e) = writeln!(err, "{REPORT_PREFIX}{line}") {
        // Nobody to tell if stderr is gone; the exit code still says it.
        tracing::debug!("stderr: {e}");
    }
}

/// Reports that the sandbox could not be set up, and exits saying so.
fn setup_failed(msg: String) -> ExitCode {
    report(&HelperReport {
        enforcement: None,
        cgroup: None,
        outcome: ReportOutcome::SetupFailed(msg),
    });
    ExitCode::from(EXIT_SETUP_FAILED)
}

/// Reads the spec, restricts itself, reports, then runs `argv` or performs `op`.
fn run(op: Option<FileOpKind>, argv: &[String]) -> ExitCode {
    let policy = match read_spec() {
        Ok(p) => p,
        Err(e) => return setup_failed(format!("reading the spec from stdin: {e}")),
    };
    if op.is_none() && argv.is_empty() {
        return setup_failed("no command given".to_owned());
    }
    let forced = std::env::var(TEST_ABI_ENV)
        .ok()
        .and_then(|v| v.parse().ok());

    // Already a session leader only if someone ran us by hand from a fresh session.
    if let Err(e) = nix::unistd::setsid() {
        tracing::debug!("setsid: {e}");
    }
    // The daemon (or `familiar run`) gone, even by SIGKILL: stop like on its SIGTERM,
    // taking what the command started along (a kept MCP server must not outlive it).
    if let Err(e) = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM) {
        tracing::debug!("PR_SET_PDEATHSIG: {e}");
    }
    if let Err(e) = nix::sys::prctl::set_no_new_privs() {
        return setup_failed(format!("PR_SET_NO_NEW_PRIVS: {e}"));
    }
    let cgroup = limits::enter_pids_cgroup(policy.limits.max_processes);
    if let Err(e) = limits::apply_rlimits(&policy.limits, cgroup.is_some()) {
        return setup_failed(e.to_string());
    }
    let enforcement = match restrict_self(&policy, effective_abi(forced)) {
        Ok(e) => e,
        Err(e) => return setup_failed(e.to_string()),
    };
    // After Landlock, before anything runs: no unix socket (the session bus, the
    // keyring) unless the soul grants one. A kernel without seccomp says so in the
    // report; `require_full` then refuses.
    let unix = match seccomp::install(!policy.sockets.is_empty()) {
        Ok(unix) => unix,
        Err(e) => {
            tracing::debug!("{e}");
            UnixSockets::Open
        }
    };
    let enforcement = enforcement
        .with_unix_sockets(unix)
        .for_sockets(&policy.sockets);
    let refused = policy.require_full && enforcement.status != EnforcementStatus::Full;
    report(&HelperReport {
        enforcement: Some(enforcement),
        cgroup,
        outcome: if refused {
            ReportOutcome::Refused
        } else {
            ReportOutcome::Running
        },
    });
    if refused {
        return ExitCode::from(EXIT_REFUSED);
    }
    match op {
        Some(kind) => fileops::main(kind),
        None => supervise(&policy, argv),
    }
}

/// What the launcher writes to the helper's stdin: the spec's length (8 bytes,
/// little-endian), the spec's JSON, then `rest`.
pub fn frame(spec_json: &[u8], rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + spec_json.len() + rest.len());
    out.extend_from_slice(&(spec_json.len() as u64).to_le_bytes());
    out.extend_from_slice(spec_json);
    out.extend_from_slice(rest);
    out
}

/// Why the helper could not read its spec.
#[derive(Debug, thiserror::Error)]
enum SpecError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0} bytes, more than {MAX_SPEC_BYTES}")]
    TooLong(u64),
    #[error("{0}")]
    Json(#[from] serde_json::Error),
}

/// Reads exactly the framed spec from stdin, through an unbuffered duplicate of fd 0.
fn read_spec() -> Result<HelperSpec, SpecError> {
    let fd = std::io::stdin().as_fd().try_clone_to_owned()?;
    let mut stdin = std::fs::File::from(fd);
    let mut len = [0u8; 8];
    stdin.read_exact(&mut len)?;
    let len = u64::from_le_bytes(len);
    let size = usize::try_from(len)
        .ok()
        .filter(|_| len <= MAX_SPEC_BYTES)
        .ok_or(SpecError::TooLong(len))?;
    let mut json = vec![0u8; size];
    stdin.read_exact(&mut json)?;
    Ok(serde_json::from_slice(&json)?)
}

/// Runs `argv` as our child, then kills and reaps everything it left behind.
fn supervise(policy: &HelperSpec, argv: &[String]) -> ExitCode {
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
        Err(e) => return spawn_failed(&e),
    };

    let mut main_status = None;
    let mut terminating = false;
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
                alarm::set(TERM_GRACE_SECS);
            }
            Ok(Signal::SIGALRM) => signal_descendants(Signal::SIGKILL),
            Ok(_) | Err(_) => {}
        }
    }
    exit_like(main_status)
}

/// Starts `program` with `args`, the spec's environment and working directory, no
/// signal blocked and SIGPIPE at its default. A child inherits its parent's signal mask
/// through fork and exec, and std's `Command` leaves it as it is: an MCP server started
/// with the helper's mask (SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGALRM blocked) ignored
/// every stop until the SIGKILL a second later (issue 26). `posix_spawn` sets the
/// child's mask as the child is created, so no moment exists in which the helper itself
/// runs unblocked and a SIGTERM could end it before it can pass the signal on.
fn spawn_unblocked(policy: &HelperSpec, program: &str, args: &[String]) -> Result<Pid, String> {
    use nix::spawn::{PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags, posix_spawn};
    use std::ffi::CString;

    let c = |s: &str| CString::new(s).map_err(|_| format!("{program}: {s:?} holds a NUL byte"));
    let argv = std::iter::once(program)
        .chain(args.iter().map(String::as_str))
        .map(c)
        .collect::<Result<Vec<_>, _>>()?;
    let envp = policy
        .env
        .iter()
        .map(|(k, v)| c(&format!("{k}={v}")))
        .collect::<Result<Vec<_>, _>>()?;
    let os = |what: &str, e: Errno| format!("{what}: {}", std::io::Error::from(e));
    let mut attr = PosixSpawnAttr::init().map_err(|e| os("posix_spawnattr_init", e))?;
    let mut pipe = SigSet::empty();
    pipe.add(Signal::SIGPIPE);
    attr.set_sigmask(&SigSet::empty())
        .and_then(|()| attr.set_sigdefault(&pipe))
        .and_then(|()| {
            attr.set_flags(
                PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK | PosixSpawnFlags::POSIX_SPAWN_SETSIGDEF,
            )
        })
        .map_err(|e| os("posix_spawnattr", e))?;
    // POSIX has no working-directory action (glibc's `addchdir_np` is not in nix): the
    // helper moves itself, and nothing it does afterwards reads a relative path.
    std::env::set_current_dir(&policy.cwd).map_err(|e| format!("{}: {e}", policy.cwd.display()))?;
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

/// Where to look for `program`: itself when it names a path, else each directory of
/// the command's `PATH` in order (as std's `Command` looks it up in the child's
/// environment).
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
        .filter(|p| p.is_file())
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

/// The command's exit as the launcher sees it through the helper: `(code, signal)`.
pub fn split_status(status: std::process::ExitStatus) -> (Option<i32>, Option<i32>) {
    (status.code(), status.signal())
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    fn parse(args: &[&str]) -> Result<HelperArgs, String> {
        HelperArgs::parse(args.iter().map(OsString::from))
    }

    fn command(argv: &[&str]) -> HelperArgs {
        HelperArgs {
            op: None,
            argv: argv.iter().map(|a| (*a).to_owned()).collect(),
        }
    }

    #[test]
    fn helper_args_take_a_command_after_the_double_dash() {
        assert_eq!(parse(&["--", "ls", "-l"]), Ok(command(&["ls", "-l"])));
    }

    #[test]
    fn helper_args_leave_the_commands_own_options_alone() {
        assert_eq!(
            parse(&["--", "sh", "-c", "x", "--", "--op"]),
            Ok(command(&["sh", "-c", "x", "--", "--op"]))
        );
        assert_eq!(
            parse(&["env", "--op", "read"]),
            Ok(command(&["env", "--op", "read"]))
        );
    }

    #[test]
    fn helper_args_take_an_op_in_both_spellings() {
        let read = HelperArgs {
            op: Some(FileOpKind::Read),
            argv: Vec::new(),
        };
        assert_eq!(parse(&["--op", "read"]), Ok(read.clone()));
        assert_eq!(parse(&["--op=read"]), Ok(read));
        assert_eq!(
            parse(&["--op", "search"]).map(|a| a.op),
            Ok(Some(FileOpKind::Search))
        );
    }

    #[test]
    fn helper_args_refuse_anything_else() {
        for bad in [
            &["--help"][..],
            &["-x", "--", "ls"],
            &["--op"],
            &["--op", "delete"],
            &["--op", "read", "--op", "list"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

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

    #[test]
    fn helper_args_name_every_op_the_launcher_sends() {
        for kind in [
            FileOpKind::Read,
            FileOpKind::List,
            FileOpKind::Write,
            FileOpKind::Edit,
            FileOpKind::Search,
        ] {
            let name = serde_json::to_value(kind).unwrap();
            let name = name.as_str().unwrap();
            assert_eq!(parse(&["--op", name]).map(|a| a.op), Ok(Some(kind)));
        }
    }
}
