//! The runtime data directory (DESIGN §6): session contexts, transcripts, the audit log,
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

mod atomic;
pub mod audit;
pub mod context;
mod journal;
pub mod memory;
mod relocate;
mod remove;
pub mod transcript;

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use serde::Deserialize;
use serde::de::IgnoredAny;

use self::atomic::TEMP_MARKER;
use crate::ids::{SessionId, SoulId};

pub use audit::{AuditContents, AuditDecision, AuditEntry, AuditOutcome, args_digest};
pub use context::{
    CONTEXT_VERSION, Context, Outcome, Plan, PlanStep, StepStatus, TaskRecord, TaskStatus,
    ToolStats, now_rfc3339, title_from_prompt,
};
pub use journal::ContextJournal;
pub use memory::{Memory, MemoryEntry, MemoryError, MemoryScope, Remembered};
pub use relocate::{Relocated, holds_data};
pub use transcript::{Transcript, TranscriptContents};

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

/// One line of [`Store::list_sessions`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SessionSummary {
    pub id: SessionId,
    pub soul: SoulId,
    pub title: String,
    /// Unix seconds (0 when the file's timestamp does not parse).
    pub updated_at: u64,
    /// RFC 3339 UTC, as the context has it.
    pub created_at: String,
    /// How many tasks the session has run.
    pub tasks: usize,
}

/// Holds a session's lock until dropped (the kernel drops it if the process dies).
#[derive(Debug)]
pub struct SessionLock {
    id: SessionId,
    // Holding the descriptor is what holds the lock.
    file: File,
}

impl SessionLock {
    pub fn session_id(&self) -> &SessionId {
        &self.id
    }
}

impl Drop for SessionLock {
    fn drop(&mut self) {
        // Unlock explicitly rather than by closing: a child forked at this moment holds a
        // copy of the descriptor until its exec closes it (close-on-exec), and a flock
        // lives as long as any copy does, so closing alone could leave the session busy
        // for a moment. LOCK_UN releases it for every copy at once.
        if let Err(e) = self.file.unlock() {
            tracing::warn!(session_id = %self.id, "cannot unlock the session: {e}");
        }
    }
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

    /// Replaces the session's context file atomically (see the module invariants) with
    /// the next `revision`, then deletes the session's journal, which the new file
    /// holds. `ctx.revision` is bumped only when the file was written.
    pub fn save_context(&self, ctx: &mut Context) -> Result<(), StoreError> {
        ctx.revision += 1;
        let written = self
            .write_temp(ctx)
            .and_then(|temp| atomic::commit(temp, &self.context_path(&ctx.session_id)));
        if written.is_err() {
            ctx.revision -= 1;
            return written;
        }
        // Left behind (a crash, or this failing), it names the old revision and is
        // ignored on load: not worth failing the save for.
        let journal = self.journal_path(&ctx.session_id);
        match fs::remove_file(&journal) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %journal.display(), error = %e, "cannot remove a session journal")
            }
        }
        Ok(())
    }

    /// Writes `ctx` to a fresh, synced temp file beside its target; the first half of
    /// [`Store::save_context`], split so tests can stop between the halves.
    fn write_temp(&self, ctx: &Context) -> Result<tempfile::TempPath, StoreError> {
        if ctx.version != CONTEXT_VERSION {
            return Err(StoreError::UnsupportedVersion(ctx.version));
        }
        let dir = self.data_dir.join(CONTEXT_DIR);
        atomic::write_temp(&dir, ctx.session_id.as_str(), |w| {
            serde_json::to_writer(w, ctx).map_err(StoreError::Serialize)
        })
    }

    /// The session's context, `None` when it has none. A file that does not parse or
    /// has another `version` is moved aside and reported as [`StoreError::Corrupt`].
    pub fn load_context(&self, id: &SessionId) -> Result<Option<Context>, StoreError> {
        let path = self.context_path(id);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::io("cannot read", &path, e)),
        };
        let reason = match serde_json::from_slice::<Context>(&bytes) {
            Ok(mut ctx) if ctx.version == CONTEXT_VERSION && &ctx.session_id == id => {
                journal::replay(&self.journal_path(id), &mut ctx)?;
                return Ok(Some(ctx));
            }
            Ok(ctx) if ctx.version != CONTEXT_VERSION => unknown_version(ctx.version),
            Ok(ctx) => format!("it holds session `{}`", ctx.session_id),
            // A newer schema may fail to parse as ours: name the version when it has one.
            Err(e) => match serde_json::from_slice::<VersionProbe>(&bytes) {
                Ok(VersionProbe { version: Some(v) }) if v != CONTEXT_VERSION => unknown_version(v),
                Ok(_) | Err(_) => format!("invalid JSON context: {e}"),
            },
        };
        let moved_to = move_aside(&path)?;
        tracing::warn!(path = %path.display(), moved_to = %moved_to.display(), %reason, "moved an unreadable session context aside");
        Err(StoreError::Corrupt {
            path,
            moved_to,
            reason,
        })
    }

    /// Opens the session's transcript for appending.
    pub fn transcript(&self, id: &SessionId) -> Result<Transcript, StoreError> {
        Transcript::open(self.transcript_path(id))
    }

    /// Every parseable entry of the session's transcript (empty when it has none).
    /// Torn lines (a crash mid-append) are skipped with a warning; use
    /// [`Store::read_transcript_contents`] to learn which.
    pub fn read_transcript(&self, id: &SessionId) -> Result<Vec<serde_json::Value>, StoreError> {
        Ok(self.read_transcript_contents(id)?.entries)
    }

    pub fn read_transcript_contents(
        &self,
        id: &SessionId,
    ) -> Result<TranscriptContents, StoreError> {
        let path = self.transcript_path(id);
        if !path.exists() {
            return Ok(TranscriptContents {
                entries: Vec::new(),
                torn_lines: Vec::new(),
            });
        }
        transcript::read(&path)
    }

    /// Appends one line to `audit.jsonl`.
    pub fn audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        let fresh_line = self.audit_torn.load(Ordering::Acquire);
        match audit::append_line(&self.audit, entry, fresh_line) {
            Ok(()) => {
                self.audit_torn.store(false, Ordering::Release);
                Ok(())
            }
            Err(e) => {
                self.audit_torn.store(true, Ordering::Release);
                Err(StoreError::io("cannot append to", &self.audit_path(), e))
            }
        }
    }

    /// Every parseable line of `audit.jsonl`; torn lines (a crash or a full disk
    /// mid-append) are skipped and numbered in the result.
    pub fn read_audit(&self) -> Result<AuditContents, StoreError> {
        let path = self.audit_path();
        audit::read(&path).map_err(|e| StoreError::io("cannot read", &path, e))
    }

    /// Takes the session's lock, or fails at once with [`StoreError::SessionBusy`].
    ///
    /// The lock file goes with its session ([`Store::remove_session`] unlinks it while
    /// holding the lock), so a lock taken here is kept only if the name still leads to
    /// the locked file: otherwise its holder removed it meanwhile, and the name is
    /// opened again (two holders never lock two files of one name).
    pub fn lock_session(&self, id: &SessionId) -> Result<SessionLock, StoreError> {
        let path = self.lock_path(id);
        loop {
            let file = atomic::open_lock_file(&path)?;
            // `std`'s `File::try_lock` (flock, stable since Rust 1.89, our minimum):
            // `fs4` and `fd-lock` would add a dependency for the same call.
            match file.try_lock() {
                Ok(()) => {}
                Err(fs::TryLockError::WouldBlock) => {
                    return Err(StoreError::SessionBusy(id.clone()));
                }
                Err(fs::TryLockError::Error(e)) => {
                    return Err(StoreError::io("cannot lock", &path, e));
                }
            }
            if atomic::still_named(&file, &path)? {
                return Ok(SessionLock {
                    id: id.clone(),
                    file,
                });
            }
        }
    }

    fn lock_path(&self, id: &SessionId) -> PathBuf {
        self.data_dir.join(CONTEXT_DIR).join(format!("{id}.lock"))
    }

    /// Every session, newest first. Unreadable contexts are skipped with a warning and
    /// left where they are (only [`Store::load_context`] moves files).
    pub fn list_sessions(&self) -> Result<Vec<SessionSummary>, StoreError> {
        let dir = self.data_dir.join(CONTEXT_DIR);
        let entries = fs::read_dir(&dir).map_err(|e| StoreError::io("cannot list", &dir, e))?;
        // With each one's update time in milliseconds: several sessions end within the
        // same second (a script, `-c` right after), and `-c` takes the first (issue 26).
        let mut sessions: Vec<(u128, SessionSummary)> = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| StoreError::io("cannot list", &dir, e))?;
            let name = entry.file_name();
            let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(|n| SessionId::new(n).ok())
            else {
                continue;
            };
            match read_summary(&entry.path()) {
                Ok(s) if s.1.id == id => sessions.push(s),
                Ok((_, s)) => {
                    tracing::warn!(path = %entry.path().display(), holds = %s.id, "skipping a context file named for another session");
                }
                Err(reason) => {
                    tracing::warn!(path = %entry.path().display(), %reason, "skipping an unreadable session context");
                }
            }
        }
        sessions.sort_by(|(a_ms, a), (b_ms, b)| b_ms.cmp(a_ms).then(a.id.cmp(&b.id)));
        Ok(sessions.into_iter().map(|(_, s)| s).collect())
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

fn unknown_version(v: u32) -> String {
    format!("unknown context version {v} (this build reads {CONTEXT_VERSION})")
}

#[derive(Deserialize)]
struct VersionProbe {
    version: Option<u32>,
}

/// Just what a listing shows; parsing skips the history without building it.
#[derive(Deserialize)]
struct SummaryProbe {
    version: u32,
    session_id: SessionId,
    soul: SoulId,
    #[serde(default)]
    title: String,
    #[serde(default)]
    created_at: String,
    updated_at: String,
    #[serde(default)]
    tasks: Vec<IgnoredAny>,
}

/// Why a listing skips a context file (it is logged, and the file is left alone).
#[derive(Debug, thiserror::Error)]
enum Unlisted {
    #[error("{0}")]
    Open(#[from] std::io::Error),
    #[error("invalid JSON context: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{}", unknown_version(*.0))]
    Version(u32),
}

/// The summary, and its update time in milliseconds (0 when it does not parse).
fn read_summary(path: &Path) -> Result<(u128, SessionSummary), Unlisted> {
    let file = File::open(path)?;
    let probe: SummaryProbe = serde_json::from_reader(std::io::BufReader::new(file))?;
    if probe.version != CONTEXT_VERSION {
        return Err(Unlisted::Version(probe.version));
    }
    let updated_ms = humantime::parse_rfc3339_weak(&probe.updated_at)
        .ok()
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis());
    Ok((
        updated_ms,
        SessionSummary {
            id: probe.session_id,
            soul: probe.soul,
            title: probe.title,
            updated_at: context::unix_secs(&probe.updated_at).unwrap_or(0),
            created_at: probe.created_at,
            tasks: probe.tasks.len(),
        },
    ))
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
mod tests;
