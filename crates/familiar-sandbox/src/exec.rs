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
//! way the command did (same code, or same signal). That supervision is in
//! `supervise`.
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

use serde::{Deserialize, Serialize};

use crate::fileops::{self, FileOpKind};
use crate::ruleset::{effective_abi, restrict_self};
use crate::seccomp::{self, UnixSockets};
use crate::spec::HelperSpec;
use crate::status::{Enforcement, EnforcementStatus, TEST_ABI_ENV};
pub use crate::supervise::TERM_GRACE_SECS;
use crate::supervise::supervise;
use crate::{cover, limits, pidns};

/// A spec larger than this on stdin is refused (a plan is a few hundred KiB at most).
pub(crate) const MAX_SPEC_BYTES: u64 = 64 * 1024 * 1024;
/// Starts the helper's first stderr line, followed by a JSON [`HelperReport`].
pub const REPORT_PREFIX: &str = "familiar-sandbox: ";
/// The spec was unreadable or the restriction could not be set up.
pub const EXIT_SETUP_FAILED: u8 = 121;
/// `require_full` and the kernel enforces less.
pub(crate) const EXIT_REFUSED: u8 = 122;

/// What the helper tells the launcher before anything else.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HelperReport {
    pub enforcement: Option<Enforcement>,
    /// The pids cgroup the helper entered, for the launcher to remove.
    pub cgroup: Option<std::path::PathBuf>,
    /// The command runs as PID 1 of a PID namespace of its own ([`crate::pidns`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pid_namespace: bool,
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
pub(crate) const USAGE: &str = "[--op read|list|write|edit|search] [--] [COMMAND ARGS...]";

/// The helper's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HelperArgs {
    /// Perform this file operation (request as JSON on stdin) instead of a command.
    pub op: Option<FileOpKind>,
    /// The command to run, with its arguments.
    pub argv: Vec<String>,
}

/// Why the helper's command line was refused (reported as a setup failure).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ArgsError {
    #[error("argument {0:?} is not valid UTF-8")]
    NotUtf8(OsString),
    #[error("--op needs a value")]
    OpWithoutValue,
    #[error("unexpected argument {0:?}")]
    Unexpected(String),
    #[error("--op given twice")]
    OpTwice,
    #[error("unknown --op {0:?}")]
    UnknownOp(String),
}

impl HelperArgs {
    /// Parses `[--op KIND | --op=KIND] [--] [ARGV...]`: the first argument that is not
    /// an option, or everything after `--`, starts the command, whose own arguments
    /// are never read as ours. By hand, so the helper binary carries no clap.
    pub(crate) fn parse(args: impl IntoIterator<Item = OsString>) -> Result<HelperArgs, ArgsError> {
        let mut args = args
            .into_iter()
            .map(|a| a.into_string().map_err(ArgsError::NotUtf8));
        let mut op = None;
        let mut argv = Vec::new();
        while let Some(arg) = args.next() {
            let arg = arg?;
            let kind = match arg.as_str() {
                "--" => break,
                "--op" => args.next().ok_or(ArgsError::OpWithoutValue)??,
                a if a.starts_with("--op=") => a["--op=".len()..].to_owned(),
                a if a.starts_with('-') => return Err(ArgsError::Unexpected(a.to_owned())),
                _ => {
                    argv.push(arg);
                    break;
                }
            };
            if op.is_some() {
                return Err(ArgsError::OpTwice);
            }
            op = Some(
                serde_json::from_value(serde_json::Value::String(kind.clone()))
                    .map_err(|_| ArgsError::UnknownOp(kind))?,
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
        pid_namespace: false,
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
    // Destroy rights on every writable tree are for the daemon's own file operations,
    // whose previous content it kept; never for a command or a read.
    if policy.brokered && !op.is_some_and(FileOpKind::is_brokered) {
        return setup_failed("a brokered spec is only for a write or edit operation".to_owned());
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
    // Before Landlock: entering writes the id maps to /proc/self. File operations
    // start nothing, so they stay where they are.
    let covering = op.is_none() && !policy.cover.is_empty();
    let pid_namespace = op.is_none() && policy.pid_namespace && pidns::enter(covering);
    // A command that may open unix sockets for the bus proxy alone: the real bus hidden
    // first, or it does not run (`cover`).
    if covering {
        if !pid_namespace {
            return setup_failed(
                "cannot hide the session bus from the command: this system refuses user namespaces, which the bus proxy (`[sandbox] bus_talk`) needs".to_owned(),
            );
        }
        if let Err(e) = cover::apply(&policy.cover, &policy.uncover) {
            return setup_failed(e.to_string());
        }
    }
    let enforcement = match restrict_self(&policy, effective_abi(forced)) {
        Ok(e) => e,
        Err(e) => return setup_failed(e.to_string()),
    };
    // After Landlock, before anything runs: no unix socket (the session bus, the
    // keyring) unless the soul grants one, no socket of the network's unless it has one. A kernel without seccomp says so in the
    // report; `require_full` then refuses.
    let sockets = seccomp::Sockets {
        unix: !policy.sockets.is_empty(),
        tcp: policy.network,
        udp: policy.network && policy.udp,
    };
    let unix = match seccomp::install(sockets) {
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
        pid_namespace,
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
        None => supervise(&policy, argv, pid_namespace),
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

/// The command's exit as the launcher sees it through the helper: `(code, signal)`.
pub fn split_status(status: std::process::ExitStatus) -> (Option<i32>, Option<i32>) {
    (status.code(), status.signal())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<HelperArgs, ArgsError> {
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
