//! The context journal (`context/SESSION_ID.journal`): what a running task appends after
//! each iteration instead of rewriting the whole context, so an iteration's save costs
//! what the iteration added, not what the session holds (issue 10: a 10,000-message
//! context cost 9 ms to rewrite; its journal line costs what one turn costs).
//!
//! Each line is one JSON object, the change since the line before:
//! `{"revision", "history_keep", "history": [...], "tasks_keep", "tasks": [...], "ctx"}`:
//! keep the first `history_keep` messages and append `history`, the same for `tasks`, and
//! take every other field from `ctx` (a context whose history and tasks are empty). A
//! line applies only to the context file whose `revision` it names.
//!
//! Invariants:
//! - The context file is the base; [`super::Store::save_context`] writes a new base with
//!   the next `revision` and then deletes the journal. A journal left behind by a crash
//!   between the two names the old revision and is ignored, so nothing is applied twice.
//! - A line is written with one `write` on an `O_APPEND` descriptor and synced before
//!   [`ContextJournal::persist`] returns. A failed append is cut off again (the file is
//!   truncated to its last whole line); a torn last line from a crash is dropped on load.
//! - The journal never grows past the size of its base (64 KiB at least): past that the
//!   next save writes a new base instead, so the rewrites cost O(1) per appended byte.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::context::{Context, TaskRecord};
use super::{Store, StoreError};
use crate::llm::Message;

/// The journal may grow to its base's size, but never less than this before a rewrite.
const MIN_JOURNAL_BYTES: u64 = 64 * 1024;

/// One line, as written.
#[derive(Serialize)]
struct LineOut<'a> {
    revision: u64,
    history_keep: usize,
    history: &'a [Message],
    tasks_keep: usize,
    tasks: &'a [TaskRecord],
    ctx: &'a Context,
}

/// One line, as read.
#[derive(Deserialize)]
struct LineIn {
    revision: u64,
    history_keep: usize,
    history: Vec<Message>,
    tasks_keep: usize,
    tasks: Vec<TaskRecord>,
    ctx: Context,
}

/// A running task's journal: the base it extends and what is on disk so far.
#[derive(Debug)]
pub struct ContextJournal {
    path: PathBuf,
    /// Opened on the first append; `None` after a new base (which deleted the file).
    file: Option<File>,
    /// The base's revision every line names.
    revision: u64,
    /// Bytes of whole lines in the file.
    len: u64,
    /// The size the journal may reach before the next save writes a new base.
    limit: u64,
    /// The history and tasks as the base plus the journal hold them, to find what
    /// changed: a turn appends messages, compaction rewrites some in place.
    history: Vec<Message>,
    tasks: Vec<TaskRecord>,
}

impl Store {
    /// Writes `ctx` as the new base (see [`Store::save_context`]) and starts a journal
    /// on it; the task's saves then go through [`ContextJournal::persist`].
    pub fn start_journal(&self, ctx: &mut Context) -> Result<ContextJournal, StoreError> {
        self.save_context(ctx)?;
        let path = self.journal_path(&ctx.session_id);
        let mut journal = ContextJournal {
            path,
            file: None,
            revision: 0,
            len: 0,
            limit: 0,
            history: Vec::new(),
            tasks: Vec::new(),
        };
        journal.rebased(self, ctx);
        Ok(journal)
    }

    /// `context/SESSION_ID.journal`.
    pub fn journal_path(&self, id: &crate::ids::SessionId) -> PathBuf {
        self.context_path(id).with_extension("journal")
    }
}

impl ContextJournal {
    /// Makes the iteration's changes to `ctx` durable: one appended, synced line, or a
    /// new base when the journal has grown to its limit. On failure nothing is counted
    /// as written: the next call tries again with everything since the last success.
    pub fn persist(&mut self, store: &Store, ctx: &mut Context) -> Result<(), StoreError> {
        let history_keep = common_prefix(&self.history, &ctx.history);
        let tasks_keep = common_prefix(&self.tasks, &ctx.tasks);
        let line = encode(self.revision, ctx, history_keep, tasks_keep)?;
        if self.len + line.len() as u64 > self.limit {
            store.save_context(ctx)?;
            self.file = None;
            self.rebased(store, ctx);
            return Ok(());
        }
        self.append(&line)?;
        self.history.truncate(history_keep);
        self.history.extend_from_slice(&ctx.history[history_keep..]);
        self.tasks.truncate(tasks_keep);
        self.tasks.extend_from_slice(&ctx.tasks[tasks_keep..]);
        Ok(())
    }

    /// After `ctx` was saved as a new base: an empty journal on it.
    fn rebased(&mut self, store: &Store, ctx: &Context) {
        self.revision = ctx.revision;
        self.len = 0;
        let base = fs::metadata(store.context_path(&ctx.session_id)).map_or(0, |m| m.len());
        self.limit = base.max(MIN_JOURNAL_BYTES);
        self.history.clone_from(&ctx.history);
        self.tasks.clone_from(&ctx.tasks);
    }

    fn append(&mut self, line: &[u8]) -> Result<(), StoreError> {
        let io = |e| StoreError::io("cannot append to", &self.path, e);
        let file = match &mut self.file {
            Some(f) => f,
            None => self.file.insert(open(&self.path).map_err(io)?),
        };
        let written = file.write_all(line).and_then(|()| file.sync_data());
        if let Err(e) = written {
            // A full disk can leave part of the line: cut it off, or the next line
            // would be glued onto it. If even that fails, the next save writes a new
            // base (a limit of 0), which deletes this file.
            if file.set_len(self.len).is_err() {
                self.limit = 0;
            }
            return Err(io(e));
        }
        self.len += line.len() as u64;
        Ok(())
    }
}

fn open(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
}

/// The line for the change from (`history_keep`, `tasks_keep`) on, `\n`-terminated. The
/// rest of the context is written with its history and tasks taken out, not copied.
fn encode(
    revision: u64,
    ctx: &mut Context,
    history_keep: usize,
    tasks_keep: usize,
) -> Result<Vec<u8>, StoreError> {
    let history = std::mem::take(&mut ctx.history);
    let tasks = std::mem::take(&mut ctx.tasks);
    let line = LineOut {
        revision,
        history_keep,
        history: &history[history_keep..],
        tasks_keep,
        tasks: &tasks[tasks_keep..],
        ctx,
    };
    let encoded = serde_json::to_vec(&line);
    ctx.history = history;
    ctx.tasks = tasks;
    let mut bytes = encoded.map_err(StoreError::Serialize)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// How many leading elements `a` and `b` share.
fn common_prefix<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Applies the journal at `path` (if any) to `base`, the context file it extends. Lines
/// of another revision (a crash between a new base and the journal's deletion) are
/// ignored; a torn last line is dropped; a line that does not fit stops the replay there.
pub(super) fn replay(path: &Path, base: &mut Context) -> Result<(), StoreError> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(StoreError::io("cannot read", path, e)),
    };
    // Only `\n`-terminated lines were completely written.
    let Some(end) = bytes.iter().rposition(|&b| b == b'\n') else {
        return Ok(());
    };
    for (n, raw) in bytes[..end].split(|&b| b == b'\n').enumerate() {
        let line = match serde_json::from_slice::<LineIn>(raw) {
            Ok(l) if l.revision == base.revision => l,
            Ok(_) => return Ok(()), // a stale journal: all of it names the old base
            Err(e) => {
                tracing::warn!(path = %path.display(), line = n + 1, error = %e, "stopping at an unreadable journal line");
                return Ok(());
            }
        };
        if !line.fits(base) {
            tracing::warn!(path = %path.display(), line = n + 1, "stopping at a journal line that does not fit its context");
            return Ok(());
        }
        line.apply(base);
    }
    Ok(())
}

impl LineIn {
    fn fits(&self, base: &Context) -> bool {
        self.history_keep <= base.history.len()
            && self.tasks_keep <= base.tasks.len()
            && self.ctx.session_id == base.session_id
            && self.ctx.version == base.version
    }

    fn apply(self, base: &mut Context) {
        let mut history = std::mem::take(&mut base.history);
        history.truncate(self.history_keep);
        history.extend(self.history);
        let mut tasks = std::mem::take(&mut base.tasks);
        tasks.truncate(self.tasks_keep);
        tasks.extend(self.tasks);
        *base = Context {
            history,
            tasks,
            revision: base.revision,
            ..self.ctx
        };
    }
}

#[cfg(test)]
#[path = "journal_tests.rs"]
mod tests;
