//! From a [`SandboxPolicy`] to an enforced Landlock domain, in the helper only.
//!
//! Landlock can only allow: a rule on `~` grants everything beneath it, `~/.ssh`
//! included. So a tree that contains a protected path is never granted whole:
//! [`expand`] grants each of its children instead, except the protected ones, and
//! recurses into a child that contains a protected path deeper down (`~/.config` minus
//! `~/.config/familiar`). The invariant: no rule is ever placed on a protected path, on
//! an ancestor of one, or on a symlink (a rule on a symlink would grant its target,
//! which the whole tree never did). The carved directories themselves get `ReadDir`
//! only, so `ls ~` works: the names beneath them are listable (Landlock rights are
//! inherited), the contents of protected files are not.
//!
//! Cost: one `readdir` per directory on the way to a protected path and one rule per
//! sibling, a few hundred rules for a home directory under the shipped policy, built in
//! about a millisecond. Limitation: an entry created in an expanded directory after the
//! ruleset is built is not covered (a new `~/notes.txt` is not readable by a command
//! already running); a tool call is short, so the next call sees it. Files hard-linked
//! from a protected path into a granted tree are reachable: Landlock sees paths, not
//! inodes' other names.

use std::path::{Component, Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};

use crate::policy::paths::{glob_match, has_glob};

use super::SandboxPolicy;
use super::status::{Enforcement, EnforcementStatus, TARGET_ABI, abi_from, kernel_abi};

#[derive(Debug, thiserror::Error)]
pub enum RulesetError {
    #[error("landlock: {0}")]
    Landlock(#[from] landlock::RulesetError),
}

/// What to grant for one allowed tree.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Expansion {
    /// Granted whole, with the tree's rights.
    pub granted: Vec<PathBuf>,
    /// Directories that contain a protected path: listable only.
    pub list_only: Vec<PathBuf>,
}

/// The paths to grant for `root` so that nothing in `protected` is reachable beneath
/// it. Both sides are compared as given and with symlinks resolved.
pub fn expand(root: &Path, protected: &[PathBuf]) -> Expansion {
    let protected: Vec<PathBuf> = protected
        .iter()
        .flat_map(|p| [p.clone(), resolve(p)])
        .collect();
    let mut out = Expansion::default();
    if let Ok(real) = root.canonicalize() {
        expand_into(&real, &protected, &mut out);
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

/// The ABI the helper builds for: the kernel's, lowered by `forced` (tests).
pub fn effective_abi(forced: Option<u8>) -> Option<u8> {
    let kernel = kernel_abi()?;
    Some(forced.map_or(kernel, |f| f.min(kernel))).filter(|v| *v > 0)
}

/// Builds the ruleset for `policy` at `abi` and enforces it on the calling thread
/// (the helper is single-threaded, so on the whole process). Also sets
/// `PR_SET_NO_NEW_PRIVS`.
pub fn restrict_self(policy: &SandboxPolicy, abi: Option<u8>) -> Result<Enforcement, RulesetError> {
    let Some(v) = abi else {
        return Ok(Enforcement::for_abi(None));
    };
    let abi = abi_from(v);
    let mut read = Expansion::default();
    for p in &policy.read {
        let e = expand(p, &policy.protected);
        read.granted.extend(e.granted);
        read.list_only.extend(e.list_only);
    }
    let mut write = Expansion::default();
    for p in &policy.write {
        let e = expand(p, &policy.protected);
        write.granted.extend(e.granted);
        read.list_only.extend(e.list_only);
    }

    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))?;
    if !policy.network && abi >= ABI::V4 {
        ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
    }
    if policy.scope_signals && abi >= ABI::V6 {
        ruleset = ruleset.scope(Scope::from_all(abi))?;
    }
    let read_access: BitFlags<AccessFs> = AccessFs::from_read(abi);
    let status = ruleset
        .create()?
        .add_rules(path_beneath_rules(&read.list_only, AccessFs::ReadDir))?
        .add_rules(path_beneath_rules(&read.granted, read_access))?
        .add_rules(path_beneath_rules(&write.granted, AccessFs::from_all(abi)))?
        .restrict_self()?;

    let mut enforcement = Enforcement::for_abi(Some(v.min(TARGET_ABI)));
    match status.ruleset {
        RulesetStatus::FullyEnforced => {}
        RulesetStatus::PartiallyEnforced => {
            enforcement.status = EnforcementStatus::Partial;
        }
        RulesetStatus::NotEnforced => enforcement = Enforcement::for_abi(None),
    }
    if !status.no_new_privs {
        enforcement.status = EnforcementStatus::Partial;
        enforcement.missing.push("no_new_privs".to_owned());
    }
    Ok(enforcement)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        for d in [".ssh", ".config/familiar", ".config/nvim", "src"] {
            std::fs::create_dir_all(t.path().join(d)).unwrap();
        }
        for f in [".ssh/id_ed25519", ".netrc", ".bashrc", ".config/familiar/x"] {
            std::fs::write(t.path().join(f), "x").unwrap();
        }
        t
    }

    fn sorted(mut v: Vec<PathBuf>) -> Vec<PathBuf> {
        v.sort();
        v
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
}
