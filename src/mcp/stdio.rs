//! Starting a stdio MCP server inside the Landlock helper.
//!
//! The helper (`familiar-sandbox -- COMMAND ARGS`, or its fallback `familiar
//! sandbox-exec -- COMMAND ARGS`; see [`SandboxLauncher::current`]) reads its framed spec from
//! stdin, restricts itself, reports on its first stderr line and then runs the server
//! with stdin and stdout left to it: after the spec, stdin and stdout carry the
//! JSON-RPC lines. The helper puts itself in a new session (its own process group),
//! stays the subreaper of everything the server starts and kills all of it when the
//! server exits or when the helper gets SIGTERM.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::McpError;
use crate::sandbox::exec::{HelperReport, REPORT_PREFIX, ReportOutcome, frame};
use crate::sandbox::{Enforcement, SandboxLauncher, SandboxPolicy};

/// A started server: the helper process and the two ends of the JSON-RPC channel.
pub struct StdioServer {
    pub child: Child,
    pub stdout: ChildStdout,
    pub stdin: ChildStdin,
    pub enforcement: Option<Enforcement>,
    /// The last lines the server wrote to stderr, for a start failure's message.
    pub stderr_tail: StderrTail,
}

/// Shared with the task that drains the server's stderr.
pub type StderrTail = Arc<Mutex<VecDeque<String>>>;

/// Lines of stderr kept for error messages.
const TAIL_LINES: usize = 5;

/// The kept stderr lines, as one clause for an error message (empty if none).
pub fn tail_clause(tail: &StderrTail) -> String {
    let lines = tail.lock().map(|t| t.iter().cloned().collect::<Vec<_>>());
    match lines {
        Ok(lines) if !lines.is_empty() => format!(" (its stderr: {})", lines.join(" | ")),
        Ok(_) | Err(_) => String::new(),
    }
}

/// Starts `argv` under `policy`. Returns once the helper has reported that the
/// sandbox is in place (not yet that the server answers).
pub async fn spawn(
    server: &str,
    launcher: &SandboxLauncher,
    policy: &SandboxPolicy,
    argv: &[String],
) -> Result<StdioServer, McpError> {
    let start = |message: String| McpError::Start {
        server: server.to_owned(),
        message,
    };
    let p = policy.clone();
    let spec = tokio::task::spawn_blocking(move || p.helper_spec_json())
        .await
        .map_err(|e| start(format!("making the sandbox plan: {e}")))??;
    let mut cmd = launcher.command();
    cmd.arg("--")
        .args(argv)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Not SIGKILL on drop: the helper must live to kill what the server started
        // (see [`terminate`]).
        .kill_on_drop(false);
    if let Some(abi) = launcher.abi_override {
        cmd.env(crate::sandbox::status::TEST_ABI_ENV, abi.to_string());
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| start(format!("{}: {e}", launcher.helper.display())))?;
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(start("the helper's pipes are missing".to_owned()));
    };
    stdin
        .write_all(&frame(&spec, &[]))
        .await
        .map_err(|e| start(format!("sending the sandbox spec: {e}")))?;
    let mut lines = BufReader::new(stderr).lines();
    let first = lines
        .next_line()
        .await
        .map_err(|e| start(format!("reading the helper's report: {e}")))?
        .unwrap_or_default();
    let report: HelperReport = first
        .strip_prefix(REPORT_PREFIX)
        .and_then(|json| serde_json::from_str(json).ok())
        .ok_or_else(|| start(format!("the sandbox helper said {first:?}")))?;
    match report.outcome {
        ReportOutcome::Running => {}
        ReportOutcome::Refused => {
            return Err(start(
                "the sandbox is not fully enforced and `require` is set".to_owned(),
            ));
        }
        ReportOutcome::SetupFailed(m) => return Err(start(format!("sandbox setup: {m}"))),
    }
    let name = server.to_owned();
    let stderr_tail = StderrTail::default();
    let tail = stderr_tail.clone();
    tokio::spawn(async move {
        // The server's own diagnostics: logged, never read by the model.
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::debug!(server = %name, "stderr: {line}");
            if let Ok(mut t) = tail.lock() {
                if t.len() == TAIL_LINES {
                    t.pop_front();
                }
                t.push_back(line.chars().take(300).collect());
            }
        }
    });
    Ok(StdioServer {
        child,
        stdout,
        stdin,
        enforcement: report.enforcement,
        stderr_tail,
    })
}

/// Sends the helper SIGTERM: it passes it on to the server and everything the server
/// started, SIGKILLs what is left a second later, and exits.
pub fn terminate(child: &Child) {
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        let pid = nix::unistd::Pid::from_raw(pid);
        if let Err(e) = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM) {
            tracing::debug!("SIGTERM to the MCP helper: {e}");
        }
    }
}

/// Asks the helper to stop (SIGTERM: it passes it on and SIGKILLs what is left a
/// second later), then kills it if it is still there after `grace`. Returns how the
/// helper ended (it ends the way the server did), when it could be seen.
pub async fn stop(child: &mut Child, grace: Duration) -> Option<std::process::ExitStatus> {
    terminate(child);
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(Ok(status)) => return Some(status),
        Ok(Err(e)) => tracing::debug!("waiting for the MCP helper: {e}"),
        Err(_) => {}
    }
    if let Err(e) = child.kill().await {
        tracing::debug!("killing the MCP helper: {e}");
    }
    None
}
