//! The sandbox plan: every Landlock rule of a task's sandbox, worked out once in the
//! daemon and handed to each helper ready to apply.
//!
//! Working the rules out means resolving the protected paths (symlinks included) and
//! carving them out of every readable tree ([`expand`]): thousands of `readlink`s and a
//! `readdir` per carved directory. The helper would otherwise repeat that for every
//! call; instead the daemon keeps one [`Plan`] per [`super::SandboxPolicy`] (one per
//! task) and the helper only opens each rule's path and adds the rule.
//!
//! The invariant: a plan handed to a helper is the plan [`compute`] would make now.
//! The plan records *witnesses*, the filesystem facts it was made from, and
//! [`PlanCache::get`] checks every witness with one `lstat` before reusing the plan:
//! - every prefix of each protected path and each allowed tree, as written and with
//!   symlinks resolved, down to the first missing one: the same inode (device,
//!   number, type, birth time) or still missing. A symlink re-pointed, a directory
//!   swapped, a missing component created all change one of them; a symlink's own
//!   change time is compared too.
//! - each carved directory: also the change time, which moves whenever an entry in it
//!   is created, removed or renamed.
//!
//! A change time within [`RACY_MARGIN`] of the plan's making (or within 2 s on a
//! filesystem with coarse timestamps) could hide a second change in the same clock
//! tick, so such a plan is used once and never cached. Anything else changed: the
//! plan is made again. The helper checks each rule's inode once more when it opens it
//! (no symlink followed at the end, same device and inode number), so a swap between
//! the check and the helper skips the rule (the safe side) instead of granting
//! something else. Not covered, as before: the realtime clock stepped backwards while
//! a directory changed.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use std::os::unix::fs::MetadataExt;

use serde::{Deserialize, Serialize};

use crate::policy::paths::{glob_match, has_glob};

/// A change time this close to the plan's making is not trusted to reveal a later
/// change (coarse kernel timestamps tick every few milliseconds).
pub const RACY_MARGIN: Duration = Duration::from_millis(20);
/// The same for filesystems whose change times are whole milliseconds (FAT, some
/// network filesystems: 10 ms to 2 s resolution).
const COARSE_RACY_MARGIN: Duration = Duration::from_secs(2);

/// The rights one rule grants, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Grant {
    /// A directory that contains a protected path: its names are listable.
    ListDir,
    /// Read (and execute) everything beneath.
    Read,
    /// Every right beneath.
    Write,
}

/// One Landlock rule: `grant` beneath the inode at `path`, if it still is `(dev, ino)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    pub path: PathBuf,
    pub dev: u64,
    pub ino: u64,
    pub grant: Grant,
}

/// Every rule of one sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub rules: Vec<Rule>,
}

/// What to grant for one allowed tree.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Expansion {
    /// Granted whole, with the tree's rights.
    pub granted: Vec<PathBuf>,
    /// Directories that contain a protected path: listable only.
    pub list_only: Vec<PathBuf>,
}

/// The plan for `read` and `write` trees minus `protected`, and what it depends on.
pub fn compute(read: &[PathBuf], write: &[PathBuf], protected: &[PathBuf]) -> (Plan, Witnesses) {
    compute_guarded(read, write, protected, &[])
}

/// [`compute`], with `write_protected` also carved out of the writable trees only
/// (familiar's own binaries: readable and runnable where a soul reads, never
/// writable, and their directory gets no new entries).
pub fn compute_guarded(
    read: &[PathBuf],
    write: &[PathBuf],
    protected: &[PathBuf],
    write_protected: &[PathBuf],
) -> (Plan, Witnesses) {
    let mut w = Witnesses::new();
    let resolved = resolve_all(protected, &mut w);
    let mut resolved_for_write = resolved.clone();
    resolved_for_write.extend(resolve_all(write_protected, &mut w));
    let mut rules = Vec::new();
    for (trees, grant, resolved) in [
        (read, Grant::Read, &resolved),
        (write, Grant::Write, &resolved_for_write),
    ] {
        for root in trees {
            w.prefixes(root);
            let Ok(real) = root.canonicalize() else {
                continue;
            };
            w.prefixes(&real);
            let mut e = Expansion::default();
            expand_into(&real, resolved, &mut e);
            for dir in e.list_only {
                w.push(&dir, true);
                push_rule(&mut rules, dir, Grant::ListDir);
            }
            for path in e.granted {
                push_rule(&mut rules, path, grant);
            }
        }
    }
    (Plan { rules }, w)
}

fn push_rule(rules: &mut Vec<Rule>, path: PathBuf, grant: Grant) {
    // Gone since the directory was read: nothing to grant.
    if let Ok(m) = path.symlink_metadata()
        && !m.is_symlink()
    {
        rules.push(Rule {
            dev: m.dev(),
            ino: m.ino(),
            path,
            grant,
        });
    }
}

/// The paths to grant for `root` so that nothing in `protected` is reachable beneath
/// it. Both sides are compared as given and with symlinks resolved.
pub fn expand(root: &Path, protected: &[PathBuf]) -> Expansion {
    let mut w = Witnesses::new();
    let protected = resolve_all(protected, &mut w);
    let mut out = Expansion::default();
    if let Ok(real) = root.canonicalize() {
        expand_into(&real, &protected, &mut out);
    }
    out
}

/// Each protected path as given and with symlinks resolved, recording what the
/// resolution depended on.
fn resolve_all(protected: &[PathBuf], w: &mut Witnesses) -> Vec<PathBuf> {
    let mut out = Vec::with_capacity(protected.len() * 2);
    for p in protected {
        w.prefixes(p);
        let r = resolve(p);
        if r != *p {
            w.prefixes(&r);
            out.push(r);
        }
        out.push(p.clone());
    }
    out
}

fn expand_into(dir: &Path, protected: &[PathBuf], out: &mut Expansion) {
    if protected.iter().any(|p| is_under(dir, p)) {
        return;
    }
    if !protected.iter().any(|p| is_under(p, dir)) {
        out.granted.push(dir.to_owned());
        return;
    }
    if dir.is_dir() {
        out.list_only.push(dir.to_owned());
    }
    // A directory we cannot list cannot be carved up: granting nothing is the safe side.
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_symlink() {
            continue;
        }
        let path = entry.path();
        if kind.is_dir() {
            expand_into(&path, protected, out);
        } else if !protected.iter().any(|p| is_under(&path, p)) {
            out.granted.push(path);
        }
    }
}

/// `path` equals `entry` or lies beneath it; a glob component of `entry` (a policy may
/// write `~/.mozilla/*/cookies.sqlite`) matches as the shell would.
fn is_under(path: &Path, entry: &Path) -> bool {
    let mut comps = path.components();
    for e in entry.components() {
        let Some(c) = comps.next() else {
            return false;
        };
        if c == e {
            continue;
        }
        let (Component::Normal(c), Component::Normal(e)) = (c, e) else {
            return false;
        };
        let (Some(c), Some(e)) = (c.to_str(), e.to_str()) else {
            return false;
        };
        if !(has_glob(e) && glob_match(e, c)) {
            return false;
        }
    }
    true
}

/// `path` with its longest existing prefix canonicalised.
fn resolve(path: &Path) -> PathBuf {
    let mut tail = Vec::new();
    let mut cur = path;
    loop {
        if let Ok(real) = cur.canonicalize() {
            let mut out = real;
            out.extend(tail.iter().rev());
            return out;
        }
        match (cur.parent(), cur.file_name()) {
            (Some(parent), Some(name)) => {
                tail.push(name.to_owned());
                cur = parent;
            }
            _ => return path.to_owned(),
        }
    }
}

/// What `lstat` said about a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Missing,
    /// Some other error (a directory the daemon may not search): compared as such.
    Unreadable,
    Entry(Identity),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
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
    fn new() -> Witnesses {
        Witnesses {
            made: SystemTime::now(),
            list: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// Records `path` (once) and returns what it is.
    fn push(&mut self, path: &Path, contents: bool) -> Seen {
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
    fn prefixes(&mut self, path: &Path) {
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

#[derive(Debug)]
struct Cached {
    read: Vec<PathBuf>,
    write: Vec<PathBuf>,
    protected: Vec<PathBuf>,
    write_protected: Vec<PathBuf>,
    plan: Arc<Plan>,
    witnesses: Witnesses,
}

/// Plans kept at once: one per soul and workspace in use, the least recently used
/// dropped first.
pub const PLAN_CACHE_ENTRIES: usize = 16;

/// Plans of recent sandboxes, each kept while its witnesses hold. The daemon shares one
/// between tasks, so a task of a soul and workspace in use by another task starts with
/// its plan made (checked, not computed); it empties the cache when it goes idle
/// ([`PlanCache::clear`]). Cheap to share: clones see the same cache.
#[derive(Debug, Default, Clone)]
pub struct PlanCache {
    /// Most recently used last.
    inner: Arc<Mutex<Vec<Cached>>>,
}

impl PlanCache {
    /// Drops every plan. The daemon does this when its last task ends: a plan holds a
    /// few thousand small paths (its witnesses), and the plans made during a busy spell
    /// would otherwise sit spread over the heap and keep its pages from going back to
    /// the kernel (BENCHMARKS.md, "Idle memory"). The next task's first call makes its
    /// plan again (a few milliseconds, once per task).
    pub fn clear(&self) {
        let mut entries = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        *entries = Vec::new();
    }

    /// The plan for these trees, reused when nothing it depends on changed. Blocking:
    /// a few hundred `lstat`s when reused, a fresh [`compute`] otherwise.
    pub fn get(
        &self,
        read: &[PathBuf],
        write: &[PathBuf],
        protected: &[PathBuf],
        write_protected: &[PathBuf],
    ) -> Arc<Plan> {
        // One caller computes, the others wait and reuse.
        let mut entries = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let found = entries.iter().position(|c| {
            c.read == read
                && c.write == write
                && c.protected == protected
                && c.write_protected == write_protected
        });
        if let Some(i) = found {
            let c = entries.remove(i);
            match c.witnesses.changed() {
                None => {
                    let plan = c.plan.clone();
                    entries.push(c);
                    return plan;
                }
                Some(path) => {
                    tracing::debug!("sandbox plan made again: {} changed", path.display());
                }
            }
        }
        let (plan, witnesses) = compute_guarded(read, write, protected, write_protected);
        let plan = Arc::new(plan);
        if let Some(path) = witnesses.racy_path() {
            tracing::debug!(
                "sandbox plan not kept: {} changed too recently to trust",
                path.display()
            );
        } else {
            if entries.len() >= PLAN_CACHE_ENTRIES {
                entries.remove(0);
            }
            entries.push(Cached {
                read: read.to_vec(),
                write: write.to_vec(),
                protected: protected.to_vec(),
                write_protected: write_protected.to_vec(),
                plan: plan.clone(),
                witnesses,
            });
        }
        plan
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
