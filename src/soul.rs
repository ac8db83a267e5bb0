//! Soul profiles: schema, loading, validation, the built-in souls.
//!
//! A soul fixes the persona prompt, the model, the tool allowlist, the budgets, the
//! tier modes it asks for and its sandbox. It can only tighten the policy: the modes it
//! asks for are clamped to the policy's at decision time ([`TierModes::tighten`]), and
//! a soul *file* that asks for more than the policy gives is a validation error naming
//! the key. What the policy decides over is the soul's [`Grant`] (allowlist and
//! modes); tool names are checked against [`crate::catalog`]. The shipped souls are
//! compiled in; a file in the user's souls directory with the same id replaces the
//! built-in one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::config::Paths;
use crate::error::{ConfigError, FileError, parse_toml};
use crate::ids::SoulId;
use crate::policy::{Grant, Policy, RateLimits, TierModes};
use crate::sandbox::{Resources, SandboxSpec};

mod sections;

use self::sections::{Fields, SoulToml};

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
    pub origin: SoulOrigin,
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
                require: self.sandbox.require || parent.sandbox.require,
                sockets: self
                    .sandbox
                    .sockets
                    .iter()
                    .filter(|s| parent.sandbox.sockets.contains(s))
                    .cloned()
                    .collect(),
            },
            max_iterations: self.max_iterations.min(parent.max_iterations),
            max_tokens: self.max_tokens.min(parent.max_tokens),
            max_wall_clock: self.max_wall_clock.min(parent.max_wall_clock),
            resources: self.resources.tighten(&parent.resources),
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
        origin,
    })
}

/// Why a soul's `prompt_file` could not be loaded.
#[derive(Debug, thiserror::Error)]
enum PromptError {
    #[error("no built-in prompt `{0}`")]
    NoBuiltIn(String),
    #[error("cannot read {}: {source}", path.display())]
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

/// The shipped souls: (id, TOML source).
pub const BUILTIN_SOULS: &[(&str, &str)] = &[
    (
        "safe_assistant",
        include_str!("../souls/safe_assistant.toml"),
    ),
    ("system_admin", include_str!("../souls/system_admin.toml")),
    (
        "automation_agent",
        include_str!("../souls/automation_agent.toml"),
    ),
    (
        "research_agent",
        include_str!("../souls/research_agent.toml"),
    ),
    ("maintenance", include_str!("../souls/maintenance.toml")),
    ("desktop", include_str!("../souls/desktop.toml")),
];

const BUILTIN_PROMPTS: &[(&str, &str)] = &[
    (
        "prompts/safe_assistant.md",
        include_str!("../souls/prompts/safe_assistant.md"),
    ),
    (
        "prompts/system_admin.md",
        include_str!("../souls/prompts/system_admin.md"),
    ),
    (
        "prompts/automation_agent.md",
        include_str!("../souls/prompts/automation_agent.md"),
    ),
    (
        "prompts/research_agent.md",
        include_str!("../souls/prompts/research_agent.md"),
    ),
    (
        "prompts/maintenance.md",
        include_str!("../souls/prompts/maintenance.md"),
    ),
    (
        "prompts/desktop.md",
        include_str!("../souls/prompts/desktop.md"),
    ),
];

fn builtin_prompt(name: &str) -> Option<&'static str> {
    BUILTIN_PROMPTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
}

/// Every soul available: built-ins, replaced by user files of the same id.
#[derive(Debug, Default)]
pub struct SoulSet {
    /// Shared: a task holds its soul as an `Arc` of this one (unless it overrides the
    /// model), not a copy of the persona prompt per task.
    pub souls: BTreeMap<String, Arc<Soul>>,
    /// User soul files that failed to load; they do not hide the others.
    pub errors: Vec<FileError>,
}

impl SoulSet {
    /// Loads built-ins, then `paths.souls_dir()/*.toml`. Built-in souls are not checked
    /// against the policy (they are clamped at decision time); user files are.
    pub fn load(paths: &Paths, policy: &Policy) -> Result<SoulSet, ConfigError> {
        let mut set = SoulSet::default();
        for (id, src) in BUILTIN_SOULS {
            let soul = parse(
                &format!("built-in:souls/{id}.toml"),
                id,
                src,
                PromptSource::BuiltIn,
                &paths.home,
                None,
                SoulOrigin::BuiltIn,
            )?;
            set.souls.insert((*id).to_owned(), Arc::new(soul));
        }
        let dir = paths.souls_dir();
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(set),
            Err(source) => return Err(ConfigError::Read { path: dir, source }),
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        files.sort();
        for path in files {
            match load_file(&path, &paths.home, Some(policy)) {
                Ok(soul) => {
                    set.souls.insert(soul.id.to_string(), Arc::new(soul));
                }
                Err(ConfigError::File(e)) => set.errors.push(e),
                Err(e) => set.errors.push(FileError::whole_file(
                    path.display().to_string(),
                    e.to_string(),
                )),
            }
        }
        Ok(set)
    }

    /// One soul by id, with the known ids in the error.
    pub fn get(&self, id: &str) -> Result<&Arc<Soul>, ConfigError> {
        self.souls.get(id).ok_or_else(|| {
            let mut msg = self.souls.keys().cloned().collect::<Vec<_>>().join(", ");
            if let Some(err) = self
                .errors
                .iter()
                .find(|e| e.file.ends_with(&format!("{id}.toml")))
            {
                msg.push_str(&format!("; {err}"));
            }
            ConfigError::UnknownSoul {
                id: id.to_owned(),
                known: msg,
            }
        })
    }
}

/// Loads and validates one soul file (what `familiar souls validate FILE` runs).
pub fn load_file(path: &Path, home: &Path, policy: Option<&Policy>) -> Result<Soul, ConfigError> {
    let src = crate::error::read_file(path)?;
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .ok_or_else(|| ConfigError::Invalid(format!("{}: not a soul file name", path.display())))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    Ok(parse(
        &path.display().to_string(),
        stem,
        &src,
        PromptSource::Dir(dir),
        home,
        policy,
        SoulOrigin::File(path.to_owned()),
    )?)
}

/// The errors of a soul whose `provider` or `mcp:NAME` names nothing in config.toml,
/// each at its file, line and key (`src` is the soul file's text). Not part of
/// [`parse`]: a soul file is valid on its own, and config.toml may change after it
/// (the daemon reloads both); `souls validate` and `doctor` check the pair.
pub fn config_errors(
    soul: &Soul,
    file: &str,
    src: Option<&str>,
    config: &crate::config::Config,
) -> Vec<FileError> {
    let configured = |names: Vec<&String>| {
        if names.is_empty() {
            "none".to_owned()
        } else {
            names
                .into_iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let mut errors = Vec::new();
    if let Some(provider) = &soul.provider
        && config.provider(Some(provider)).is_err()
    {
        errors.push(FileError::at_key(
            file,
            src,
            "provider",
            format!(
                "unknown provider `{provider}`: config.toml has no [providers.{provider}] (configured: {})",
                configured(config.providers.keys().collect())
            ),
        ));
    }
    let servers: std::collections::BTreeSet<&str> = soul
        .grant
        .tools
        .iter()
        .filter_map(|e| crate::catalog::mcp_entry(e).map(|(server, _)| server))
        .collect();
    for server in servers {
        if !config.mcp.contains_key(server) {
            errors.push(FileError::at_key(
                file,
                src,
                "tools",
                format!(
                    "`mcp:{server}`: config.toml has no [mcp.{server}] (configured: {}), so its tools would never be offered",
                    configured(config.mcp.keys().collect())
                ),
            ));
        }
    }
    errors
}

#[cfg(test)]
mod tests;
