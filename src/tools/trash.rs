//! `trash`: a file or directory moved to the freedesktop Trash, where the person (and
//! `familiar undo`) can take it back, instead of deleted for good.
//!
//! It runs as a brokered file operation in the helper (`FileOp::Trash`): the kernel
//! lets it move only what the soul may write, and it may write into the home Trash for
//! this one call ([`crate::sandbox::SandboxPolicy::trashing`]). Outside the workspace
//! the move is recorded for undo ([`super::changes`]).

use familiar_sandbox::fileops::{FileOp, FileReply};
use futures::FutureExt;
use serde_json::{Value, json};

use super::changes::record_trash;
use super::util::{object_schema, sandboxed_in, str_arg, unexpected};
use super::{Tool, ToolContext, ToolError, ToolFuture};
use crate::catalog::{self, ToolInfo};

pub struct Trash;

impl Tool for Trash {
    fn info(&self) -> &'static ToolInfo {
        &catalog::TRASH
    }

    fn description(&self) -> &'static str {
        "Move a file or directory to the Trash (the desktop's trash can, where the user can \
         restore it). Use this instead of `rm`, `rm -rf`, `unlink` or `find -delete`: \
         outside the task workspace the sandbox refuses deleting for good. Relative paths \
         are relative to the task workspace. Needs the user's approval unless the policy \
         allows writes."
    }

    fn schema(&self) -> Value {
        object_schema(
            json!({"path": {"type": "string", "description": "File or directory to trash"}}),
            &["path"],
        )
    }

    fn execute(&self, args: Value, ctx: ToolContext) -> ToolFuture {
        async move {
            let path = ctx.resolve(str_arg(&args, "path")?);
            let policy = ctx
                .sandbox
                .trashing(&crate::store::home_trash(&ctx.home))
                .map_err(ToolError::from)?;
            let op = FileOp::Trash { path: path.clone() };
            match sandboxed_in(&ctx, &policy, op).await? {
                FileReply::Trashed {
                    original,
                    files,
                    info,
                } => {
                    record_trash(&ctx, &original, &files, &info).await?;
                    Ok(format!("moved {} to the Trash", path.display()))
                }
                other => Err(unexpected("trash", &other)),
            }
        }
        .boxed()
    }
}
