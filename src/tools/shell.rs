//! `shell`: one `sh -c COMMAND` in the task's sandbox.
//!
//! The invariant: the command runs only through [`crate::sandbox::SandboxLauncher`],
//! under the task's Landlock rules, with the allowlisted environment, its own process
//! group, a timeout and an output cap; nothing it starts outlives the call. The policy
//! has already looked at the command line (blocked patterns, opaque constructs such as
//! `| sh` are asked); what the command then does is bounded by the kernel, not by that
//! analysis. A command that fails is a normal result the model reads, not a tool error.

use std::time::Duration;

use futures::FutureExt;
use serde_json::{Value, json};

use super::util::{object_schema, opt_u64, str_arg};
use super::{Tool, ToolContext, ToolError, ToolFuture};
use crate::catalog::{self, ToolInfo};
use crate::sandbox::SandboxOutput;

pub const DEFAULT_TIMEOUT_SECS: u64 = 60;
pub const MAX_TIMEOUT_SECS: u64 = 600;

pub struct Shell;

impl Tool for Shell {
    fn info(&self) -> &'static ToolInfo {
        &catalog::SHELL
    }

    fn description(&self) -> &'static str {
        "Run a command with `sh -c` in the sandbox: it can read the soul's read paths, write \
         only the task workspace (and the soul's write paths), and has no network unless the \
         soul allows it. `cwd` defaults to the workspace; `timeout_secs` defaults to 60 (max \
         600). Returns the exit status, stdout and stderr. Needs the user's approval unless \
         the policy allows execution."
    }

    fn schema(&self) -> Value {
        object_schema(
            json!({
                "command": {"type": "string", "description": "shell command line"},
                "cwd": {"type": "string", "description": "working directory (default: the workspace)"},
                "timeout_secs": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_SECS}
            }),
            &["command"],
        )
    }

    fn execute(&self, args: Value, ctx: ToolContext) -> ToolFuture {
        async move {
            let command = str_arg(&args, "command")?;
            if command.trim().is_empty() {
                return Err(ToolError::model("`command` is empty"));
            }
            let timeout = timeout_arg(&args)?;
            let mut policy = (*ctx.sandbox).clone();
            if let Some(cwd) = args.get("cwd").and_then(Value::as_str) {
                policy.cwd = ctx.resolve(cwd);
                // Said here because the helper could only report "sh: not found" after
                // failing to enter it. (Whether it may be entered is the kernel's call.)
                if !policy.cwd.is_dir() {
                    return Err(ToolError::model(format!(
                        "cwd {} is not an existing directory",
                        policy.cwd.display()
                    )));
                }
            }
            policy.limits.timeout = Duration::from_secs(timeout);
            let argv = ["sh", "-c", command].map(str::to_owned);
            let out = ctx.launcher.run(&policy, &argv, None, &ctx.cancel).await?;
            Ok(format_output(&out, timeout))
        }
        .boxed()
    }
}

fn timeout_arg(args: &Value) -> Result<u64, ToolError> {
    match opt_u64(args, "timeout_secs")? {
        None => Ok(DEFAULT_TIMEOUT_SECS),
        Some(t @ 1..=MAX_TIMEOUT_SECS) => Ok(t),
        Some(t) => Err(ToolError::model(format!(
            "`timeout_secs` must be between 1 and {MAX_TIMEOUT_SECS}, got {t}"
        ))),
    }
}

/// How the command ended, then its output, each stream in its own section.
pub(crate) fn format_output(out: &SandboxOutput, timeout_secs: u64) -> String {
    let status = if out.timed_out {
        format!("timed out after {timeout_secs}s (the command was killed)")
    } else {
        match (out.exit_code, out.signal) {
            (Some(code), _) => format!("exit {code}"),
            (None, Some(sig)) => match nix::sys::signal::Signal::try_from(sig) {
                Ok(name) => format!("killed by signal {sig} ({name})"),
                Err(_) => format!("killed by signal {sig}"),
            },
            (None, None) => "ended without a status".to_owned(),
        }
    };
    let mut text = status;
    for (name, stream) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        if stream.is_empty() {
            text.push_str(&format!("\n--- {name}: empty ---"));
        } else {
            text.push_str(&format!("\n--- {name} ---\n{stream}"));
            if !stream.ends_with('\n') {
                text.push('\n');
            }
        }
    }
    if out.truncated {
        text.push_str(
            "\n[output truncated: the middle of a long stream was dropped; redirect to a file \
             in the workspace and read parts of it]",
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use familiar_sandbox::status::Enforcement;

    use super::*;

    fn output(exit_code: Option<i32>, signal: Option<i32>, timed_out: bool) -> SandboxOutput {
        SandboxOutput {
            exit_code,
            signal,
            stdout: "hi\n".into(),
            stderr: String::new(),
            truncated: false,
            timed_out,
            enforcement: Enforcement::for_abi(None),
        }
    }

    #[test]
    fn output_starts_with_how_the_command_ended() {
        assert_eq!(
            format_output(&output(Some(0), None, false), 60),
            "exit 0\n--- stdout ---\nhi\n\n--- stderr: empty ---"
        );
        assert!(
            format_output(&output(None, Some(9), false), 60)
                .starts_with("killed by signal 9 (SIGKILL)")
        );
        assert!(format_output(&output(None, Some(15), true), 5).starts_with("timed out after 5s"));
    }

    #[test]
    fn timeout_is_bounded() {
        assert_eq!(timeout_arg(&json!({})), Ok(DEFAULT_TIMEOUT_SECS));
        assert_eq!(timeout_arg(&json!({"timeout_secs": "5"})), Ok(5));
        assert!(timeout_arg(&json!({"timeout_secs": 0})).is_err());
        assert!(timeout_arg(&json!({"timeout_secs": 601})).is_err());
    }
}
