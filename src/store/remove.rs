//! Removing a session: what `familiar sessions rm`/`prune`, `run --ephemeral` and the
//! clean-up of a session whose first task never got a model answer share.
//!
//! Invariant: a session is removed only while its lock is held, so a task running in
//! it (here or in the daemon) is never pulled from under it. The lock file itself stays
//! (see [`Store::lock_session`]); the store's own workspace goes, a workspace the user
//! named is never touched (only `workspaces/SESSION_ID` is removed).

use std::fs;
use std::io::ErrorKind;

use super::{Store, StoreError};
use crate::ids::SessionId;

impl Store {
    /// Removes the session's context, transcript and store workspace. `Ok(false)` when
    /// there was no such session; [`StoreError::SessionBusy`] while a task runs in it.
    pub fn remove_session(&self, id: &SessionId) -> Result<bool, StoreError> {
        let _lock = self.lock_session(id)?;
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
