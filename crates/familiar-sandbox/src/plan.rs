//! The sandbox plan as the helper reads it: every Landlock rule of one sandbox, worked
//! out in the daemon (the product's `sandbox::plan`: carving the protected paths, the
//! witnesses, the cache) and handed over in the [`HelperSpec`](crate::spec::HelperSpec)
//! ready to apply (`ruleset`).
//!
//! The invariant: a rule names the inode it was made for (`dev`, `ino`); the helper
//! skips a rule whose path is no longer that inode, so a swap after the daemon made
//! the plan loses a grant instead of granting something else.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The rights one rule grants, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Grant {
    /// A directory that contains a protected path: its names are listable.
    ListDir,
    /// Read (and execute) everything beneath.
    Read,
    /// Read, write and create beneath, but neither remove nor truncate: what is there
    /// stays (issue 40, "nothing permanent").
    Write,
    /// Every right beneath, removing and truncating included: the task's workspace and
    /// the trees a soul names in `[sandbox] destroy`.
    Destroy,
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
