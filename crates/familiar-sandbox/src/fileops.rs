//! File operations performed by the helper itself, after it has restricted itself:
//! `familiar-sandbox --op read|list|write|edit|trash|search` with the request as JSON on stdin and the
//! reply as JSON on stdout.
//!
//! The invariant: these run under the same Landlock domain as a command would, so a
//! bug in a path check upstream cannot reach a protected or unlisted file: the kernel
//! refuses. Writes never go through a final symlink (refused, and the write itself is a
//! `rename` of a fresh `O_EXCL | O_NOFOLLOW` temp file, which replaces a name and never
//! follows one), and are atomic: a reader sees the old content or the new, never half.
//! A search never follows a symlink, never opens anything but a regular file (a fifo
//! would block it), and is bounded in matches, files and bytes per file; what the
//! kernel refuses is skipped and counted, never fatal (see [`crate::search`]).
//! A write or edit asked to `keep` sends back what it replaced ([`Previous`]), read
//! under the same rules, so the daemon never opens a path a model chose itself.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::{Deserialize, Serialize};

use crate::OpFailure;
use crate::search::{SearchReply, search};

/// Bytes `read` returns at most; the reply says when the file was longer.
pub(crate) const MAX_READ_BYTES: u64 = 1024 * 1024;
/// Entries `list` returns at most.
pub(crate) const MAX_LIST_ENTRIES: usize = 10_000;
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileOpKind {
    Read,
    List,
    Write,
    Edit,
    Trash,
    Search,
}

impl FileOpKind {
    /// An operation the daemon brokers: it replaces what is there, after the daemon
    /// kept it, so it may run with destroy rights ([`crate::spec::HelperSpec::brokered`]).
    pub fn is_brokered(self) -> bool {
        match self {
            FileOpKind::Write | FileOpKind::Edit | FileOpKind::Trash => true,
            FileOpKind::Read | FileOpKind::List | FileOpKind::Search => false,
        }
    }
}

/// One request, as the launcher writes it to the helper's stdin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum FileOp {
    /// `offset` is the first line (1-based), `limit` the number of lines.
    Read {
        path: PathBuf,
        offset: Option<usize>,
        limit: Option<usize>,
    },
    List {
        path: PathBuf,
    },
    /// `keep`: reply [`FileReply::Replaced`] with what was there, up to that many bytes.
    Write {
        path: PathBuf,
        content: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        keep: Option<u64>,
    },
    /// Replaces the one occurrence of `old` with `new`; `keep` as for `Write`.
    Edit {
        path: PathBuf,
        old: String,
        new: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        keep: Option<u64>,
    },
    /// Moves a file or directory to the home Trash ([`crate::trash`]).
    Trash {
        path: PathBuf,
    },
    /// Lines matching the regex `pattern` in the files under `path` whose name matches
    /// the shell glob `glob`.
    Search {
        path: PathBuf,
        pattern: String,
        glob: Option<String>,
    },
}

impl FileOp {
    pub fn kind(&self) -> FileOpKind {
        match self {
            FileOp::Read { .. } => FileOpKind::Read,
            FileOp::List { .. } => FileOpKind::List,
            FileOp::Write { .. } => FileOpKind::Write,
            FileOp::Edit { .. } => FileOpKind::Edit,
            FileOp::Trash { .. } => FileOpKind::Trash,
            FileOp::Search { .. } => FileOpKind::Search,
        }
    }

    /// How much of the replaced content the reply may carry (`keep` of a write or edit).
    pub fn keep(&self) -> Option<u64> {
        match self {
            FileOp::Write { keep, .. } | FileOp::Edit { keep, .. } => *keep,
            FileOp::Read { .. }
            | FileOp::List { .. }
            | FileOp::Trash { .. }
            | FileOp::Search { .. } => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    pub name: String,
    pub kind: EntryKind,
    pub size: u64,
}

/// What the helper prints on stdout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileReply {
    Read {
        content: String,
        /// Lines of the file (of the part read, when `truncated`).
        total_lines: usize,
        truncated: bool,
    },
    List {
        entries: Vec<DirEntry>,
        truncated: bool,
    },
    Written {
        bytes: usize,
    },
    /// A write or edit asked to keep what it replaced.
    Replaced {
        bytes: usize,
        previous: Previous,
    },
    /// Moved to the Trash: `original` (its parent resolved, as the `.trashinfo` says
    /// it), now at `files`, described by `info`.
    Trashed {
        original: PathBuf,
        files: PathBuf,
        info: PathBuf,
    },
    Search(SearchReply),
    /// The kernel or the operation said no; `errno` when it was the kernel.
    Error {
        errno: Option<i32>,
        message: String,
    },
}

/// What a write or edit replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "was", rename_all = "snake_case")]
pub enum Previous {
    /// Nothing: the file was made.
    Missing,
    /// The bytes that were there, base64.
    Kept { base64: String },
    /// More than `keep` bytes: not sent.
    TooLarge { size: u64 },
}

impl Previous {
    /// The bytes kept, if any (`None` for a reply that is not base64: a bug upstream).
    pub fn bytes(&self) -> Option<Vec<u8>> {
        match self {
            Previous::Kept { base64 } => {
                base64::Engine::decode(&base64::engine::general_purpose::STANDARD, base64).ok()
            }
            Previous::Missing | Previous::TooLarge { .. } => None,
        }
    }

    fn of(bytes: &[u8]) -> Previous {
        Previous::Kept {
            base64: base64::Engine::encode(&base64::engine::general_purpose::STANDARD, bytes),
        }
    }
}

impl FileReply {
    pub(crate) fn from_io(path: &Path, e: &std::io::Error) -> FileReply {
        FileReply::from(OpFailure::from_io(path, e))
    }
}

impl From<OpFailure> for FileReply {
    fn from(f: OpFailure) -> FileReply {
        FileReply::Error {
            errno: f.errno,
            message: f.message,
        }
    }
}

/// Reads the request from stdin, performs it, prints the reply; exit 0 on success.
pub(crate) fn main(kind: FileOpKind) -> ExitCode {
    let mut input = String::new();
    let reply = match std::io::stdin().read_to_string(&mut input) {
        Err(e) => FileReply::from_io(Path::new("<stdin>"), &e),
        Ok(_) => match serde_json::from_str::<FileOp>(&input) {
            Err(e) => FileReply::Error {
                errno: None,
                message: format!("bad request: {e}"),
            },
            Ok(op) if op.kind() != kind => FileReply::Error {
                errno: None,
                message: format!("request is {:?}, helper was asked for {kind:?}", op.kind()),
            },
            Ok(op) => perform(&op),
        },
    };
    let ok = !matches!(reply, FileReply::Error { .. });
    let line = serde_json::to_string(&reply).unwrap_or_default();
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{line}").is_err() || !ok {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// Performs `op` in this process (which must already be restricted).
pub(crate) fn perform(op: &FileOp) -> FileReply {
    match op {
        FileOp::Read {
            path,
            offset,
            limit,
        } => read(path, *offset, *limit),
        FileOp::List { path } => list(path),
        FileOp::Write {
            path,
            content,
            keep,
        } => write_keeping(path, content.as_bytes(), *keep),
        FileOp::Edit {
            path,
            old,
            new,
            keep,
        } => edit(path, old, new, *keep),
        FileOp::Trash { path } => match crate::trash::trash(path) {
            Ok(t) => FileReply::Trashed {
                original: t.original,
                files: t.files,
                info: t.info,
            },
            Err(crate::trash::Refusal::Io { path, error }) => FileReply::from_io(&path, &error),
            Err(crate::trash::Refusal::Said(message)) => FileReply::Error {
                errno: None,
                message,
            },
        },
        FileOp::Search {
            path,
            pattern,
            glob,
        } => search(path, pattern, glob.as_deref()).map_or_else(FileReply::from, FileReply::Search),
    }
}

fn read(path: &Path, offset: Option<usize>, limit: Option<usize>) -> FileReply {
    let mut bytes = Vec::new();
    let read =
        std::fs::File::open(path).and_then(|f| f.take(MAX_READ_BYTES + 1).read_to_end(&mut bytes));
    if let Err(e) = read {
        return FileReply::from_io(path, &e);
    }
    let truncated = bytes.len() as u64 > MAX_READ_BYTES;
    bytes.truncate(usize::try_from(MAX_READ_BYTES).unwrap_or(usize::MAX));
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let start = offset.unwrap_or(1).saturating_sub(1).min(lines.len());
    let end = limit.map_or(lines.len(), |l| start.saturating_add(l).min(lines.len()));
    FileReply::Read {
        content: lines[start..end].concat(),
        total_lines: lines.len(),
        truncated,
    }
}

fn list(path: &Path) -> FileReply {
    let entries = match std::fs::read_dir(path) {
        Ok(e) => e,
        Err(e) => return FileReply::from_io(path, &e),
    };
    let mut out: Vec<DirEntry> = entries
        .flatten()
        .map(|e| {
            let meta = e.path().symlink_metadata();
            let kind = match &meta {
                Ok(m) if m.is_symlink() => EntryKind::Symlink,
                Ok(m) if m.is_dir() => EntryKind::Dir,
                Ok(m) if m.is_file() => EntryKind::File,
                Ok(_) | Err(_) => EntryKind::Other,
            };
            DirEntry {
                name: e.file_name().to_string_lossy().into_owned(),
                kind,
                size: meta.map_or(0, |m| m.len()),
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    let truncated = out.len() > MAX_LIST_ENTRIES;
    out.truncate(MAX_LIST_ENTRIES);
    FileReply::List {
        entries: out,
        truncated,
    }
}

fn write(path: &Path, content: &[u8]) -> FileReply {
    match write_atomic(path, content) {
        Ok(()) => FileReply::Written {
            bytes: content.len(),
        },
        Err(e) => FileReply::from_io(path, &e),
    }
}

/// [`write`], sending back what it replaces when asked to `keep` up to that many bytes.
fn write_keeping(path: &Path, content: &[u8], keep: Option<u64>) -> FileReply {
    let Some(max) = keep else {
        return write(path, content);
    };
    let previous = match read_previous(path, max) {
        Ok(p) => p,
        Err(e) => return FileReply::from_io(path, &e),
    };
    replaced(write(path, content), previous)
}

/// A `Written` reply as `Replaced`, with `previous`.
fn replaced(reply: FileReply, previous: Previous) -> FileReply {
    match reply {
        FileReply::Written { bytes } => FileReply::Replaced { bytes, previous },
        other => other,
    }
}

/// What is at `path` now, through no symlink: nothing, its bytes, or its size when
/// over `max`. Not a regular file: an error (a write would fail on it anyway).
fn read_previous(path: &Path, max: u64) -> std::io::Result<Previous> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let file = match file {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Previous::Missing),
        // A final symlink (ELOOP): the write refuses it with its own words.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Ok(Previous::Missing),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    if meta.len() > max {
        return Ok(Previous::TooLarge { size: meta.len() });
    }
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Ok(Previous::TooLarge {
            size: bytes.len() as u64,
        });
    }
    Ok(Previous::of(&bytes))
}

/// Through a `tempfile` temp file beside `path`, opened by us: `O_EXCL | O_NOFOLLOW`
/// (never through a symlink planted at its name) and with the target's mode before any
/// byte is written. `tempfile` picks a fresh name, removes the file when anything fails,
/// and `persist` renames it over `path`, which replaces a name and never follows one.
fn write_atomic(path: &Path, content: &[u8]) -> std::io::Result<()> {
    let mode = match path.symlink_metadata() {
        Ok(m) if m.is_symlink() => {
            return Err(std::io::Error::other("refusing to write through a symlink"));
        }
        Ok(m) => m.permissions().mode() & 0o7777,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0o644,
        Err(e) => return Err(e),
    };
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("not a file name"))?;
    let parent = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.familiar-", name.to_string_lossy()))
        .suffix(".tmp")
        .make_in(parent, |tmp| {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW)
                .mode(mode)
                .open(tmp)
        })?;
    tmp.as_file_mut().write_all(content)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

fn edit(path: &Path, old: &str, new: &str, keep: Option<u64>) -> FileReply {
    if path.symlink_metadata().is_ok_and(|m| m.is_symlink()) {
        return FileReply::Error {
            errno: None,
            message: format!("{}: refusing to edit through a symlink", path.display()),
        };
    }
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => return FileReply::from_io(path, &e),
    };
    let count = if old.is_empty() {
        0
    } else {
        text.matches(old).count()
    };
    if count != 1 {
        return FileReply::Error {
            errno: None,
            message: format!(
                "{}: the text to replace occurs {count} times, it must occur once",
                path.display()
            ),
        };
    }
    let reply = write(path, text.replacen(old, new, 1).as_bytes());
    match keep {
        None => reply,
        Some(max) if text.len() as u64 > max => replaced(
            reply,
            Previous::TooLarge {
                size: text.len() as u64,
            },
        ),
        Some(_) => replaced(reply, Previous::of(text.as_bytes())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_slices_lines() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("f");
        std::fs::write(&p, "a\nb\nc\n").unwrap();
        assert_eq!(
            read(&p, Some(2), Some(1)),
            FileReply::Read {
                content: "b\n".into(),
                total_lines: 3,
                truncated: false
            }
        );
    }

    #[test]
    fn write_replaces_atomically_and_keeps_the_mode() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("f");
        std::fs::write(&p, "old").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(write(&p, b"new"), FileReply::Written { bytes: 3 });
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read_dir(t.path()).unwrap().count(), 1);
    }

    #[test]
    fn write_refuses_a_final_symlink_and_leaves_its_target_alone() {
        let t = tempfile::tempdir().unwrap();
        let target = t.path().join("target");
        std::fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, t.path().join("link")).unwrap();
        let reply = write(&t.path().join("link"), b"x");
        assert!(matches!(reply, FileReply::Error { .. }), "{reply:?}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    }

    #[test]
    fn edit_needs_exactly_one_occurrence() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("f");
        std::fs::write(&p, "x x y").unwrap();
        assert!(matches!(edit(&p, "x", "z", None), FileReply::Error { .. }));
        assert_eq!(edit(&p, "y", "z", None), FileReply::Written { bytes: 5 });
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "x x z");
    }

    #[test]
    fn a_kept_write_sends_back_what_it_replaced() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("f");
        let made = write_keeping(&p, b"one", Some(8));
        assert_eq!(
            made,
            FileReply::Replaced {
                bytes: 3,
                previous: Previous::Missing
            }
        );
        let FileReply::Replaced { previous, .. } = write_keeping(&p, b"two", Some(8)) else {
            panic!("not replaced");
        };
        assert_eq!(previous.bytes().unwrap(), b"one");
        let big = write_keeping(&p, b"three", Some(2));
        assert_eq!(
            big,
            FileReply::Replaced {
                bytes: 5,
                previous: Previous::TooLarge { size: 3 }
            }
        );
        let FileReply::Replaced { previous, .. } = edit(&p, "three", "four", Some(8)) else {
            panic!("not replaced");
        };
        assert_eq!(previous.bytes().unwrap(), b"three");
    }
}
