//! Helpers the tool implementations share: reading the model's arguments, running a
//! file operation in the sandbox, and finding programs on the daemon's `PATH`.
//!
//! Invariant: a bad argument is a [`ToolError::RespondToModel`] that names the key, so
//! the model can correct the call; nothing here panics on what a model sent.

use std::path::PathBuf;

use familiar_sandbox::fileops::{FileOp, FileReply};

use super::{ToolContext, ToolError};

/// A required string argument, or an error the model can act on.
pub(crate) fn str_arg<'a>(args: &'a serde_json::Value, key: &str) -> Result<&'a str, ToolError> {
    args.get(key)
        .and_then(|v| v.as_str())
        .ok_or_else(|| ToolError::model(format!("missing string argument `{key}`")))
}

/// `key` was given a value outside its choices: say which ones there are.
pub(crate) fn not_one_of(key: &str, got: &str, choices: &[&str]) -> ToolError {
    ToolError::model(format!(
        "unknown `{key}` `{got}`; one of: {}",
        choices.join(", ")
    ))
}

/// An optional unsigned argument (numbers sent as strings are accepted: small models do).
pub(crate) fn opt_u64(args: &serde_json::Value, key: &str) -> Result<Option<u64>, ToolError> {
    match args.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
            .map(Some)
            .ok_or_else(|| {
                ToolError::model(format!("`{key}` must be a non-negative integer, got {v}"))
            }),
    }
}

/// `name` on the system's `PATH`, never the daemon's ([`crate::programs`]).
pub(crate) fn find_program(name: &str) -> Option<PathBuf> {
    crate::programs::find(name)
}

/// The JSON schema of a tool's arguments: an object with `properties`, the
/// `required` keys, and nothing else (`additionalProperties: false`, so a misspelt
/// key is the model's error to fix, not silently ignored).
pub(crate) fn object_schema(properties: serde_json::Value, required: &[&str]) -> serde_json::Value {
    let mut schema = serde_json::json!({
        "type": "object",
        "properties": properties,
        "additionalProperties": false,
    });
    if !required.is_empty() {
        schema["required"] = serde_json::json!(required);
    }
    schema
}

/// Runs a file operation in the task's sandbox and turns a refusal into an error the
/// model can read (the kernel's errno included, so "Permission denied" is visible as
/// such).
pub(crate) async fn sandboxed(ctx: &ToolContext, op: FileOp) -> Result<FileReply, ToolError> {
    sandboxed_in(ctx, &ctx.sandbox, op).await
}

/// [`sandboxed`] under `policy` (the task's, with something added for this call).
pub(crate) async fn sandboxed_in(
    ctx: &ToolContext,
    policy: &crate::sandbox::SandboxPolicy,
    op: FileOp,
) -> Result<FileReply, ToolError> {
    let (reply, _enforcement) = ctx.launcher.file_op(policy, &op, &ctx.cancel).await?;
    match reply {
        FileReply::Error { errno, message } => Err(ToolError::model(match errno {
            Some(libc::EACCES) | Some(libc::EPERM) => {
                format!("{message} (outside what this soul's sandbox allows)")
            }
            Some(libc::EISDIR) => format!("{message}: it is a directory, use list_dir"),
            Some(_) | None => message,
        })),
        other => Ok(other),
    }
}

/// The sandbox helper answered an operation with the reply of another: a bug of ours,
/// not the model's, so the task stops.
pub(crate) fn unexpected(op: &str, reply: &FileReply) -> ToolError {
    ToolError::Fatal(format!("unexpected reply to {op}: {reply:?}"))
}
