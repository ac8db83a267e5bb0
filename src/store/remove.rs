//! Removing a session: what `familiar sessions rm`/`prune`, `run --ephemeral` and the
//! clean-up of a session whose first task never got a model answer share.
//!
//! Invariant: a session is removed only while its lock is held, so a task running in
//! it (here or in the daemon) is never pulled from under it. The lock file goes last,
//! still locked (a waiting taker sees its name gone and opens a fresh one, see
//! [`Store::lock_session`]), so no `.lock` outlives its session; the store's own
//! workspace goes, a workspace the user named is never touched (only
//! `workspaces/SESSION_ID` is removed).

use std::fs;
use std::io::ErrorKind;

use familiar_protocol::ids::SessionId;

use super::{Store, StoreError};

impl Store {
    /// Removes the session's context, transcript and store workspace. `Ok(false)` when
    /// there was no such session; [`StoreError::SessionBusy`] while a task runs in it.
    pub fn remove_session(&self, id: &SessionId) -> Result<bool, StoreError> {
        let lock = self.lock_session(id)?;
        let existed = self.remove_session_files(id)?;
        let path = self.lock_path(id);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io("cannot remove", &path, e)),
        }
        drop(lock);
        Ok(existed)
    }

    /// Removes the lock files no session has (left by versions that never removed
    /// them, or by a process killed mid-removal), skipping any that is held.
    /// Returns how many went.
    pub fn remove_orphan_locks(&self) -> Result<usize, StoreError> {
        let dir = self.data_dir.join(super::CONTEXT_DIR);
        let entries = fs::read_dir(&dir).map_err(|e| StoreError::io("cannot list", &dir, e))?;
        let mut removed = 0;
        for entry in entries {
            let entry = entry.map_err(|e| StoreError::io("cannot list", &dir, e))?;
            let Some(id) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".lock"))
                .and_then(|n| SessionId::new(n).ok())
            else {
                continue;
            };
            if self.context_path(&id).exists() {
                continue;
            }
            match self.remove_session(&id) {
                Ok(_) => removed += 1,
                Err(StoreError::SessionBusy(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(removed)
    }

    /// The session's files and store workspace; the caller holds its lock.
    fn remove_session_files(&self, id: &SessionId) -> Result<bool, StoreError> {
        let mut existed = false;
        for file in [
            self.context_path(id),
            self.journal_path(id),
            self.transcript_path(id),
        ] {
            match fs::remove_file(&file) {
                Ok(()) => existed = true,
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(StoreError::io("cannot remove", &file, e)),
            }
        }
        // The session's screenshots (`screenshot`) go with the history naming them.
        for dir in [
            self.workspace_dir(id),
            self.data_dir.join("screens").join(id.as_str()),
        ] {
            match fs::remove_dir_all(&dir) {
                Ok(()) => existed = true,
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(StoreError::io("cannot remove", &dir, e)),
            }
        }
        Ok(existed)
    }
}

#[cfg(test)]
mod tests {
    use crate::store::StoreError;
    use crate::store::tests::{sid, store};

    // Regression: lock files were never removed (82 left after `sessions prune`).
    #[test]
    fn removing_a_session_removes_its_lock_file_and_a_stale_opener_relocks() {
        let (dir, store) = store();
        let lock_path = dir.path().join("data/context/s1.lock");
        drop(store.lock_session(&sid("s1")).unwrap());
        // A taker that opened the lock file before the removal unlinked it.
        let stale = std::fs::File::open(&lock_path).unwrap();
        assert!(store.remove_session(&sid("s1")).is_ok());
        assert!(!lock_path.exists(), "the lock file outlived its session");
        stale.try_lock().unwrap();
        // The unlinked file's lock is not the session's: the name is locked afresh.
        let lock = store.lock_session(&sid("s1")).unwrap();
        assert!(matches!(
            store.lock_session(&sid("s1")),
            Err(StoreError::SessionBusy(_))
        ));
        drop(lock);
    }

    #[test]
    fn orphan_lock_files_go_and_held_ones_stay() {
        let (dir, store) = store();
        std::fs::write(dir.path().join("data/context/s-orphan.lock"), "").unwrap();
        let _held = store.lock_session(&sid("s-running")).unwrap();
        assert_eq!(store.remove_orphan_locks().unwrap(), 1);
        assert!(!dir.path().join("data/context/s-orphan.lock").exists());
        assert!(dir.path().join("data/context/s-running.lock").exists());
    }
}
