//! Kept versions (`data_dir/versions/SHA256`): the previous content of the files tasks
//! changed outside their workspace, so a task can be undone ([`super::undo`]).
//!
//! Invariants: a version's name is the SHA-256 (lowercase hex) of its bytes, so the
//! same content is kept once and a name always means the same bytes; a version is
//! written to a synced temp file and renamed into place, never seen half-written; the
//! directory stays within `[versions]` `max_total` bytes and `max_age` (the oldest go
//! first, kept again refreshes one); nothing here is ever sent to a model. The bytes
//! come from the sandboxed helper's reply, never from the daemon opening a path a
//! model chose.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use super::StoreError;
use crate::config::versions::VersionsConfig;

const VERSIONS_DIR: &str = "versions";

/// SHA-256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The kept versions of one data directory, bounded by `limits`.
#[derive(Debug, Clone)]
pub struct Versions {
    dir: PathBuf,
    limits: VersionsConfig,
}

impl Versions {
    pub fn new(data_dir: &Path, limits: VersionsConfig) -> Versions {
        Versions {
            dir: data_dir.join(VERSIONS_DIR),
            limits,
        }
    }

    pub fn limits(&self) -> &VersionsConfig {
        &self.limits
    }

    /// `versions/HASH`.
    pub fn path(&self, hash: &str) -> PathBuf {
        self.dir.join(hash)
    }

    /// Keeps `bytes`, returns their hash; then drops what is past the bounds.
    pub fn keep(&self, bytes: &[u8]) -> Result<String, StoreError> {
        let hash = sha256_hex(bytes);
        let target = self.path(&hash);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(|e| StoreError::io("cannot create", &self.dir, e))?;
        if target.exists() {
            // Kept again: the newest, whatever its age.
            let now = fs::File::options()
                .write(true)
                .open(&target)
                .and_then(|f| f.set_modified(SystemTime::now()));
            now.map_err(|e| StoreError::io("cannot touch", &target, e))?;
        } else {
            let mut tmp = tempfile::Builder::new()
                .prefix(".version-")
                .permissions(fs::Permissions::from_mode(0o600))
                .tempfile_in(&self.dir)
                .map_err(|e| StoreError::io("cannot write", &self.dir, e))?;
            let io = |e| StoreError::io("cannot write", &target, e);
            tmp.write_all(bytes).map_err(io)?;
            tmp.as_file().sync_all().map_err(io)?;
            super::atomic::commit(tmp.into_temp_path(), &target)?;
        }
        self.prune(SystemTime::now())?;
        Ok(hash)
    }

    /// The bytes kept under `hash`, checked against it (`None`: not kept, or gone).
    pub fn get(&self, hash: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let path = self.path(hash);
        match fs::read(&path) {
            Ok(b) if sha256_hex(&b) == hash => Ok(Some(b)),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::io("cannot read", &path, e)),
        }
    }

    /// Drops versions older than `max_age`, then the oldest until the rest fit
    /// `max_total`.
    pub fn prune(&self, now: SystemTime) -> Result<(), StoreError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(StoreError::io("cannot list", &self.dir, e)),
        };
        let mut kept: Vec<(SystemTime, u64, PathBuf)> = entries
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                Some((m.modified().unwrap_or(UNIX_EPOCH), m.len(), e.path()))
            })
            .collect();
        kept.sort();
        let mut total: u64 = kept.iter().map(|(_, len, _)| len).sum();
        for (modified, len, path) in kept {
            let old = now
                .duration_since(modified)
                .is_ok_and(|age| age > self.limits.max_age);
            if !old && total <= self.limits.max_total {
                break;
            }
            match fs::remove_file(&path) {
                Ok(()) => total -= len,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => total -= len,
                Err(e) => return Err(StoreError::io("cannot remove", &path, e)),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn versions(dir: &Path, max_total: u64) -> Versions {
        Versions::new(
            dir,
            VersionsConfig {
                max_total,
                max_age: Duration::from_secs(3600),
                max_file: max_total,
            },
        )
    }

    #[test]
    fn a_version_is_kept_once_under_its_hash() {
        let t = tempfile::tempdir().unwrap();
        let v = versions(t.path(), 1024);
        let a = v.keep(b"old bytes").unwrap();
        assert_eq!(a, sha256_hex(b"old bytes"));
        assert_eq!(v.keep(b"old bytes").unwrap(), a);
        assert_eq!(v.get(&a).unwrap().unwrap(), b"old bytes");
        assert_eq!(fs::read_dir(t.path().join("versions")).unwrap().count(), 1);
        assert_eq!(v.get(&sha256_hex(b"never")).unwrap(), None);
    }

    #[test]
    fn the_oldest_versions_go_first_past_the_total_and_the_age() {
        let t = tempfile::tempdir().unwrap();
        let v = versions(t.path(), 10);
        let first = v.keep(b"123456").unwrap();
        let old = SystemTime::now() - Duration::from_secs(60);
        fs::File::options()
            .write(true)
            .open(v.path(&first))
            .unwrap()
            .set_modified(old)
            .unwrap();
        let second = v.keep(b"abcdef").unwrap();
        assert_eq!(
            v.get(&first).unwrap(),
            None,
            "over 10 bytes: the oldest went"
        );
        assert!(v.get(&second).unwrap().is_some());
        v.prune(SystemTime::now() + Duration::from_secs(7200))
            .unwrap();
        assert_eq!(v.get(&second).unwrap(), None, "older than max_age");
    }
}
