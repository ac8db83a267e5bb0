//! The sandbox helper, `familiar-sandbox`: what runs between the daemon and a hostile
//! program. The daemon hands it a [`spec::HelperSpec`] (the Landlock rules of a
//! [`plan::Plan`], limits, environment) on stdin; the helper restricts itself on its
//! single thread (`ruleset`, [`seccomp`], [`limits`]), then runs the command as its
//! child and kills and reaps everything it left ([`exec`], `supervise`), or performs a
//! file operation itself ([`fileops`], [`search`]).
//!
//! The invariant this crate exists for: the code that confines hostile programs is
//! small enough to audit and cannot reach the daemon's. It depends on neither tokio nor
//! zbus (Cargo.toml; `.ci/run` checks `cargo tree -p familiar-sandbox`), and nothing
//! here imports the product crate `familiar`, whose daemon side (`familiar::sandbox`:
//! the plan computation and its cache, launcher, capture, resources) names these
//! modules by their paths.
//!
//! - [`spec`]: what the helper gets for one call.
//! - [`plan`]: the rules of one sandbox, as the daemon worked them out (its
//!   `sandbox::plan` carves the protected paths once per soul and workspace).
//! - `ruleset`: the plan as a Landlock ruleset.
//! - [`seccomp`]: the helper's filter (no unix sockets unless granted, no io_uring).
//! - [`exec`]: the helper's entry point, its arguments and its report ([`main`]).
//! - `supervise`: the command run as the helper's child; all it leaves is killed.
//! - [`fileops`], [`search`], `trash`: file operations performed by the restricted helper.
//! - [`limits`]: rlimits and the pids cgroup.
//! - `pidns`: the command as PID 1 of a PID namespace of its own.
//! - `cover`: paths hidden from the command in a mount namespace of its own.
//! - [`status`]: what the running kernel enforces ([`status::probe`]).
//! - [`glob`]: the shell's pathname matching, shared with the daemon's path policy.
//!
//! Public is what the helper's two callers need (the `familiar-sandbox` binary's
//! [`main`], the daemon's launcher, tools and status report): the spec, the plan's rules,
//! the report, the file operations' requests and replies, the kernel probe. How the
//! helper confines itself (`ruleset`, `cover`, `pidns`, `supervise`, `trash`, the
//! filters and limits it applies) is the crate's own.

mod cover;
pub mod exec;
pub mod fileops;
pub mod glob;
pub mod limits;
mod pidns;
pub mod plan;
mod ruleset;
pub mod search;
pub mod seccomp;
pub mod spec;
pub mod status;
mod supervise;
mod trash;

pub use exec::main;

/// A file operation the kernel or the operation itself refused, as the helper reports
/// it: `errno` when it was the kernel. Shared by [`fileops`] and [`search`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OpFailure {
    pub errno: Option<i32>,
    pub message: String,
}

impl OpFailure {
    pub(crate) fn from_io(path: &std::path::Path, e: &std::io::Error) -> OpFailure {
        OpFailure {
            errno: e.raw_os_error(),
            message: format!("{}: {e}", path.display()),
        }
    }
}
