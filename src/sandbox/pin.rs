//! The sandbox helper's binary, opened and checked once ([`PinnedHelper`]): the
//! launcher executes that open file for every call (`/proc/self/fd/N`), so whatever is
//! put at the helper's path later is not run until the process starts again.

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The helper binary, opened once and executed through that descriptor
/// (`/proc/self/fd/N`): whatever is put at its path later (a tool that may write
/// `~/.local/bin` replacing `familiar-sandbox`), every call runs the file that was
/// checked when the launcher was made. The check: a regular file owned by the user or
/// root and writable by neither its group nor others.
#[derive(Debug, Clone)]
pub struct PinnedHelper(pub(super) Result<Arc<std::fs::File>, PinError>);

/// Why the helper binary cannot be trusted to run tools.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PinError {
    #[error("cannot open it: {0}")]
    Open(Arc<std::io::Error>),
    #[error("cannot stat it: {0}")]
    Stat(Arc<std::io::Error>),
    #[error("it is not a regular file")]
    NotAFile,
    #[error(
        "it belongs to uid {owner}, neither you (uid {uid}) nor root: another user could replace what runs your tools"
    )]
    Owner { owner: u32, uid: u32 },
    #[error("it is writable by its group or others (mode {mode:o}): run `chmod go-w {}`", path.display())]
    Writable { mode: u32, path: PathBuf },
}

impl PinnedHelper {
    /// Opens and checks `path`.
    pub fn open(path: &Path) -> PinnedHelper {
        PinnedHelper(pin(path).map(Arc::new))
    }

    /// Why the helper cannot be used, if it cannot.
    pub fn problem(&self) -> Option<String> {
        self.0.as_ref().err().map(PinError::to_string)
    }
}

/// Launchers are the same when they start the same path the same way; the descriptor
/// is how, not what.
impl PartialEq for PinnedHelper {
    fn eq(&self, _: &PinnedHelper) -> bool {
        true
    }
}

impl Eq for PinnedHelper {}

fn pin(path: &Path) -> Result<std::fs::File, PinError> {
    use std::os::unix::fs::MetadataExt;
    let file = std::fs::File::open(path).map_err(|e| PinError::Open(Arc::new(e)))?;
    let meta = file.metadata().map_err(|e| PinError::Stat(Arc::new(e)))?;
    if !meta.is_file() {
        return Err(PinError::NotAFile);
    }
    let uid = nix::unistd::geteuid().as_raw();
    if meta.uid() != uid && meta.uid() != 0 {
        return Err(PinError::Owner {
            owner: meta.uid(),
            uid,
        });
    }
    if meta.mode() & 0o022 != 0 {
        return Err(PinError::Writable {
            mode: meta.mode() & 0o7777,
            path: path.to_owned(),
        });
    }
    Ok(file)
}
