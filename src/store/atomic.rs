//! The two file-system moves every durable file of the store is made of: a fresh,
//! synced temp file beside its target, then a rename and a sync of the directory; and
//! the lock files that are never deleted.
//!
//! Hand-written rather than `tempfile`'s `NamedTempFile::persist` or
//! `atomic-write-file` (issue 15, evaluated): neither keeps the writer's pid in the
//! temp name, which [`super::Store::open`] needs to remove only dead writers'
//! leftovers, `persist` does not sync the directory (the rename's durability), and
//! `atomic-write-file` 0.3 (which does) brings `rand` 0.10 beside our 0.9, a second
//! copy in the binary. Either would replace about ten lines.

use std::fs::{self, File, OpenOptions};
use std::io::BufWriter;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::StoreError;

/// In a temp file's name between its target's stem and the writer's pid.
pub(super) const TEMP_MARKER: &str = ".json.tmp-";

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes a temp file `.STEM.json.tmp-PID-N` in `dir` with `write`, synced; removed
/// again when anything fails.
pub(super) fn write_temp(
    dir: &Path,
    stem: &str,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<(), StoreError>,
) -> Result<PathBuf, StoreError> {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let temp = dir.join(format!(".{stem}{TEMP_MARKER}{}-{n}", std::process::id()));
    let io = |e| StoreError::io("cannot write", &temp, e);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .map_err(io)?;
    let result = (|| {
        let mut w = BufWriter::with_capacity(64 * 1024, file);
        write(&mut w)?;
        let file = w.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(io)
    })();
    if let Err(e) = result {
        if let Err(rm) = fs::remove_file(&temp) {
            tracing::warn!(path = %temp.display(), error = %rm, "cannot remove temp file");
        }
        return Err(e);
    }
    Ok(temp)
}

/// Renames `temp` over `target` and syncs the directory: the rename is durable only
/// once the directory entry is.
pub(super) fn commit(temp: &Path, target: &Path) -> Result<(), StoreError> {
    fs::rename(temp, target).map_err(|e| StoreError::io("cannot rename into", target, e))?;
    let dir = target.parent().unwrap_or(Path::new("/"));
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io("cannot sync", dir, e))
}

/// Opens (creating it) a lock file. Lock files are never deleted: unlinking one lets
/// two holders lock two different inodes of the same name.
pub(super) fn open_lock_file(path: &Path) -> Result<File, StoreError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|e| StoreError::io("cannot open", path, e))
}
