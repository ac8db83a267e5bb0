//! Soul profiles: schema, loading, validation, the built-in souls.
//!
//! A soul fixes the persona prompt, the model, the tool allowlist, the budgets, the
//! tier modes it asks for and its sandbox. It can only tighten the policy: the modes it
//! asks for are clamped to the policy's at decision time ([`TierModes::tighten`]), and
//! a soul *file* that asks for more than the policy gives is a validation error naming
//! the key. What the policy decides over is the soul's [`Grant`] (allowlist and
//! modes); tool names are checked against [`crate::catalog`]. The shipped souls are
//! compiled in ([`builtin`]); a file in the user's souls directory with the same id
//! replaces the built-in one ([`set`]). The file's schema and its checks, key by key,
//! are in [`sections`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use familiar_protocol::ids::SoulId;
use serde::Serialize;

use crate::error::{FileError, parse_toml};
use crate::policy::{Grant, Policy, RateLimits, TierModes};
use crate::sandbox::{Resources, SandboxSpec};

mod builtin;
mod sections;
mod set;

use self::builtin::builtin_prompt;
use self::sections::{Fields, SoulToml};
pub use builtin::{BUILTIN_SOULS, ShippedFiles, shipped_files};
pub use set::{SoulSet, config_errors, load_file};

pub const DEFAULT_MAX_ITERATIONS: u32 = 10;
pub const MAX_MAX_ITERATIONS: u32 = 1000;
pub const DEFAULT_MAX_TOKENS: u64 = 200_000;
pub const DEFAULT_MAX_WALL_CLOCK: Duration = Duration::from_secs(10 * 60);
/// Tools a soul gets when its file names none: the read tier only.
pub const DEFAULT_TOOLS: &[&str] = &["read_file", "list_dir", "search_files", "system_snapshot"];

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
    #[serde(serialize_with = "ser_duration")]
    pub max_wall_clock: Duration,
    /// The tools and tier modes the policy decides over (serialised in place, as
    /// `tools` and `permissions`).
    #[serde(flatten)]
    pub grant: Grant,
    /// What its tools may touch: the sandbox's own spec type, taken as it is.
    pub sandbox: SandboxSpec,
    pub rate_limits: RateLimits,
    /// Souls it may hand sub-tasks to with `delegate` (none by default).
    pub delegates: Vec<SoulId>,
    /// Its long-term memory entries go into the system prompt.
    pub memory: bool,
    /// Local probes run before the first model call: the model is called only when one
    /// finds something worth reporting (`[precheck]`).
    pub precheck: Option<Precheck>,
    /// Memory, CPU share and processes of its tool processes together (`[resources]`).
    #[serde(skip_serializing_if = "Resources::is_empty")]
    pub resources: Resources,
    /// Where what its tools see of the screen may go (`screen`).
    #[serde(skip_serializing_if = "ScreenPrivacy::is_default")]
    pub screen: ScreenPrivacy,
    pub origin: SoulOrigin,
}

/// A soul's `screen`: where screenshots and the text of the windows' controls
/// (`screenshot`, `ui_read`) may be sent. Ordered from the strictest.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ScreenPrivacy {
    /// The screen tools are not offered.
    Off,
    /// Only to a model on this machine (a loopback address or a unix socket).
    #[default]
    Local,
    /// To a hosted model too, each time asked, the approval naming where.
    Hosted,
}

impl ScreenPrivacy {
    fn is_default(&self) -> bool {
        *self == ScreenPrivacy::default()
    }

    /// As a soul file spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ScreenPrivacy::Off => "off",
            ScreenPrivacy::Local => "local",
            ScreenPrivacy::Hosted => "hosted",
        }
    }
}

/// A soul's `[precheck]`: what is looked at before the model is asked anything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Precheck {
    /// Failed units of the user's systemd manager.
    pub failed_units: bool,
    /// A disk used above this percentage.
    pub disk_percent: u8,
    /// Errors in the user journal since the previous pre-check of this soul.
    pub journal_errors: bool,
}

/// `[precheck] disk_percent` when left out.
pub const DEFAULT_DISK_PERCENT: u8 = 90;

impl Soul {
    /// The modes in force under `policy`.
    pub fn effective_modes(&self, policy: &Policy) -> TierModes {
        self.grant.effective_modes(policy)
    }

    /// The soul a sub-task handed from `parent` to `self` runs under: `self`, made no
    /// looser than `parent` in anything, so delegating can never do what the parent
    /// could not. Tools: the intersection (in `self`'s order). Tier modes: the stricter
    /// of both, tier by tier. Sandbox: only the trees both grant, network only if both
    /// allow it, enforcement required if either requires it. Budgets and resource
    /// limits: the smaller.
    /// Rate limits stay `self`'s: the parent's are applied to the child's calls at run
    /// time, counted under the parent's session.
    pub fn restricted_to(&self, parent: &Soul) -> Soul {
        Soul {
            grant: Grant {
                tools: crate::catalog::intersect_allowlists(&self.grant.tools, &parent.grant.tools),
                permissions: self.grant.permissions.tighten(&parent.grant.permissions),
            },
            sandbox: SandboxSpec {
                read: intersect_trees(&self.sandbox.read, &parent.sandbox.read),
                write: intersect_trees(&self.sandbox.write, &parent.sandbox.write),
                network: self.sandbox.network && parent.sandbox.network,
                udp: self.sandbox.udp && parent.sandbox.udp,
                require: self.sandbox.require || parent.sandbox.require,
                startup: self
                    .sandbox
                    .startup
                    .iter()
                    .filter(|s| parent.sandbox.startup.contains(s))
                    .cloned()
                    .collect(),
                destroy: intersect_trees(&self.sandbox.destroy, &parent.sandbox.destroy),
                sockets: self
                    .sandbox
                    .sockets
                    .iter()
                    .filter(|s| parent.sandbox.sockets.contains(s))
                    .cloned()
                    .collect(),
                bus_talk: self
                    .sandbox
                    .bus_talk
                    .iter()
                    .filter(|n| {
                        parent
                            .sandbox
                            .bus_talk
                            .iter()
                            .any(|p| crate::sandbox::busproxy::covers(p, n))
                    })
                    .cloned()
                    .collect(),
            },
            max_iterations: self.max_iterations.min(parent.max_iterations),
            max_tokens: self.max_tokens.min(parent.max_tokens),
            max_wall_clock: self.max_wall_clock.min(parent.max_wall_clock),
            resources: self.resources.tighten(&parent.resources),
            screen: self.screen.min(parent.screen),
            ..self.clone()
        }
    }
}

/// The trees that lie in both lists: for each pair, the deeper one when one contains
/// the other (component-wise, so `/home/a` does not contain `/home/ab`).
fn intersect_trees(a: &[PathBuf], b: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for x in a {
        for y in b {
            let deeper = if x.starts_with(y) {
                x
            } else if y.starts_with(x) {
                y
            } else {
                continue;
            };
            if !out.contains(deeper) {
                out.push(deeper.clone());
            }
        }
    }
    out
}

fn ser_duration<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&humantime::format_duration(*d))
}

/// How a prompt file named by a soul is found.
pub enum PromptSource<'a> {
    /// Built-in souls: the compiled-in prompts.
    BuiltIn,
    /// User souls: relative to the soul file's directory.
    Dir(&'a Path),
}

/// Parses and validates one soul file.
///
/// `file` labels errors; `stem` is the file name without `.toml` (the id when the file
/// has no `id`); `policy`, when given, is the ceiling the soul may not exceed.
pub fn parse(
    file: &str,
    stem: &str,
    src: &str,
    prompts: PromptSource<'_>,
    home: &Path,
    policy: Option<&Policy>,
    origin: SoulOrigin,
) -> Result<Soul, FileError> {
    let raw: SoulToml = parse_toml(file, src)?;
    let f = Fields { file, src, home };
    let id = f.id(raw.id.as_ref(), stem)?;
    let prompt = f.prompt(raw.prompt, raw.prompt_file.as_ref(), &prompts)?;
    let tools = f.tools(raw.tools)?;
    let delegates = f.delegates(raw.delegates, &id, &tools)?;
    Ok(Soul {
        id,
        description: raw.description.unwrap_or_default(),
        prompt,
        provider: raw.provider,
        model: raw.model,
        max_iterations: f.max_iterations(raw.max_iterations)?,
        max_tokens: f.max_tokens(raw.max_tokens)?,
        max_wall_clock: f.max_wall_clock(raw.max_wall_clock)?,
        grant: Grant {
            tools,
            permissions: f.permissions(raw.permissions.unwrap_or_default(), policy)?,
        },
        sandbox: f.sandbox(raw.sandbox.unwrap_or_default())?,
        rate_limits: raw.rate_limits.unwrap_or_default(),
        delegates,
        memory: raw.memory.unwrap_or(false),
        precheck: f.precheck(raw.precheck)?,
        resources: f.resources(raw.resources)?,
        screen: raw.screen.unwrap_or_default(),
        origin,
    })
}

/// Why a soul's `prompt_file` could not be loaded.
#[derive(Debug, thiserror::Error)]
enum PromptError {
    #[error("no built-in prompt `{0}`")]
    NoBuiltIn(String),
    #[error(
        "cannot read {}: {source}: put the prompt in that file, or write it in the soul as `prompt = \"\"\"…\"\"\"` (`familiar souls copy ID` copies a shipped soul with its prompt)",
        path.display()
    )]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn load_prompt(name: &str, source: &PromptSource<'_>) -> Result<String, PromptError> {
    match source {
        PromptSource::BuiltIn => builtin_prompt(name)
            .map(str::to_owned)
            .ok_or_else(|| PromptError::NoBuiltIn(name.to_owned())),
        PromptSource::Dir(dir) => {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|source| PromptError::Read { path, source })
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use familiar_protocol::tier::Mode;

    use super::*;
    use crate::policy::{Policy, TierModes};
    use crate::sandbox::Resources;

    pub(super) fn policy(write: Mode, execute: Mode) -> Policy {
        let mut p = Policy::from_toml("default.toml", "", Path::new("/home/user")).unwrap();
        p.tiers = TierModes {
            read: Mode::Allow,
            write,
            execute,
            system_critical: Mode::Ask,
        };
        p
    }

    fn parse_str(src: &str, pol: Option<&Policy>) -> Result<Soul, FileError> {
        parse(
            "mine.toml",
            "mine",
            src,
            PromptSource::BuiltIn,
            Path::new("/home/user"),
            pol,
            SoulOrigin::BuiltIn,
        )
    }

    #[test]
    fn minimal_soul_gets_the_defaults() {
        let soul = parse_str("prompt = \"be nice\"\n", None).unwrap();
        assert_eq!(soul.id.as_str(), "mine");
        assert_eq!(soul.max_iterations, DEFAULT_MAX_ITERATIONS);
        assert_eq!(soul.max_tokens, DEFAULT_MAX_TOKENS);
        assert_eq!(soul.max_wall_clock, DEFAULT_MAX_WALL_CLOCK);
        assert_eq!(soul.grant.tools, DEFAULT_TOOLS);
        assert_eq!(soul.sandbox.read, vec![PathBuf::from("/home/user")]);
        assert!(!soul.sandbox.network);
    }

    #[test]
    fn soul_modes_are_clamped_to_the_policy() {
        let soul = parse_str("prompt = \"p\"\n[permissions]\nwrite = \"deny\"\n", None).unwrap();
        let eff = soul.effective_modes(&policy(Mode::Ask, Mode::Ask));
        assert_eq!(eff.write, Mode::Deny);
        assert_eq!(
            eff.execute,
            Mode::Ask,
            "an omitted tier takes the policy's mode"
        );
    }

    #[test]
    fn malformed_souls_name_file_line_key_and_allowed_values() {
        let pol = policy(Mode::Ask, Mode::Ask);
        let cases: &[(&str, &str)] = &[
            (
                "prompt = \"p\"\nmax_iteratons = 5\n",
                "mine.toml:2: key `max_iteratons`: unknown field `max_iteratons`, expected one of",
            ),
            (
                "prompt = \"p\"\nmax_iterations = \"ten\"\n",
                "mine.toml:2: key `max_iterations`: invalid type: string \"ten\", expected u32",
            ),
            (
                "prompt = \"p\"\nscreen = \"cloud\"\n",
                "mine.toml:2: key `screen`: unknown variant `cloud`, expected one of `off`, `local`, `hosted`",
            ),
            (
                "prompt = \"p\"\nmax_iterations = 0\n",
                "mine.toml:2: key `max_iterations`: 0 is outside 1..=1000",
            ),
            (
                "prompt = \"p\"\n[precheck]\ndisk_percent = 0\n",
                "mine.toml:3: key `precheck.disk_percent`: 0 is outside 1..=100",
            ),
            (
                "prompt = \"p\"\n[precheck]\nfailed = true\n",
                "mine.toml:3: key `precheck.failed`: unknown field `failed`",
            ),
            (
                "prompt = \"p\"\ntools = [\"mcp:Notes\"]\n",
                "mine.toml:2: key `tools`: `mcp:Notes` is not an MCP entry: write `mcp:NAME`",
            ),
            (
                "prompt = \"p\"\ntools = [\"read_file\",\n  \"mcp:notes/a/b\"]\n",
                "mine.toml:3: key `tools`: `mcp:notes/a/b` is not an MCP entry",
            ),
            (
                "prompt = \"p\"\ntools = [\"read_file\", \"rm_rf\"]\n",
                "mine.toml:2: key `tools`: unknown tool `rm_rf` (known: read_file, list_dir,",
            ),
            (
                "prompt = \"p\"\n[permissions]\nwrite = \"maybe\"\n",
                "mine.toml:3: key `permissions.write`: unknown variant `maybe`, expected one of `allow`, `ask`, `deny`",
            ),
            (
                "prompt = \"p\"\n[permissions]\nexecute = \"allow\"\n",
                "mine.toml:3: key `permissions.execute`: `allow` is looser than policy `default`, which sets execute = `ask`: a soul can only tighten the policy (allowed here: ask, deny)",
            ),
            (
                "prompt = \"p\"\nmax_wall_clock = \"a while\"\n",
                "mine.toml:2: key `max_wall_clock`: invalid duration `a while`",
            ),
            (
                "prompt = \"p\"\n[sandbox]\nwrite = [\"relative/dir\"]\n",
                "mine.toml:3: key `sandbox.write`: `relative/dir` must be absolute or start with ~/",
            ),
            (
                "prompt = \"p\"\n[sandbox]\nnetwork = \"yes\"\n",
                "mine.toml:3: key `sandbox.network`: invalid type: string \"yes\", expected a boolean",
            ),
            (
                "prompt = \"p\"\n[rate_limits]\ntool_calls = \"lots\"\n",
                "mine.toml:3: key `rate_limits.tool_calls`: invalid rate `lots`: expected COUNT/UNIT",
            ),
            (
                "id = \"other\"\nprompt = \"p\"\n",
                "mine.toml:1: key `id`: id `other` does not match the file name `mine.toml`",
            ),
            (
                "description = \"d\"\n",
                "mine.toml: missing `prompt` or `prompt_file`",
            ),
            (
                "prompt_file = \"prompts/nope.md\"\n",
                "mine.toml:1: key `prompt_file`: no built-in prompt `prompts/nope.md`",
            ),
            ("prompt = \"p\"\n[permissions\n", "mine.toml:2:"),
        ];
        for (src, want) in cases {
            let err = parse_str(src, Some(&pol)).unwrap_err().to_string();
            assert!(err.starts_with(want), "{src:?}\n got: {err}\nwant: {want}");
        }
    }

    #[test]
    fn memory_and_delegates_are_off_by_default() {
        let soul = parse_str("prompt = \"p\"\n", None).unwrap();
        assert!(!soul.memory);
        assert!(soul.delegates.is_empty());
        let soul = parse_str("prompt = \"p\"\nmemory = true\n", None).unwrap();
        assert!(soul.memory);
    }

    #[test]
    fn delegates_without_the_delegate_tool_name_the_key() {
        let err = parse_str(
            "prompt = \"p\"\ntools = [\"read_file\"]\ndelegates = [\"research_agent\"]\n",
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("mine.toml:3: key `delegates`:")
                && err.contains("does not list `delegate`"),
            "{err}"
        );
        let err = parse_str("prompt = \"p\"\ndelegates = [\"../x\"]\n", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("mine.toml:2"), "{err}");
    }

    #[test]
    fn a_delegate_runs_under_the_stricter_of_both_souls() {
        let parent = parse_str(
            "prompt = \"p\"\nmax_iterations = 8\ntools = [\"read_file\", \"list_dir\", \"shell\"]\n\
             [permissions]\nexecute = \"ask\"\n\
             [sandbox]\nread = [\"~/docs\", \"/etc\"]\nwrite = [\"~/out\"]\nnetwork = false\n",
            None,
        )
        .unwrap();
        let child = parse_str(
            "prompt = \"c\"\nmax_iterations = 20\ntools = [\"shell\", \"write_file\", \"read_file\"]\n\
             [permissions]\nwrite = \"deny\"\n\
             [sandbox]\nread = [\"~\", \"/usr/share/doc\"]\nwrite = [\"~/out/sub\", \"~/elsewhere\"]\n\
             network = true\nrequire = true\n",
            None,
        )
        .unwrap();
        let r = child.restricted_to(&parent);
        assert_eq!(r.id, child.id);
        assert_eq!(r.prompt, "c");
        assert_eq!(r.grant.tools, ["shell", "read_file"]);
        assert_eq!(
            r.grant.permissions,
            TierModes {
                read: Mode::Allow,
                write: Mode::Deny,
                execute: Mode::Ask,
                system_critical: Mode::Allow,
            }
        );
        let h = |p: &str| PathBuf::from(format!("/home/user/{p}"));
        assert_eq!(r.sandbox.read, [h("docs")]);
        assert_eq!(r.sandbox.write, [h("out/sub")]);
        assert!(!r.sandbox.network);
        assert!(r.sandbox.require);
        assert_eq!(r.max_iterations, 8);
    }

    #[test]
    fn tree_intersection_is_component_wise() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(
            intersect_trees(&[p("/home/a")], &[p("/home/ab")]),
            Vec::<PathBuf>::new()
        );
        assert_eq!(
            intersect_trees(&[p("/")], &[p("/etc"), p("/var/log")]),
            [p("/etc"), p("/var/log")]
        );
    }

    #[test]
    fn mcp_entries_are_kept_and_allow_their_servers_tools() {
        let soul = parse_str(
            "prompt = \"p\"\ntools = [\"read_file\", \"mcp:notes\", \"mcp:git/log\", \"mcp:notes\"]\n",
            None,
        )
        .unwrap();
        assert_eq!(
            soul.grant.tools,
            ["read_file", "mcp:notes", "mcp:git/log"],
            "listed once, in order"
        );
        assert!(soul.grant.allows_tool("notes__search"));
        assert!(soul.grant.allows_tool("git__log"));
        assert!(!soul.grant.allows_tool("git__push"));
    }

    #[test]
    fn resources_parse_as_systemd_spells_them_and_a_delegate_gets_the_smaller() {
        let parent = parse_str(
            "prompt = \"p\"\n[resources]\nmemory_max = \"1G\"\ncpu_quota = \"150%\"\n",
            None,
        )
        .unwrap();
        assert_eq!(
            parent.resources,
            Resources {
                memory_max: Some(1 << 30),
                cpu_quota: Some(150),
                tasks_max: None,
            }
        );
        let child = parse_str(
            "prompt = \"c\"\n[resources]\nmemory_max = 268435456\ntasks_max = 32\n",
            None,
        )
        .unwrap();
        assert_eq!(
            child.restricted_to(&parent).resources,
            Resources {
                memory_max: Some(256 << 20),
                cpu_quota: Some(150),
                tasks_max: Some(32),
            }
        );
        // None set: nothing in `souls show`, nothing for the task to set up.
        let plain = parse_str("prompt = \"p\"\n", None).unwrap();
        assert!(plain.resources.is_empty());
    }
}
