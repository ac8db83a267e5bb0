//! Policy files: the raw schema ([`PolicyToml`]), the built-in policies, loading by name.
//!
//! Invariant: a [`Policy`] only exists once every regex a user wrote compiled (the
//! built-in policies' are compiled at their first match, see [`Pattern`]), every mode,
//! rate and duration parsed and every protected path is absolute; anything else is a
//! [`FileError`] naming the file, the line, the key and what is allowed. A key a file
//! leaves out keeps the built-in `default` policy's value, so a short user policy never
//! silently drops the protected paths or the blocked patterns.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::paths::lexical_normalize;
use super::pattern::Pattern;
use super::{Mode, Policy, RateLimits, RateSpec, TierModes};
use crate::config::{Paths, expand_home, parse_duration};
use crate::error::{ConfigError, FileError, parse_toml};

/// The modes of a policy file that has no `[tiers]` and no base to inherit from.
pub const DEFAULT_TIERS: TierModes = TierModes {
    read: Mode::Allow,
    write: Mode::Ask,
    execute: Mode::Ask,
    system_critical: Mode::Ask,
};
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(120);

const BUILTINS: &[(&str, &str)] = &[
    ("default", include_str!("../../policies/default.toml")),
    ("strict", include_str!("../../policies/strict.toml")),
];

/// `policies/NAME.toml` as written. Every key is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyToml {
    pub description: Option<String>,
    pub approval_timeout: Option<Spanned<String>>,
    pub tiers: Option<TiersToml>,
    pub rate_limits: Option<RateLimitsToml>,
    pub protected_paths: Option<Vec<Spanned<String>>>,
    pub blocked: Option<Vec<PatternToml>>,
    pub ask: Option<Vec<PatternToml>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TiersToml {
    pub read: Option<Mode>,
    pub write: Option<Mode>,
    pub execute: Option<Mode>,
    pub system_critical: Option<Mode>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitsToml {
    pub tool_calls: Option<RateSpec>,
    pub llm_calls: Option<RateSpec>,
    pub global_tool_calls: Option<RateSpec>,
    pub submits: Option<RateSpec>,
    pub tools: Option<BTreeMap<Spanned<String>, RateSpec>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatternToml {
    pub pattern: Spanned<String>,
    pub reason: String,
}

/// A compiled `[[blocked]]` or `[[ask]]` rule.
#[derive(Debug, Clone)]
pub struct PatternRule {
    pub pattern: Pattern,
    /// Shown to the model and the user.
    pub reason: String,
}

impl PartialEq for PatternRule {
    fn eq(&self, other: &Self) -> bool {
        self.pattern.as_str() == other.pattern.as_str() && self.reason == other.reason
    }
}

/// The names of the compiled-in policies.
pub fn builtin_names() -> &'static [&'static str] {
    &["default", "strict"]
}

/// The text of a compiled-in policy.
pub fn builtin_source(name: &str) -> Option<&'static str> {
    BUILTINS.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

fn builtin_label(name: &str) -> String {
    format!("built-in:policies/{name}.toml")
}

impl Policy {
    /// Parses and validates a policy file. The policy is named after the file's stem;
    /// keys the file leaves out keep the built-in `default` policy's values.
    pub fn from_toml(file_label: &str, src: &str, home: &Path) -> Result<Policy, FileError> {
        let base = builtin_default(home)?;
        let name = Path::new(file_label).file_stem().map_or_else(
            || file_label.to_owned(),
            |s| s.to_string_lossy().into_owned(),
        );
        let raw: PolicyToml = parse_toml(file_label, src)?;
        Source {
            file: file_label,
            src,
            home,
            builtin: BUILTINS.iter().any(|(_, text)| *text == src),
        }
        .resolve(&name, raw, Some(&base))
    }
}

/// The built-in `default` policy for `home`, the base every policy file inherits
/// from. Made once per home directory and kept, with its patterns: a policy that repeats
/// one shares its regex, compiled once (a reload, `familiar policy check` and the fuzzers
/// parse many policies).
fn builtin_default(home: &Path) -> Result<Policy, FileError> {
    static CACHE: Mutex<Option<(PathBuf, Policy)>> = Mutex::new(None);
    let mut cache = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((h, policy)) = cache.as_ref()
        && h == home
    {
        return Ok(policy.clone());
    }
    let label = builtin_label("default");
    let src = builtin_source("default").unwrap_or_default();
    let raw: PolicyToml = parse_toml(&label, src)?;
    let policy = Source {
        file: &label,
        src,
        home,
        builtin: true,
    }
    .resolve("default", raw, None)?;
    *cache = Some((home.to_owned(), policy.clone()));
    Ok(policy)
}

/// A policy file being resolved: where its errors point, the home `~` means, and
/// whether it is the text of a built-in policy (whose patterns compile at first use).
struct Source<'a> {
    file: &'a str,
    src: &'a str,
    home: &'a Path,
    builtin: bool,
}

impl Source<'_> {
    fn at(&self, span: std::ops::Range<usize>, message: String) -> FileError {
        FileError::at(self.file, self.src, span, message)
    }

    /// The effective policy: each key from the file, or the base's where it is left out.
    fn resolve(
        &self,
        name: &str,
        raw: PolicyToml,
        base: Option<&Policy>,
    ) -> Result<Policy, FileError> {
        let approval_timeout = match raw.approval_timeout {
            Some(s) => self.approval_timeout(&s)?,
            None => base.map_or(DEFAULT_APPROVAL_TIMEOUT, |b| b.approval_timeout),
        };
        let base_tiers = base.map_or(DEFAULT_TIERS, |b| b.tiers);
        let t = raw.tiers.unwrap_or_default();
        let tiers = TierModes {
            read: t.read.unwrap_or(base_tiers.read),
            write: t.write.unwrap_or(base_tiers.write),
            execute: t.execute.unwrap_or(base_tiers.execute),
            system_critical: t.system_critical.unwrap_or(base_tiers.system_critical),
        };
        let (rate_limits, global_tool_calls, submits) = match raw.rate_limits {
            Some(r) => self.rate_limits(r, base)?,
            None => (
                base.map(|b| b.rate_limits.clone()).unwrap_or_default(),
                base.and_then(|b| b.global_tool_calls),
                base.and_then(|b| b.submits),
            ),
        };
        let protected_paths = match raw.protected_paths {
            Some(list) => self.protected_paths(list)?,
            None => base.map(|b| b.protected_paths.clone()).unwrap_or_default(),
        };
        let blocked = match raw.blocked {
            Some(rules) => self.patterns(rules, base)?,
            None => base.map(|b| b.blocked.clone()).unwrap_or_default(),
        };
        let ask = match raw.ask {
            Some(rules) => self.patterns(rules, base)?,
            None => base.map(|b| b.ask.clone()).unwrap_or_default(),
        };
        Ok(Policy {
            name: name.to_owned(),
            description: raw
                .description
                .or_else(|| base.map(|b| b.description.clone()))
                .unwrap_or_default(),
            tiers,
            rate_limits,
            global_tool_calls,
            submits,
            approval_timeout,
            protected_paths,
            blocked,
            ask,
        })
    }

    fn approval_timeout(&self, s: &Spanned<String>) -> Result<Duration, FileError> {
        let d = parse_duration(s.get_ref()).map_err(|e| self.at(s.span(), e.to_string()))?;
        if d.is_zero() {
            return Err(self.at(
                s.span(),
                "must be longer than 0s (examples: \"30s\", \"2m\")".to_owned(),
            ));
        }
        Ok(d)
    }

    fn rate_limits(
        &self,
        r: RateLimitsToml,
        base: Option<&Policy>,
    ) -> Result<(RateLimits, Option<RateSpec>, Option<RateSpec>), FileError> {
        let base_rates = base.map(|b| &b.rate_limits);
        let tools = match r.tools {
            Some(map) => {
                let mut tools = BTreeMap::new();
                for (tool, rate) in map {
                    if crate::catalog::info(tool.get_ref()).is_none() {
                        let known: Vec<_> = crate::catalog::names().collect();
                        let message = format!(
                            "unknown tool `{}` (tools: {})",
                            tool.get_ref(),
                            known.join(", ")
                        );
                        return Err(self.at(tool.span(), message));
                    }
                    tools.insert(tool.into_inner(), rate);
                }
                tools
            }
            None => base_rates.map(|b| b.tools.clone()).unwrap_or_default(),
        };
        let limits = RateLimits {
            tool_calls: r.tool_calls.or(base_rates.and_then(|b| b.tool_calls)),
            llm_calls: r.llm_calls.or(base_rates.and_then(|b| b.llm_calls)),
            tools,
        };
        let global = r
            .global_tool_calls
            .or(base.and_then(|b| b.global_tool_calls));
        let submits = r.submits.or(base.and_then(|b| b.submits));
        Ok((limits, global, submits))
    }

    fn protected_paths(&self, list: Vec<Spanned<String>>) -> Result<Vec<PathBuf>, FileError> {
        let mut out = Vec::with_capacity(list.len());
        for p in list {
            let text = p.get_ref();
            let expanded = expand_protected(text, self.home);
            if !expanded.is_absolute() {
                let mut err = self.at(
                    p.span(),
                    format!("`{text}` must be an absolute path or start with `~/`"),
                );
                // A multi-line array puts the entry on a line of its own, with no key.
                err.key.get_or_insert_with(|| "protected_paths".to_owned());
                return Err(err);
            }
            out.push(lexical_normalize(&expanded));
        }
        Ok(out)
    }

    /// `[[blocked]]` or `[[ask]]` rules, compiled: a pattern the base has is the base's
    /// (one regex, compiled once), a built-in's is compiled at its first match, any
    /// other now.
    fn patterns(
        &self,
        rules: Vec<PatternToml>,
        base: Option<&Policy>,
    ) -> Result<Vec<PatternRule>, FileError> {
        let known: Vec<&Pattern> = base
            .into_iter()
            .flat_map(|b| b.blocked.iter().chain(&b.ask))
            .map(|r| &r.pattern)
            .collect();
        rules
            .into_iter()
            .map(|r| {
                let source = r.pattern.get_ref();
                let shared = known.iter().find(|p| p.as_str() == source);
                let pattern = match shared {
                    Some(p) => Pattern::clone(p),
                    None if self.builtin => Pattern::builtin(source),
                    None => Pattern::compile(source).map_err(|e| {
                        self.at(
                            r.pattern.span(),
                            format!(
                                "invalid regex `{source}`: {} (regex syntax: https://docs.rs/regex)",
                                regex_error_summary(&e)
                            ),
                        )
                    })?,
                };
                if r.reason.trim().is_empty() {
                    return Err(self.at(
                        r.pattern.span(),
                        "needs a non-empty `reason`: it is shown to the model and the user"
                            .to_owned(),
                    ));
                }
                Ok(PatternRule {
                    pattern,
                    reason: r.reason,
                })
            })
            .collect()
    }
}

fn expand_protected(text: &str, home: &Path) -> PathBuf {
    let text = text
        .strip_prefix("${HOME}")
        .or_else(|| text.strip_prefix("$HOME"))
        .map_or_else(|| text.to_owned(), |rest| format!("~{rest}"));
    expand_home(Path::new(&text), home)
}

/// The one line of a regex error that says what is wrong (the full text draws a caret
/// diagram over several lines, which does not fit in a one-line file error).
fn regex_error_summary(e: &regex::Error) -> String {
    let text = e.to_string();
    text.lines()
        .find_map(|l| l.trim().strip_prefix("error: "))
        .unwrap_or(text.lines().last().unwrap_or("invalid"))
        .to_owned()
}

/// Loads the policy `name`: `<config_dir>/policies/NAME.toml` if it exists, else the
/// built-in of that name. familiar's own config directory and its audit log, contexts,
/// transcripts and long-term memory are added to the protected paths whatever the file says: a tool
/// must never rewrite the rules it runs under or the record of what it did.
pub fn load(name: &str, paths: &Paths) -> Result<Policy, ConfigError> {
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    let user_file = paths.policies_dir().join(format!("{name}.toml"));
    let mut policy = if plain && user_file.is_file() {
        let src = crate::error::read_file(&user_file)?;
        Policy::from_toml(&user_file.display().to_string(), &src, &paths.home)?
    } else if let Some(src) = builtin_source(name) {
        Policy::from_toml(&builtin_label(name), src, &paths.home)?
    } else {
        return Err(ConfigError::UnknownPolicy {
            name: name.to_owned(),
            known: known_names(paths).join(", "),
            dir: paths.policies_dir().display().to_string(),
        });
    };
    policy.name = name.to_owned();
    let own = [
        paths.config_dir.clone(),
        paths.data_dir.join("audit.jsonl"),
        paths.data_dir.join("context"),
        paths.data_dir.join("transcripts"),
        // Long-term memory goes into system prompts: a tool writing it could plant
        // instructions the user never approved. Its lock, temp files and corrupt
        // copies live under context/.
        paths.data_dir.join("memory.json"),
    ];
    for p in own {
        let p = lexical_normalize(&p);
        if !policy.protected_paths.contains(&p) {
            policy.protected_paths.push(p);
        }
    }
    Ok(policy)
}

/// Built-in names and the user's policy files, sorted, for error messages.
fn known_names(paths: &Paths) -> Vec<String> {
    let mut names: Vec<String> = builtin_names().iter().map(|s| (*s).to_owned()).collect();
    if let Ok(entries) = std::fs::read_dir(paths.policies_dir()) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "toml")
                && let Some(stem) = path.file_stem()
            {
                names.push(stem.to_string_lossy().into_owned());
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
#[path = "file_tests.rs"]
mod tests;
