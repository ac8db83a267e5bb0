//! Witnesses: the filesystem facts a plan was made from (each path's inode, a carved
//! directory's change time), checked with one `lstat` each before a plan is reused.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// A change time this close to the plan's making is not trusted to reveal a later
/// change (coarse kernel timestamps tick every few milliseconds).
pub const RACY_MARGIN: Duration = Duration::from_millis(20);
/// The same for filesystems whose change times are whole milliseconds (FAT, some
/// network filesystems: 10 ms to 2 s resolution).
const COARSE_RACY_MARGIN: Duration = Duration::from_secs(2);
/// What `lstat` said about a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seen {
    Missing,
    /// Some other error (a directory the daemon may not search): compared as such.
    Unreadable,
    Entry(Identity),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Identity {
    dev: u64,
    ino: u64,
    /// `S_IFMT` bits.
    kind: u32,
    /// Birth time where the filesystem records it: tells a reused inode number apart.
    born: Option<SystemTime>,
    /// Change time, `(seconds, nanoseconds)`; compared where `contents` says so and for
    /// symlinks.
    changed: (i64, i64),
}

impl Seen {
    fn of(path: &Path) -> Seen {
        match path.symlink_metadata() {
            Ok(m) => Seen::Entry(Identity {
                dev: m.dev(),
                ino: m.ino(),
                kind: m.mode() & libc::S_IFMT,
                born: m.created().ok(),
                changed: (m.ctime(), m.ctime_nsec()),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Seen::Missing,
            Err(_) => Seen::Unreadable,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Witness {
    path: PathBuf,
    /// The entries in this directory matter, not only which directory it is.
    contents: bool,
    seen: Seen,
}

impl Witness {
    /// Whether `now` tells the same story as what the plan was made from.
    fn holds(&self, now: Seen) -> bool {
        match (self.seen, now) {
            (Seen::Entry(a), Seen::Entry(b)) => {
                let same = a.dev == b.dev && a.ino == b.ino && a.kind == b.kind && a.born == b.born;
                same && (!self.compares_change_time() || a.changed == b.changed)
            }
            (a, b) => a == b,
        }
    }

    fn compares_change_time(&self) -> bool {
        match self.seen {
            Seen::Entry(id) => self.contents || id.kind == libc::S_IFLNK,
            Seen::Missing | Seen::Unreadable => false,
        }
    }

    /// A change time so recent that another change in the same tick would not show.
    fn racy(&self, made: SystemTime) -> bool {
        let Seen::Entry(id) = self.seen else {
            return false;
        };
        if !self.compares_change_time() {
            return false;
        }
        let (secs, nanos) = id.changed;
        let margin = if nanos % 1_000_000 == 0 {
            COARSE_RACY_MARGIN
        } else {
            RACY_MARGIN
        };
        let Ok(secs) = u64::try_from(secs) else {
            return true;
        };
        let changed =
            SystemTime::UNIX_EPOCH + Duration::new(secs, u32::try_from(nanos).unwrap_or(0));
        changed + margin >= made
    }
}

/// The filesystem facts a plan was made from (see the module doc).
#[derive(Debug, Clone)]
pub struct Witnesses {
    made: SystemTime,
    list: Vec<Witness>,
    index: HashMap<PathBuf, usize>,
}

impl Witnesses {
    pub(super) fn new() -> Witnesses {
        Witnesses {
            made: SystemTime::now(),
            list: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// Records `path` (once) and returns what it is.
    pub(super) fn push(&mut self, path: &Path, contents: bool) -> Seen {
        if let Some(&i) = self.index.get(path)
            && let Some(w) = self.list.get_mut(i)
        {
            w.contents |= contents;
            return w.seen;
        }
        let seen = Seen::of(path);
        self.index.insert(path.to_owned(), self.list.len());
        self.list.push(Witness {
            path: path.to_owned(),
            contents,
            seen,
        });
        seen
    }

    /// Every prefix of `path`, `/` first, down to the first missing one (whose
    /// appearance is then what would change the picture).
    pub(super) fn prefixes(&mut self, path: &Path) {
        let mut cur = PathBuf::new();
        for c in path.components() {
            cur.push(c);
            if self.push(&cur, false) == Seen::Missing {
                return;
            }
        }
    }

    /// Whether every witness still holds (one `lstat` each).
    pub fn hold(&self) -> bool {
        self.changed().is_none()
    }

    /// The first path that no longer is what the plan was made from.
    pub fn changed(&self) -> Option<&Path> {
        self.list
            .iter()
            .find(|w| !w.holds(Seen::of(&w.path)))
            .map(|w| w.path.as_path())
    }

    /// Whether a change could have slipped by unseen (see [`RACY_MARGIN`]).
    pub fn racy(&self) -> bool {
        self.racy_path().is_some()
    }

    /// The first path whose change is too recent to trust.
    pub fn racy_path(&self) -> Option<&Path> {
        self.list
            .iter()
            .find(|w| w.racy(self.made))
            .map(|w| w.path.as_path())
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use familiar_sandbox::plan::Grant;

    use crate::sandbox::plan::tests::{change, grants, home_plan, tree};

    #[test]
    fn the_plan_carves_and_records_inodes() {
        let t = tree();
        let h = t.path().canonicalize().unwrap();
        let (plan, w) = home_plan(&h);
        assert_eq!(grants(&plan, &h), Some(Grant::ListDir));
        assert_eq!(grants(&plan, &h.join(".bashrc")), Some(Grant::Read));
        assert_eq!(grants(&plan, &h.join("src")), Some(Grant::Write));
        assert_eq!(grants(&plan, &h.join(".ssh")), None);
        let bashrc = plan
            .rules
            .iter()
            .find(|r| r.path == h.join(".bashrc"))
            .unwrap();
        let m = std::fs::symlink_metadata(h.join(".bashrc")).unwrap();
        assert_eq!((bashrc.dev, bashrc.ino), (m.dev(), m.ino()));
        assert!(w.hold());
    }

    #[test]
    fn writing_inside_granted_trees_keeps_the_plan() {
        let t = tree();
        let h = t.path().canonicalize().unwrap();
        let (_, w) = home_plan(&h);
        std::fs::write(h.join("src/main.rs"), "fn main() {}").unwrap();
        std::fs::create_dir(h.join(".config/nvim/lua")).unwrap();
        std::fs::write(h.join(".bashrc"), "edited in place").unwrap();
        assert!(w.hold());
    }

    #[test]
    fn a_new_entry_in_a_carved_directory_invalidates_the_plan() {
        let t = tree();
        let h = t.path().canonicalize().unwrap();
        let (_, w) = home_plan(&h);
        change(&h, &w);
        assert!(!w.hold());
    }

    #[test]
    fn a_protected_path_appearing_or_repointed_invalidates_the_plan() {
        let t = tree();
        let h = t.path().canonicalize().unwrap();
        let (_, w) = home_plan(&h);
        // Missing when the plan was made: its appearance is seen.
        std::os::unix::fs::symlink(h.join("src"), h.join(".aws")).unwrap();
        assert!(!w.hold());
        let (plan, w) = home_plan(&h);
        // Now `src` is the target of a protected link: no rule at all.
        assert_eq!(grants(&plan, &h.join("src")), None);
        std::fs::remove_file(h.join(".aws")).unwrap();
        std::os::unix::fs::symlink(h.join(".config/nvim"), h.join(".aws")).unwrap();
        assert!(!w.hold());
    }

    #[test]
    fn a_fresh_change_time_makes_the_plan_single_use() {
        let t = tree();
        let h = t.path().canonicalize().unwrap();
        let (_, mut w) = home_plan(&h);
        // The tree was made just now.
        assert!(w.racy());
        w.made += Duration::from_secs(10);
        assert!(!w.racy());
    }
}
