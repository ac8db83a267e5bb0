//! The runtime data directory: session contexts, transcripts, the audit log,
//! long-term memory ([`memory`]) and task workspaces. `data/README.md` documents the layout for users.
//!
//! Invariants:
//! - A context file is replaced atomically (temp file, fsync, rename, fsync the
//!   directory): after a crash at any instant it holds the old or the new context,
//!   never a torn one. While a task runs, its steps are appended to the session's
//!   journal instead ([`journal`]); a load applies it, a whole save deletes it.
//! - A context that fails to parse or has an unknown `version` is never overwritten:
//!   it is moved aside to `SESSION_ID.json.corrupt-<unix time>` and reported.
//! - Transcripts and the audit log only grow (see [`transcript`], [`audit`]).
//! - One holder per session lock, across processes ([`SessionLock`], `flock(2)`).
//!
//! Here: opening the directory and naming its files. Contexts are saved, loaded and
//! listed in [`sessions`], locked in [`lock`], removed in [`remove`].

mod atomic;
pub mod audit;
pub mod changes;
pub mod context;
mod journal;
mod lock;
pub mod memory;
mod relocate;
mod remove;
mod sessions;
pub mod transcript;
pub mod undo;
pub mod versions;

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::SystemTime;

use familiar_protocol::ids::SessionId;

use self::atomic::TEMP_MARKER;

pub use audit::{AuditContents, AuditDecision, AuditEntry, AuditOutcome, args_digest};
pub use changes::{Change, TaskChanges};
pub use context::{
    CONTEXT_VERSION, Context, TaskRecord, ToolStats, now_rfc3339, title_from_prompt,
};
pub use journal::ContextJournal;
pub use lock::SessionLock;
pub use memory::{Memory, MemoryEntry, MemoryError, MemoryScope, Remembered};
pub use relocate::{Relocated, holds_data};
pub use sessions::SessionSummary;
pub use transcript::{Transcript, TranscriptContents};
pub use undo::{Refusal, UndoError, Undone, home_trash, undo};
pub use versions::{Versions, sha256_hex};

const CONTEXT_DIR: &str = "context";
const TRANSCRIPT_DIR: &str = "transcripts";
const WORKSPACE_DIR: &str = "workspaces";
const AUDIT_FILE: &str = "audit.jsonl";
// Temp files are `.SESSION_ID.json.tmp-PID-RANDOM`: ids never start with a dot, so a temp
// file can never be mistaken for a session.

/// Runs `f`, which blocks on the disk (a synced write, a context load), without
/// holding up the async tasks that share its runtime thread: on a multi-threaded
/// runtime they move to another worker while `f` runs. Under load (50 tasks syncing
/// at once on a slow disk) the daemon's two workers would otherwise both sit in
/// `fsync` and its D-Bus answers wait behind them.
pub fn off_runtime<R>(f: impl FnOnce() -> R) -> R {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    // The OS error is part of the message and deliberately not a `#[source]`: anyhow's
    // `{:#}` printed it twice ("... (os error 28): No space left on device (os error 28)").
    #[error("{what} {}: {err}{}", path.display(), io_hint(err))]
    Io {
        what: &'static str,
        path: PathBuf,
        err: std::io::Error,
    },
    #[error(
        "session file {} is unreadable ({reason}); moved aside to {}",
        path.display(),
        moved_to.display()
    )]
    Corrupt {
        path: PathBuf,
        moved_to: PathBuf,
        reason: String,
    },
    #[error("session {0} is busy: another task is running in it")]
    SessionBusy(SessionId),
    #[error("context version {0} cannot be written by this build (it writes {CONTEXT_VERSION})")]
    UnsupportedVersion(u32),
    #[error("a transcript entry must be a JSON object")]
    NotAnObject,
    #[error("cannot serialise: {0}")]
    Serialize(#[source] serde_json::Error),
}

impl StoreError {
    fn io(what: &'static str, path: &Path, err: std::io::Error) -> StoreError {
        StoreError::Io {
            what,
            path: path.to_owned(),
            err,
        }
    }
}

/// What a person can do about an I/O failure in the data directory, for the errors that
/// have a remedy outside familiar.
fn io_hint(e: &std::io::Error) -> &'static str {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::StorageFull | ErrorKind::QuotaExceeded | ErrorKind::FileTooLarge => {
            " (the disk holding familiar's data directory is full: free some space, then run the task again; the session keeps what was saved)"
        }
        ErrorKind::ReadOnlyFilesystem => {
            " (familiar's data directory is on a read-only filesystem: remount it read-write, or point `data_dir` in config.toml at a writable directory)"
        }
        ErrorKind::PermissionDenied => {
            " (familiar cannot write its data directory: check that it belongs to you, or point `data_dir` in config.toml at a writable directory)"
        }
        _ => "",
    }
}

/// The data directory, opened.
#[derive(Debug)]
pub struct Store {
    data_dir: PathBuf,
    audit: File,
    /// Set when an audit append failed (a full disk can leave half a line): the next
    /// append starts a fresh line so it is not glued onto the torn one.
    audit_torn: AtomicBool,
}

impl Store {
    /// Opens (creating) the data directory: `data_dir` mode 0700, its `context/`,
    /// `transcripts/`, `workspaces/`, and `audit.jsonl`. Removes temp files left by
    /// writers that are no longer running.
    pub fn open(data_dir: &Path) -> Result<Store, StoreError> {
        let mkdir = |dir: &Path| {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| StoreError::io("cannot create", dir, e))
        };
        mkdir(data_dir)?;
        // `DirBuilder::mode` does not change a directory that already exists.
        fs::set_permissions(data_dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| StoreError::io("cannot set permissions on", data_dir, e))?;
        for sub in [CONTEXT_DIR, TRANSCRIPT_DIR, WORKSPACE_DIR] {
            mkdir(&data_dir.join(sub))?;
        }
        let audit_path = data_dir.join(AUDIT_FILE);
        let audit = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&audit_path)
            .map_err(|e| StoreError::io("cannot open", &audit_path, e))?;
        let store = Store {
            data_dir: data_dir.to_owned(),
            audit_torn: AtomicBool::new(audit::ends_torn(&audit_path)),
            audit,
        };
        store.remove_stale_temp_files();
        Ok(store)
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// `context/SESSION_ID.json`.
    pub fn context_path(&self, id: &SessionId) -> PathBuf {
        self.data_dir.join(CONTEXT_DIR).join(format!("{id}.json"))
    }

    /// `transcripts/SESSION_ID.jsonl`.
    pub fn transcript_path(&self, id: &SessionId) -> PathBuf {
        self.data_dir
            .join(TRANSCRIPT_DIR)
            .join(format!("{id}.jsonl"))
    }

    /// `audit.jsonl`.
    pub fn audit_path(&self) -> PathBuf {
        self.data_dir.join(AUDIT_FILE)
    }

    /// `workspaces/SESSION_ID`: a task's scratch directory when it was given none.
    /// Only the path; [`Store::ensure_workspace`] creates it.
    pub fn workspace_dir(&self, id: &SessionId) -> PathBuf {
        self.data_dir.join(WORKSPACE_DIR).join(id.as_str())
    }

    /// [`Store::workspace_dir`], created (mode 0700) if missing.
    pub fn ensure_workspace(&self, id: &SessionId) -> Result<PathBuf, StoreError> {
        let dir = self.workspace_dir(id);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| StoreError::io("cannot create", &dir, e))?;
        Ok(dir)
    }

    /// Deletes temp files whose writer process is gone; a live writer's file is left
    /// alone (another `familiar` process may be saving right now).
    fn remove_stale_temp_files(&self) {
        let dir = self.data_dir.join(CONTEXT_DIR);
        let Ok(entries) = fs::read_dir(&dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(temp_file_pid) else {
                continue;
            };
            // Our own pid: another thread may be saving right now.
            if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
                continue;
            }
            if let Err(e) = fs::remove_file(entry.path()) {
                tracing::warn!(path = %entry.path().display(), error = %e, "cannot remove a stale temp file");
            }
        }
    }
}

/// The writer's pid in a temp file name `.ID.json.tmp-PID-RANDOM`.
fn temp_file_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix('.')?;
    let (_, tail) = rest.split_once(TEMP_MARKER)?;
    tail.split('-').next()?.parse().ok()
}

/// Moves `path` to `path.corrupt-<unix time>` (or `…-<unix time>-N` if that exists),
/// never replacing an existing file.
fn move_aside(path: &Path) -> Result<PathBuf, StoreError> {
    move_aside_to(path, path)
}

/// Moves `path` to `dest.corrupt-<unix time>` (or `…-<unix time>-N` if that exists),
/// never replacing an existing file. `dest` must be on the same file system.
fn move_aside_to(path: &Path, dest: &Path) -> Result<PathBuf, StoreError> {
    let secs = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let base = format!("{}.corrupt-{secs}", dest.display());
    for n in 0..1000 {
        let dest = PathBuf::from(if n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        // link + unlink rather than rename: link fails if `dest` exists, rename would
        // silently replace an earlier corrupt copy.
        match fs::hard_link(path, &dest) {
            Ok(()) => {
                fs::remove_file(path).map_err(|e| StoreError::io("cannot remove", path, e))?;
                return Ok(dest);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(StoreError::io("cannot move aside", path, e)),
        }
    }
    Err(StoreError::io(
        "cannot move aside",
        path,
        std::io::Error::other("too many corrupt copies"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn sid(s: &str) -> SessionId {
        SessionId::new(s).unwrap()
    }

    pub(super) fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("data")).unwrap();
        (dir, store)
    }

    #[test]
    fn open_creates_the_layout_private() {
        let (_dir, store) = store();
        for sub in ["context", "transcripts", "workspaces"] {
            assert!(store.data_dir().join(sub).is_dir(), "{sub}");
        }
        let mode = fs::metadata(store.data_dir()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[test]
    fn open_removes_temp_files_of_dead_writers_only() {
        let (_dir, store) = store();
        let ctx_dir = store.data_dir().join("context");
        // pid_max is at most 2^22, so this writer is certainly dead.
        let dead = ctx_dir.join(".s1.json.tmp-99999999-0");
        let live = ctx_dir.join(format!(".s1.json.tmp-{}-7", std::process::id()));
        fs::write(&dead, b"{").unwrap();
        fs::write(&live, b"{").unwrap();
        let _reopened = Store::open(store.data_dir()).unwrap();
        assert!(!dead.exists());
        assert!(live.exists());
    }

    #[test]
    fn workspace_is_created_on_demand() {
        let (_dir, store) = store();
        let path = store.workspace_dir(&sid("s1"));
        assert!(!path.exists());
        assert_eq!(store.ensure_workspace(&sid("s1")).unwrap(), path);
        assert!(path.is_dir());
    }
}
