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

use super::{Store, StoreError};
use crate::ids::SessionId;

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
        let ws = self.workspace_dir(id);
        match fs::remove_dir_all(&ws) {
            Ok(()) => existed = true,
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io("cannot remove", &ws, e)),
        }
        Ok(existed)
    }
}
