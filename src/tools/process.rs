//! `kill_process`: send one signal to one process of the user.
//!
//! This runs in the daemon, not in the sandbox: a signal is not a file access, and the
//! sandbox scopes signals to its own processes. It runs only after the policy
//! (`system_critical`, asked by default). The invariant: it never signals pid 1 (or
//! 0 and negative pids, which mean process groups), familiar itself, any ancestor of
//! familiar (its service manager, session, terminal), nor a process of another user;
//! each refusal tells the model why. Between the check and the `kill(2)` a pid could in
//! principle be reused; the window is microseconds and needs the pid space to wrap.

use futures::FutureExt;
use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use serde_json::{Value, json};

use super::ToolFuture;
use super::util::object_schema;
use super::{Tool, ToolContext, ToolError};
use crate::catalog::{self, ToolInfo};

/// Signals the model may send, by name.
pub const SIGNALS: &[(&str, Signal)] = &[
    ("TERM", Signal::SIGTERM),
    ("INT", Signal::SIGINT),
    ("HUP", Signal::SIGHUP),
    ("KILL", Signal::SIGKILL),
    ("STOP", Signal::SIGSTOP),
    ("CONT", Signal::SIGCONT),
    ("USR1", Signal::SIGUSR1),
    ("USR2", Signal::SIGUSR2),
];

pub struct KillProcess;

/// `TERM`, `SIGTERM`, `sigterm`, `15`: one of [`SIGNALS`].
fn parse_signal(v: Option<&Value>) -> Result<Signal, ToolError> {
    let allowed = || {
        SIGNALS
            .iter()
            .map(|(n, s)| format!("{n} ({})", *s as i32))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let found = match v {
        None | Some(Value::Null) => Some(Signal::SIGTERM),
        Some(Value::Number(n)) => n
            .as_i64()
            .and_then(|n| SIGNALS.iter().find(|(_, s)| *s as i64 == n))
            .map(|(_, s)| *s),
        Some(Value::String(s)) => {
            let s = s.trim().to_ascii_uppercase();
            let name = s.strip_prefix("SIG").unwrap_or(&s);
            SIGNALS
                .iter()
                .find(|(n, sig)| *n == name || name.parse::<i32>().is_ok_and(|x| x == *sig as i32))
                .map(|(_, s)| *s)
        }
        Some(_) => None,
    };
    found.ok_or_else(|| {
        ToolError::model(format!(
            "unsupported `signal` {}; allowed: {}",
            v.map(Value::to_string).unwrap_or_default(),
            allowed()
        ))
    })
}

fn parse_pid(args: &Value) -> Result<i32, ToolError> {
    let v = args
        .get("pid")
        .ok_or_else(|| ToolError::model("missing integer argument `pid`"))?;
    v.as_i64()
        .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
        .and_then(|p| i32::try_from(p).ok())
        .ok_or_else(|| ToolError::model(format!("`pid` must be an integer, got {v}")))
}

/// The parent of `pid` from `/proc/PID/stat`.
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses; the ppid follows the last ')'.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// familiar's own pid and every ancestor of it, up to pid 1.
fn own_lineage() -> Vec<i32> {
    let mut chain = vec![std::process::id().cast_signed()];
    while let Some(&last) = chain.last()
        && last > 1
        && chain.len() < 4096
    {
        match parent_of(last) {
            Some(parent) if parent > 0 && !chain.contains(&parent) => chain.push(parent),
            Some(_) | None => break,
        }
    }
    chain
}

/// The real uid a process runs as, from `/proc/PID/status`.
fn uid_of(pid: i32) -> Result<u32, ToolError> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            ToolError::model(format!(
                "no process {pid} (ESRCH): it has exited or never existed"
            ))
        } else {
            ToolError::model(format!("cannot inspect process {pid}: {e}"))
        }
    })?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|uid| uid.parse().ok())
        .ok_or_else(|| ToolError::model(format!("cannot read the owner of process {pid}")))
}

fn name_of(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// Why `pid` must not be signalled, if it must not.
fn refusal(pid: i32) -> Result<(), ToolError> {
    if pid <= 1 {
        return Err(ToolError::model(format!(
            "refused: pid {pid} is init or a process group, never signalled"
        )));
    }
    let lineage = own_lineage();
    if lineage.first() == Some(&pid) {
        return Err(ToolError::model(format!(
            "refused: pid {pid} is familiar itself; the user can stop a task with `familiar \
             cancel`"
        )));
    }
    if lineage.contains(&pid) {
        return Err(ToolError::model(format!(
            "refused: pid {pid} ({}) is an ancestor of familiar (its service manager or \
             session); signalling it could end the session",
            name_of(pid)
        )));
    }
    let owner = uid_of(pid)?;
    let me = nix::unistd::getuid().as_raw();
    if owner != me {
        return Err(ToolError::model(format!(
            "refused: pid {pid} ({}) belongs to uid {owner}, not to this user (uid {me})",
            name_of(pid)
        )));
    }
    Ok(())
}

impl Tool for KillProcess {
    fn info(&self) -> &'static ToolInfo {
        &catalog::KILL_PROCESS
    }

    fn description(&self) -> &'static str {
        "Send a signal to one of the user's processes (find pids with process_list). `signal` \
         is TERM (default), INT, HUP, KILL, STOP, CONT, USR1 or USR2, by name or number. \
         Refuses pid 1, familiar and its ancestors, and other users' processes. Needs the \
         user's approval."
    }

    fn schema(&self) -> Value {
        object_schema(
            json!({
                "pid": {"type": "integer", "minimum": 2},
                "signal": {
                    "type": "string",
                    "enum": SIGNALS.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
                    "description": "default TERM"
                }
            }),
            &["pid"],
        )
    }

    fn execute(&self, args: Value, _ctx: ToolContext) -> ToolFuture {
        async move {
            let pid = parse_pid(&args)?;
            let signal = parse_signal(args.get("signal"))?;
            refusal(pid)?;
            let name = name_of(pid);
            match nix::sys::signal::kill(Pid::from_raw(pid), signal) {
                Ok(()) => Ok(format!("sent {signal} to {pid} ({name})")),
                Err(Errno::ESRCH) => Err(ToolError::model(format!(
                    "no process {pid} (ESRCH): it exited before the signal"
                ))),
                Err(Errno::EPERM) => Err(ToolError::model(format!(
                    "the kernel refused to signal {pid} ({name}) (EPERM: not permitted)"
                ))),
                Err(e) => Err(ToolError::model(format!("kill {pid}: {e}"))),
            }
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_by_name_or_number_from_the_allowlist_only() {
        assert_eq!(parse_signal(None), Ok(Signal::SIGTERM));
        assert_eq!(parse_signal(Some(&json!("kill"))), Ok(Signal::SIGKILL));
        assert_eq!(parse_signal(Some(&json!("SIGHUP"))), Ok(Signal::SIGHUP));
        assert_eq!(parse_signal(Some(&json!(10))), Ok(Signal::SIGUSR1));
        assert_eq!(parse_signal(Some(&json!("9"))), Ok(Signal::SIGKILL));
        assert!(parse_signal(Some(&json!("SEGV"))).is_err());
        assert!(parse_signal(Some(&json!(11))).is_err());
    }

    #[test]
    fn init_ourselves_and_our_parent_are_refused() {
        for pid in [-1, 0, 1] {
            assert!(refusal(pid).is_err());
        }
        let me = std::process::id().cast_signed();
        let err = refusal(me).unwrap_err();
        assert!(err.to_string().contains("familiar itself"), "{err}");
        let parent = nix::unistd::getppid().as_raw();
        if parent > 1 {
            let err = refusal(parent).unwrap_err();
            assert!(err.to_string().contains("ancestor"), "{err}");
        }
    }
}
