//! Policy files: the raw schema ([`PolicyToml`]) and what a file resolves to (the
//! built-in policies and loading by name are in [`super::load`]).
//!
//! Invariant: a [`Policy`] only exists once every regex a user wrote compiled (the
//! built-in policies' are compiled at their first match, see [`Pattern`]), every mode,
//! rate and duration parsed and every protected path is absolute; anything else is a
//! [`FileError`] naming the file, the line, the key and what is allowed. A key a file
//! leaves out keeps the built-in `default` policy's value, so a short user policy never
//! silently drops the protected paths or the blocked patterns.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use familiar_protocol::tier::Mode;
use serde::Deserialize;
use toml::Spanned;

use super::paths::lexical_normalize;
use super::pattern::Pattern;
use super::{Policy, RateLimits, RateSpec, TierModes};
use crate::config::{expand_home, parse_duration};
use crate::error::FileError;

/// The modes of a policy file that has no `[tiers]` and no base to inherit from.
pub const DEFAULT_TIERS: TierModes = TierModes {
    read: Mode::Allow,
    write: Mode::Ask,
    execute: Mode::Ask,
    system_critical: Mode::Ask,
};
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(120);

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

/// A policy file being resolved: where its errors point, the home `~` means, and
/// whether it is the text of a built-in policy (whose patterns compile at first use).
pub(super) struct Source<'a> {
    pub(super) file: &'a str,
    pub(super) src: &'a str,
    pub(super) home: &'a Path,
    pub(super) builtin: bool,
}

impl Source<'_> {
    fn at(&self, span: std::ops::Range<usize>, message: String) -> FileError {
        FileError::at(self.file, self.src, span, message)
    }

    /// The effective policy: each key from the file, or the base's where it is left out.
    pub(super) fn resolve(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::parse_toml;
    use crate::policy::builtin_source;
    use crate::policy::tests::{HOME, parse};

    #[test]
    fn missing_keys_keep_the_default_policy() {
        let p = parse("[tiers]\nexecute = \"allow\"\n").unwrap();
        let d = parse(builtin_source("default").unwrap()).unwrap();
        assert_eq!(p.name, "p");
        assert_eq!(p.tiers.execute, Mode::Allow);
        assert_eq!(p.tiers.write, Mode::Ask);
        assert_eq!(p.protected_paths, d.protected_paths);
        assert_eq!(p.blocked, d.blocked);
        assert_eq!(p.rate_limits, d.rate_limits);
        assert_eq!(p.approval_timeout, Duration::from_secs(120));
    }

    #[test]
    fn empty_lists_drop_what_the_default_has() {
        let p = parse("protected_paths = []\nblocked = []\nask = []\n").unwrap();
        assert!(p.protected_paths.is_empty() && p.blocked.is_empty() && p.ask.is_empty());
    }

    #[test]
    fn home_forms_expand_in_protected_paths() {
        let p = parse("protected_paths = [\"~/a/../b\", \"$HOME/c\", \"${HOME}/d/\", \"/e\"]\n")
            .unwrap();
        let want: Vec<PathBuf> = ["/home/user/b", "/home/user/c", "/home/user/d", "/e"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(p.protected_paths, want);
    }

    #[test]
    fn malformed_policies_name_file_line_key_and_what_is_allowed() {
        let cases: &[(&str, &str)] = &[
            (
                "[tiers]\nread = \"maybe\"\n",
                "p.toml:2: key `tiers.read`: unknown variant `maybe`, expected one of `allow`, `ask`, `deny`",
            ),
            (
                "[tiers]\nexec = \"allow\"\n",
                "p.toml:2: key `tiers.exec`: unknown field `exec`, expected one of `read`, `write`, `execute`, `system_critical`",
            ),
            (
                "descripton = \"x\"\n",
                "p.toml:1: key `descripton`: unknown field `descripton`, expected one of `description`, `approval_timeout`, `tiers`, `rate_limits`, `protected_paths`, `blocked`, `ask`",
            ),
            (
                "\n[rate_limits]\ntool_calls = \"60 per minute\"\n",
                "p.toml:3: key `rate_limits.tool_calls`: invalid rate `60 per minute`: expected COUNT/UNIT like `30/min` (units: s, sec, min, h, hour, day)",
            ),
            (
                "[rate_limits]\nglobal_tool_calls = \"0/min\"\n",
                "p.toml:2: key `rate_limits.global_tool_calls`: invalid rate `0/min`",
            ),
            (
                "[rate_limits.tools]\nshel = \"5/min\"\n",
                "p.toml:2: key `rate_limits.tools.shel`: unknown tool `shel` (tools: read_file, list_dir,",
            ),
            (
                "approval_timeout = \"soon\"\n",
                "p.toml:1: key `approval_timeout`: invalid duration `soon`",
            ),
            (
                "approval_timeout = \"0s\"\n",
                "p.toml:1: key `approval_timeout`: must be longer than 0s",
            ),
            (
                "description = \"x\"\n\n[[blocked]]\npattern = '^rm (-rf'\nreason = \"x\"\n",
                "p.toml:4: key `blocked.pattern`: invalid regex `^rm (-rf`: unclosed group (regex syntax: https://docs.rs/regex)",
            ),
            (
                "[[ask]]\npattern = 'a'\nreason = \"  \"\n",
                "p.toml:2: key `ask.pattern`: needs a non-empty `reason`",
            ),
            (
                "[[ask]]\npattern = 'a'\nwhy = \"x\"\n",
                "p.toml:3: key `ask.why`: unknown field `why`, expected `pattern` or `reason`",
            ),
            (
                "protected_paths = [\n  \"~/.ssh\",\n  \"relative/dir\",\n]\n",
                "p.toml:3: key `protected_paths`: `relative/dir` must be an absolute path or start with `~/`",
            ),
            ("[tiers\n", "p.toml:1:"),
        ];
        for (src, want) in cases {
            let err = parse(src).unwrap_err().to_string();
            assert!(err.starts_with(want), "{src:?}\n got: {err}\nwant: {want}");
        }
    }

    /// A policy resolved on `base` without the per-home cache, so no other test can have
    /// matched its patterns.
    fn resolve_fresh(src: &str, builtin: bool, base: Option<&Policy>) -> Policy {
        let raw: PolicyToml = parse_toml("p.toml", src).unwrap();
        Source {
            file: "p.toml",
            src,
            home: Path::new(HOME),
            builtin,
        }
        .resolve("p", raw, base)
        .unwrap()
    }

    #[test]
    fn builtin_patterns_compile_at_first_match_and_a_users_at_load() {
        let base = resolve_fresh(builtin_source("default").unwrap(), true, None);
        let compiled = |p: &Policy| {
            p.blocked
                .iter()
                .chain(&p.ask)
                .filter(|r| r.pattern.is_compiled())
                .count()
        };
        assert_eq!(compiled(&base), 0);
        let repeated = base.blocked[0].pattern.as_str();
        let src = format!(
            "[[blocked]]\npattern = '''{repeated}'''\nreason = \"repeated\"\n\n\
             [[blocked]]\npattern = '^mine( |$)'\nreason = \"new\"\n"
        );
        let user = resolve_fresh(&src, false, Some(&base));
        assert!(user.blocked[1].pattern.is_compiled());
        assert!(!user.blocked[0].pattern.is_compiled());
        assert!(user.blocked[0].pattern.is_match("rm -r /"));
        // One regex behind both: the base's is now compiled too, and only it.
        assert_eq!(compiled(&base), 1);
        let strict = resolve_fresh(builtin_source("strict").unwrap(), true, Some(&base));
        assert_eq!(compiled(&strict), 1);
    }
}
