//! Soul profiles: schema, loading, validation, the built-in souls.
//!
//! A soul fixes the persona prompt, the model, the tool allowlist, the budgets, the
//! tier modes it asks for and its sandbox. It can only tighten the policy: the modes it
//! asks for are clamped to the policy's at decision time, and a soul *file* that asks
//! for more than the policy gives is a validation error naming the key.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::ids::SoulId;
use crate::policy::{RateLimits, TierModes};

/// What a soul's tools may touch, enforced by Landlock in the tool's child process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SandboxSpec {
    /// Readable trees (absolute, `~` expanded).
    pub read: Vec<PathBuf>,
    /// Writable trees, besides the task workspace.
    pub write: Vec<PathBuf>,
    /// TCP connect/bind allowed.
    pub network: bool,
    /// Refuse to run unless Landlock is fully enforced.
    pub require: bool,
}

/// Where a soul was loaded from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SoulOrigin {
    BuiltIn,
    File(PathBuf),
}

/// A validated soul.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Soul {
    pub id: SoulId,
    pub description: String,
    pub prompt: String,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub max_iterations: u32,
    /// Per task, input + output.
    pub max_tokens: u64,
    #[serde(serialize_with = "crate::soul::ser_duration")]
    pub max_wall_clock: Duration,
    /// The allowlist, in file order.
    pub tools: Vec<String>,
    /// The modes the soul asks for; the policy's are the ceiling.
    pub permissions: TierModes,
    pub sandbox: SandboxSpec,
    pub rate_limits: RateLimits,
    pub origin: SoulOrigin,
}

pub(crate) fn ser_duration<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&humantime::format_duration(*d))
}
