//! A soul file's keys as written ([`SoulToml`]) and their validation, one method per
//! key or section, each error naming the file, the line and the key. `[sandbox]`, the
//! section that says what the kernel lets a soul's tools reach, is in `sandbox.rs`.

mod sandbox;

use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use familiar_protocol::ids::SoulId;
use familiar_protocol::tier::{Mode, Tier};
use serde::Deserialize;
use toml::Spanned;

use super::{
    DEFAULT_DISK_PERCENT, DEFAULT_MAX_ITERATIONS, DEFAULT_MAX_TOKENS, DEFAULT_MAX_WALL_CLOCK,
    DEFAULT_TOOLS, MAX_MAX_ITERATIONS, Precheck, PromptSource, load_prompt,
};
use crate::catalog;
use crate::config::{parse_bytes, parse_duration};
use crate::error::FileError;
use crate::policy::{Policy, RateLimits, TierModes};
use crate::sandbox::Resources;

/// A soul file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SoulToml {
    pub(super) id: Option<Spanned<String>>,
    pub(super) description: Option<String>,
    pub(super) prompt: Option<String>,
    pub(super) prompt_file: Option<Spanned<String>>,
    pub(super) provider: Option<String>,
    pub(super) model: Option<String>,
    pub(super) max_iterations: Option<Spanned<u32>>,
    pub(super) max_tokens: Option<Spanned<u64>>,
    pub(super) max_wall_clock: Option<Spanned<String>>,
    pub(super) tools: Option<Vec<Spanned<String>>>,
    pub(super) permissions: Option<PermissionsToml>,
    pub(super) sandbox: Option<SandboxToml>,
    pub(super) rate_limits: Option<RateLimits>,
    pub(super) delegates: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) memory: Option<bool>,
    pub(super) precheck: Option<PrecheckToml>,
    pub(super) resources: Option<ResourcesToml>,
    /// Where the screen tools' results may go: `off`, `local` (default), `hosted`.
    pub(super) screen: Option<super::ScreenPrivacy>,
}

/// `[resources]` as written: sizes and percentages as systemd spells them, or numbers.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ResourcesToml {
    pub(super) memory_max: Option<Spanned<NumberOrText>>,
    pub(super) cpu_quota: Option<Spanned<NumberOrText>>,
    pub(super) tasks_max: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum NumberOrText {
    Number(i64),
    Text(String),
}

/// `[precheck]` as written: every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PrecheckToml {
    pub(super) failed_units: Option<bool>,
    pub(super) disk_percent: Option<Spanned<u8>>,
    pub(super) journal_errors: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PermissionsToml {
    pub(super) read: Option<Spanned<Mode>>,
    pub(super) write: Option<Spanned<Mode>>,
    pub(super) execute: Option<Spanned<Mode>>,
    pub(super) system_critical: Option<Spanned<Mode>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SandboxToml {
    pub(super) read: Option<Vec<Spanned<String>>>,
    pub(super) write: Option<Vec<Spanned<String>>>,
    pub(super) network: Option<bool>,
    pub(super) udp: Option<bool>,
    pub(super) startup: Option<Vec<Spanned<String>>>,
    pub(super) destroy: Option<Vec<Spanned<String>>>,
    pub(super) require: Option<bool>,
    pub(super) sockets: Option<Vec<Spanned<String>>>,
    pub(super) bus_talk: Option<Vec<Spanned<String>>>,
}

/// The file being validated: where errors point, and the home `~` means.
pub(super) struct Fields<'a> {
    pub(super) file: &'a str,
    pub(super) src: &'a str,
    pub(super) home: &'a Path,
}

impl Fields<'_> {
    /// `[precheck]`: the probes, each on unless turned off; a disk is worth reporting
    /// above `disk_percent` (1..=100, default 90).
    pub(super) fn precheck(
        &self,
        raw: Option<PrecheckToml>,
    ) -> Result<Option<Precheck>, FileError> {
        let Some(raw) = raw else {
            return Ok(None);
        };
        let disk_percent = match raw.disk_percent {
            Some(p) if !(1..=100).contains(p.get_ref()) => {
                return Err(self.at(
                    p.span(),
                    format!(
                        "{} is outside 1..=100 (percent of a disk used)",
                        p.get_ref()
                    ),
                ));
            }
            Some(p) => p.into_inner(),
            None => DEFAULT_DISK_PERCENT,
        };
        Ok(Some(Precheck {
            failed_units: raw.failed_units.unwrap_or(true),
            disk_percent,
            journal_errors: raw.journal_errors.unwrap_or(true),
        }))
    }

    /// `[resources]`: `memory_max` in bytes or with a K/M/G/T suffix (powers of 1024,
    /// as systemd reads them; at least 1M), `cpu_quota` as `"50%"` of one CPU (1 to
    /// 100 per CPU, up to 10000%), `tasks_max` at least 1.
    pub(super) fn resources(&self, raw: Option<ResourcesToml>) -> Result<Resources, FileError> {
        let Some(raw) = raw else {
            return Ok(Resources::default());
        };
        let memory_max = match raw.memory_max {
            None => None,
            Some(m) => {
                let bytes = match m.get_ref() {
                    NumberOrText::Number(n) => u64::try_from(*n).ok(),
                    NumberOrText::Text(t) => parse_bytes(t),
                };
                match bytes {
                    Some(b) if b >= MIN_MEMORY_MAX => Some(b),
                    Some(_) => {
                        return Err(
                            self.at(m.span(), "below 1M: no program runs in less".to_owned())
                        );
                    }
                    None => {
                        return Err(self.at(
                            m.span(),
                            "not a size: write bytes, or a number with K, M, G or T (\"512M\")"
                                .to_owned(),
                        ));
                    }
                }
            }
        };
        let cpu_quota = match raw.cpu_quota {
            None => None,
            Some(q) => {
                let percent = match q.get_ref() {
                    NumberOrText::Number(n) => u32::try_from(*n).ok(),
                    NumberOrText::Text(t) => t
                        .trim()
                        .strip_suffix('%')
                        .and_then(|p| p.trim().parse().ok()),
                };
                match percent {
                    Some(p) if (1..=MAX_CPU_QUOTA).contains(&p) => Some(p),
                    _ => {
                        return Err(self.at(
                            q.span(),
                            format!("not a CPU quota: write a percentage of one CPU from \"1%\" to \"{MAX_CPU_QUOTA}%\" (\"200%\" is two CPUs)"),
                        ));
                    }
                }
            }
        };
        let tasks_max = match raw.tasks_max {
            None => None,
            Some(t) => match u64::try_from(*t.get_ref()) {
                Ok(n) if n >= 1 => Some(n),
                _ => {
                    return Err(self.at(
                        t.span(),
                        format!("{} is not a number of processes (at least 1)", t.get_ref()),
                    ));
                }
            },
        };
        Ok(Resources {
            memory_max,
            cpu_quota,
            tasks_max,
        })
    }

    fn at(&self, span: Range<usize>, msg: String) -> FileError {
        FileError::at(self.file, self.src, span, msg)
    }

    fn whole(&self, msg: String) -> FileError {
        FileError::whole_file(self.file, msg)
    }

    /// `id`, which must match the file name; the file name when it is left out.
    pub(super) fn id(&self, id: Option<&Spanned<String>>, stem: &str) -> Result<SoulId, FileError> {
        let Some(id) = id else {
            return SoulId::new(stem).map_err(|e| self.whole(format!("file name: {e}")));
        };
        let parsed =
            SoulId::new(id.get_ref().clone()).map_err(|e| self.at(id.span(), e.to_string()))?;
        if parsed.as_str() != stem {
            return Err(self.at(
                id.span(),
                format!("id `{parsed}` does not match the file name `{stem}.toml`"),
            ));
        }
        Ok(parsed)
    }

    /// `prompt` or `prompt_file`, exactly one, not empty.
    pub(super) fn prompt(
        &self,
        prompt: Option<String>,
        prompt_file: Option<&Spanned<String>>,
        prompts: &PromptSource<'_>,
    ) -> Result<String, FileError> {
        let prompt = match (prompt, prompt_file) {
            (Some(_), Some(pf)) => {
                return Err(self.at(
                    pf.span(),
                    "set either `prompt` or `prompt_file`, not both".into(),
                ));
            }
            (Some(p), None) => p,
            (None, Some(pf)) => {
                load_prompt(pf.get_ref(), prompts).map_err(|e| self.at(pf.span(), e.to_string()))?
            }
            (None, None) => return Err(self.whole("missing `prompt` or `prompt_file`".into())),
        };
        if prompt.trim().is_empty() {
            return Err(self.whole("the prompt is empty".into()));
        }
        Ok(prompt)
    }

    pub(super) fn max_iterations(&self, n: Option<Spanned<u32>>) -> Result<u32, FileError> {
        match n {
            Some(n) if *n.get_ref() == 0 || *n.get_ref() > MAX_MAX_ITERATIONS => Err(self.at(
                n.span(),
                format!("{} is outside 1..={MAX_MAX_ITERATIONS}", n.get_ref()),
            )),
            Some(n) => Ok(n.into_inner()),
            None => Ok(DEFAULT_MAX_ITERATIONS),
        }
    }

    pub(super) fn max_tokens(&self, n: Option<Spanned<u64>>) -> Result<u64, FileError> {
        match n {
            Some(n) if *n.get_ref() < 1000 => Err(self.at(
                n.span(),
                format!("{} is below the minimum of 1000", n.get_ref()),
            )),
            Some(n) => Ok(n.into_inner()),
            None => Ok(DEFAULT_MAX_TOKENS),
        }
    }

    pub(super) fn max_wall_clock(&self, s: Option<Spanned<String>>) -> Result<Duration, FileError> {
        match s {
            Some(s) => parse_duration(s.get_ref()).map_err(|e| self.at(s.span(), e.to_string())),
            None => Ok(DEFAULT_MAX_WALL_CLOCK),
        }
    }

    /// `tools`: known names, each once, in the file's order.
    pub(super) fn tools(
        &self,
        list: Option<Vec<Spanned<String>>>,
    ) -> Result<Vec<String>, FileError> {
        let Some(list) = list else {
            return Ok(DEFAULT_TOOLS.iter().map(|s| (*s).to_owned()).collect());
        };
        let mut tools = Vec::with_capacity(list.len());
        for t in list {
            if let Some((server, tool)) = catalog::mcp_entry(t.get_ref()) {
                let tool_ok = tool.is_none_or(|t| !t.is_empty() && !t.contains('/'));
                if !crate::config::mcp::valid_server_name(server) || !tool_ok {
                    return Err(self.at(
                        t.span(),
                        format!(
                            "`{}` is not an MCP entry: write `mcp:NAME` for all of the server's \
                             tools or `mcp:NAME/TOOL` for one (NAME as in `[mcp.NAME]`)",
                            t.get_ref()
                        ),
                    ));
                }
            } else if catalog::info(t.get_ref()).is_none() {
                return Err(self.at(
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
        Ok(tools)
    }

    /// `delegates`: soul ids, not the soul itself, and set exactly when `tools` names
    /// `delegate` (either alone is a soul that cannot do what its file says).
    pub(super) fn delegates(
        &self,
        raw: Option<Spanned<Vec<Spanned<String>>>>,
        id: &SoulId,
        tools: &[String],
    ) -> Result<Vec<SoulId>, FileError> {
        let has_tool = tools.iter().any(|t| t == "delegate");
        let Some(raw) = raw else {
            return if has_tool {
                Err(self.whole(
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
            let soul =
                SoulId::new(d.get_ref().clone()).map_err(|e| self.at(d.span(), e.to_string()))?;
            if &soul == id {
                return Err(self.at(d.span(), "a soul cannot delegate to itself".into()));
            }
            if !out.contains(&soul) {
                out.push(soul);
            }
        }
        match (out.is_empty(), has_tool) {
            (false, false) => Err(self.at(
                span,
                "`delegates` is set but `tools` does not list `delegate`".into(),
            )),
            (true, true) => Err(self.at(
                span,
                "`tools` lists `delegate` but `delegates` is empty".into(),
            )),
            (true, false) | (false, true) => Ok(out),
        }
    }

    /// `[permissions]`: each tier's mode, never looser than the policy's.
    pub(super) fn permissions(
        &self,
        perms: PermissionsToml,
        policy: Option<&Policy>,
    ) -> Result<TierModes, FileError> {
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
                    return Err(self.at(
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
            permissions.set(tier, *mode.get_ref());
        }
        Ok(permissions)
    }
}

/// The modes a soul may set under a policy's `ceiling`: `ask, deny` under `ask`.
fn allowed_modes(ceiling: Mode) -> String {
    let allowed: Vec<&str> = Mode::ALL
        .into_iter()
        .filter(|m| *m >= ceiling)
        .map(Mode::as_str)
        .collect();
    allowed.join(", ")
}

/// Smallest `memory_max`.
const MIN_MEMORY_MAX: u64 = 1 << 20;
/// Largest `cpu_quota`, percent (a hundred CPUs).
const MAX_CPU_QUOTA: u32 = 10_000;

#[cfg(test)]
mod tests {
    use super::{Mode, allowed_modes, parse_bytes};

    #[test]
    fn a_soul_may_set_the_policys_mode_or_a_stricter_one() {
        assert_eq!(allowed_modes(Mode::Allow), "allow, ask, deny");
        assert_eq!(allowed_modes(Mode::Ask), "ask, deny");
        assert_eq!(allowed_modes(Mode::Deny), "deny");
    }

    #[test]
    fn sizes_are_powers_of_1024_as_in_systemd() {
        assert_eq!(parse_bytes("512M"), Some(512 << 20));
        assert_eq!(parse_bytes("2g"), Some(2 << 30));
        assert_eq!(parse_bytes(" 1048576 "), Some(1 << 20));
        assert_eq!(parse_bytes("1T"), Some(1 << 40));
        assert_eq!(parse_bytes("M"), None);
        assert_eq!(parse_bytes("1.5G"), None);
        assert_eq!(parse_bytes("99999999999T"), None);
    }
}
