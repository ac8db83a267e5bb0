//! The sandbox plan: every Landlock rule of a task's sandbox, worked out once in the
//! daemon and handed to each helper ready to apply.
//!
//! Working the rules out means resolving the protected paths (symlinks included) and
//! carving them out of every readable tree ([`expand`]): thousands of `readlink`s and a
//! `readdir` per carved directory. The helper would otherwise repeat that for every
//! call; instead the daemon keeps one [`Plan`] per `SandboxPolicy` (one per
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
//!
//! Here: the rules and working them out; the witnesses in [`witness`], the cache of
//! recent plans in [`cache`].

mod cache;
mod witness;

pub use cache::{PLAN_CACHE_ENTRIES, PlanCache};
pub use witness::{RACY_MARGIN, Witnesses};

use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use familiar_sandbox::glob::{glob_match, has_glob};
use familiar_sandbox::plan::{Grant, Plan, Rule};

use crate::policy::paths::resolve;

/// What to grant for one allowed tree.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Expansion {
    /// Granted whole, with the tree's rights.
    pub granted: Vec<PathBuf>,
    /// Directories that contain a protected path: listable only.
    pub list_only: Vec<PathBuf>,
}

/// The trees one sandbox is made of, as the daemon names them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Trees<'a> {
    /// Readable.
    pub read: &'a [PathBuf],
    /// Readable and writable, without removing or truncating.
    pub write: &'a [PathBuf],
    /// Of `write`, the trees where removing and truncating are granted as well: a
    /// write tree that is one of them or lies beneath one gets [`Grant::Destroy`].
    pub destroy: &'a [PathBuf],
    /// Carved out of every tree.
    pub protected: &'a [PathBuf],
    /// Carved out of the writable trees (familiar's own binaries: readable and
    /// runnable where a soul reads, never writable, and their directory gets no new
    /// entries).
    pub write_protected: &'a [PathBuf],
    /// Carved out of each writable tree that does not lie inside it (the places where
    /// code is planted that runs later; a tree inside one was named on purpose, and
    /// the caller vouches for it).
    pub closed: &'a [PathBuf],
}

/// The plan for `read` and `write` trees minus `protected`, and what it depends on.
pub fn compute(read: &[PathBuf], write: &[PathBuf], protected: &[PathBuf]) -> (Plan, Witnesses) {
    compute_trees(&Trees {
        read,
        write,
        protected,
        ..Trees::default()
    })
}

/// The plan for `trees`, and what it depends on.
pub fn compute_trees(trees: &Trees<'_>) -> (Plan, Witnesses) {
    let mut w = Witnesses::new();
    let resolved = resolve_all(trees.protected, &mut w);
    let mut resolved_for_write = resolved.clone();
    resolved_for_write.extend(resolve_all(trees.write_protected, &mut w));
    let resolved_closed = resolve_all(trees.closed, &mut w);
    let mut rules = Vec::new();
    for (roots, writable) in [(trees.read, false), (trees.write, true)] {
        for root in roots {
            w.prefixes(root);
            let Ok(real) = root.canonicalize() else {
                continue;
            };
            w.prefixes(&real);
            let (grant, carved) = if writable {
                let destroy = trees.destroy.iter().any(|d| {
                    root.starts_with(d) || d.canonicalize().is_ok_and(|d| real.starts_with(d))
                });
                let carved: Vec<PathBuf> = resolved_for_write
                    .iter()
                    .chain(
                        resolved_closed
                            .iter()
                            .filter(|c| !is_under(root, c) && !is_under(&real, c)),
                    )
                    .cloned()
                    .collect();
                (
                    if destroy {
                        Grant::Destroy
                    } else {
                        Grant::Write
                    },
                    carved,
                )
            } else {
                (Grant::Read, resolved.clone())
            };
            let mut e = Expansion::default();
            expand_into(&real, &carved, &mut e);
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

#[cfg(test)]
mod tests {
    //! Unit tests of the plan: carving and the refresh rule.

    use std::path::PathBuf;

    use super::*;

    pub(super) fn tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        for d in [".ssh", ".config/familiar", ".config/nvim", "src"] {
            std::fs::create_dir_all(t.path().join(d)).unwrap();
        }
        for f in [".ssh/id_ed25519", ".netrc", ".bashrc", ".config/familiar/x"] {
            std::fs::write(t.path().join(f), "x").unwrap();
        }
        t
    }

    pub(super) fn sorted(mut v: Vec<PathBuf>) -> Vec<PathBuf> {
        v.sort();
        v
    }
    /// Changes `dir` (a new entry) until its change time differs from `before`: on a
    /// filesystem with coarse timestamps the first change may land in the same tick.
    pub(super) fn change(dir: &Path, before: &Witnesses) {
        for i in 0.. {
            std::fs::write(dir.join(format!("new{i}")), "x").unwrap();
            if !before.hold() {
                return;
            }
        }
    }

    pub(super) fn home_plan(h: &Path) -> (Plan, Witnesses) {
        compute(
            &[h.to_owned()],
            &[h.join("src")],
            &[h.join(".ssh"), h.join(".netrc"), h.join(".aws")],
        )
    }

    pub(super) fn grants(plan: &Plan, path: &Path) -> Option<Grant> {
        plan.rules
            .iter()
            .filter(|r| r.path == path)
            .map(|r| r.grant)
            .max()
    }

    #[test]
    fn a_tree_without_protected_paths_is_granted_whole() {
        let t = tree();
        let root = t.path().canonicalize().unwrap();
        let e = expand(&root.join("src"), &[root.join(".ssh")]);
        assert_eq!(e.granted, [root.join("src")]);
        assert!(e.list_only.is_empty());
    }

    #[test]
    fn protected_children_are_carved_out_recursively() {
        let t = tree();
        let h = t.path().canonicalize().unwrap();
        let protected = [h.join(".ssh"), h.join(".netrc"), h.join(".config/familiar")];
        let e = expand(&h, &protected);
        assert_eq!(
            sorted(e.granted),
            sorted(vec![
                h.join(".bashrc"),
                h.join(".config/nvim"),
                h.join("src")
            ])
        );
        assert_eq!(
            sorted(e.list_only),
            sorted(vec![h.clone(), h.join(".config")])
        );
    }

    #[test]
    fn a_tree_inside_a_protected_path_is_not_granted() {
        let t = tree();
        let h = t.path().canonicalize().unwrap();
        assert_eq!(
            expand(&h.join(".ssh"), &[h.join(".ssh")]),
            Expansion::default()
        );
    }

    #[test]
    fn symlinked_children_get_no_rule() {
        let t = tree();
        let h = t.path().canonicalize().unwrap();
        std::os::unix::fs::symlink(h.join(".ssh"), h.join("keys")).unwrap();
        let got = expand(&h, &[h.join(".ssh")]).granted;
        assert!(!got.contains(&h.join("keys")), "{got:?}");
    }

    #[test]
    fn glob_components_in_protected_paths_match() {
        let t = tree();
        let h = t.path().canonicalize().unwrap();
        let got = expand(&h.join(".config"), &[h.join(".config/fam*")]).granted;
        assert_eq!(got, [h.join(".config/nvim")]);
    }

    #[test]
    fn write_protected_files_stay_readable_and_their_directory_gets_no_new_entries() {
        let t = tree();
        let h = t.path().canonicalize().unwrap();
        let bin = h.join(".local/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("familiar-sandbox"), "helper").unwrap();
        std::fs::write(bin.join("other"), "x").unwrap();
        let (plan, _) = compute_trees(&Trees {
            read: std::slice::from_ref(&h),
            write: std::slice::from_ref(&h),
            destroy: std::slice::from_ref(&h),
            write_protected: &[bin.join("familiar-sandbox")],
            ..Trees::default()
        });
        // The home is writable, except the helper and its directory's own entries: the
        // directory is only listable for writes, its other files writable, and the whole
        // home (helper included) readable.
        assert!(
            plan.rules
                .iter()
                .any(|r| r.path == h && r.grant == Grant::Read)
        );
        assert_eq!(grants(&plan, &bin.join("other")), Some(Grant::Destroy));
        assert!(
            !plan.rules.iter().any(
                |r| r.path.starts_with(bin.join("familiar-sandbox")) && r.grant >= Grant::Write
            ),
            "{plan:?}"
        );
        assert!(
            !plan
                .rules
                .iter()
                .any(|r| bin.starts_with(&r.path) && r.grant >= Grant::Write),
            "no write rule on the directory or above it: {plan:?}"
        );
    }

    #[test]
    fn only_destroy_trees_may_remove_or_truncate() {
        let t = tree();
        let h = t.path().canonicalize().unwrap();
        let write = [h.join("src"), h.join(".config")];
        let destroy = [h.join("src")];
        let (plan, _) = compute_trees(&Trees {
            write: &write,
            destroy: &destroy,
            ..Trees::default()
        });
        assert_eq!(grants(&plan, &h.join("src")), Some(Grant::Destroy));
        assert_eq!(grants(&plan, &h.join(".config")), Some(Grant::Write));
    }

    #[test]
    fn closed_places_are_carved_from_trees_outside_them_only() {
        let t = tree();
        let h = t.path().canonicalize().unwrap();
        let named = h.join(".config/nvim");
        let closed = [h.join(".*"), h.join(".config")];
        let write = [h.clone(), named.clone()];
        let (plan, _) = compute_trees(&Trees {
            write: &write,
            closed: &closed,
            ..Trees::default()
        });
        // The home: its visible entries writable, no hidden one, and the home itself
        // only listable, so no new entry (hidden or not) can be made in it.
        assert_eq!(grants(&plan, &h.join("src")), Some(Grant::Write));
        assert_eq!(grants(&plan, &h), Some(Grant::ListDir));
        for hidden in [".bashrc", ".netrc", ".ssh", ".config", ".config/familiar"] {
            assert!(
                !plan.rules.iter().any(|r| r.path.starts_with(h.join(hidden))
                    && r.grant == Grant::Write
                    && !r.path.starts_with(&named)),
                "{hidden}: {plan:?}"
            );
        }
        // A tree inside a closed place, named on purpose, is granted whole.
        assert_eq!(grants(&plan, &named), Some(Grant::Write));
    }
}
