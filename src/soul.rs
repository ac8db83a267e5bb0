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
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::catalog::{self, Tier};
use crate::config::{Paths, expand_home, parse_duration};
use crate::error::{ConfigError, FileError, parse_toml};
use crate::ids::SoulId;
use crate::policy::{Grant, Mode, Policy, RateLimits, TierModes};
use crate::sandbox::SandboxSpec;

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
    pub origin: SoulOrigin,
}

impl Soul {
    /// The modes in force under `policy`.
    pub fn effective_modes(&self, policy: &Policy) -> TierModes {
        self.grant.effective_modes(policy)
    }

    /// The soul a sub-task handed from `parent` to `self` runs under: `self`, made no
    /// looser than `parent` in anything, so delegating can never do what the parent
    /// could not. Tools: the intersection (in `self`'s order). Tier modes: the stricter
    /// of both, tier by tier. Sandbox: only the trees both grant, network only if both
    /// allow it, enforcement required if either requires it. Budgets: the smaller.
    /// Rate limits stay `self`'s: the parent's are applied to the child's calls at run
    /// time, counted under the parent's session.
    pub fn restricted_to(&self, parent: &Soul) -> Soul {
        Soul {
            grant: Grant {
                tools: self
                    .grant
                    .tools
                    .iter()
                    .filter(|t| parent.grant.allows_tool(t))
                    .cloned()
                    .collect(),
                permissions: self.grant.permissions.tighten(&parent.grant.permissions),
            },
            sandbox: SandboxSpec {
                read: intersect_trees(&self.sandbox.read, &parent.sandbox.read),
                write: intersect_trees(&self.sandbox.write, &parent.sandbox.write),
                network: self.sandbox.network && parent.sandbox.network,
                require: self.sandbox.require || parent.sandbox.require,
            },
            max_iterations: self.max_iterations.min(parent.max_iterations),
            max_tokens: self.max_tokens.min(parent.max_tokens),
            max_wall_clock: self.max_wall_clock.min(parent.max_wall_clock),
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

/// A soul file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SoulToml {
    id: Option<Spanned<String>>,
    description: Option<String>,
    prompt: Option<String>,
    prompt_file: Option<Spanned<String>>,
    provider: Option<String>,
    model: Option<String>,
    max_iterations: Option<Spanned<u32>>,
    max_tokens: Option<Spanned<u64>>,
    max_wall_clock: Option<Spanned<String>>,
    tools: Option<Vec<Spanned<String>>>,
    permissions: Option<PermissionsToml>,
    sandbox: Option<SandboxToml>,
    rate_limits: Option<RateLimits>,
    delegates: Option<Spanned<Vec<Spanned<String>>>>,
    memory: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PermissionsToml {
    read: Option<Spanned<Mode>>,
    write: Option<Spanned<Mode>>,
    execute: Option<Spanned<Mode>>,
    system_critical: Option<Spanned<Mode>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SandboxToml {
    read: Option<Vec<Spanned<String>>>,
    write: Option<Vec<Spanned<String>>>,
    network: Option<bool>,
    require: Option<bool>,
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
    let at = |span: std::ops::Range<usize>, msg: String| FileError::at(file, src, span, msg);
    let whole = |msg: String| FileError::whole_file(file, msg);

    let id = match &raw.id {
        Some(id) => {
            let parsed =
                SoulId::new(id.get_ref().clone()).map_err(|e| at(id.span(), e.to_string()))?;
            if parsed.as_str() != stem {
                return Err(at(
                    id.span(),
                    format!("id `{parsed}` does not match the file name `{stem}.toml`"),
                ));
            }
            parsed
        }
        None => SoulId::new(stem).map_err(|e| whole(format!("file name: {e}")))?,
    };

    let prompt = match (raw.prompt, &raw.prompt_file) {
        (Some(_), Some(pf)) => {
            return Err(at(
                pf.span(),
                "set either `prompt` or `prompt_file`, not both".into(),
            ));
        }
        (Some(p), None) => p,
        (None, Some(pf)) => {
            load_prompt(pf.get_ref(), &prompts).map_err(|e| at(pf.span(), e.to_string()))?
        }
        (None, None) => return Err(whole("missing `prompt` or `prompt_file`".into())),
    };
    if prompt.trim().is_empty() {
        return Err(whole("the prompt is empty".into()));
    }

    let max_iterations = match raw.max_iterations {
        Some(n) if *n.get_ref() == 0 || *n.get_ref() > MAX_MAX_ITERATIONS => {
            return Err(at(
                n.span(),
                format!("{} is outside 1..={MAX_MAX_ITERATIONS}", n.get_ref()),
            ));
        }
        Some(n) => n.into_inner(),
        None => DEFAULT_MAX_ITERATIONS,
    };
    let max_tokens = match raw.max_tokens {
        Some(n) if *n.get_ref() < 1000 => {
            return Err(at(
                n.span(),
                format!("{} is below the minimum of 1000", n.get_ref()),
            ));
        }
        Some(n) => n.into_inner(),
        None => DEFAULT_MAX_TOKENS,
    };
    let max_wall_clock = match raw.max_wall_clock {
        Some(s) => parse_duration(s.get_ref()).map_err(|e| at(s.span(), e.to_string()))?,
        None => DEFAULT_MAX_WALL_CLOCK,
    };

    let tools = match raw.tools {
        Some(list) => {
            let mut tools = Vec::with_capacity(list.len());
            for t in list {
                if catalog::info(t.get_ref()).is_none() {
                    return Err(at(
                        t.span(),
                        format!(
                            "unknown tool `{}` (known: {})",
                            t.get_ref(),
                            catalog::names().collect::<Vec<_>>().join(", ")
                        ),
                    ));
                }
                if !tools.contains(t.get_ref()) {
                    tools.push(t.into_inner());
                }
            }
            tools
        }
        None => DEFAULT_TOOLS.iter().map(|s| (*s).to_owned()).collect(),
    };

    let delegates = parse_delegates(raw.delegates, &id, &tools, &at, &whole)?;

    let perms = raw.permissions.unwrap_or_default();
    let mut permissions = TierModes {
        read: Mode::Allow,
        write: Mode::Allow,
        execute: Mode::Allow,
        system_critical: Mode::Allow,
    };
    for (tier, mode) in [
        (Tier::Read, &perms.read),
        (Tier::Write, &perms.write),
        (Tier::Execute, &perms.execute),
        (Tier::SystemCritical, &perms.system_critical),
    ] {
        let Some(mode) = mode else { continue };
        if let Some(policy) = policy {
            let ceiling = policy.tiers.get(tier);
            if *mode.get_ref() < ceiling {
                return Err(at(
                    mode.span(),
                    format!(
                        "`{}` is looser than policy `{}`, which sets {tier} = `{ceiling}`: a soul can only tighten the policy (allowed here: {})",
                        mode.get_ref(),
                        policy.name,
                        allowed_modes(ceiling)
                    ),
                ));
            }
        }
        match tier {
            Tier::Read => permissions.read = *mode.get_ref(),
            Tier::Write => permissions.write = *mode.get_ref(),
            Tier::Execute => permissions.execute = *mode.get_ref(),
            Tier::SystemCritical => permissions.system_critical = *mode.get_ref(),
        }
    }

    let sb = raw.sandbox.unwrap_or_default();
    let paths = |list: Option<Vec<Spanned<String>>>, default: &[&str]| {
        let list = match list {
            Some(l) => l,
            None => default
                .iter()
                .map(|s| Spanned::new(0..0, (*s).to_owned()))
                .collect(),
        };
        list.into_iter()
            .map(|p| {
                let expanded = expand_home(Path::new(p.get_ref()), home);
                if expanded.is_absolute() {
                    Ok(expanded)
                } else {
                    Err(at(
                        p.span(),
                        format!("`{}` must be absolute or start with ~/", p.get_ref()),
                    ))
                }
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let sandbox = SandboxSpec {
        read: paths(sb.read, &["~"])?,
        write: paths(sb.write, &[])?,
        network: sb.network.unwrap_or(false),
        require: sb.require.unwrap_or(false),
    };

    Ok(Soul {
        id,
        description: raw.description.unwrap_or_default(),
        prompt,
        provider: raw.provider,
        model: raw.model,
        max_iterations,
        max_tokens,
        max_wall_clock,
        grant: Grant { tools, permissions },
        sandbox,
        rate_limits: raw.rate_limits.unwrap_or_default(),
        delegates,
        memory: raw.memory.unwrap_or(false),
        origin,
    })
}

/// `delegates`: soul ids, not the soul itself, and set exactly when `tools` names
/// `delegate` (either alone is a soul that cannot do what its file says).
fn parse_delegates(
    raw: Option<Spanned<Vec<Spanned<String>>>>,
    id: &SoulId,
    tools: &[String],
    at: &dyn Fn(std::ops::Range<usize>, String) -> FileError,
    whole: &dyn Fn(String) -> FileError,
) -> Result<Vec<SoulId>, FileError> {
    let has_tool = tools.iter().any(|t| t == "delegate");
    let Some(raw) = raw else {
        return if has_tool {
            Err(whole(
                "`tools` lists `delegate` but `delegates` names no soul to hand sub-tasks to"
                    .into(),
            ))
        } else {
            Ok(Vec::new())
        };
    };
    let span = raw.span();
    let mut out: Vec<SoulId> = Vec::new();
    for d in raw.into_inner() {
        let soul = SoulId::new(d.get_ref().clone()).map_err(|e| at(d.span(), e.to_string()))?;
        if &soul == id {
            return Err(at(d.span(), "a soul cannot delegate to itself".into()));
        }
        if !out.contains(&soul) {
            out.push(soul);
        }
    }
    match (out.is_empty(), has_tool) {
        (false, false) => Err(at(
            span,
            "`delegates` is set but `tools` does not list `delegate`".into(),
        )),
        (true, true) => Err(at(
            span,
            "`tools` lists `delegate` but `delegates` is empty".into(),
        )),
        (true, false) | (false, true) => Ok(out),
    }
}

fn allowed_modes(ceiling: Mode) -> &'static str {
    match ceiling {
        Mode::Allow => "allow, ask, deny",
        Mode::Ask => "ask, deny",
        Mode::Deny => "deny",
    }
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
    pub souls: BTreeMap<String, Soul>,
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
            set.souls.insert((*id).to_owned(), soul);
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
                    set.souls.insert(soul.id.to_string(), soul);
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
    pub fn get(&self, id: &str) -> Result<&Soul, ConfigError> {
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

#[cfg(test)]
mod tests;
