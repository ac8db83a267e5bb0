//! Taking in data another directory holds for this data dir: what a daemon wrote to
//! `$XDG_CONFIG_HOME/familiar` on systemd before 254, which gave a user unit's
//! `StateDirectory=` the config dir (see `config::paths::default_data_dir`).
//!
//! Invariants:
//! - Nothing is lost and nothing is overwritten. A file the data dir lacks is moved
//!   in; transcripts and the audit log are appended to the data dir's (both are logs
//!   that only grow); memory entries are merged; a file both hold with other contents
//!   keeps the data dir's and moves the other in beside it as `NAME.moved-UNIXTIME`.
//! - A session is moved only while its lock is held on both sides, so a task running in
//!   it (on either side) is never pulled from under it: a busy session stays and is
//!   taken the next time.
//! - Only familiar's own names are touched (`context/`, `transcripts/`, `workspaces/`,
//!   `audit.jsonl`, `memory.json`): the config dir's `config.toml`, `souls/`, … and
//!   anything of the user's stay. `mcp/` and `precheck/` (scratch that familiar
//!   recreates) are left where they are, as a user may keep their own files under
//!   those names in the config dir.

use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use familiar_protocol::ids::SessionId;
use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};

use super::memory::MEMORY_FILE;
use super::{
    AUDIT_FILE, CONTEXT_DIR, Memory, MemoryError, Store, StoreError, TRANSCRIPT_DIR, WORKSPACE_DIR,
    atomic,
};

/// What [`Store::take_in`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Relocated {
    /// Sessions whose context, journal, transcript and workspace now live here.
    pub sessions: usize,
    /// Audit lines, transcripts and other files moved or appended.
    pub files: usize,
    /// Memory entries added to this data dir's memory.
    pub memories: usize,
    /// Files that both held with different contents: the other's copy, now here.
    pub kept_beside: Vec<PathBuf>,
    /// Sessions left behind because a task ran in them.
    pub busy: Vec<SessionId>,
}

impl Relocated {
    pub fn is_empty(&self) -> bool {
        *self == Relocated::default()
    }
}

impl std::fmt::Display for Relocated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} session(s), {} other file(s), {} memory entr{}",
            self.sessions,
            self.files,
            self.memories,
            if self.memories == 1 { "y" } else { "ies" }
        )?;
        if !self.kept_beside.is_empty() {
            write!(
                f,
                "; kept both copies of {} (the other's is `NAME.moved-…`)",
                self.kept_beside.len()
            )?;
        }
        if !self.busy.is_empty() {
            let ids: Vec<_> = self.busy.iter().map(SessionId::as_str).collect();
            write!(f, "; busy, left for next time: {}", ids.join(", "))?;
        }
        Ok(())
    }
}

/// Whether `dir` holds any of the data-dir names [`Store::take_in`] moves.
pub fn holds_data(dir: &Path) -> bool {
    [
        CONTEXT_DIR,
        TRANSCRIPT_DIR,
        WORKSPACE_DIR,
        AUDIT_FILE,
        MEMORY_FILE,
    ]
    .iter()
    .any(|n| dir.join(n).symlink_metadata().is_ok())
}

impl Store {
    /// Moves the sessions, transcripts, workspaces, audit lines and memory entries that
    /// `from` holds into this data dir (see the module invariants), removing what was
    /// taken from `from`. `memory_max` is the memory's per-scope limit (a merge may pass
    /// it: each entry was approved, none is dropped).
    pub fn take_in(&self, from: &Path, memory_max: usize) -> Result<Relocated, StoreError> {
        let mut done = Relocated::default();
        if from == self.data_dir() || !holds_data(from) {
            return Ok(done);
        }
        if from.join(MEMORY_FILE).exists() {
            // Its lock lives in its context/ (removed below with the other locks).
            fs::create_dir_all(from.join(CONTEXT_DIR))
                .map_err(|e| StoreError::io("cannot create", &from.join(CONTEXT_DIR), e))?;
            let theirs = Memory::new(from, memory_max);
            let ours = Memory::new(self.data_dir(), memory_max);
            done.memories = ours.take_in(&theirs).map_err(|e| match e {
                MemoryError::Store(e) => e,
                other => StoreError::io(
                    "cannot merge the memory of",
                    from,
                    io::Error::other(other.to_string()),
                ),
            })?;
        }
        let context = from.join(CONTEXT_DIR);
        for id in session_ids(&context, ".json")
            .into_iter()
            .chain(session_ids(&from.join(TRANSCRIPT_DIR), ".jsonl"))
            .chain(session_ids(&from.join(WORKSPACE_DIR), ""))
        {
            self.take_session(from, &id, &mut done)?;
        }
        // Whatever else context/ holds (copies moved aside as unreadable, a journal
        // without its context); lock and temp files are the other side's and go.
        for entry in read_dir(&context)? {
            let name = entry.file_name();
            let src = entry.path();
            let text = name.to_string_lossy();
            let busy = done.busy.iter().any(|id| {
                ["json", "journal", "lock"]
                    .iter()
                    .any(|ext| text == format!("{id}.{ext}"))
            });
            let live_temp = super::temp_file_pid(&text)
                .is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
            if busy || live_temp {
                continue;
            }
            if text.ends_with(".lock") || text.starts_with('.') {
                remove_file(&src)?;
            } else {
                let dst = self.data_dir().join(CONTEXT_DIR).join(&name);
                move_in(&src, &dst, &mut done)
                    .map_err(|e| StoreError::io("cannot move", &src, e))?;
                done.files += 1;
            }
        }
        let audit = from.join(AUDIT_FILE);
        if audit.exists() {
            append(&audit, &self.audit_path())
                .map_err(|e| StoreError::io("cannot append", &audit, e))?;
            done.files += 1;
        }
        for dir in [CONTEXT_DIR, TRANSCRIPT_DIR, WORKSPACE_DIR] {
            remove_empty_dir(&from.join(dir));
        }
        Ok(done)
    }

    /// One session's files, under its lock on both sides; a busy session is noted and
    /// left.
    fn take_session(
        &self,
        from: &Path,
        id: &SessionId,
        done: &mut Relocated,
    ) -> Result<(), StoreError> {
        let context = from.join(CONTEXT_DIR);
        let their_lock_path = context.join(format!("{id}.lock"));
        let their_lock = if context.is_dir() {
            let file = atomic::open_lock_file(&their_lock_path)?;
            match file.try_lock() {
                Ok(()) => Some(file),
                Err(fs::TryLockError::WouldBlock) => {
                    done.busy.push(id.clone());
                    return Ok(());
                }
                Err(fs::TryLockError::Error(e)) => {
                    return Err(StoreError::io("cannot lock", &their_lock_path, e));
                }
            }
        } else {
            None
        };
        let _ours = match self.lock_session(id) {
            Ok(lock) => lock,
            Err(StoreError::SessionBusy(_)) => {
                done.busy.push(id.clone());
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let mut any = false;
        for name in [format!("{id}.json"), format!("{id}.journal")] {
            let src = context.join(&name);
            if src.symlink_metadata().is_ok() {
                let dst = self.data_dir().join(CONTEXT_DIR).join(&name);
                move_in(&src, &dst, done).map_err(|e| StoreError::io("cannot move", &src, e))?;
                any = true;
            }
        }
        let transcript = from.join(TRANSCRIPT_DIR).join(format!("{id}.jsonl"));
        if transcript.exists() {
            let dst = self.transcript_path(id);
            append(&transcript, &dst)
                .map_err(|e| StoreError::io("cannot append", &transcript, e))?;
            any = true;
        }
        let workspace = from.join(WORKSPACE_DIR).join(id.as_str());
        if workspace.symlink_metadata().is_ok() {
            move_in(&workspace, &self.workspace_dir(id), done)
                .map_err(|e| StoreError::io("cannot move", &workspace, e))?;
            any = true;
        }
        if any {
            done.sessions += 1;
        }
        if their_lock.is_some() {
            // Nobody else takes this lock again: the directory is no data dir any more.
            remove_file(&their_lock_path)?;
        }
        Ok(())
    }
}

/// The session ids named by `dir`'s entries ending in `suffix` (`""`: directories).
fn session_ids(dir: &Path, suffix: &str) -> Vec<SessionId> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut ids: Vec<SessionId> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let stem = if suffix.is_empty() {
                e.file_type().ok()?.is_dir().then_some(name.as_str())?
            } else {
                name.strip_suffix(suffix)?
            };
            SessionId::new(stem).ok()
        })
        .collect();
    ids.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    ids
}

fn read_dir(dir: &Path) -> Result<Vec<fs::DirEntry>, StoreError> {
    match fs::read_dir(dir) {
        Ok(entries) => entries
            .collect::<Result<_, _>>()
            .map_err(|e| StoreError::io("cannot list", dir, e)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(StoreError::io("cannot list", dir, e)),
    }
}

fn remove_file(path: &Path) -> Result<(), StoreError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StoreError::io("cannot remove", path, e)),
    }
}

/// Removes `dir` if it is empty; anything left in it (a busy session) keeps it.
fn remove_empty_dir(dir: &Path) {
    match fs::remove_dir(dir) {
        Ok(()) => {}
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::DirectoryNotEmpty) => {}
        Err(e) => tracing::warn!(path = %dir.display(), error = %e, "cannot remove"),
    }
}

/// Moves `src` to `dst`. When `dst` exists: directories are merged entry by entry, the
/// same file is dropped from `src`, a different one is moved in beside `dst`.
fn move_in(src: &Path, dst: &Path, done: &mut Relocated) -> io::Result<()> {
    if rename_new(src, dst)? {
        return Ok(());
    }
    let (s, d) = (src.symlink_metadata()?, dst.symlink_metadata()?);
    if s.is_dir() && d.is_dir() {
        for entry in fs::read_dir(src)? {
            let entry = entry?;
            move_in(&entry.path(), &dst.join(entry.file_name()), done)?;
        }
        return fs::remove_dir(src);
    }
    if s.is_file() && d.is_file() && same_contents(src, dst)? {
        return fs::remove_file(src);
    }
    let beside = beside(src, dst)?;
    done.kept_beside.push(beside);
    Ok(())
}

/// Moves `src` to a free `dst.moved-UNIXTIME[-N]` and returns that path.
fn beside(src: &Path, dst: &Path) -> io::Result<PathBuf> {
    let secs = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let base = format!("{}.moved-{secs}", dst.display());
    for n in 0..1000 {
        let candidate = PathBuf::from(if n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        if rename_new(src, &candidate)? {
            return Ok(candidate);
        }
    }
    Err(io::Error::other("too many moved copies"))
}

/// Renames `src` to `dst` unless `dst` exists (`Ok(false)`). Across file systems
/// (`~/.config` on another disk) a file is copied, synced and removed, a directory
/// created and filled entry by entry.
fn rename_new(src: &Path, dst: &Path) -> io::Result<bool> {
    match renameat2(AT_FDCWD, src, AT_FDCWD, dst, RenameFlags::RENAME_NOREPLACE) {
        Ok(()) => return Ok(true),
        Err(nix::errno::Errno::EEXIST) => return Ok(false),
        Err(nix::errno::Errno::EXDEV) => {}
        Err(e) => return Err(e.into()),
    }
    let meta = src.symlink_metadata()?;
    if meta.is_dir() {
        match fs::create_dir(dst) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(e),
        }
        fs::set_permissions(dst, meta.permissions())?;
        for entry in fs::read_dir(src)? {
            let entry = entry?;
            if !rename_new(&entry.path(), &dst.join(entry.file_name()))? {
                return Err(io::Error::other("a directory being created is not empty"));
            }
        }
        fs::remove_dir(src)?;
        return Ok(true);
    }
    if meta.is_symlink() {
        match std::os::unix::fs::symlink(fs::read_link(src)?, dst) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(e),
        }
        fs::remove_file(src)?;
        return Ok(true);
    }
    let mut out = match OpenOptions::new().write(true).create_new(true).open(dst) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::AlreadyExists => return Ok(false),
        Err(e) => return Err(e),
    };
    out.set_permissions(meta.permissions())?;
    io::copy(&mut File::open(src)?, &mut out)?;
    out.sync_all()?;
    fs::remove_file(src)?;
    Ok(true)
}

/// Appends `src` to the log `dst` (created if missing) in one write, on a line of its
/// own, synced; then removes `src`. Both are logs of lines, in the order written.
fn append(src: &Path, dst: &Path) -> io::Result<()> {
    let mut bytes = fs::read(src)?;
    if !bytes.is_empty() {
        if bytes.last() != Some(&b'\n') {
            bytes.push(b'\n');
        }
        if super::audit::ends_torn(dst) {
            bytes.insert(0, b'\n');
        }
        let mut out = OpenOptions::new()
            .append(true)
            .create(true)
            .open(dst)
            .and_then(|f| {
                f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
                Ok(f)
            })?;
        out.write_all(&bytes)?;
        out.sync_all()?;
    }
    fs::remove_file(src)
}

fn same_contents(a: &Path, b: &Path) -> io::Result<bool> {
    let (mut a, mut b) = (File::open(a)?, File::open(b)?);
    if a.metadata()?.len() != b.metadata()?.len() {
        return Ok(false);
    }
    let (mut x, mut y) = ([0u8; 8192], [0u8; 8192]);
    loop {
        let n = a.read(&mut x)?;
        if n == 0 {
            return Ok(true);
        }
        b.read_exact(&mut y[..n])?;
        if x[..n] != y[..n] {
            return Ok(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Context, MemoryScope};

    fn session(n: &str) -> SessionId {
        SessionId::new(n).unwrap()
    }

    fn ctx(id: &str) -> Context {
        Context::new(
            session(id),
            familiar_protocol::ids::SoulId::new("safe_assistant").unwrap(),
            "a prompt",
        )
    }

    /// Regression: a daemon on systemd 252 wrote its data to the config dir.
    /// Everything it wrote comes over; what the data dir already had stays; a clash
    /// keeps both copies; config files are not touched.
    #[test]
    fn data_in_the_config_dir_is_taken_in_with_nothing_lost_or_overwritten() {
        let home = tempfile::tempdir().unwrap();
        let config = home.path().join("config");
        let state = home.path().join("state");
        let theirs = Store::open(&config).unwrap();
        let ours = Store::open(&state).unwrap();
        std::fs::write(config.join("config.toml"), "policy = \"default\"\n").unwrap();
        theirs.save_context(&mut ctx("s-daemon")).unwrap();
        theirs
            .transcript(&session("s-daemon"))
            .unwrap()
            .append(&serde_json::json!({"kind": "from_daemon"}))
            .unwrap();
        ours.transcript(&session("s-both"))
            .unwrap()
            .append(&serde_json::json!({"kind": "ours"}))
            .unwrap();
        theirs
            .transcript(&session("s-both"))
            .unwrap()
            .append(&serde_json::json!({"kind": "theirs"}))
            .unwrap();
        let ws = theirs.ensure_workspace(&session("s-daemon")).unwrap();
        std::fs::write(ws.join("notes.txt"), "daemon wrote this").unwrap();
        let both_ws = theirs.ensure_workspace(&session("s-both")).unwrap();
        std::fs::write(both_ws.join("a.txt"), "theirs").unwrap();
        std::fs::write(both_ws.join("same.txt"), "same").unwrap();
        let our_ws = ours.ensure_workspace(&session("s-both")).unwrap();
        std::fs::write(our_ws.join("a.txt"), "ours").unwrap();
        std::fs::write(our_ws.join("same.txt"), "same").unwrap();
        std::fs::write(config.join("audit.jsonl"), "{\"tool\":\"theirs\"}\n").unwrap();
        std::fs::write(state.join("audit.jsonl"), "{\"tool\":\"ours\"}\n").unwrap();
        for (dir, fact) in [
            (&state, "the cli's fact"),
            (&state, "a shared fact"),
            (&config, "a shared fact"),
            (&config, "the daemon's fact"),
        ] {
            Memory::new(dir, 10)
                .remember(fact, MemoryScope::All, &session("s-x"))
                .unwrap();
        }

        let done = ours.take_in(&config, 10).unwrap();

        assert_eq!(done.sessions, 2, "{done:?}");
        assert_eq!(done.memories, 1, "the same fact is not kept twice");
        assert_eq!(done.kept_beside.len(), 1, "{done:?}");
        assert!(done.busy.is_empty());
        assert!(ours.load_context(&session("s-daemon")).unwrap().is_some());
        let said = |id| {
            ours.read_transcript(&session(id))
                .unwrap()
                .iter()
                .map(|e| e["kind"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(said("s-daemon"), ["from_daemon"]);
        assert_eq!(said("s-both"), ["ours", "theirs"]);
        let ws = ours.workspace_dir(&session("s-daemon"));
        assert_eq!(
            std::fs::read_to_string(ws.join("notes.txt")).unwrap(),
            "daemon wrote this"
        );
        assert_eq!(
            std::fs::read_to_string(our_ws.join("a.txt")).unwrap(),
            "ours"
        );
        assert_eq!(
            std::fs::read_to_string(&done.kept_beside[0]).unwrap(),
            "theirs"
        );
        assert!(our_ws.join("same.txt").is_file());
        assert_eq!(
            std::fs::read_to_string(state.join("audit.jsonl")).unwrap(),
            "{\"tool\":\"ours\"}\n{\"tool\":\"theirs\"}\n"
        );
        let facts: Vec<_> = Memory::new(&state, 10)
            .list()
            .unwrap()
            .into_iter()
            .map(|e| e.text)
            .collect();
        assert_eq!(
            facts,
            ["the cli's fact", "a shared fact", "the daemon's fact"]
        );
        // The config dir keeps its config and nothing of the data.
        assert!(config.join("config.toml").is_file());
        assert!(!holds_data(&config), "{:?}", std::fs::read_dir(&config));
        // A second run finds nothing.
        assert!(ours.take_in(&config, 10).unwrap().is_empty());
    }

    #[test]
    fn a_session_a_task_runs_in_stays_until_next_time() {
        let home = tempfile::tempdir().unwrap();
        let (config, state) = (home.path().join("config"), home.path().join("state"));
        let theirs = Store::open(&config).unwrap();
        let ours = Store::open(&state).unwrap();
        theirs.save_context(&mut ctx("s-busy")).unwrap();
        let held = theirs.lock_session(&session("s-busy")).unwrap();
        let done = ours.take_in(&config, 10).unwrap();
        assert_eq!(done.busy, [session("s-busy")]);
        assert!(config.join("context/s-busy.json").is_file());
        drop(held);
        assert_eq!(ours.take_in(&config, 10).unwrap().sessions, 1);
        assert!(ours.load_context(&session("s-busy")).unwrap().is_some());
    }

    #[test]
    fn a_clash_of_directories_with_a_file_keeps_both() {
        let dir = tempfile::tempdir().unwrap();
        let (src, dst) = (dir.path().join("src"), dir.path().join("dst"));
        std::fs::create_dir(&src).unwrap();
        std::fs::write(&dst, "a file").unwrap();
        let mut done = Relocated::default();
        move_in(&src, &dst, &mut done).unwrap();
        assert_eq!(std::fs::read_to_string(&dst).unwrap(), "a file");
        assert!(done.kept_beside[0].is_dir());
    }
}
