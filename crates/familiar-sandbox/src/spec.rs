//! What the daemon hands the helper for one call ([`HelperSpec`]: the ready rules of
//! the [`Plan`], the [`Limits`], the environment and the working directory), as JSON on
//! its stdin. The daemon builds it from a task's `SandboxPolicy` (the product crate's
//! `sandbox::spec`); nothing here is trusted by the kernel until the helper turns it
//! into a Landlock ruleset (`ruleset`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::plan::Plan;

pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Per stream (stdout, stderr): the head and the tail are kept, half each.
pub(crate) const DEFAULT_OUTPUT_CAP_BYTES: usize = 128 * 1024;
/// Processes (threads count too) the command may have at once.
pub(crate) const DEFAULT_MAX_PROCESSES: u64 = 256;
pub(crate) const DEFAULT_MAX_FILE_SIZE: u64 = 1024 * 1024 * 1024;
pub(crate) const DEFAULT_CPU_SECONDS: u64 = 120;

/// Resource bounds of one sandboxed call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Wall clock, enforced by the launcher (SIGTERM, then SIGKILL to the group).
    #[serde(with = "millis")]
    pub timeout: Duration,
    /// Per stream; past it the middle is dropped, far past it the command is killed.
    pub output_cap_bytes: usize,
    /// A pids cgroup where one can be made, else `RLIMIT_NPROC` on top of the user's
    /// current count (root ignores `RLIMIT_NPROC`, hence the cgroup).
    pub max_processes: u64,
    /// `RLIMIT_FSIZE`, bytes.
    pub max_file_size: u64,
    /// `RLIMIT_CPU`, seconds of CPU time per process.
    pub cpu_seconds: u64,
    /// `RLIMIT_DATA`, bytes per process: a soul's `memory_max` where no systemd slice
    /// bounds the task's memory (the daemon's `sandbox::resources`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_data: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: DEFAULT_TIMEOUT,
            output_cap_bytes: DEFAULT_OUTPUT_CAP_BYTES,
            max_processes: DEFAULT_MAX_PROCESSES,
            max_file_size: DEFAULT_MAX_FILE_SIZE,
            cpu_seconds: DEFAULT_CPU_SECONDS,
            max_data: None,
        }
    }
}

/// Everything the helper needs to restrict itself and run one command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HelperSpec {
    pub plan: Plan,
    pub network: bool,
    /// Internet datagram sockets as well as TCP ([`crate::seccomp::Sockets::udp`]).
    #[serde(default)]
    pub udp: bool,
    /// Run the command as PID 1 of a PID namespace of its own ([`crate::pidns`]).
    #[serde(default = "yes")]
    pub pid_namespace: bool,
    pub scope_signals: bool,
    pub require_full: bool,
    #[serde(default)]
    pub sockets: Vec<PathBuf>,
    /// Hidden from the command ([`crate::cover`]): each an empty read-only tmpfs (a
    /// file: `/dev/null`) in a mount namespace of its own, but the `uncover` entries
    /// beneath. Set when the session bus is proxied; the call fails when it cannot be
    /// done.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cover: Vec<PathBuf>,
    /// Under a `cover` path and still seen: bound back in at the same place.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uncover: Vec<PathBuf>,
    pub limits: Limits,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// A brokered file operation (`write`, `edit`): every writable rule may remove
    /// and truncate as well, since the daemon kept what the operation replaces. Never
    /// with a command: the helper refuses one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub brokered: bool,
}

/// [`HelperSpec`] borrowed, to encode without copying the plan.
#[derive(Serialize)]
pub struct HelperSpecRef<'a> {
    pub plan: &'a Plan,
    pub network: bool,
    pub udp: bool,
    pub pid_namespace: bool,
    pub scope_signals: bool,
    pub require_full: bool,
    pub sockets: &'a [PathBuf],
    pub cover: &'a [PathBuf],
    pub uncover: &'a [PathBuf],
    pub limits: &'a Limits,
    pub env: &'a [(String, String)],
    pub cwd: &'a Path,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub brokered: bool,
}

fn yes() -> bool {
    true
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}
