//! Permission tiers, modes, blocked patterns, protected paths and rate-limit specs.
//!
//! A policy (`policies/NAME.toml`) is the ceiling every soul obeys. Deciding one tool
//! call is a pure function of (the soul's [`Grant`], policy, tool, tier, arguments),
//! apart from
//! resolving symlinks in the paths it names: see [`decide()`]. The rate limiter and the
//! approval broker come after it; this module only says whether a call is allowed,
//! must be asked, or is denied, and why.
//!
//! The invariant: nothing a model can write turns a deny or an ask into an allow.
//! What cannot be understood (an opaque shell construct, an unparseable command) is
//! asked, never allowed.
//!
//! - [`file`](mod@file): the policy file schema, and what a file resolves to.
//! - [`load`](mod@load): the built-in policies, loading by name.
//! - [`decide`](mod@decide): the decision for one call, step by step.
//! - [`verdict`]: the decision and the steps that reached it (each step, its outcome).
//! - [`subjects`]: what a call is judged by: its command line, the paths it names.
//! - [`scope`]: what a timed grant of an asked call covers, and which calls take none.
//! - [`shell`]: shell command analysis (simple commands, canonical forms, opacity).
//! - [`paths`]: path normalisation and the protected-path test.
//! - [`pattern`]: a rule's regex, and when it is compiled.

pub mod closed;
pub mod decide;
pub mod file;
pub mod load;
pub mod paths;
pub mod pattern;
pub mod scope;
pub mod shell;
pub mod startup;
pub mod subjects;
pub mod verdict;

pub use decide::decide;
pub use file::{PatternRule, PolicyToml};
pub use load::{builtin_names, builtin_source, load};
pub use paths::PathContext;
pub use scope::grantable;
pub use subjects::Call;
pub use verdict::{Decision, DenyRule, Outcome, Step, StepName, Verdict};

use std::fmt;
use std::num::NonZeroU32;
use std::str::FromStr;
use std::time::Duration;

use familiar_protocol::tier::{Mode, Tier};
use serde::{Deserialize, Serialize};

/// One mode per tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierModes {
    pub read: Mode,
    pub write: Mode,
    pub execute: Mode,
    pub system_critical: Mode,
}

impl TierModes {
    pub fn get(&self, tier: Tier) -> Mode {
        match tier {
            Tier::Read => self.read,
            Tier::Write => self.write,
            Tier::Execute => self.execute,
            Tier::SystemCritical => self.system_critical,
        }
    }

    /// Sets the mode of `tier`.
    pub fn set(&mut self, tier: Tier, mode: Mode) {
        let slot = match tier {
            Tier::Read => &mut self.read,
            Tier::Write => &mut self.write,
            Tier::Execute => &mut self.execute,
            Tier::SystemCritical => &mut self.system_critical,
        };
        *slot = mode;
    }

    /// The stricter of the two, tier by tier.
    pub fn tighten(&self, other: &TierModes) -> TierModes {
        TierModes {
            read: self.read.max(other.read),
            write: self.write.max(other.write),
            execute: self.execute.max(other.execute),
            system_critical: self.system_critical.max(other.system_critical),
        }
    }
}

/// What a soul is granted, the part of it a decision reads: the tools it may call and
/// the modes it asks for. `Soul` embeds one, so the policy decides without knowing
/// souls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Grant {
    /// The allowlist, in file order.
    pub tools: Vec<String>,
    /// The modes the soul asks for; a tier the file leaves out is `allow` here, which
    /// means "whatever the policy says". The policy's modes are the ceiling.
    pub permissions: TierModes,
}

impl Grant {
    /// Whether the allowlist names `tool` (an MCP tool: by an `mcp:` entry).
    pub fn allows_tool(&self, tool: &str) -> bool {
        crate::catalog::allowlist_allows(&self.tools, tool)
    }

    /// The modes in force under `policy`.
    pub fn effective_modes(&self, policy: &Policy) -> TierModes {
        self.permissions.tighten(&policy.tiers)
    }
}

/// A rate like `"30/min"`: at most `count` events per `per`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RateSpec {
    pub count: NonZeroU32,
    pub per: Duration,
}

/// A rate that is not `COUNT/UNIT`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid rate `{0}`: expected COUNT/UNIT like `30/min` (units: s, sec, min, h, hour, day)")]
pub struct RateSpecError(String);

impl FromStr for RateSpec {
    type Err = RateSpecError;

    fn from_str(s: &str) -> Result<Self, RateSpecError> {
        let bad = || RateSpecError(s.to_owned());
        let (count, unit) = s.split_once('/').ok_or_else(bad)?;
        let count: u32 = count.trim().parse().map_err(|_| bad())?;
        let count = NonZeroU32::new(count).ok_or_else(bad)?;
        let per = match unit.trim() {
            "s" | "sec" | "second" => Duration::from_secs(1),
            "m" | "min" | "minute" => Duration::from_secs(60),
            "h" | "hour" => Duration::from_secs(3600),
            "d" | "day" => Duration::from_secs(86_400),
            _ => return Err(bad()),
        };
        Ok(RateSpec { count, per })
    }
}

impl TryFrom<String> for RateSpec {
    type Error = RateSpecError;
    fn try_from(s: String) -> Result<Self, RateSpecError> {
        s.parse()
    }
}

impl From<RateSpec> for String {
    fn from(r: RateSpec) -> String {
        r.to_string()
    }
}

impl fmt::Display for RateSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.per.as_secs() {
            1 => "s",
            60 => "min",
            3600 => "hour",
            86_400 => "day",
            n => return write!(f, "{}/{n}s", self.count),
        };
        write!(f, "{}/{unit}", self.count)
    }
}

/// Rate limits a soul or a policy sets. `None` means "no limit at this level".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimits {
    /// All tool calls of one session.
    pub tool_calls: Option<RateSpec>,
    /// LLM requests of one session.
    pub llm_calls: Option<RateSpec>,
    /// Per tool, per session (`shell = "10/min"`).
    #[serde(default)]
    pub tools: std::collections::BTreeMap<String, RateSpec>,
}

/// The effective policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub name: String,
    pub description: String,
    pub tiers: TierModes,
    pub rate_limits: RateLimits,
    /// All tool calls across all sessions (the daemon's global ceiling).
    pub global_tool_calls: Option<RateSpec>,
    /// `Submit`s to the daemon, per Unix user (the daemon's default: 30/min).
    pub submits: Option<RateSpec>,
    /// How long an approval waits before the call is denied.
    pub approval_timeout: Duration,
    /// Absolute (`~` expanded), lexically normalised; symlinks are resolved at
    /// decision time, since the file system changes under a running daemon.
    pub protected_paths: Vec<std::path::PathBuf>,
    /// Matched → deny.
    pub blocked: Vec<PatternRule>,
    /// Matched → ask, whatever the tier's mode.
    pub ask: Vec<PatternRule>,
}

#[cfg(test)]
mod type_tests {
    use super::*;

    #[test]
    fn rate_specs_parse_and_print() {
        let r: RateSpec = "30/min".parse().unwrap();
        assert_eq!(r.count.get(), 30);
        assert_eq!(r.per, Duration::from_secs(60));
        assert_eq!(r.to_string(), "30/min");
        for bad in ["30", "0/min", "x/min", "30/fortnight", "-1/s"] {
            assert!(bad.parse::<RateSpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn tighten_takes_the_stricter_mode() {
        let loose = TierModes {
            read: Mode::Allow,
            write: Mode::Allow,
            execute: Mode::Ask,
            system_critical: Mode::Deny,
        };
        let strict = TierModes {
            read: Mode::Allow,
            write: Mode::Ask,
            execute: Mode::Deny,
            system_critical: Mode::Ask,
        };
        let t = loose.tighten(&strict);
        assert_eq!(
            (t.read, t.write, t.execute, t.system_critical),
            (Mode::Allow, Mode::Ask, Mode::Deny, Mode::Deny)
        );
    }
}

#[cfg(test)]
mod tests {
    //! The decision table: (tool, arguments, soul, policy) → decision, over every rule
    //! of the shipped policies, in a temporary home with a real `~/.ssh` and a symlink
    //! into it.

    use std::path::PathBuf;

    use familiar_protocol::ids::SoulId;
    use serde_json::{Value, json};

    use super::*;

    pub(super) const HOME: &str = "/home/user";

    /// A policy file `p.toml` with `src`, on the built-in default.
    pub(super) fn parse(src: &str) -> Result<Policy, crate::error::FileError> {
        Policy::from_toml("p.toml", src, std::path::Path::new(HOME))
    }

    pub(super) const ALL_TOOLS: &[&str] = &[
        "read_file",
        "list_dir",
        "search_files",
        "disk_usage",
        "write_file",
        "edit_file",
        "trash",
        "shell",
        "systemd_user",
        "hypr_dispatch",
        "desktop_dispatch",
        "open",
        "kill_process",
        "power",
    ];

    pub(super) const ALLOW_ALL: TierModes = TierModes {
        read: Mode::Allow,
        write: Mode::Allow,
        execute: Mode::Allow,
        system_critical: Mode::Allow,
    };

    pub(super) fn grant(tools: &[&str], permissions: TierModes) -> Grant {
        Grant {
            tools: tools.iter().map(|t| (*t).to_owned()).collect(),
            permissions,
        }
    }

    /// A home directory with `~/.ssh/id_rsa`, a workspace `~/work` and a symlink
    /// `~/work/innocent` → `~/.ssh`.
    pub(super) struct World {
        _dir: tempfile::TempDir,
        pub(super) home: PathBuf,
        pub(super) cwd: PathBuf,
        pub(super) default: Policy,
        pub(super) strict: Policy,
        /// `default` with every tier allowed: shows what the patterns alone decide.
        pub(super) open: Policy,
    }

    pub(super) fn world() -> World {
        let dir = tempfile::tempdir().unwrap();
        let home = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::write(home.join(".ssh/id_rsa"), "secret").unwrap();
        let cwd = home.join("work");
        std::fs::create_dir_all(cwd.join("build")).unwrap();
        std::os::unix::fs::symlink(home.join(".ssh"), cwd.join("innocent")).unwrap();
        let parse = |name: &str| {
            Policy::from_toml(
                &format!("built-in:policies/{name}.toml"),
                builtin_source(name).unwrap(),
                &home,
            )
            .unwrap()
        };
        let default = parse("default");
        let strict = parse("strict");
        let mut open = default.clone();
        open.name = "open".to_owned();
        open.tiers = ALLOW_ALL;
        World {
            _dir: dir,
            home,
            cwd,
            default,
            strict,
            open,
        }
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    pub(super) enum Want {
        Allow,
        Ask,
        Deny(DenyRule),
    }

    pub(super) fn kind(d: &Decision) -> Want {
        match d {
            Decision::Allow => Want::Allow,
            Decision::Ask { .. } => Want::Ask,
            Decision::Deny { rule, .. } => Want::Deny(*rule),
        }
    }

    impl World {
        pub(super) fn decide_with(
            &self,
            grant: &Grant,
            policy: &Policy,
            tool: &str,
            args: &Value,
        ) -> Verdict {
            let info = crate::catalog::info(tool).unwrap();
            let call = Call {
                tool,
                tier: crate::catalog::tier_for_call(info, args),
                args,
            };
            let ctx = PathContext {
                home: &self.home,
                cwd: &self.cwd,
            };
            decide(&SoulId::new("tester").unwrap(), grant, policy, &call, &ctx)
        }

        pub(super) fn policy(&self, name: &str) -> &Policy {
            match name {
                "default" => &self.default,
                "strict" => &self.strict,
                "open" => &self.open,
                other => panic!("no policy {other}"),
            }
        }
    }

    pub(super) fn sh(cmd: &str) -> (&'static str, Value) {
        ("shell", json!({ "command": cmd }))
    }

    pub(super) use DenyRule::{BlockedPattern, NotInSoul, ProtectedPath, TierDenied};
    pub(super) use Want::{Allow, Ask, Deny};

    /// Checks each `(policy, call, want)` row against the shipped policies, with a soul
    /// that allows every tool, and reports every row that differs.
    pub(super) fn check_table(cases: &[(&str, (&str, Value), Want)]) {
        let w = world();
        let full = grant(ALL_TOOLS, ALLOW_ALL);
        let mut failures = Vec::new();
        for (policy, (tool, args), want) in cases {
            let v = w.decide_with(&full, w.policy(policy), tool, args);
            if kind(&v.decision) != *want {
                failures.push(format!("{policy} {tool} {args}: want {want:?}, got {v}"));
            }
        }
        assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    }

    #[test]
    fn tier_modes_per_tier_per_shipped_policy() {
        #[rustfmt::skip]
        let cases: &[(&str, (&str, Value), Want)] = &[
            // Tier modes per tier, per shipped policy.
            ("default", ("read_file", json!({"path": "~/notes.txt"})), Allow),
            ("default", ("list_dir", json!({"path": "."})), Allow),
            ("default", ("write_file", json!({"path": "out.txt", "content": "x"})), Ask),
            ("default", ("trash", json!({"path": "~/old.txt"})), Ask),
            ("default", sh("ls -la"), Ask),
            ("default", ("kill_process", json!({"pid": 42})), Ask),
            ("default", ("systemd_user", json!({"action": "status", "unit": "x"})), Allow),
            ("strict", ("read_file", json!({"path": "notes.txt"})), Allow),
            ("strict", ("edit_file", json!({"path": "a.txt", "old": "a", "new": "b"})), Ask),
            ("strict", ("trash", json!({"path": "a.txt"})), Ask),
            ("strict", sh("ls -la"), Deny(TierDenied)),
            ("strict", ("open", json!({"target": "https://example.com"})), Deny(TierDenied)),
            ("strict", ("power", json!({"action": "reboot"})), Deny(TierDenied)),
            ("strict", ("systemd_user", json!({"action": "list"})), Allow),
        ];
        check_table(cases);
    }
}
