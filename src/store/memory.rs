//! Long-term memory: `data_dir/memory.json`, the facts the user approved for one soul
//! (or for every soul) to keep across sessions.
//!
//! Invariants:
//! - Every operation runs under an exclusive `flock` on `context/.memory.lock`, and a
//!   change is read, modified and written under it: the daemon and `familiar memory` in
//!   another process never lose each other's changes.
//! - The file is replaced atomically (temp file, fsync, rename, fsync the directory):
//!   after a crash it holds the old or the new entries, never a torn list.
//! - A file that fails to parse or has an unknown `version` is never overwritten: it is
//!   moved aside (`context/memory.json.corrupt-<unix time>`) and reported; the next
//!   change starts an empty memory.
//! - Everything memory leaves on disk besides `memory.json` itself (lock, temp files,
//!   corrupt copies) lives under `context/`, which the policy protects from tools like
//!   `memory.json`: no tool can read or plant a memory behind the user's back.
//! - At most `max_per_scope` entries per scope. A full scope is an error, never a silent
//!   eviction: each entry was approved by the user, only they decide what goes.

use std::fmt;
use std::fs::{self, File};
use std::path::{Path, PathBuf};

use familiar_protocol::ids::{IdError, MemoryId, SessionId, SoulId};
use serde::{Deserialize, Serialize};

use super::{CONTEXT_DIR, StoreError, atomic, move_aside_to, now_rfc3339};

/// The `version` this build reads and writes.
pub const MEMORY_VERSION: u32 = 1;
/// The file's name in the data dir.
pub const MEMORY_FILE: &str = "memory.json";
/// Longest fact, in characters: memory goes into every system prompt of the soul.
pub const MAX_FACT_CHARS: usize = 500;
/// How an entry for every soul is spelled in the file, on D-Bus and on the CLI.
pub const ALL_SOULS: &str = "*";
const LOCK_FILE: &str = ".memory.lock";

/// Whose memory an entry is: one soul's, or every soul's.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum MemoryScope {
    /// Every soul sees it (`*`).
    All,
    Soul(SoulId),
}

impl MemoryScope {
    /// Whether a task of `soul` sees entries of this scope.
    pub fn includes(&self, soul: &SoulId) -> bool {
        match self {
            MemoryScope::All => true,
            MemoryScope::Soul(s) => s == soul,
        }
    }
}

impl TryFrom<String> for MemoryScope {
    type Error = IdError;
    fn try_from(s: String) -> Result<Self, IdError> {
        if s == ALL_SOULS {
            Ok(MemoryScope::All)
        } else {
            SoulId::new(s).map(MemoryScope::Soul)
        }
    }
}

impl std::str::FromStr for MemoryScope {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, IdError> {
        MemoryScope::try_from(s.to_owned())
    }
}

impl From<MemoryScope> for String {
    fn from(s: MemoryScope) -> String {
        match s {
            MemoryScope::All => ALL_SOULS.to_owned(),
            MemoryScope::Soul(id) => id.into(),
        }
    }
}

impl fmt::Display for MemoryScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemoryScope::All => f.pad(ALL_SOULS),
            MemoryScope::Soul(id) => id.fmt(f),
        }
    }
}

/// One remembered fact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryEntry {
    pub id: MemoryId,
    /// One line, at most [`MAX_FACT_CHARS`] characters.
    pub text: String,
    pub soul: MemoryScope,
    /// RFC 3339 UTC.
    pub created: String,
    /// The session whose task remembered it.
    pub session: SessionId,
}

/// `memory.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct MemoryFile {
    version: u32,
    #[serde(default)]
    entries: Vec<MemoryEntry>,
}

#[derive(Deserialize)]
struct VersionProbe {
    version: Option<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "memory file {} is unreadable ({reason}); moved aside to {}",
        path.display(),
        moved_to.display()
    )]
    Corrupt {
        path: PathBuf,
        moved_to: PathBuf,
        reason: String,
    },
    #[error("no memory entry `{0}`")]
    NotFound(String),
    #[error(
        "the memory of {scope} is full ({max} entries): forget an entry first (its id is in the notes)"
    )]
    Full { scope: MemoryScope, max: usize },
    #[error("the fact is empty")]
    Empty,
    #[error("the fact has {0} characters; at most {MAX_FACT_CHARS} fit")]
    TooLong(usize),
}

/// What [`Memory::remember`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remembered {
    New(MemoryEntry),
    /// The same fact was already in that scope; nothing changed.
    Already(MemoryEntry),
}

/// The memory file of one data dir.
#[derive(Debug, Clone)]
pub struct Memory {
    path: PathBuf,
    /// `data_dir/context`: lock, temp files and corrupt copies.
    private_dir: PathBuf,
    max_per_scope: usize,
}

impl Memory {
    /// The memory of `data_dir` (which [`super::Store::open`] has created), at most
    /// `max_per_scope` entries per scope. Touches nothing on disk.
    pub fn new(data_dir: &Path, max_per_scope: usize) -> Memory {
        Memory {
            path: data_dir.join(MEMORY_FILE),
            private_dir: data_dir.join(CONTEXT_DIR),
            max_per_scope: max_per_scope.max(1),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn max_per_scope(&self) -> usize {
        self.max_per_scope
    }

    /// Every entry, oldest first.
    pub fn list(&self) -> Result<Vec<MemoryEntry>, MemoryError> {
        let _lock = self.lock()?;
        Ok(self.load()?.entries)
    }

    /// What a task of `soul` sees: its own entries and those for every soul, oldest
    /// first.
    pub fn for_soul(&self, soul: &SoulId) -> Result<Vec<MemoryEntry>, MemoryError> {
        let mut entries = self.list()?;
        entries.retain(|e| e.soul.includes(soul));
        Ok(entries)
    }

    /// Adds `fact` (whitespace folded to single spaces) to `scope`. The same fact twice
    /// in one scope is stored once.
    pub fn remember(
        &self,
        fact: &str,
        scope: MemoryScope,
        session: &SessionId,
    ) -> Result<Remembered, MemoryError> {
        let text = fact.split_whitespace().collect::<Vec<_>>().join(" ");
        if text.is_empty() {
            return Err(MemoryError::Empty);
        }
        let chars = text.chars().count();
        if chars > MAX_FACT_CHARS {
            return Err(MemoryError::TooLong(chars));
        }
        let _lock = self.lock()?;
        let mut file = self.load()?;
        if let Some(e) = file
            .entries
            .iter()
            .find(|e| e.soul == scope && e.text == text)
        {
            return Ok(Remembered::Already(e.clone()));
        }
        if file.entries.iter().filter(|e| e.soul == scope).count() >= self.max_per_scope {
            return Err(MemoryError::Full {
                scope,
                max: self.max_per_scope,
            });
        }
        let entry = MemoryEntry {
            id: MemoryId::generate(),
            text,
            soul: scope,
            created: now_rfc3339(),
            session: session.clone(),
        };
        file.entries.push(entry.clone());
        self.save(&file)?;
        Ok(Remembered::New(entry))
    }

    /// Removes one entry and returns it.
    pub fn forget(&self, id: &str) -> Result<MemoryEntry, MemoryError> {
        let _lock = self.lock()?;
        let mut file = self.load()?;
        let Some(i) = file.entries.iter().position(|e| e.id.as_str() == id) else {
            return Err(MemoryError::NotFound(id.to_owned()));
        };
        let entry = file.entries.remove(i);
        self.save(&file)?;
        Ok(entry)
    }

    /// Removes every entry of `scope` (every entry when `None`); returns how many.
    pub fn clear(&self, scope: Option<&MemoryScope>) -> Result<usize, MemoryError> {
        let _lock = self.lock()?;
        let mut file = self.load()?;
        let before = file.entries.len();
        file.entries.retain(|e| scope.is_some_and(|s| e.soul != *s));
        let removed = before - file.entries.len();
        if removed > 0 {
            self.save(&file)?;
        }
        Ok(removed)
    }

    /// Adds the entries of `other` (another data dir's memory) that this one lacks
    /// (the same id, or the same fact in the same scope, is there already), then
    /// removes `other`'s file; returns how many were added. A scope may end up past
    /// `max_per_scope`: each entry was approved by the user, so none is dropped.
    pub fn take_in(&self, other: &Memory) -> Result<usize, MemoryError> {
        let _theirs = other.lock()?;
        let _ours = self.lock()?;
        let theirs = other.load()?;
        let mut file = self.load()?;
        let mut added = 0;
        for entry in theirs.entries {
            let known = file
                .entries
                .iter()
                .any(|e| e.id == entry.id || (e.soul == entry.soul && e.text == entry.text));
            if !known {
                file.entries.push(entry);
                added += 1;
            }
        }
        if added > 0 {
            self.save(&file)?;
        }
        match fs::remove_file(&other.path) {
            Ok(()) => Ok(added),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(added),
            Err(e) => Err(StoreError::io("cannot remove", &other.path, e).into()),
        }
    }

    /// Holds the memory lock until dropped (the kernel drops it if the process dies).
    fn lock(&self) -> Result<File, MemoryError> {
        let path = self.private_dir.join(LOCK_FILE);
        let file = atomic::open_lock_file(&path)?;
        file.lock()
            .map_err(|e| StoreError::io("cannot lock", &path, e))?;
        Ok(file)
    }

    /// The file's entries (none when it does not exist). Call only under the lock.
    fn load(&self) -> Result<MemoryFile, MemoryError> {
        let bytes = match fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(MemoryFile {
                    version: MEMORY_VERSION,
                    entries: Vec::new(),
                });
            }
            Err(e) => return Err(StoreError::io("cannot read", &self.path, e).into()),
        };
        let reason = match serde_json::from_slice::<MemoryFile>(&bytes) {
            Ok(file) if file.version == MEMORY_VERSION => return Ok(file),
            Ok(file) => unknown_version(file.version),
            // A newer schema may fail to parse as ours: name the version when it has one.
            Err(e) => match serde_json::from_slice::<VersionProbe>(&bytes) {
                Ok(VersionProbe { version: Some(v) }) if v != MEMORY_VERSION => unknown_version(v),
                Ok(_) | Err(_) => format!("invalid JSON memory: {e}"),
            },
        };
        let moved_to = move_aside_to(&self.path, &self.private_dir.join(MEMORY_FILE))?;
        tracing::warn!(path = %self.path.display(), moved_to = %moved_to.display(), %reason, "moved an unreadable memory file aside");
        Err(MemoryError::Corrupt {
            path: self.path.clone(),
            moved_to,
            reason,
        })
    }

    /// Replaces the file atomically. Call only under the lock.
    fn save(&self, file: &MemoryFile) -> Result<(), MemoryError> {
        // `.memory.json.tmp-PID-RANDOM` in context/: the store's stale-temp sweep knows the
        // pattern, and tools never see it.
        let temp = atomic::write_temp(&self.private_dir, "memory", |w| {
            serde_json::to_writer_pretty(w, file).map_err(StoreError::Serialize)
        })?;
        atomic::commit(temp, &self.path)?;
        Ok(())
    }
}

fn unknown_version(v: u32) -> String {
    format!("unknown memory version {v} (this build reads {MEMORY_VERSION})")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(max: usize) -> (tempfile::TempDir, Memory) {
        let dir = tempfile::tempdir().unwrap();
        let store = super::super::Store::open(&dir.path().join("data")).unwrap();
        let m = Memory::new(store.data_dir(), max);
        (dir, m)
    }

    fn soul(s: &str) -> MemoryScope {
        MemoryScope::Soul(SoulId::new(s).unwrap())
    }

    fn session() -> SessionId {
        SessionId::new("s-1").unwrap()
    }

    fn added(r: Remembered) -> MemoryEntry {
        match r {
            Remembered::New(e) => e,
            Remembered::Already(e) => panic!("already there: {e:?}"),
        }
    }

    #[test]
    fn entries_round_trip_with_the_documented_keys() {
        let (_d, m) = memory(10);
        let e = added(
            m.remember("my backup disk is /mnt/backup", soul("desktop"), &session())
                .unwrap(),
        );
        assert!(e.id.as_str().starts_with("m-"));
        assert_eq!(m.list().unwrap(), std::slice::from_ref(&e));
        let v: serde_json::Value = serde_json::from_slice(&fs::read(m.path()).unwrap()).unwrap();
        assert_eq!(v["version"], 1);
        assert_eq!(
            v["entries"][0],
            serde_json::json!({"id": e.id, "text": "my backup disk is /mnt/backup", "soul": "desktop", "created": e.created, "session": "s-1"})
        );
    }

    #[test]
    fn a_soul_sees_its_own_entries_and_those_for_all() {
        let (_d, m) = memory(10);
        let a = added(m.remember("a", soul("desktop"), &session()).unwrap());
        let all = added(m.remember("b", MemoryScope::All, &session()).unwrap());
        added(m.remember("c", soul("research_agent"), &session()).unwrap());
        let desktop = SoulId::new("desktop").unwrap();
        assert_eq!(m.for_soul(&desktop).unwrap(), [a, all]);
        assert_eq!(m.list().unwrap().len(), 3);
    }

    #[test]
    fn whitespace_is_folded_and_a_repeated_fact_is_kept_once() {
        let (_d, m) = memory(10);
        let e = added(
            m.remember(
                " never touch\n\nthe vm\tin ~/vms ",
                MemoryScope::All,
                &session(),
            )
            .unwrap(),
        );
        assert_eq!(e.text, "never touch the vm in ~/vms");
        assert_eq!(
            m.remember("never touch the vm in ~/vms", MemoryScope::All, &session())
                .unwrap(),
            Remembered::Already(e)
        );
        // The same text in another scope is another entry.
        added(
            m.remember("never touch the vm in ~/vms", soul("desktop"), &session())
                .unwrap(),
        );
        assert!(matches!(
            m.remember(" \n", MemoryScope::All, &session()),
            Err(MemoryError::Empty)
        ));
        assert!(matches!(
            m.remember(
                &"x".repeat(MAX_FACT_CHARS + 1),
                MemoryScope::All,
                &session()
            ),
            Err(MemoryError::TooLong(501))
        ));
    }

    #[test]
    fn a_full_scope_refuses_instead_of_evicting() {
        let (_d, m) = memory(2);
        added(m.remember("1", soul("desktop"), &session()).unwrap());
        added(m.remember("2", soul("desktop"), &session()).unwrap());
        let err = m.remember("3", soul("desktop"), &session()).unwrap_err();
        assert!(matches!(err, MemoryError::Full { max: 2, .. }), "{err}");
        assert!(err.to_string().contains("forget"), "{err}");
        // Other scopes have their own room.
        added(m.remember("3", MemoryScope::All, &session()).unwrap());
        assert_eq!(m.list().unwrap().len(), 3);
    }

    #[test]
    fn forget_and_clear_by_scope() {
        let (_d, m) = memory(10);
        let a = added(m.remember("a", soul("desktop"), &session()).unwrap());
        added(m.remember("b", soul("desktop"), &session()).unwrap());
        let c = added(m.remember("c", MemoryScope::All, &session()).unwrap());
        assert_eq!(m.forget(a.id.as_str()).unwrap(), a);
        assert!(matches!(
            m.forget(a.id.as_str()),
            Err(MemoryError::NotFound(_))
        ));
        assert_eq!(m.clear(Some(&soul("desktop"))).unwrap(), 1);
        assert_eq!(m.list().unwrap(), [c]);
        assert_eq!(m.clear(None).unwrap(), 1);
        assert_eq!(m.list().unwrap(), []);
    }

    #[test]
    fn a_corrupt_file_is_moved_aside_reported_and_never_overwritten() {
        for (contents, reason) in [
            (&b"{\"version\":1,\"entries\":[{"[..], "invalid JSON"),
            (&br#"{"version":2,"entries":[]}"#[..], "version 2"),
            (&br#"{"version":3,"entries":"elsewhere"}"#[..], "version 3"),
        ] {
            let (_d, m) = memory(10);
            fs::write(m.path(), contents).unwrap();
            let err = m.list().unwrap_err();
            let MemoryError::Corrupt {
                moved_to,
                reason: r,
                ..
            } = err
            else {
                panic!("not Corrupt: {err}");
            };
            assert!(r.contains(reason), "{r}");
            assert_eq!(fs::read(&moved_to).unwrap(), contents);
            // Kept where tools cannot read it.
            assert_eq!(moved_to.parent(), Some(m.private_dir.as_path()));
            assert!(!m.path().exists());
            // The next change starts afresh and leaves the copy alone.
            added(m.remember("new", MemoryScope::All, &session()).unwrap());
            assert_eq!(m.list().unwrap().len(), 1);
            assert_eq!(fs::read(&moved_to).unwrap(), contents);
        }
    }

    #[test]
    fn writes_leave_no_temp_file_behind() {
        let (_d, m) = memory(10);
        added(m.remember("a", MemoryScope::All, &session()).unwrap());
        let names: Vec<_> = fs::read_dir(&m.private_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, [LOCK_FILE]);
    }

    #[test]
    fn two_handles_never_lose_each_others_changes() {
        let (_d, m) = memory(1000);
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for i in 0..10 {
                        m.remember(&format!("{t}-{i}"), MemoryScope::All, &session())
                            .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(m.list().unwrap().len(), 40);
    }

    #[test]
    fn scopes_parse_and_print() {
        assert_eq!("*".parse::<MemoryScope>().unwrap(), MemoryScope::All);
        assert_eq!("desktop".parse::<MemoryScope>().unwrap(), soul("desktop"));
        assert!("../x".parse::<MemoryScope>().is_err());
        assert_eq!(MemoryScope::All.to_string(), "*");
    }
}
