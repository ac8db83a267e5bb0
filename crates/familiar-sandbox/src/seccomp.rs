//! The helper's seccomp filter: no unix socket can be opened, so nothing the sandbox
//! runs can reach the session bus, the system bus, the keyring, the user manager,
//! ssh-agent, or a display or audio server.
//!
//! Landlock (up to ABI 8) does not govern `connect()` on a path-name unix socket, and
//! every process of the user may connect to `$XDG_RUNTIME_DIR/bus`: a tool confined to
//! its workspace could still ask the daemon to run an unconfined task, approve its own
//! calls or read the keyring. So the helper installs, after its Landlock ruleset and
//! before it starts anything, a filter that makes `socket(AF_UNIX, …)` fail with
//! `EACCES`: no socket, no connect, path-name or abstract alike. `socketpair()` stays
//! allowed (its two ends reach nothing outside), and so do TCP sockets, which Landlock
//! governs (`network = false`).
//!
//! The filter also refuses `io_uring_setup` (and its siblings): a ring's
//! `IORING_OP_SOCKET` and `IORING_OP_CONNECT` run without passing through the filter's
//! view of `socket(2)`. On x86_64 the same calls by their x32 numbers are refused too;
//! a call made through another architecture's table (a 32-bit program, `int 0x80`) kills
//! the process, since its `socketcall(2)` hides the socket family from a filter.
//!
//! A soul that names unix sockets in `[sandbox] sockets` lifts the `socket(AF_UNIX)`
//! rule for its tools (io_uring stays refused): the kernel cannot yet hold a connect to
//! the named paths only (Landlock's `LANDLOCK_ACCESS_FS_RESOLVE_UNIX`, ABI 9, is not in
//! the landlock crate we build with), so the grant opens every unix socket, which
//! `familiar doctor`, `task_started` and docs/sandbox.md say. The daemon still refuses
//! D-Bus calls from a task's tool processes (the daemon's `sandbox::ancestry`).
//!
//! The invariant: once [`install`] returned `Ok`, the calling thread and everything it
//! starts can never create a unix socket (unless granted); the filter cannot be removed.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use serde::{Deserialize, Serialize};

/// Where the kernel says which seccomp actions it has: present only with
/// `CONFIG_SECCOMP_FILTER`.
const ACTIONS_AVAIL: &str = "/proc/sys/kernel/seccomp/actions_avail";

/// What a refused call returns: the same error as a Landlock refusal, so tools say
/// "Permission denied".
const REFUSED: SeccompAction = SeccompAction::Errno(libc::EACCES as u32);

/// The bit that marks an x32 system call on x86_64 (`__X32_SYSCALL_BIT`).
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: i64 = 0x4000_0000;

/// How unix sockets stand for a sandboxed call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnixSockets {
    /// No unix socket can be opened (the seccomp filter).
    #[default]
    Blocked,
    /// The soul grants sockets (`[sandbox] sockets`): any unix socket can be opened.
    Granted,
    /// The filter could not be installed (no seccomp in this kernel, another
    /// architecture): unix sockets are open.
    Open,
}

impl UnixSockets {
    pub fn as_str(self) -> &'static str {
        match self {
            UnixSockets::Blocked => "blocked",
            UnixSockets::Granted => "granted",
            UnixSockets::Open => "open",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("seccomp filters are not available on {0}")]
    Arch(&'static str),
    #[error("building the seccomp filter: {0}")]
    Build(seccompiler::BackendError),
    #[error("installing the seccomp filter: {0}")]
    Install(seccompiler::Error),
}

/// Whether this kernel can filter system calls (the daemon's view: it never installs a
/// filter on itself).
pub fn available() -> bool {
    std::fs::read_to_string(ACTIONS_AVAIL).is_ok_and(|a| a.split_whitespace().any(|w| w == "errno"))
        && TargetArch::try_from(std::env::consts::ARCH).is_ok()
}

/// The filter: `socket(AF_UNIX, …)` refused unless `allow_unix`, io_uring refused.
pub fn filter(allow_unix: bool) -> Result<BpfProgram, SeccompError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|_| SeccompError::Arch(std::env::consts::ARCH))?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for nr in syscall_numbers(libc::SYS_io_uring_setup)
        .into_iter()
        .chain(syscall_numbers(libc::SYS_io_uring_enter))
        .chain(syscall_numbers(libc::SYS_io_uring_register))
    {
        // No conditions: every call of it matches.
        rules.insert(nr, Vec::new());
    }
    if !allow_unix {
        let unix = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Eq,
            libc::AF_UNIX as u64,
        )
        .map_err(SeccompError::Build)?;
        let rule = SeccompRule::new(vec![unix]).map_err(SeccompError::Build)?;
        for nr in syscall_numbers(libc::SYS_socket) {
            rules.insert(nr, vec![rule.clone()]);
        }
    }
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, REFUSED, arch)
        .map_err(SeccompError::Build)?;
    filter.try_into().map_err(SeccompError::Build)
}

/// Installs [`filter`] on the calling thread (the helper has only one).
/// `PR_SET_NO_NEW_PRIVS` must already be set.
pub fn install(allow_unix: bool) -> Result<UnixSockets, SeccompError> {
    let program = filter(allow_unix)?;
    seccompiler::apply_filter(&program).map_err(SeccompError::Install)?;
    Ok(if allow_unix {
        UnixSockets::Granted
    } else {
        UnixSockets::Blocked
    })
}

/// A system call's number in each table the filter's architecture check lets through:
/// the native one, and on x86_64 its x32 twin.
fn syscall_numbers(native: libc::c_long) -> Vec<i64> {
    #[cfg(target_arch = "x86_64")]
    {
        vec![native, native | X32_SYSCALL_BIT]
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        vec![native]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_builds_with_and_without_unix_sockets() {
        if TargetArch::try_from(std::env::consts::ARCH).is_err() {
            return;
        }
        let blocked = filter(false).unwrap();
        let granted = filter(true).unwrap();
        assert!(
            blocked.len() > granted.len(),
            "the socket rule adds instructions"
        );
    }

    #[test]
    fn the_status_names_are_stable() {
        assert_eq!(
            serde_json::to_value([
                UnixSockets::Blocked,
                UnixSockets::Granted,
                UnixSockets::Open
            ])
            .unwrap(),
            serde_json::json!(["blocked", "granted", "open"])
        );
    }
}
