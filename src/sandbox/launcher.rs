//! The daemon side: start the helper for one call, feed it, capture its output, bound
//! it in time and size, and make sure nothing it started is left running.
//!
//! The invariant: when [`SandboxLauncher::run`] returns (or its future is dropped),
//! the helper is dead and reaped, and so is everything the command started: the helper
//! reaps its subtree itself, the launcher SIGTERMs its whole session/process group on
//! timeout, cancel or runaway output and SIGKILLs it [`KILL_GRACE`] later, and empties
//! the helper's pids cgroup when there is one. The output readers keep draining the
//! pipes past the cap, so the command never blocks on a full pipe.

use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use familiar_sandbox::exec::{ReportOutcome, TERM_GRACE_SECS, frame};
use familiar_sandbox::fileops::{FileOp, FileReply};
use familiar_sandbox::limits;
use familiar_sandbox::status::{Enforcement, TEST_ABI_ENV};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};
use tokio::sync::{Notify, Semaphore, SemaphorePermit};
use tokio_util::sync::CancellationToken;

use super::capture::Streams;
use super::pin::PinnedHelper;
use super::{SandboxError, SandboxPolicy};

/// From SIGTERM to SIGKILL of the helper's group; longer than the helper's own grace
/// so the helper gets to kill and reap what escaped its group first.
pub const KILL_GRACE: Duration = Duration::from_secs(TERM_GRACE_SECS as u64 + 2);

/// Helpers starting up at once, across the whole process: a start (exec of our binary,
/// the ruleset, rlimits) is a burst of CPU, and fifty tasks' parallel reads would
/// otherwise start a hundred at once, starving the daemon's own threads (its D-Bus
/// answers took 400 ms under that load) and the user's desktop. A permit is held from
/// spawn until the helper reports; a long-running command holds none.
fn start_permits() -> &'static Semaphore {
    static PERMITS: OnceLock<Semaphore> = OnceLock::new();
    PERMITS.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
        Semaphore::new(cpus)
    })
}

/// What one sandboxed command did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SandboxOutput {
    pub exit_code: Option<i32>,
    /// The signal that ended the command (then `exit_code` is `None`).
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// Some output was dropped (see [`super::Limits::output_cap_bytes`]).
    pub truncated: bool,
    pub timed_out: bool,
    pub enforcement: Enforcement,
}

/// The helper binary, looked for beside the running `familiar`.
pub const HELPER_NAME: &str = "familiar-sandbox";
/// Set in a helper's own environment: who started it (`task t-… of soul S`, `mcp server
/// NAME`), for the daemon's caller check ([`super::ancestry`]). The command never sees
/// it: its environment is the spec's.
pub const OWNER_ENV: &str = "FAMILIAR_SANDBOX_OWNER";
/// `familiar`'s own entry to the helper, for when [`HELPER_NAME`] is not installed.
pub const HELPER_SUBCOMMAND: &str = "sandbox-exec";

/// familiar's own binaries as this process found them (symlinks resolved): the
/// running one and its helper. Tools may never write them (see
/// [`super::SandboxPolicy::new`]), whatever trees a soul may write.
pub fn own_binaries() -> Vec<PathBuf> {
    static OWN: OnceLock<Vec<PathBuf>> = OnceLock::new();
    OWN.get_or_init(|| {
        let mut own: Vec<PathBuf> = std::env::current_exe().into_iter().collect();
        if let Ok(l) = SandboxLauncher::current() {
            own.push(l.helper);
        }
        let mut own: Vec<PathBuf> = own
            .into_iter()
            .map(|p| p.canonicalize().unwrap_or(p))
            .collect();
        own.sort();
        own.dedup();
        own
    })
    .clone()
}

/// Starts sandboxed calls through a given helper binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxLauncher {
    /// `familiar-sandbox` beside the running binary, else the running `familiar`
    /// itself (see [`SandboxLauncher::current`]); tests pass
    /// `CARGO_BIN_EXE_familiar-sandbox`.
    pub helper: PathBuf,
    /// `helper` is `familiar`, run as `familiar sandbox-exec`: same arguments and
    /// protocol, but an exec of the whole 16 MB binary per call (BENCHMARKS.md).
    pub subcommand: bool,
    /// Makes the helper act as if the kernel had this Landlock ABI (tests only; it can
    /// only lower enforcement, and the reported status says so).
    #[doc(hidden)]
    pub abi_override: Option<u8>,
    /// `helper`, opened and checked when the launcher was made.
    pub pinned: PinnedHelper,
}

/// Runs `argv` under `policy` with the running binary as helper.
pub async fn run(
    policy: &SandboxPolicy,
    argv: &[String],
    stdin: Option<Vec<u8>>,
    cancel: &CancellationToken,
) -> Result<SandboxOutput, SandboxError> {
    SandboxLauncher::current()?
        .run(policy, argv, stdin, cancel)
        .await
}

impl SandboxLauncher {
    /// The `familiar-sandbox` binary at `helper`.
    pub fn new(helper: impl Into<PathBuf>) -> SandboxLauncher {
        let helper = helper.into();
        SandboxLauncher {
            pinned: PinnedHelper::open(&helper),
            helper,
            subcommand: false,
            abi_override: None,
        }
    }

    /// `familiar sandbox-exec`, with `familiar` at `exe`.
    pub fn subcommand(exe: impl Into<PathBuf>) -> SandboxLauncher {
        SandboxLauncher {
            subcommand: true,
            ..SandboxLauncher::new(exe)
        }
    }

    /// The helper for the running binary ([`SandboxLauncher::beside`] it), looked up
    /// once per process.
    pub fn current() -> Result<SandboxLauncher, SandboxError> {
        static CURRENT: OnceLock<SandboxLauncher> = OnceLock::new();
        if let Some(launcher) = CURRENT.get() {
            return Ok(launcher.clone());
        }
        let exe = std::env::current_exe().map_err(SandboxError::CurrentExe)?;
        Ok(CURRENT
            .get_or_init(|| SandboxLauncher::beside(&exe))
            .clone())
    }

    /// `familiar-sandbox` in the directory of `exe` (the `familiar` binary) when it is
    /// an executable file there, else `exe sandbox-exec` (someone copied only
    /// `familiar`), which works the same and costs more per call.
    pub fn beside(exe: &Path) -> SandboxLauncher {
        let helper = exe.with_file_name(HELPER_NAME);
        let executable = helper.metadata().is_ok_and(|m| m.is_file())
            && nix::unistd::access(&helper, nix::unistd::AccessFlags::X_OK).is_ok();
        if executable {
            return SandboxLauncher::new(helper);
        }
        tracing::info!(
            "no {} beside {}: sandboxed calls run as `{} {HELPER_SUBCOMMAND}`, slower (install both binaries, docs/sandbox.md)",
            HELPER_NAME,
            exe.display(),
            exe.display()
        );
        SandboxLauncher::subcommand(exe)
    }

    /// The helper's command line, up to its own arguments, and its own environment:
    /// nothing of ours but who started it (for the daemon's caller check,
    /// [`super::ancestry`]) and, in tests, the Landlock ABI to act as if.
    pub(crate) fn command(&self, policy: &SandboxPolicy) -> Result<Command, SandboxError> {
        let file = self
            .pinned
            .0
            .as_ref()
            .map_err(|problem| SandboxError::Helper {
                status: format!("not started: {}", self.helper.display()),
                stderr: problem.to_string(),
            })?;
        // The descriptor is close-on-exec: the kernel opens the file through the link
        // before it closes the descriptors, so the helper never holds it.
        let mut cmd = Command::new(format!("/proc/self/fd/{}", file.as_raw_fd()));
        if self.subcommand {
            cmd.arg0("familiar").arg(HELPER_SUBCOMMAND);
        } else {
            cmd.arg0(HELPER_NAME);
        }
        cmd.env_clear();
        cmd.envs(policy.helper_env.iter().map(|(k, v)| (k, v)));
        if let Some(owner) = &policy.owner {
            cmd.env(OWNER_ENV, owner);
        }
        if let Some(abi) = self.abi_override {
            cmd.env(TEST_ABI_ENV, abi.to_string());
        }
        Ok(cmd)
    }

    /// `policy`, with familiar's own binaries and this launcher's helper among the
    /// paths no tool may write (a tool that replaced `familiar-sandbox` in
    /// `~/.local/bin` ran the next call unconfined).
    pub(crate) fn guarding(&self, policy: &SandboxPolicy) -> SandboxPolicy {
        let mut p = policy.clone();
        let helper = self
            .helper
            .canonicalize()
            .unwrap_or_else(|_| self.helper.clone());
        for path in own_binaries().into_iter().chain([helper]) {
            if !p.write_protected.contains(&path) {
                p.write_protected.push(path);
            }
        }
        p
    }

    /// Runs `argv` in the sandbox `policy` describes. Errors when the helper could not
    /// set the sandbox up, refuses (`require_full`), or `cancel` fired; a command that
    /// fails is an `Ok` with its exit code.
    pub async fn run(
        &self,
        policy: &SandboxPolicy,
        argv: &[String],
        stdin: Option<Vec<u8>>,
        cancel: &CancellationToken,
    ) -> Result<SandboxOutput, SandboxError> {
        // File operations are the helper's own code: only a command may use the bus.
        if let Some(bus) = &policy.bus {
            tokio::select! {
                ready = bus.ensure() => ready?,
                () = cancel.cancelled() => return Err(SandboxError::Cancelled),
            }
        }
        let mut args = vec!["--".to_owned()];
        args.extend(argv.iter().cloned());
        self.execute(policy, args, stdin, cancel).await
    }

    /// Performs a file operation inside the sandbox `policy` describes.
    pub async fn file_op(
        &self,
        policy: &SandboxPolicy,
        op: &FileOp,
        cancel: &CancellationToken,
    ) -> Result<(FileReply, Enforcement), SandboxError> {
        let kind = serde_json::to_value(op.kind()).map_err(SandboxError::Spec)?;
        let kind = kind.as_str().unwrap_or_default().to_owned();
        let request = serde_json::to_vec(op).map_err(SandboxError::Spec)?;
        let brokered;
        let policy = if op.kind().is_brokered() {
            let mut p = policy.brokered();
            // The reply carries the replaced content, base64 (4 bytes per 3), whole: cut
            // at the output cap it would be no reply at all.
            if let Some(keep) = op.keep() {
                let base64 = usize::try_from((keep.saturating_add(2) / 3).saturating_mul(4))
                    .unwrap_or(usize::MAX);
                p.limits.output_cap_bytes = p
                    .limits
                    .output_cap_bytes
                    .max(base64.saturating_add(64 * 1024));
            }
            brokered = p;
            &brokered
        } else {
            policy
        };
        let out = self
            .execute(policy, vec!["--op".to_owned(), kind], Some(request), cancel)
            .await?;
        let reply = serde_json::from_str(out.stdout.trim()).map_err(|e| {
            let head: String = out.stdout.chars().take(300).collect();
            SandboxError::Reply(format!("{e}: {head:?}… {:?}", out.stderr))
        })?;
        Ok((reply, out.enforcement))
    }

    async fn execute(
        &self,
        policy: &SandboxPolicy,
        helper_args: Vec<String>,
        stdin: Option<Vec<u8>>,
        cancel: &CancellationToken,
    ) -> Result<SandboxOutput, SandboxError> {
        let (mut child, permit) = self.start(policy, helper_args, stdin, cancel).await?;
        let pid = child.id().and_then(|p| i32::try_from(p).ok());
        let overflow = Arc::new(Notify::new());
        let mut streams = Streams::start(
            &mut child,
            policy.limits.output_cap_bytes,
            &overflow,
            permit,
        );

        let mut timed_out = false;
        let mut cancelled = false;
        let timeout = tokio::time::sleep(policy.limits.timeout);
        let status = tokio::select! {
            status = child.wait() => status,
            () = timeout => {
                timed_out = true;
                terminate(&mut child, pid).await
            }
            () = cancel.cancelled() => {
                cancelled = true;
                terminate(&mut child, pid).await
            }
            () = overflow.notified() => terminate(&mut child, pid).await,
        }
        .map_err(SandboxError::Wait)?;
        if let (Some(helper), Some(signal)) = (pid, status.signal()) {
            // Killed before it could reap: kill what it started (see `sweep`).
            match tokio::task::spawn_blocking(move || super::sweep::kill_session(helper)).await {
                Ok(0) => {}
                Ok(n) => tracing::warn!(
                    "the sandbox helper {helper} died of signal {signal}; killed the {n} process(es) it left"
                ),
                Err(e) => tracing::warn!("sweeping after the sandbox helper: {e}"),
            }
        }

        let report = streams.report().await;
        if let Some(cgroup) = report.as_ref().and_then(|r| r.cgroup.clone()) {
            remove_cgroup(cgroup).await;
        }
        let (stdout, stderr, truncated) = streams.finish().await;

        let Some(report) = report else {
            return Err(SandboxError::Helper {
                status: status.to_string(),
                stderr,
            });
        };
        let enforcement = report
            .enforcement
            .unwrap_or_else(|| Enforcement::for_abi(None));
        match report.outcome {
            ReportOutcome::Running => {}
            ReportOutcome::Refused => return Err(SandboxError::NotEnforced(enforcement)),
            ReportOutcome::SetupFailed(msg) => return Err(SandboxError::Setup(msg)),
        }
        if cancelled {
            return Err(SandboxError::Cancelled);
        }
        let (exit_code, signal) = familiar_sandbox::exec::split_status(status);
        Ok(SandboxOutput {
            exit_code,
            signal,
            stdout,
            stderr,
            truncated,
            timed_out,
            enforcement,
        })
    }

    /// Starts the helper with its spec and `stdin` written in the background, placed in
    /// the task's slice; with the start permit it holds until it reports.
    async fn start(
        &self,
        policy: &SandboxPolicy,
        helper_args: Vec<String>,
        stdin: Option<Vec<u8>>,
        cancel: &CancellationToken,
    ) -> Result<(Child, Option<SemaphorePermit<'static>>), SandboxError> {
        // Checking (or remaking) the plan touches the filesystem: off the runtime.
        let p = self.guarding(policy);
        let spec = tokio::task::spawn_blocking(move || p.helper_spec_json())
            .await
            .map_err(|e| SandboxError::Setup(format!("making the sandbox plan: {e}")))??;
        let input = frame(&spec, stdin.as_deref().unwrap_or_default());
        let permit = tokio::select! {
            permit = start_permits().acquire() => permit.ok(),
            () = cancel.cancelled() => return Err(SandboxError::Cancelled),
        };
        let mut cmd = self.command(policy)?;
        cmd.args(helper_args)
            // The spec comes first on stdin; then the command's input, or end of file.
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|source| SandboxError::Spawn {
            path: self.helper.clone(),
            source,
        })?;
        // The helper waits for its spec on stdin: in the task's slice before it gets it.
        if let (Some(resources), Some(raw)) = (&policy.resources, child.id()) {
            resources.place(raw).await?;
        }

        if let Some(mut pipe) = child.stdin.take() {
            tokio::spawn(async move {
                // The command may exit without reading its input: EPIPE is its choice.
                if let Err(e) = pipe.write_all(&input).await {
                    tracing::debug!("sandbox stdin: {e}");
                }
            });
        }
        Ok((child, permit))
    }
}

/// SIGTERM to the helper's group, SIGKILL after [`KILL_GRACE`], then reap.
async fn terminate(
    child: &mut Child,
    pid: Option<i32>,
) -> std::io::Result<std::process::ExitStatus> {
    signal_group(child, pid, Signal::SIGTERM);
    match tokio::time::timeout(KILL_GRACE, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            signal_group(child, pid, Signal::SIGKILL);
            child.wait().await
        }
    }
}

fn signal_group(child: &mut Child, pid: Option<i32>, signal: Signal) {
    let Some(p) = pid.map(Pid::from_raw) else {
        // Already reaped: nothing of it to signal.
        return;
    };
    // Before its setsid() the helper leads no group yet: signal it alone then.
    if killpg(p, signal).is_err()
        && let Err(e) = nix::sys::signal::kill(p, signal)
    {
        tracing::debug!("signalling the sandbox helper {p}: {e}");
        if let Err(e) = child.start_kill() {
            tracing::debug!("killing the sandbox helper: {e}");
        }
    }
}

async fn remove_cgroup(cgroup: PathBuf) {
    if let Err(e) = tokio::task::spawn_blocking(move || limits::remove_cgroup(&cgroup)).await {
        tracing::warn!("removing the sandbox cgroup: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn the_helper_binary_beside_familiar_is_preferred() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("familiar");
        file(&exe, 0o755);
        file(&dir.path().join(HELPER_NAME), 0o755);
        let launcher = SandboxLauncher::beside(&exe);
        assert_eq!(launcher, SandboxLauncher::new(dir.path().join(HELPER_NAME)));
        let cmd = launcher.command(&policy(dir.path())).unwrap();
        assert_eq!(cmd.as_std().get_args().count(), 0);
    }

    #[test]
    fn without_the_helper_binary_familiar_runs_its_own_subcommand() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("familiar");
        file(&exe, 0o755);
        let launcher = SandboxLauncher::beside(&exe);
        assert_eq!(launcher, SandboxLauncher::subcommand(&exe));
        let cmd = launcher.command(&policy(dir.path())).unwrap();
        // Executed through the descriptor opened when the launcher was made.
        assert!(
            cmd.as_std()
                .get_program()
                .to_string_lossy()
                .starts_with("/proc/self/fd/")
        );
        assert_eq!(
            cmd.as_std().get_args().collect::<Vec<_>>(),
            [HELPER_SUBCOMMAND]
        );
    }

    fn policy(dir: &Path) -> SandboxPolicy {
        let spec = crate::sandbox::SandboxSpec {
            read: vec![],
            write: vec![],
            network: false,
            udp: false,
            require: false,
            startup: Vec::new(),
            destroy: Vec::new(),
            sockets: vec![],
            bus_talk: vec![],
        };
        SandboxPolicy::new(&spec, &[], &dir.join("ws"), dir).unwrap()
    }

    #[test]
    fn a_helper_writable_by_others_or_owned_by_another_user_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let helper = dir.path().join(HELPER_NAME);
        file(&helper, 0o775);
        let launcher = SandboxLauncher::new(&helper);
        let problem = launcher.pinned.problem().unwrap();
        assert!(problem.contains("chmod go-w"), "{problem}");
        let err = launcher
            .command(&policy(dir.path()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("writable by its group or others"), "{err}");
        file(&helper, 0o755);
        assert_eq!(SandboxLauncher::new(&helper).pinned.problem(), None);
    }

    #[test]
    fn a_helper_that_cannot_be_executed_is_passed_over() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("familiar");
        file(&exe, 0o755);
        file(&dir.path().join(HELPER_NAME), 0o644);
        assert_eq!(
            SandboxLauncher::beside(&exe),
            SandboxLauncher::subcommand(&exe)
        );
        std::fs::remove_file(dir.path().join(HELPER_NAME)).unwrap();
        std::fs::create_dir(dir.path().join(HELPER_NAME)).unwrap();
        assert_eq!(
            SandboxLauncher::beside(&exe),
            SandboxLauncher::subcommand(&exe)
        );
    }
}
