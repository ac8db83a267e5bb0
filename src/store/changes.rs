//! What each task changed outside its workspace (`data_dir/changes/TASK_ID.json`):
//! the files it created, changed and trashed, in order, with the hashes that tell
//! [`super::undo`] whether a file is still as the task left it.
//!
//! Invariants: a record is replaced atomically (temp file, fsync, rename, fsync the
//! directory), like a session's context; a change is recorded after the helper did it
//! and before the tool's result reaches the model; a record names only paths a tool
//! of that task wrote, so undo touches nothing else.

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use familiar_protocol::ids::{SoulId, TaskId};
use serde::{Deserialize, Serialize};

use super::{Store, StoreError, atomic};

const CHANGES_DIR: &str = "changes";

/// One change to one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Change {
    /// Made by the task, with these bytes (SHA-256): undo moves it to the Trash.
    Created { path: PathBuf, after: String },
    /// Changed: undo puts `before` (a kept version) back. `None`: larger than
    /// `[versions] max_file`, not kept, so this one cannot be undone; `after` unknown
    /// when the helper did not send what it replaced.
    Changed {
        path: PathBuf,
        before: Option<String>,
        after: Option<String>,
    },
    /// Moved to the Trash, where `files` is it and `info` its `.trashinfo`: undo
    /// moves it back.
    Trashed {
        path: PathBuf,
        files: PathBuf,
        info: PathBuf,
    },
}

impl Change {
    pub fn path(&self) -> &Path {
        match self {
            Change::Created { path, .. }
            | Change::Changed { path, .. }
            | Change::Trashed { path, .. } => path,
        }
    }
}

/// A task's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskChanges {
    pub task_id: TaskId,
    pub soul: SoulId,
    pub changes: Vec<Change>,
    /// RFC 3339, when `familiar undo` restored them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undone: Option<String>,
}

impl TaskChanges {
    /// "changed 3 files, trashed 2"; `None` for no change.
    pub fn summary(&self) -> Option<String> {
        let count = |f: fn(&Change) -> bool| self.changes.iter().filter(|c| f(c)).count();
        let parts: Vec<String> = [
            ("created", count(|c| matches!(c, Change::Created { .. }))),
            ("changed", count(|c| matches!(c, Change::Changed { .. }))),
            ("trashed", count(|c| matches!(c, Change::Trashed { .. }))),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .enumerate()
        .map(|(i, (verb, n))| match (i, n) {
            (0, 1) => format!("{verb} 1 file"),
            (0, n) => format!("{verb} {n} files"),
            (_, n) => format!("{verb} {n}"),
        })
        .collect();
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    /// Whether `familiar undo` has something to restore.
    pub fn undoable(&self) -> bool {
        self.undone.is_none() && !self.changes.is_empty()
    }
}

impl Store {
    /// `changes/TASK_ID.json`.
    pub fn changes_path(&self, task: &TaskId) -> PathBuf {
        self.data_dir()
            .join(CHANGES_DIR)
            .join(format!("{task}.json"))
    }

    /// The task's record, if it changed anything.
    pub fn changes(&self, task: &TaskId) -> Result<Option<TaskChanges>, StoreError> {
        let path = self.changes_path(task);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::io("cannot read", &path, e)),
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| StoreError::io("cannot parse", &path, std::io::Error::other(e)))
    }

    /// Appends `change` to the task's record. A task's mutating calls run alone and in
    /// order, so there is one writer per record.
    pub fn record_change(
        &self,
        task: &TaskId,
        soul: &SoulId,
        change: Change,
    ) -> Result<(), StoreError> {
        let mut record = self.changes(task)?.unwrap_or_else(|| TaskChanges {
            task_id: task.clone(),
            soul: soul.clone(),
            changes: Vec::new(),
            undone: None,
        });
        record.changes.push(change);
        self.save_changes(&record)
    }

    /// Replaces the task's record.
    pub fn save_changes(&self, record: &TaskChanges) -> Result<(), StoreError> {
        let dir = self.data_dir().join(CHANGES_DIR);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| StoreError::io("cannot create", &dir, e))?;
        let stem = record.task_id.to_string();
        let temp = atomic::write_temp(&dir, &stem, |w| {
            serde_json::to_writer(w, record).map_err(StoreError::Serialize)
        })?;
        atomic::commit(temp, &self.changes_path(&record.task_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(changes: Vec<Change>) -> TaskChanges {
        TaskChanges {
            task_id: TaskId::new("t-1").unwrap(),
            soul: SoulId::new("s").unwrap(),
            changes,
            undone: None,
        }
    }

    #[test]
    fn the_summary_counts_each_kind_in_one_line() {
        let changed = |p: &str| Change::Changed {
            path: p.into(),
            before: None,
            after: None,
        };
        let trashed = |p: &str| Change::Trashed {
            path: p.into(),
            files: p.into(),
            info: p.into(),
        };
        assert_eq!(record(vec![]).summary(), None);
        assert_eq!(
            record(vec![
                changed("a"),
                changed("b"),
                changed("c"),
                trashed("d"),
                trashed("e")
            ])
            .summary()
            .unwrap(),
            "changed 3 files, trashed 2"
        );
        assert_eq!(
            record(vec![trashed("d")]).summary().unwrap(),
            "trashed 1 file"
        );
    }

    #[test]
    fn a_record_grows_one_change_at_a_time_and_survives_reopening() {
        let t = tempfile::tempdir().unwrap();
        let store = Store::open(t.path()).unwrap();
        let (task, soul) = (TaskId::new("t-1").unwrap(), SoulId::new("s").unwrap());
        assert_eq!(store.changes(&task).unwrap(), None);
        let made = Change::Created {
            path: "/h/a".into(),
            after: "00".into(),
        };
        store.record_change(&task, &soul, made.clone()).unwrap();
        store.record_change(&task, &soul, made.clone()).unwrap();
        let again = Store::open(t.path())
            .unwrap()
            .changes(&task)
            .unwrap()
            .unwrap();
        assert_eq!(
            again,
            TaskChanges {
                changes: vec![made.clone(), made],
                ..record(vec![])
            }
        );
    }
}
