//! The context journal (`context/SESSION_ID.journal`): what a running task appends after
//! each iteration instead of rewriting the whole context, so an iteration's save costs
//! what the iteration added, not what the session holds (a 10,000-message context
//! cost 9 ms to rewrite; its journal line costs what one turn costs).
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
    pub fn journal_path(&self, id: &familiar_protocol::ids::SessionId) -> PathBuf {
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
mod tests {
    use std::fs;

    use familiar_protocol::ids::{SessionId, SoulId, TaskId};
    use familiar_protocol::task::TaskStatus;

    use super::*;
    use crate::llm::{ContentBlock, Message};

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        (dir, store)
    }

    fn session() -> Context {
        let mut ctx = Context::new(
            SessionId::new("s-journal").unwrap(),
            SoulId::new("safe_assistant").unwrap(),
            "first",
        );
        ctx.history.push(Message::user_text("first"));
        ctx
    }

    fn task(id: &str) -> TaskRecord {
        TaskRecord {
            task_id: TaskId::new(id).unwrap(),
            prompt: "p".into(),
            status: TaskStatus::Running,
            origin: "cli".into(),
            workspace: None,
            started_at: crate::store::now_rfc3339(),
            finished_at: None,
            plan: Default::default(),
            usage: Default::default(),
            result: None,
        }
    }

    /// A turn: an assistant message and a result, and the task's record changed.
    fn turn(ctx: &mut Context, n: usize) {
        ctx.history
            .push(Message::assistant_text(format!("answer {n}")));
        ctx.history.push(Message::user_text(format!("result {n}")));
        if let Some(t) = ctx.tasks.last_mut() {
            t.usage.output_tokens += 10;
        }
        ctx.touch();
    }

    fn loaded(store: &Store, ctx: &Context) -> Context {
        store.load_context(&ctx.session_id).unwrap().unwrap()
    }

    fn journal_lines(store: &Store, ctx: &Context) -> usize {
        fs::read_to_string(store.journal_path(&ctx.session_id)).map_or(0, |s| s.lines().count())
    }

    #[test]
    fn each_persist_is_one_line_and_a_load_sees_all_of_them() {
        let (_dir, store) = store();
        let mut ctx = session();
        ctx.tasks.push(task("t-1"));
        let mut journal = store.start_journal(&mut ctx).unwrap();
        let base = fs::read(store.context_path(&ctx.session_id)).unwrap();
        for n in 0..5 {
            turn(&mut ctx, n);
            journal.persist(&store, &mut ctx).unwrap();
            assert_eq!(loaded(&store, &ctx), ctx, "after turn {n}");
        }
        assert_eq!(journal_lines(&store, &ctx), 5);
        // The base was not rewritten: the turns are in the journal only.
        assert_eq!(fs::read(store.context_path(&ctx.session_id)).unwrap(), base);
    }

    #[test]
    fn a_line_holds_only_what_changed() {
        let (_dir, store) = store();
        let mut ctx = session();
        for n in 0..50 {
            turn(&mut ctx, n);
        }
        let mut journal = store.start_journal(&mut ctx).unwrap();
        turn(&mut ctx, 50);
        journal.persist(&store, &mut ctx).unwrap();
        let text = fs::read_to_string(store.journal_path(&ctx.session_id)).unwrap();
        let line: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
        assert_eq!(line["history_keep"], 101);
        assert_eq!(line["history"].as_array().unwrap().len(), 2);
        assert_eq!(line["ctx"]["history"], serde_json::json!([]));
        assert!(!text.contains("answer 49"), "old messages are not repeated");
    }

    #[test]
    fn messages_changed_in_place_and_a_shorter_history_are_replayed() {
        let (_dir, store) = store();
        let mut ctx = session();
        for n in 0..6 {
            turn(&mut ctx, n);
        }
        let mut journal = store.start_journal(&mut ctx).unwrap();
        // Micro-compaction clears an old result in place.
        ctx.history[2].content = vec![ContentBlock::Text {
            text: "[cleared]".into(),
        }];
        turn(&mut ctx, 6);
        journal.persist(&store, &mut ctx).unwrap();
        assert_eq!(loaded(&store, &ctx), ctx);
        // Full compaction: a summary and a short history.
        ctx.history.drain(..10);
        ctx.summary = Some("the gist".into());
        ctx.facts.push("a fact".into());
        journal.persist(&store, &mut ctx).unwrap();
        assert_eq!(loaded(&store, &ctx), ctx);
    }

    #[test]
    fn a_journal_past_its_base_size_becomes_a_new_base() {
        let (_dir, store) = store();
        let mut ctx = session();
        let mut journal = store.start_journal(&mut ctx).unwrap();
        let revision = ctx.revision;
        let big = "x".repeat(8 * 1024);
        for n in 0..20 {
            ctx.history
                .push(Message::assistant_text(format!("{n} {big}")));
            journal.persist(&store, &mut ctx).unwrap();
            assert!(
                fs::metadata(store.journal_path(&ctx.session_id)).map_or(0, |m| m.len())
                    <= MIN_JOURNAL_BYTES.max(
                        fs::metadata(store.context_path(&ctx.session_id))
                            .unwrap()
                            .len()
                    )
            );
        }
        assert!(ctx.revision > revision, "a new base was written");
        assert_eq!(loaded(&store, &ctx), ctx);
    }

    #[test]
    fn a_journal_left_by_a_crash_after_a_new_base_is_ignored() {
        let (_dir, store) = store();
        let mut ctx = session();
        let mut journal = store.start_journal(&mut ctx).unwrap();
        turn(&mut ctx, 0);
        journal.persist(&store, &mut ctx).unwrap();
        let path = store.journal_path(&ctx.session_id);
        let stale = fs::read(&path).unwrap();
        // The new base holds everything; the crash came before the journal was deleted.
        turn(&mut ctx, 1);
        store.save_context(&mut ctx).unwrap();
        fs::write(&path, stale).unwrap();
        assert_eq!(
            loaded(&store, &ctx),
            ctx,
            "the old lines are not applied twice"
        );
    }

    #[test]
    fn a_torn_last_line_is_dropped_and_a_bad_line_stops_the_replay() {
        let (_dir, store) = store();
        let mut ctx = session();
        let mut journal = store.start_journal(&mut ctx).unwrap();
        turn(&mut ctx, 0);
        journal.persist(&store, &mut ctx).unwrap();
        let saved = ctx.clone();
        let path = store.journal_path(&ctx.session_id);
        let whole = fs::read(&path).unwrap();

        let mut torn = whole.clone();
        torn.extend_from_slice(br#"{"revision":1,"history_keep":0,"hist"#);
        fs::write(&path, &torn).unwrap();
        assert_eq!(loaded(&store, &saved), saved);

        let mut bad = whole.clone();
        bad.extend_from_slice(b"not json\n");
        bad.extend_from_slice(&whole);
        fs::write(&path, &bad).unwrap();
        assert_eq!(loaded(&store, &saved), saved, "nothing after the bad line");

        // A line whose `keep` is past the history it extends does not fit.
        let mut misfit = whole.clone();
        let text = String::from_utf8(whole).unwrap();
        let wrong = text.replacen("\"history_keep\":1", "\"history_keep\":99", 1);
        misfit.extend_from_slice(wrong.as_bytes());
        fs::write(&path, &misfit).unwrap();
        assert_eq!(loaded(&store, &saved), saved);
    }

    #[test]
    fn removing_a_session_removes_its_journal() {
        let (_dir, store) = store();
        let mut ctx = session();
        let mut journal = store.start_journal(&mut ctx).unwrap();
        turn(&mut ctx, 0);
        journal.persist(&store, &mut ctx).unwrap();
        drop(journal);
        assert!(store.remove_session(&ctx.session_id).unwrap());
        assert!(!store.journal_path(&ctx.session_id).exists());
    }

    #[test]
    fn a_whole_save_deletes_the_journal() {
        let (_dir, store) = store();
        let mut ctx = session();
        let mut journal = store.start_journal(&mut ctx).unwrap();
        turn(&mut ctx, 0);
        journal.persist(&store, &mut ctx).unwrap();
        turn(&mut ctx, 1);
        journal.persist(&store, &mut ctx).unwrap();
        store.save_context(&mut ctx).unwrap();
        assert!(!store.journal_path(&ctx.session_id).exists());
        assert_eq!(loaded(&store, &ctx), ctx);
        // A later line after a whole save starts a fresh journal on the new base.
        let mut journal = store.start_journal(&mut ctx).unwrap();
        turn(&mut ctx, 2);
        journal.persist(&store, &mut ctx).unwrap();
        assert_eq!(journal_lines(&store, &ctx), 1);
        assert_eq!(loaded(&store, &ctx), ctx);
    }
}
