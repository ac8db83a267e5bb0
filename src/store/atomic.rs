//! The two file-system moves every durable file of the store is made of: a fresh,
//! synced temp file beside its target (`tempfile`), then a rename and a sync of the
//! directory; and the lock files that are never deleted.
//!
//! `tempfile` names the file (with the writer's pid in it, which [`super::Store::open`]
//! reads to remove only dead writers' leftovers), creates it `O_EXCL` and mode 0600, and
//! removes it when the write fails or the temp file is dropped uncommitted; the syncs
//! are ours (`persist` is a bare `rename`: durable only once the directory is synced).

use std::fs::{self, File, OpenOptions};
use std::io::BufWriter;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use tempfile::{NamedTempFile, TempPath};

use super::StoreError;

/// In a temp file's name between its target's stem and the writer's pid.
pub(super) const TEMP_MARKER: &str = ".json.tmp-";

/// Writes a temp file `.STEM.json.tmp-PID-RANDOM` in `dir` with `write`, synced. It is
/// removed when anything fails, and when the path returned is dropped uncommitted.
pub(super) fn write_temp(
    dir: &Path,
    stem: &str,
    write: impl FnOnce(&mut BufWriter<NamedTempFile>) -> Result<(), StoreError>,
) -> Result<TempPath, StoreError> {
    let prefix = format!(".{stem}{TEMP_MARKER}{}-", std::process::id());
    let file = tempfile::Builder::new()
        .prefix(&prefix)
        .permissions(fs::Permissions::from_mode(0o600))
        .tempfile_in(dir)
        .map_err(|e| StoreError::io("cannot write", &dir.join(&prefix), e))?;
    let temp = file.path().to_owned();
    let io = |e| StoreError::io("cannot write", &temp, e);
    let mut w = BufWriter::with_capacity(64 * 1024, file);
    write(&mut w)?;
    let file = w.into_inner().map_err(|e| io(e.into_error()))?;
    file.as_file().sync_all().map_err(io)?;
    Ok(file.into_temp_path())
}

/// Renames `temp` over `target` and syncs the directory: the rename is durable only
/// once the directory entry is.
pub(super) fn commit(temp: TempPath, target: &Path) -> Result<(), StoreError> {
    temp.persist(target)
        .map_err(|e| StoreError::io("cannot rename into", target, e.error))?;
    let dir = target.parent().unwrap_or(Path::new("/"));
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io("cannot sync", dir, e))
}

/// Whether `path` still names `file` (the same inode): a lock file unlinked by its
/// holder after we opened it is not the lock any more.
pub(super) fn still_named(file: &File, path: &Path) -> Result<bool, StoreError> {
    use std::os::unix::fs::MetadataExt;
    let ours = file
        .metadata()
        .map_err(|e| StoreError::io("cannot stat", path, e))?;
    match std::fs::metadata(path) {
        Ok(named) => Ok(named.dev() == ours.dev() && named.ino() == ours.ino()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(StoreError::io("cannot stat", path, e)),
    }
}

/// Opens (creating it) a lock file. Only its lock's holder may unlink it, and a taker
/// checks [`still_named`] after locking: otherwise two holders could lock two
/// different inodes of the same name.
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
