//! The `trash` file operation: a file or directory moved to the home Trash of the
//! freedesktop Trash specification (`$XDG_DATA_HOME/Trash`, what GNOME, KDE and the file
//! managers show), by the `trash` crate, under the helper's Landlock rules.
//!
//! The invariant: what is trashed is only what the soul may write. The launcher adds the
//! Trash directory as a writable tree for this operation alone and sets
//! `XDG_DATA_HOME` in the helper's own environment (the crate reads it); moving the
//! file out of its directory needs the remove right there, which the kernel grants only
//! in the soul's writable trees. A file on another filesystem than the home Trash is
//! refused rather than trashed into a `.Trash-UID` of its own mount, so every trashed
//! item is where the daemon can find it again to undo the move.

use std::collections::HashSet;
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

const INFO_SUFFIX: &str = ".trashinfo";

/// The home Trash the crate uses: `$XDG_DATA_HOME/Trash`, else `~/.local/share/Trash`.
fn home_trash() -> Option<PathBuf> {
    let data = std::env::var_os("XDG_DATA_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| PathBuf::from(h).join(".local/share"))
        })?;
    Some(data.join("Trash"))
}

/// Where a trashed file went: `original` (its parent resolved, as the `.trashinfo`
/// says it), now at `files`, described by `info`.
#[derive(Debug)]
pub(crate) struct Trashed {
    pub original: PathBuf,
    pub files: PathBuf,
    pub info: PathBuf,
}

/// Why nothing was trashed.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// The kernel or the file system said no.
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// It is not something the home Trash can take; why.
    Said(String),
}

/// Moves `path` to the home Trash; where it went, or why not.
pub(crate) fn trash(path: &Path) -> Result<Trashed, Refusal> {
    let refuse = |message: String| Err(Refusal::Said(message));
    let io = |path: &Path, error: std::io::Error| {
        Err(Refusal::Io {
            path: path.to_owned(),
            error,
        })
    };
    let Some(home) = home_trash() else {
        return refuse("no home Trash: neither XDG_DATA_HOME nor HOME is set".to_owned());
    };
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return refuse(format!("{}: not a file or directory name", path.display()));
    };
    let original = match parent.canonicalize() {
        Ok(p) => p.join(name),
        Err(e) => return io(parent, e),
    };
    let meta = match original.symlink_metadata() {
        Ok(m) => m,
        Err(e) => return io(path, e),
    };
    // The Trash itself, or its parent, would be moved into itself.
    if home.starts_with(&original) {
        return refuse(format!("{}: holds the Trash itself", path.display()));
    }
    let trash_dev = home
        .ancestors()
        .find_map(|a| a.metadata().ok())
        .map(|m| m.dev());
    if trash_dev != Some(meta.dev()) {
        return refuse(format!(
            "{}: on another filesystem than the Trash ({}); only the home Trash is used",
            path.display(),
            home.display()
        ));
    }
    let info_dir = home.join("info");
    let before = names(&info_dir);
    if let Err(e) = trash::delete(&original) {
        return from_trash_error(path, e);
    }
    // The crate does not say which name it picked: the one `.trashinfo` that is new
    // and whose name starts with the file's (it adds `.2`, `.3` on a collision).
    let prefix = name.to_string_lossy().into_owned();
    let new: Vec<OsString> = names(&info_dir)
        .difference(&before)
        .filter(|n| n.to_string_lossy().starts_with(&prefix))
        .cloned()
        .collect();
    let [info_name] = new.as_slice() else {
        return refuse(format!(
            "{}: moved to the Trash, but its entry in {} was not found",
            path.display(),
            info_dir.display()
        ));
    };
    let info_text = info_name.to_string_lossy();
    let stem = info_text.strip_suffix(INFO_SUFFIX).unwrap_or(&info_text);
    Ok(Trashed {
        original,
        files: home.join("files").join(stem),
        info: info_dir.join(info_name),
    })
}

fn names(dir: &Path) -> HashSet<OsString> {
    std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default()
}

fn from_trash_error(path: &Path, e: trash::Error) -> Result<Trashed, Refusal> {
    Err(match e {
        trash::Error::FileSystem { path: at, source } => Refusal::Io {
            path: at,
            error: source,
        },
        other => Refusal::Said(format!("{}: {other}", path.display())),
    })
}
