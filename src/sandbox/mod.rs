//! The Landlock sandbox every file-touching or program-running tool goes through: the
//! daemon's side. The helper itself (its spec, Landlock and seccomp code, its `main`)
//! is the `familiar-sandbox` crate, imported by its own paths, so the code that
//! confines hostile programs cannot import the daemon's (tokio, zbus).
//!
//! The daemon never restricts itself. A call runs in the helper binary
//! `familiar-sandbox` (or `familiar sandbox-exec` where only `familiar` is installed;
//! [`launcher`] picks), which restricts itself on its single thread and then runs the
//! command or performs the file operation; whatever a path check upstream missed, the
//! kernel refuses. The invariant: a sandboxed call reaches only
//! what its [`SandboxPolicy`] grants, minus the protected paths, and leaves no process
//! behind.
//!
//! Here, the daemon's side:
//! - [`spec`]: [`SandboxSpec`] (a soul's `[sandbox]`), [`SandboxPolicy`] (one task's
//!   sandbox) and the [`spec::HelperSpec`] it hands the helper.
//! - [`lines`]: lines from a child's pipe, each held to a ceiling.
//! - [`resources`]: a task's `[resources]`: its systemd slice, or rlimits standing in.
//! - [`launcher`]: the async daemon side: spawn, timeout, cancel, kill.
//! - [`capture`]: the command's stdout and stderr, drained into capped buffers.
//! - [`pin`]: the helper binary, opened and checked once, executed from that descriptor.
//! - [`ancestry`]: the daemon's check that a bus caller is not one of a sandbox's.
//! - [`busproxy`]: a task's filtering proxy to the session bus (`[sandbox] bus_talk`).
//! - `sweep`: what a helper killed by a signal left in its session, killed.
//!
//! - [`plan`]: the protected-path carving, done once per soul and workspace and kept
//!   while current; the helper gets its rules (`familiar_sandbox::plan::Plan`).
//!
//! From `familiar-sandbox`, named by its paths: `ruleset` (the plan as a Landlock
//! ruleset), `exec` (the helper's entry: arguments, setup, report), `fileops` and
//! `search` (file operations inside the sandbox), `limits` (rlimits, the pids cgroup),
//! `seccomp` (no unix sockets, no io_uring), `status` (what the kernel enforces,
//! `probe`).

pub mod ancestry;
pub mod busproxy;
mod capture;
pub mod launcher;
pub mod lines;
pub mod pin;
pub mod plan;
pub mod resources;
pub mod spec;
mod sweep;

use std::path::PathBuf;

use familiar_sandbox::seccomp::UnixSockets;
use familiar_sandbox::status::{Enforcement, EnforcementStatus};

pub use launcher::{SandboxLauncher, SandboxOutput, run};
pub use resources::{ResourceReport, Resources, TaskResources};
pub use spec::{SandboxPolicy, SandboxSpec};

/// What the kernel enforces, as the bus reports it (the `Sandbox` property,
/// `task_started`'s `sandbox`): the protocol crate's type, which the helper's crate
/// does not know.
pub fn report(e: &Enforcement) -> familiar_protocol::query::SandboxReport {
    use familiar_protocol::query::{
        EnforcementStatus as Status, SandboxReport, UnixSockets as Unix,
    };
    SandboxReport {
        abi: e.abi,
        status: match e.status {
            EnforcementStatus::Full => Status::Full,
            EnforcementStatus::Partial => Status::Partial,
            EnforcementStatus::None => Status::None,
        },
        missing: e.missing.clone(),
        unix_sockets: match e.unix_sockets {
            UnixSockets::Blocked => Unix::Blocked,
            UnixSockets::Granted => Unix::Granted,
            UnixSockets::Open => Unix::Open,
        },
        sockets: e.sockets.iter().map(|p| p.display().to_string()).collect(),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("creating the task workspace {}: {source}", path.display())]
    Workspace {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("creating the Trash {}: {source}", path.display())]
    Trash {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("finding our own binary to use as sandbox helper: {0}")]
    CurrentExe(std::io::Error),
    #[error("starting the sandbox helper {}: {source}", path.display())]
    Spawn {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("waiting for the sandbox helper: {0}")]
    Wait(std::io::Error),
    #[error("encoding the sandbox spec: {0}")]
    Spec(serde_json::Error),
    #[error("the sandbox could not be set up: {0}")]
    Setup(String),
    #[error(
        "the soul requires a fully enforced sandbox, this kernel gives {} (missing: {})",
        .0.status.as_str(),
        .0.missing.join(", ")
    )]
    NotEnforced(Enforcement),
    #[error("the sandbox helper ended without a report ({status}): {stderr}")]
    Helper { status: String, stderr: String },
    #[error("bad reply from the sandbox helper: {0}")]
    Reply(String),
    #[error("the session bus proxy: {0}")]
    BusProxy(#[from] busproxy::BusProxyError),
    #[error("cancelled")]
    Cancelled,
}
