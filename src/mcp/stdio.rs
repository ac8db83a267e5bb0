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

use familiar_sandbox::exec::{HelperReport, REPORT_PREFIX, ReportOutcome, frame};
use familiar_sandbox::status::Enforcement;
use tokio::io::{AsyncWriteExt, DuplexStream};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::McpError;
use crate::sandbox::lines::BoundedLines;
use crate::sandbox::{SandboxLauncher, SandboxPolicy};

/// A started server: the helper process and the two ends of the JSON-RPC channel.
pub struct StdioServer {
    pub child: Child,
    /// The server's stdout, passed on message by message (see [`guard_stdout`]).
    pub stdout: DuplexStream,
    pub stdin: ChildStdin,
    pub enforcement: Option<Enforcement>,
    /// The last lines the server wrote to stderr, for a start failure's message.
    pub stderr_tail: StderrTail,
    /// The task filling `stderr_tail`: done once the server's stderr is closed, so a
    /// start failure's message waits for it to hold the server's last words.
    pub stderr_reader: tokio::task::JoinHandle<()>,
    /// Why the server's stdout was cut off, once it broke the protocol.
    pub stdout_fault: StdoutFault,
}

/// Set once, by the task that guards the server's stdout.
pub type StdoutFault = Arc<Mutex<Option<String>>>;

/// The longest stderr line kept (longer ones are cut, the rest counted and dropped).
pub const MAX_STDERR_LINE: usize = 4096;
/// The longest JSON-RPC message taken from a server's stdout: a longer one ends the
/// connection (rmcp's own ceiling is the same).
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;
/// What the guard may have written that rmcp has not read yet.
const PIPE_BYTES: usize = 64 << 10;

/// Shared with the task that drains the server's stderr.
pub type StderrTail = Arc<Mutex<VecDeque<String>>>;

/// Lines of stderr kept for error messages.
const TAIL_LINES: usize = 5;
/// Characters of each kept line.
const TAIL_LINE_CHARS: usize = 300;

/// Why the connection broke, when the server broke the protocol on stdout (empty if
/// it did not), as one clause for an error message.
pub fn fault_clause(fault: &StdoutFault) -> String {
    match fault.lock().map(|f| f.clone()) {
        Ok(Some(why)) => format!(" ({why})"),
        Ok(None) | Err(_) => String::new(),
    }
}

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
    // PID 1 of its own namespace, like a tool's command: the helper stops a server
    // without a SIGTERM handler as that signal's default action would.
    let p = launcher.guarding(policy);
    let spec = tokio::task::spawn_blocking(move || p.helper_spec_json())
        .await
        .map_err(|e| start(format!("making the sandbox plan: {e}")))??;
    let mut cmd = launcher.command(policy).map_err(|e| start(e.to_string()))?;
    cmd.arg("--")
        .args(argv)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Not SIGKILL on drop: the helper must live to kill what the server started
        // (see [`terminate`]).
        .kill_on_drop(false);
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
    let mut lines = BoundedLines::new(stderr, MAX_STDERR_LINE);
    let first = lines
        .next_line()
        .await
        .map_err(|e| start(format!("reading the helper's report: {e}")))?
        .map(|l| l.text())
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
    let stderr_reader = tokio::spawn(async move {
        // The server's own diagnostics: logged, never read by the model; each line held
        // to MAX_STDERR_LINE, so a flood without newlines costs no memory.
        while let Ok(Some(line)) = lines.next_line().await {
            let line = line.text();
            tracing::debug!(server = %name, "stderr: {line}");
            if let Ok(mut t) = tail.lock() {
                if t.len() == TAIL_LINES {
                    t.pop_front();
                }
                // Shown in error messages on a terminal: escapes made visible.
                let mut kept: String = line.chars().take(TAIL_LINE_CHARS).collect();
                if kept.len() < line.len() {
                    kept.push('…');
                }
                t.push_back(familiar_protocol::display::visible(&kept));
            }
        }
    });
    let stdout_fault = StdoutFault::default();
    let stdout = guard_stdout(server, stdout, stdout_fault.clone());
    Ok(StdioServer {
        child,
        stdout,
        stdin,
        enforcement: report.enforcement,
        stderr_tail,
        stderr_reader,
        stdout_fault,
    })
}

/// Passes the server's stdout on to the client one JSON message at a time. The first
/// line that is not JSON, or is longer than [`MAX_MESSAGE_BYTES`], ends the stream
/// with the reason in `fault`: the client then fails what it waits for at once,
/// instead of skipping the line and waiting out its timeout. Stdout
/// carries only protocol messages (the MCP spec: a server must not write anything
/// else there).
fn guard_stdout(server: &str, stdout: ChildStdout, fault: StdoutFault) -> DuplexStream {
    let (client_end, mut ours) = tokio::io::duplex(PIPE_BYTES);
    let name = server.to_owned();
    tokio::spawn(async move {
        let mut lines = BoundedLines::new(stdout, MAX_MESSAGE_BYTES);
        let why = loop {
            let line = match lines.next_line().await {
                Ok(Some(line)) => line,
                Ok(None) => return,
                Err(e) => break format!("reading its stdout: {e}"),
            };
            if line.dropped > 0 {
                break format!(
                    "it wrote a message longer than {} MiB on stdout",
                    MAX_MESSAGE_BYTES >> 20
                );
            }
            if line.bytes.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&line.bytes) {
                let start =
                    String::from_utf8_lossy(&line.bytes[..line.bytes.len().min(120)]).into_owned();
                break format!(
                    "it wrote something that is not a JSON-RPC message on stdout, which carries only the protocol ({e}): `{}`",
                    familiar_protocol::display::visible(&start)
                );
            }
            let sent = async {
                ours.write_all(&line.bytes).await?;
                ours.write_all(b"\n").await
            };
            if sent.await.is_err() {
                // The client is gone; the server is being stopped.
                return;
            }
        };
        tracing::warn!(server = %name, "MCP server broke the protocol: {why}");
        if let Ok(mut f) = fault.lock() {
            *f = Some(why);
        }
        // Dropping our end is the client's end of stream: its pending calls fail now.
    });
    client_end
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
