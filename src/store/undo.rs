//! `familiar undo TASK`: the files a task changed outside its workspace, put back as
//! they were ([`super::changes`]): a file it created goes to the Trash, a file it
//! changed gets its kept version back ([`super::versions`]), a file it trashed comes
//! back from the Trash.
//!
//! Invariants: only the paths of the task's record are touched; nothing is touched
//! unless every one of them is still as the task left it (same SHA-256, or still gone
//! and still in the Trash), and a refusal names each file that is not; the restore is
//! audited (`audit.jsonl`, tool `undo`). This runs in the daemon as the person's own
//! action, not the model's, so not in the sandbox.
//!
//! A created file goes to the home Trash by a move of our own ([`to_trash`]), not the
//! `trash` crate the helper uses: the crate finds the Trash only through the process's
//! environment, and the daemon moves it to the Trash it names (the one the `trash`
//! tool used, [`home_trash`]), which the tests must be able to point elsewhere.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use familiar_protocol::ids::TaskId;
use familiar_protocol::tier::Tier;

use super::changes::{Change, TaskChanges};
use super::versions::{Versions, sha256_hex};
use super::{AuditDecision, AuditEntry, AuditOutcome, Store, StoreError, args_digest};

/// Why a task was not undone.
#[derive(Debug, thiserror::Error)]
pub enum UndoError {
    #[error("task {0} changed nothing outside its workspace: nothing to undo")]
    NothingToUndo(TaskId),
    #[error("task {task} was already undone at {at}")]
    AlreadyUndone { task: TaskId, at: String },
    #[error("nothing was undone: {}", refusals.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Refused { refusals: Vec<Refusal> },
    #[error("undoing stopped after {done} of {total} changes: {source}")]
    Failed {
        done: usize,
        total: usize,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A file undo will not touch, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub path: PathBuf,
    pub why: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.why)
    }
}

/// What an undo restored: the record's summary ("changed 3 files, trashed 2").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undone {
    pub changes: usize,
    pub summary: String,
}

/// The home Trash of the freedesktop spec: `$XDG_DATA_HOME/Trash` (when set and
/// absolute), else `~/.local/share/Trash`.
pub fn home_trash(home: &Path) -> PathBuf {
    std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|d| d.is_absolute())
        .unwrap_or_else(|| home.join(".local/share"))
        .join("Trash")
}

/// Undoes `task`'s changes; a file it created goes to `trash`. `Ok(None)`: the store
/// has no record of it.
pub fn undo(
    store: &Store,
    versions: &Versions,
    trash: &Path,
    task: &TaskId,
) -> Result<Option<Undone>, UndoError> {
    let Some(mut record) = store.changes(task)? else {
        return Ok(None);
    };
    if let Some(at) = &record.undone {
        return Err(UndoError::AlreadyUndone {
            task: task.clone(),
            at: at.clone(),
        });
    }
    let Some(summary) = record.summary() else {
        return Err(UndoError::NothingToUndo(task.clone()));
    };
    let refusals = check(&record, versions);
    if !refusals.is_empty() {
        let why = refusals
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        audit(
            store,
            &record,
            AuditDecision::Denied,
            AuditOutcome::NotRun,
            why,
        )?;
        return Err(UndoError::Refused { refusals });
    }
    let total = record.changes.len();
    for (done, change) in record.changes.iter().rev().enumerate() {
        if let Err(source) = restore(change, versions, trash) {
            let why = format!("{}: {source}", change.path().display());
            audit(
                store,
                &record,
                AuditDecision::Approved,
                AuditOutcome::Failed,
                why,
            )?;
            return Err(UndoError::Failed {
                done,
                total,
                source,
            });
        }
    }
    audit(
        store,
        &record,
        AuditDecision::Approved,
        AuditOutcome::Succeeded,
        format!("undone by the user: {summary}"),
    )?;
    record.undone = Some(super::now_rfc3339());
    store.save_changes(&record)?;
    Ok(Some(Undone {
        changes: total,
        summary,
    }))
}

/// What is at a path now.
#[derive(Debug, PartialEq, Eq)]
enum Now {
    Missing,
    File(String),
    Other,
}

fn now_at(path: &Path) -> std::io::Result<Now> {
    match path.symlink_metadata() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Now::Missing),
        Err(e) => Err(e),
        Ok(m) if m.is_file() => Ok(Now::File(sha256_hex(&std::fs::read(path)?))),
        Ok(_) => Ok(Now::Other),
    }
}

/// Every file that is not as the task left it (the last change to each path says how
/// that is), and every change whose previous content is not kept.
fn check(record: &TaskChanges, versions: &Versions) -> Vec<Refusal> {
    let mut last: HashMap<&Path, &Change> = HashMap::new();
    let mut refusals = Vec::new();
    let mut refuse = |path: &Path, why: &str| {
        let r = Refusal {
            path: path.to_owned(),
            why: why.to_owned(),
        };
        if !refusals.contains(&r) {
            refusals.push(r);
        }
    };
    for change in &record.changes {
        last.insert(change.path(), change);
        if let Change::Changed { path, before, .. } = change {
            match before.as_deref().map(|h| versions.get(h)) {
                None => refuse(
                    path,
                    "its previous content was larger than [versions] max_file and was not kept",
                ),
                Some(Ok(Some(_))) => {}
                Some(Ok(None)) => refuse(
                    path,
                    "its kept version is gone (past [versions] max_age or max_total)",
                ),
                Some(Err(e)) => refuse(path, &e.to_string()),
            }
        }
    }
    for (path, change) in last {
        let now = match now_at(path) {
            Ok(n) => n,
            Err(e) => {
                refuse(path, &format!("cannot be read: {e}"));
                continue;
            }
        };
        let changed_since = "changed since the task touched it";
        match change {
            Change::Created { after, .. } => {
                if now != Now::File(after.clone()) {
                    refuse(path, changed_since);
                }
            }
            Change::Changed { after: None, .. } => {
                refuse(path, "what the task wrote was not recorded")
            }
            Change::Changed {
                after: Some(after), ..
            } => {
                if now != Now::File(after.clone()) {
                    refuse(path, changed_since);
                }
            }
            Change::Trashed { files, .. } => {
                if now != Now::Missing {
                    refuse(path, "something is there again since the task trashed it");
                } else if files.symlink_metadata().is_err() {
                    refuse(path, "no longer in the Trash");
                }
            }
        }
    }
    refusals
}

fn restore(change: &Change, versions: &Versions, trash: &Path) -> std::io::Result<()> {
    match change {
        Change::Created { path, .. } => to_trash(path, trash),
        Change::Changed { path, before, .. } => {
            let bytes = before
                .as_deref()
                .map(|h| versions.get(h))
                .transpose()
                .map_err(std::io::Error::other)?
                .flatten()
                .ok_or_else(|| std::io::Error::other("its kept version is gone"))?;
            write_back(path, &bytes)
        }
        Change::Trashed { path, files, info } => {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            // Never over something made there meanwhile.
            nix::fcntl::renameat2(
                nix::fcntl::AT_FDCWD,
                files,
                nix::fcntl::AT_FDCWD,
                path,
                nix::fcntl::RenameFlags::RENAME_NOREPLACE,
            )
            .map_err(std::io::Error::from)?;
            match std::fs::remove_file(info) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                Ok(()) | Err(_) => Ok(()),
            }
        }
    }
}

/// What the Trash spec percent-encodes in a `.trashinfo` `Path=`: all but the
/// unreserved characters of RFC 3986 and `/`.
const TRASH_PATH: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'/')
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Moves `path` into the home Trash `trash` as the freedesktop Trash spec says: a
/// `info/NAME.trashinfo` made first (`O_EXCL`, `NAME.2`, `NAME.3`… on a collision)
/// with the absolute `Path=` and the local `DeletionDate=`, then the rename into
/// `files/NAME`; the info file goes again if the rename fails.
pub fn to_trash(path: &Path, trash: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let (files, info) = (trash.join("files"), trash.join("info"));
    for dir in [&files, &info] {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("not a file name"))?;
    let encoded =
        percent_encoding::percent_encode(path.as_os_str().as_bytes(), TRASH_PATH).to_string();
    let date = chrono::Local::now().format("%Y-%m-%dT%H:%M:%S");
    for n in 1u32.. {
        let mut stem = name.to_owned();
        if n > 1 {
            stem.push(format!(".{n}"));
        }
        let mut info_name = stem.clone();
        info_name.push(".trashinfo");
        let info_path = info.join(&info_name);
        let mut file = match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&info_path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        };
        let moved = write!(file, "[Trash Info]\nPath={encoded}\nDeletionDate={date}\n")
            .and_then(|()| file.sync_all())
            .and_then(|()| std::fs::rename(path, files.join(&stem)));
        if let Err(e) = moved {
            std::fs::remove_file(&info_path).ok();
            return Err(e);
        }
        return Ok(());
    }
    Err(std::io::Error::other("no free name in the Trash"))
}

/// `bytes` at `path`, atomically, with the mode it has now, never through a symlink.
fn write_back(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mode = match path.symlink_metadata() {
        Ok(m) if m.is_symlink() => return Err(std::io::Error::other("a symlink is there now")),
        Ok(m) => m.permissions().mode() & 0o7777,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0o644,
        Err(e) => return Err(e),
    };
    let parent = path.parent().unwrap_or(Path::new("/"));
    let mut tmp = tempfile::Builder::new()
        .prefix(".familiar-undo-")
        .make_in(parent, |p| {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW)
                .mode(mode)
                .open(p)
        })?;
    tmp.as_file_mut().write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

fn audit(
    store: &Store,
    record: &TaskChanges,
    decision: AuditDecision,
    outcome: AuditOutcome,
    reason: String,
) -> Result<(), StoreError> {
    let paths: Vec<String> = record
        .changes
        .iter()
        .map(|c| c.path().display().to_string())
        .collect();
    store.audit(&AuditEntry {
        time: super::now_rfc3339(),
        task_id: Some(record.task_id.clone()),
        session_id: None,
        soul: record.soul.clone(),
        tool: "undo".to_owned(),
        tier: Tier::Write,
        args_digest: args_digest(&serde_json::json!({"task": record.task_id, "paths": paths})),
        decision,
        reason: Some(reason),
        outcome,
    })
}
