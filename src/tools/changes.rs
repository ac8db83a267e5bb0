//! What the file tools record for undo: before `write_file`, `edit_file` or `trash`
//! changes a file outside the task's workspace, the helper is asked to send back what
//! it replaces; afterwards the previous content is kept ([`crate::store::Versions`])
//! and the change recorded with the task ([`crate::store::changes`]).
//!
//! Invariant: the previous content comes only from the sandboxed helper's reply (the
//! daemon never opens a path a model chose), and is never part of what the model reads.

use std::path::Path;
use std::sync::Arc;

use familiar_protocol::ids::{SoulId, TaskId};
use familiar_sandbox::fileops::Previous;

use super::{ToolContext, ToolError};
use crate::store::{Change, Store, Versions, sha256_hex};

/// A task's change record and the versions kept for it.
#[derive(Clone)]
pub struct ChangeLog {
    pub store: Arc<Store>,
    pub versions: Versions,
    pub task: TaskId,
    pub soul: SoulId,
}

impl ChangeLog {
    /// Records `change` (and keeps `previous` first), off the async runtime.
    async fn record(&self, previous: Option<Vec<u8>>, change: Change) -> Result<(), ToolError> {
        let log = self.clone();
        let done = tokio::task::spawn_blocking(move || {
            let change = match (change, previous) {
                (Change::Changed { path, after, .. }, Some(bytes)) => Change::Changed {
                    path,
                    before: Some(log.versions.keep(&bytes)?),
                    after,
                },
                (change, _) => change,
            };
            log.store.record_change(&log.task, &log.soul, change)
        })
        .await;
        match done {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(ToolError::Fatal(format!(
                "the change was made but could not be recorded for undo: {e}"
            ))),
            Err(e) => Err(ToolError::Fatal(format!("recording a change: {e}"))),
        }
    }
}

/// The `keep` limit for a write of `path`: `[versions] max_file` outside the
/// workspace when the task records its changes, else nothing to keep.
pub(super) fn keep_for(ctx: &ToolContext, path: &Path) -> Option<u64> {
    let log = ctx.changes.as_ref()?;
    (!path.starts_with(&ctx.workspace)).then_some(log.versions.limits().max_file)
}

/// Records a write or edit of `path` that replaced `previous` with content whose
/// SHA-256 is `after` (`None`: not known). Returns what the model is told beyond the
/// write itself: that the change cannot be undone, when the previous content was too
/// large to keep.
pub(super) async fn record_write(
    ctx: &ToolContext,
    path: &Path,
    previous: &Previous,
    after: Option<String>,
) -> Result<&'static str, ToolError> {
    let Some(log) = &ctx.changes else {
        return Ok("");
    };
    let path = path.to_owned();
    let (change, kept, note) = match previous {
        Previous::Missing => match after {
            Some(after) => (Change::Created { path, after }, None, ""),
            None => return Ok(""),
        },
        Previous::Kept { .. } => {
            let bytes = previous.bytes().ok_or_else(|| {
                ToolError::Fatal(
                    "the sandbox helper sent a previous content that is not base64".into(),
                )
            })?;
            let change = Change::Changed {
                path,
                before: None,
                after,
            };
            (change, Some(bytes), "")
        }
        Previous::TooLarge { .. } => (
            Change::Changed {
                path,
                before: None,
                after,
            },
            None,
            " (its previous content is larger than [versions] max_file and was not kept: this change cannot be undone)",
        ),
    };
    log.record(kept, change).await?;
    Ok(note)
}

/// Records that `path` was moved to the Trash, as `files` described by `info`.
pub(super) async fn record_trash(
    ctx: &ToolContext,
    path: &Path,
    files: &Path,
    info: &Path,
) -> Result<(), ToolError> {
    let Some(log) = &ctx.changes else {
        return Ok(());
    };
    if path.starts_with(&ctx.workspace) {
        return Ok(());
    }
    let change = Change::Trashed {
        path: path.to_owned(),
        files: files.to_owned(),
        info: info.to_owned(),
    };
    log.record(None, change).await
}

/// The SHA-256 of `text` with its one `old` replaced by `new`: what an edit left, from
/// what it replaced.
pub(super) fn edited_hash(previous: &Previous, old: &str, new: &str) -> Option<String> {
    let bytes = previous.bytes()?;
    let text = std::str::from_utf8(&bytes).ok()?;
    Some(sha256_hex(text.replacen(old, new, 1).as_bytes()))
}
