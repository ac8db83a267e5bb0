//! The sandbox helper's binary, opened and checked once ([`PinnedHelper`]): the
//! launcher executes that open file for every call (`/proc/self/fd/N`), so whatever is
//! put at the helper's path later is not run until the process starts again.

use std::path::Path;
use std::sync::Arc;

/// The helper binary, opened once and executed through that descriptor
/// (`/proc/self/fd/N`): whatever is put at its path later (a tool that may write
/// `~/.local/bin` replacing `familiar-sandbox`), every call runs the file that was
/// checked when the launcher was made. The check: a regular file owned by the user or
/// root and writable by neither its group nor others.
#[derive(Debug, Clone)]
pub struct PinnedHelper(pub(super) Result<Arc<std::fs::File>, String>);

impl PinnedHelper {
    /// Opens and checks `path`.
    pub fn open(path: &Path) -> PinnedHelper {
        PinnedHelper(pin(path).map(Arc::new))
    }

    /// Why the helper cannot be used, if it cannot.
    pub fn problem(&self) -> Option<&str> {
        self.0.as_ref().err().map(String::as_str)
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

fn pin(path: &Path) -> Result<std::fs::File, String> {
    use std::os::unix::fs::MetadataExt;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open it: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot stat it: {e}"))?;
    if !meta.is_file() {
        return Err("it is not a regular file".to_owned());
    }
    let uid = nix::unistd::geteuid().as_raw();
    if meta.uid() != uid && meta.uid() != 0 {
        return Err(format!(
            "it belongs to uid {}, neither you (uid {uid}) nor root: another user could replace what runs your tools",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "it is writable by its group or others (mode {:o}): run `chmod go-w {}`",
            meta.mode() & 0o7777,
            path.display()
        ));
    }
    Ok(file)
}
