//! From a [`Plan`] to an enforced Landlock domain, in the helper only.
//!
//! Landlock can only allow: a rule on `~` grants everything beneath it, `~/.ssh`
//! included. So a tree that contains a protected path is never granted whole: the
//! daemon's plan ([`crate::plan`]) grants each of its children instead, except the
//! protected ones, recursing into a child that contains a protected path deeper down
//! (`~/.config` minus `~/.config/familiar`). The invariant: no rule is ever placed on a
//! protected path, on an ancestor of one, or on a symlink (a rule on a symlink would
//! grant its target, which the whole tree never did). The carved directories themselves
//! get `ReadDir` only, so `ls ~` works: the names beneath them are listable (Landlock
//! rights are inherited), the contents of protected files are not.
//!
//! Here the helper only opens each rule's path (`O_PATH | O_NOFOLLOW`), checks it is
//! still the inode the plan was made for, and adds the rule: a path that vanished or
//! now names something else gets no rule (the safe side). Cost: one `open` and one
//! `fstat` per rule, a few hundred rules for a carved home directory.
//!
//! Limitation: an entry created in a carved directory after the plan was checked is
//! not covered (a new `~/notes.txt` is not readable by a command already running); the
//! next call's plan sees it (see [`crate::plan`] for when a plan is made again). Files
//! hard-linked from a protected path into a granted tree are reachable: Landlock sees
//! paths, not inodes' other names.

use std::os::fd::OwnedFd;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};
use nix::fcntl::OFlag;
use nix::sys::stat::{Mode, SFlag};

use crate::plan::{Grant, Rule};
use crate::spec::HelperSpec;
use crate::status::{Enforcement, EnforcementStatus, TARGET_ABI, abi_from, kernel_abi};

#[derive(Debug, thiserror::Error)]
pub(crate) enum RulesetError {
    #[error("landlock: {0}")]
    Landlock(#[from] landlock::RulesetError),
}

/// The ABI the helper builds for: the kernel's, lowered by `forced` (tests).
pub(crate) fn effective_abi(forced: Option<u8>) -> Option<u8> {
    let kernel = kernel_abi()?;
    Some(forced.map_or(kernel, |f| f.min(kernel))).filter(|v| *v > 0)
}

/// Opens `rule.path` without following a final symlink; `None` unless it is still the
/// inode of the plan. Also says whether it is a directory.
fn open_rule(rule: &Rule) -> Option<(OwnedFd, bool)> {
    let fd = nix::fcntl::open(
        &rule.path,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let st = nix::sys::stat::fstat(&fd).ok()?;
    let kind = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
    let same = st.st_dev == rule.dev && st.st_ino == rule.ino && kind != SFlag::S_IFLNK;
    same.then_some((fd, kind == SFlag::S_IFDIR))
}

/// The rights that destroy what is there: unlinking (a rename away or over a name is
/// one too) and truncating (`> file`, `O_TRUNC`, `ftruncate`; Landlock ABI 3).
pub(crate) fn destroy_access() -> BitFlags<AccessFs> {
    AccessFs::RemoveFile | AccessFs::RemoveDir | AccessFs::Truncate
}

/// Builds the ruleset for `spec` at `abi` and enforces it on the calling thread
/// (the helper is single-threaded, so on the whole process). Also sets
/// `PR_SET_NO_NEW_PRIVS`.
pub(crate) fn restrict_self(
    spec: &HelperSpec,
    abi: Option<u8>,
) -> Result<Enforcement, RulesetError> {
    let Some(v) = abi else {
        return Ok(Enforcement::for_abi(None));
    };
    let abi = abi_from(v);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))?;
    if !spec.network && abi >= ABI::V4 {
        ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
    }
    if spec.scope_signals && abi >= ABI::V6 {
        ruleset = ruleset.scope(Scope::from_all(abi))?;
    }
    let read_access: BitFlags<AccessFs> = AccessFs::from_read(abi);
    let file_access: BitFlags<AccessFs> = AccessFs::from_file(abi);
    let mut created = ruleset.create()?;
    for rule in &spec.plan.rules {
        let Some((fd, is_dir)) = open_rule(rule) else {
            continue;
        };
        let access = match rule.grant {
            Grant::ListDir => BitFlags::from(AccessFs::ReadDir),
            Grant::Read => read_access,
            // A brokered file operation: the daemon kept what it replaces or moves.
            Grant::Write if spec.brokered => AccessFs::from_all(abi),
            Grant::Write => AccessFs::from_all(abi) & !destroy_access(),
            Grant::Destroy => AccessFs::from_all(abi),
        };
        // Directory-only rights on a file are an error to Landlock.
        let access = if is_dir { access } else { access & file_access };
        if access.is_empty() {
            continue;
        }
        created = created.add_rule(PathBeneath::new(fd, access))?;
    }
    let status = created.restrict_self()?;

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
