//! The helper's seccomp filter: no unix socket can be opened, so nothing the sandbox
//! runs can reach the session bus, the system bus, the keyring, the user manager,
//! ssh-agent, or a display or audio server.
//!
//! Landlock (up to ABI 8) does not govern `connect()` on a path-name unix socket, and
//! every process of the user may connect to `$XDG_RUNTIME_DIR/bus`: a tool confined to
//! its workspace could still ask the daemon to run an unconfined task, approve its own
//! calls or read the keyring. So the helper installs, after its Landlock ruleset and
//! before it starts anything, a filter that makes `socket(AF_UNIX, …)` fail with
//! `EACCES`: no socket, no connect, path-name or abstract alike. A datagram
//! `socketpair()` is refused too (`sendto()` on either end with an address reaches any
//! path-named datagram socket: journald, `/dev/log`); stream and seqpacket pairs reach
//! nothing outside and stay allowed.
//!
//! The network is the same filter's: without `network` no `socket()` of any family but
//! unix succeeds (no UDP, which Landlock does not govern, no netlink, vsock or packet
//! sockets); with `network` only internet stream sockets, whose TCP ports Landlock
//! holds, and datagram ones only with `udp`. Raw and packet sockets never.
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
pub(crate) enum SeccompError {
    #[error("seccomp filters are not available on {0}")]
    Arch(&'static str),
    #[error("building the seccomp filter: {0}")]
    Build(seccompiler::BackendError),
    #[error("installing the seccomp filter: {0}")]
    Install(seccompiler::Error),
}

/// Whether this kernel can filter system calls (the daemon's view: it never installs a
/// filter on itself).
pub(crate) fn available() -> bool {
    std::fs::read_to_string(ACTIONS_AVAIL).is_ok_and(|a| a.split_whitespace().any(|w| w == "errno"))
        && TargetArch::try_from(std::env::consts::ARCH).is_ok()
}

/// Which sockets a sandboxed call may create: what the filter lets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sockets {
    /// `[sandbox] sockets` granted something: `socket(AF_UNIX)` and datagram pairs.
    pub unix: bool,
    /// `network = true`: `AF_INET`/`AF_INET6` stream sockets (Landlock then decides
    /// which TCP ports).
    pub tcp: bool,
    /// `udp = true` as well: `AF_INET`/`AF_INET6` datagram sockets (DNS, QUIC), which
    /// Landlock does not govern.
    pub udp: bool,
}

/// Socket types by their low bits (`SOCK_NONBLOCK`/`SOCK_CLOEXEC` sit above them).
const SOCK_TYPE_MASK: u64 = 0xf;

/// Internet socket types never allowed: raw and packet sockets, and the datagram-like
/// ones that are not UDP. `SOCK_DGRAM` joins them without `udp`.
const INET_REFUSED_TYPES: &[i32] = &[
    libc::SOCK_RAW,
    libc::SOCK_RDM,
    libc::SOCK_SEQPACKET,
    libc::SOCK_DCCP,
    // SOCK_PACKET (10), the obsolete packet type; libc marks its constant deprecated.
    10,
];

/// The filter: io_uring refused; `socket()` refused for every family but those
/// [`Sockets`] allows (no network: no `AF_INET`, `AF_INET6`, `AF_NETLINK`, `AF_VSOCK`,
/// `AF_PACKET`, nor any other; no unix grant: no `AF_UNIX`); datagram `socketpair()`s
/// refused without a unix grant, since `sendto()` on one reaches any path-named
/// datagram socket (journald, `/dev/log`).
pub(crate) fn filter(sockets: Sockets) -> Result<BpfProgram, SeccompError> {
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
    let socket_rules = socket_rules(sockets)?;
    for nr in syscall_numbers(libc::SYS_socket) {
        rules.insert(nr, socket_rules.clone());
    }
    if !sockets.unix {
        let dgram = vec![rule(&[(
            1,
            SeccompCmpOp::MaskedEq(SOCK_TYPE_MASK),
            libc::SOCK_DGRAM,
        )])?];
        for nr in syscall_numbers(libc::SYS_socketpair) {
            rules.insert(nr, dgram.clone());
        }
    }
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, REFUSED, arch)
        .map_err(SeccompError::Build)?;
    filter.try_into().map_err(SeccompError::Build)
}

/// The `socket()` calls refused, each rule one refused shape (any rule matching
/// refuses the call).
fn socket_rules(sockets: Sockets) -> Result<Vec<SeccompRule>, SeccompError> {
    use SeccompCmpOp::{Eq, MaskedEq, Ne};
    let (unix, inet, inet6) = (libc::AF_UNIX, libc::AF_INET, libc::AF_INET6);
    let mut refused = Vec::new();
    // Every family but the three this filter reasons about.
    refused.push(rule(&[(0, Ne, unix), (0, Ne, inet), (0, Ne, inet6)])?);
    if !sockets.unix {
        refused.push(rule(&[(0, Eq, unix)])?);
    }
    for family in [inet, inet6] {
        if !sockets.tcp {
            refused.push(rule(&[(0, Eq, family)])?);
            continue;
        }
        let mut types = INET_REFUSED_TYPES.to_vec();
        if !sockets.udp {
            types.push(libc::SOCK_DGRAM);
        }
        for ty in types {
            refused.push(rule(&[(0, Eq, family), (1, MaskedEq(SOCK_TYPE_MASK), ty)])?);
        }
    }
    Ok(refused)
}

/// A rule of conditions on 32-bit arguments, all of which must hold.
fn rule(conditions: &[(u8, SeccompCmpOp, i32)]) -> Result<SeccompRule, SeccompError> {
    let conditions = conditions
        .iter()
        .map(|(arg, op, value)| {
            SeccompCondition::new(*arg, SeccompCmpArgLen::Dword, op.clone(), *value as u64)
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(SeccompError::Build)?;
    SeccompRule::new(conditions).map_err(SeccompError::Build)
}

/// Installs [`filter`] on the calling thread (the helper has only one).
/// `PR_SET_NO_NEW_PRIVS` must already be set.
pub(crate) fn install(sockets: Sockets) -> Result<UnixSockets, SeccompError> {
    let program = filter(sockets)?;
    seccompiler::apply_filter(&program).map_err(SeccompError::Install)?;
    Ok(if sockets.unix {
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
        let none = Sockets {
            unix: false,
            tcp: false,
            udp: false,
        };
        let blocked = filter(none).unwrap();
        let granted = filter(Sockets { unix: true, ..none }).unwrap();
        assert!(
            blocked.len() > granted.len(),
            "the unix rules add instructions"
        );
        let tcp = filter(Sockets { tcp: true, ..none }).unwrap();
        let udp = filter(Sockets {
            tcp: true,
            udp: true,
            ..none
        })
        .unwrap();
        assert!(
            tcp.len() > udp.len(),
            "refusing datagrams adds instructions"
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
