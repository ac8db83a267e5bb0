//! `search_files` performed by the helper: a regex over the text files of a tree.
//!
//! The invariant: the walk never follows a symlink (neither to a directory nor to a
//! file), never opens anything but a regular file (a fifo would block it), reads at
//! most [`MAX_SEARCH_FILE_BYTES`] of a file and stops at [`MAX_SEARCH_MATCHES`]
//! matches or [`MAX_SEARCH_FILES`] files. What the kernel refuses (the sandbox's
//! EACCES on a protected subtree) is skipped and counted, never fatal: the model
//! learns that part of the tree was not searched, and why.

use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::OpFailure;

/// A search stops after this many matching lines.
pub const MAX_SEARCH_MATCHES: usize = 200;
/// A search stops after looking at this many files.
pub const MAX_SEARCH_FILES: usize = 20_000;
/// Larger files are skipped by a search (logs and data, not what the model wants).
pub const MAX_SEARCH_FILE_BYTES: u64 = 2 * 1024 * 1024;
/// A matching line is cut to this many characters.
pub(crate) const MAX_SEARCH_LINE_CHARS: usize = 300;
/// Unreadable paths a search names (the rest are only counted).
pub(crate) const MAX_SEARCH_UNREADABLE_SHOWN: usize = 10;
/// Compiled size of a search regex; the daemon checks the same bound first.
pub(crate) const SEARCH_REGEX_SIZE_LIMIT: usize = 1024 * 1024;

/// One matching line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchMatch {
    pub path: PathBuf,
    /// 1-based.
    pub line: usize,
    /// Cut to [`MAX_SEARCH_LINE_CHARS`] characters.
    pub text: String,
}

/// Why a search stopped before the end of the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchStop {
    MatchLimit,
    FileLimit,
}

/// What a search found, and what it could not look at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchReply {
    pub matches: Vec<SearchMatch>,
    /// Regular files whose name matched the glob and that were looked at.
    pub files_searched: usize,
    /// Binary files and files over [`MAX_SEARCH_FILE_BYTES`].
    pub skipped_files: usize,
    /// Directories and files the kernel refused (or that vanished meanwhile).
    pub unreadable: usize,
    /// The first [`MAX_SEARCH_UNREADABLE_SHOWN`] of them, with the error.
    pub unreadable_examples: Vec<String>,
    pub stopped: Option<SearchStop>,
}

/// Compiles a search pattern with the bounds the helper uses.
pub fn search_regex(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(pattern)
        .size_limit(SEARCH_REGEX_SIZE_LIMIT)
        .build()
}

/// Walks `root` depth-first in name order, without following symlinks.
pub(crate) fn search(
    root: &Path,
    pattern: &str,
    glob: Option<&str>,
) -> Result<SearchReply, OpFailure> {
    let re = match search_regex(pattern) {
        Ok(re) => re,
        Err(e) => {
            return Err(OpFailure {
                errno: None,
                message: format!("bad pattern: {e}"),
            });
        }
    };
    let meta = match root.symlink_metadata() {
        Ok(m) => m,
        Err(e) => return Err(OpFailure::from_io(root, &e)),
    };
    let mut s = Search {
        re,
        glob,
        matches: Vec::new(),
        files_searched: 0,
        skipped_files: 0,
        unreadable: 0,
        unreadable_examples: Vec::new(),
        stopped: None,
    };
    if meta.is_dir() {
        if let Err(e) = std::fs::read_dir(root) {
            // The root itself refused is an answer, not a skipped entry.
            return Err(OpFailure::from_io(root, &e));
        }
        s.walk(root);
    } else if meta.is_file() {
        s.file(root, meta.len());
    }
    Ok(SearchReply {
        matches: s.matches,
        files_searched: s.files_searched,
        skipped_files: s.skipped_files,
        unreadable: s.unreadable,
        unreadable_examples: s.unreadable_examples,
        stopped: s.stopped,
    })
}

struct Search<'a> {
    re: regex::Regex,
    glob: Option<&'a str>,
    matches: Vec<SearchMatch>,
    files_searched: usize,
    skipped_files: usize,
    unreadable: usize,
    unreadable_examples: Vec<String>,
    stopped: Option<SearchStop>,
}

/// The OS error behind a walk error (a loop needs followed links, which we never do).
fn io_error(e: walkdir::Error) -> std::io::Error {
    e.into_io_error()
        .unwrap_or_else(|| std::io::Error::other("filesystem loop"))
}

impl Search<'_> {
    fn refused(&mut self, path: &Path, e: &std::io::Error) {
        self.unreadable += 1;
        if self.unreadable_examples.len() < MAX_SEARCH_UNREADABLE_SHOWN {
            self.unreadable_examples
                .push(format!("{}: {e}", path.display()));
        }
    }

    /// Depth-first: in each directory its files in name order, then its
    /// subdirectories in name order (walkdir, never following a symlink). Not the
    /// `ignore` crate's walker: it skips hidden and git-ignored files by default, and a
    /// search of `~/.config` or a build tree must see them.
    fn walk(&mut self, root: &Path) {
        let walk = walkdir::WalkDir::new(root)
            .follow_links(false)
            .sort_by(|a, b| {
                (a.file_type().is_dir(), a.file_name())
                    .cmp(&(b.file_type().is_dir(), b.file_name()))
            });
        for entry in walk {
            if self.stopped.is_some() {
                return;
            }
            let entry = match entry {
                Ok(e) => e,
                Err(e) => {
                    let path = e.path().unwrap_or(root).to_owned();
                    self.refused(&path, &io_error(e));
                    continue;
                }
            };
            // The entry itself: symlinks stay symlinks.
            let kind = entry.file_type();
            if kind.is_file()
                && self.glob.is_none_or(|g| {
                    crate::glob::glob_match(g, &entry.file_name().to_string_lossy())
                })
            {
                match entry.metadata() {
                    Ok(m) => self.file(entry.path(), m.len()),
                    Err(e) => self.refused(entry.path(), &io_error(e)),
                }
            }
        }
    }

    fn file(&mut self, path: &Path, len: u64) {
        if self.files_searched >= MAX_SEARCH_FILES {
            self.stopped = Some(SearchStop::FileLimit);
            return;
        }
        self.files_searched += 1;
        if len > MAX_SEARCH_FILE_BYTES {
            self.skipped_files += 1;
            return;
        }
        let mut bytes = Vec::new();
        let read = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .and_then(|f| f.take(MAX_SEARCH_FILE_BYTES).read_to_end(&mut bytes));
        if let Err(e) = read {
            self.refused(path, &e);
            return;
        }
        if bytes.iter().take(8192).any(|b| *b == 0) {
            self.skipped_files += 1;
            return;
        }
        let text = String::from_utf8_lossy(&bytes);
        for (i, line) in text.lines().enumerate() {
            if !self.re.is_match(line) {
                continue;
            }
            let mut text: String = line.chars().take(MAX_SEARCH_LINE_CHARS).collect();
            if text.len() < line.len() {
                text.push('…');
            }
            self.matches.push(SearchMatch {
                path: path.to_owned(),
                line: i + 1,
                text,
            });
            if self.matches.len() >= MAX_SEARCH_MATCHES {
                self.stopped = Some(SearchStop::MatchLimit);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn search_reply(root: &Path, pattern: &str, glob: Option<&str>) -> SearchReply {
        search(root, pattern, glob).unwrap()
    }

    #[test]
    fn search_finds_lines_in_name_order_and_honours_the_glob() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("sub")).unwrap();
        std::fs::write(t.path().join("b.rs"), "fn main() {}\nlet x = 1;\n").unwrap();
        std::fs::write(t.path().join("a.txt"), "fn in text\n").unwrap();
        std::fs::write(t.path().join("sub/c.rs"), "no\nfn helper()\n").unwrap();
        std::fs::create_dir(t.path().join("a")).unwrap();
        std::fs::write(t.path().join("a/z.rs"), "fn z()\n").unwrap();
        let SearchReply {
            matches,
            files_searched,
            stopped,
            ..
        } = search_reply(t.path(), r"^fn ", Some("*.rs"));
        let got: Vec<_> = matches
            .iter()
            .map(|m| (m.path.strip_prefix(t.path()).unwrap().to_owned(), m.line))
            .collect();
        assert_eq!(
            got,
            [
                (PathBuf::from("b.rs"), 1),
                (PathBuf::from("a/z.rs"), 1),
                (PathBuf::from("sub/c.rs"), 2)
            ]
        );
        assert_eq!(files_searched, 3);
        assert_eq!(stopped, None);
    }

    #[test]
    fn search_skips_binary_files_and_does_not_follow_symlinks() {
        let t = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "needle\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), t.path().join("link")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), t.path().join("f")).unwrap();
        std::fs::write(t.path().join("bin"), b"needle\0\x01").unwrap();
        let reply = search_reply(t.path(), "needle", None);
        let SearchReply {
            matches,
            skipped_files,
            ..
        } = reply;
        assert!(matches.is_empty(), "{matches:?}");
        assert_eq!(skipped_files, 1);
    }

    #[test]
    fn search_stops_at_the_match_limit_and_cuts_long_lines() {
        let t = tempfile::tempdir().unwrap();
        let long = "x".repeat(1000);
        let text = format!("{long}\n").repeat(MAX_SEARCH_MATCHES + 5);
        std::fs::write(t.path().join("f"), text).unwrap();
        let SearchReply {
            matches, stopped, ..
        } = search_reply(t.path(), "x", None);
        assert_eq!(matches.len(), MAX_SEARCH_MATCHES);
        assert_eq!(stopped, Some(SearchStop::MatchLimit));
        assert_eq!(matches[0].text.chars().count(), MAX_SEARCH_LINE_CHARS + 1);
    }

    #[test]
    fn search_with_a_bad_pattern_says_so() {
        let t = tempfile::tempdir().unwrap();
        assert!(matches!(
            search(t.path(), "(", None),
            Err(OpFailure { errno: None, .. })
        ));
    }
}
