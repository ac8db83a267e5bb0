//! Session locks (`context/SESSION_ID.lock`): one holder per session across processes,
//! through `flock(2)`; the kernel releases a lock whose holder dies.

use std::fs::{self, File};
use std::path::PathBuf;

use familiar_protocol::ids::SessionId;

use super::{CONTEXT_DIR, Store, StoreError, atomic};

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

    pub(super) fn lock_path(&self, id: &SessionId) -> PathBuf {
        self.data_dir.join(CONTEXT_DIR).join(format!("{id}.lock"))
    }
}

#[cfg(test)]
mod tests {
    use crate::store::StoreError;
    use crate::store::tests::{sid, store};

    #[test]
    fn lock_is_exclusive_and_released_on_drop() {
        let (_dir, store) = store();
        let lock = store.lock_session(&sid("s1")).unwrap();
        assert_eq!(lock.session_id(), &sid("s1"));
        assert!(matches!(
            store.lock_session(&sid("s1")),
            Err(StoreError::SessionBusy(id)) if id == sid("s1")
        ));
        let _other = store.lock_session(&sid("s2")).unwrap();
        drop(lock);
        let _again = store.lock_session(&sid("s1")).unwrap();
    }
}
