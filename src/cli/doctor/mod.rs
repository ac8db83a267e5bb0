//! `familiar doctor [--json]`: checks what a first run needs, one line per check with
//! `ok`, `warn` or `fail` and, when not ok, the fix.
//!
//! Invariant: the doctor only looks; it changes nothing but a probe file in the data
//! dir and a scratch directory for the sandbox check, both removed again. A check that
//! cannot run because an earlier one failed says so instead of guessing. The exit code
//! is 1 when any check fails, 0 otherwise (warnings are not failures).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use super::{Exit, Out};
use crate::config::{Config, ProcessEnv};
use crate::soul::SoulSet;

mod provider;
mod system;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

/// The outcome of one check.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub check: &'static str,
    pub status: Level,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    pub(super) fn ok(check: &'static str, detail: impl Into<String>) -> Check {
        Check {
            check,
            status: Level::Ok,
            detail: detail.into(),
            fix: None,
        }
    }

    pub(super) fn warn(
        check: &'static str,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Check {
        Check {
            check,
            status: Level::Warn,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    pub(super) fn fail(
        check: &'static str,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Check {
        Check {
            check,
            status: Level::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

/// The checks for people: one line each, the names in one column as wide as the
/// longest, and a check's fix on the line below, under its detail.
fn render(checks: &[Check]) -> String {
    let width = checks.iter().map(|c| c.check.len()).max().unwrap_or(0);
    let mut text = String::new();
    for c in checks {
        let mark = match c.status {
            Level::Ok => "ok  ",
            Level::Warn => "warn",
            Level::Fail => "FAIL",
        };
        text.push_str(&format!("{mark}  {:<width$}  {}\n", c.check, c.detail));
        if let Some(fix) = &c.fix {
            text.push_str(&format!("      {:<width$}  fix: {fix}\n", ""));
        }
    }
    text
}

pub fn doctor(config: &Option<PathBuf>, json: bool, out: &mut Out) -> anyhow::Result<Exit> {
    let checks = super::client::block_on(run_checks(config.as_deref()))?;
    if json {
        for c in &checks {
            out.json_line(c)?;
        }
    } else {
        write!(out, "{}", render(&checks))?;
    }
    let count = |l: Level| checks.iter().filter(|c| c.status == l).count();
    let failed = count(Level::Fail);
    if !json {
        writeln!(
            out,
            "{failed} failed, {} warning(s), {} ok",
            count(Level::Warn),
            count(Level::Ok)
        )?;
    }
    Ok(if failed > 0 {
        Exit::Failed
    } else {
        Exit::Completed
    })
}

/// Every check, in the order a new user would fix them.
pub async fn run_checks(config_path: Option<&Path>) -> Vec<Check> {
    let mut checks = Vec::new();
    let config = match Config::load(config_path, &ProcessEnv) {
        Ok(c) => {
            let detail = match &c.source {
                Some(p) => format!("{} parses", p.display()),
                None => "no config file: the defaults are in force".to_owned(),
            };
            checks.push(Check::ok("config", detail));
            Some(Arc::new(c))
        }
        Err(e) => {
            checks.push(Check::fail(
                "config",
                e.to_string(),
                "correct the key the message names (docs/config.md lists them)",
            ));
            None
        }
    };
    if let Some(config) = &config {
        checks.extend(config_checks(config).await);
    }
    checks.extend(system::sandbox_checks().await);
    checks.extend(system::bus_checks().await);
    checks.push(system::desktop_check());
    checks.push(system::menu_check(config.as_deref()));
    match &config {
        Some(c) => {
            checks.push(system::data_dir_check(&c.paths.data_dir));
            checks.push(system::daemon_data_check(&c.paths).await);
        }
        None => checks.push(Check::warn(
            "data_dir",
            "not checked: the config does not load",
            "fix the config first",
        )),
    }
    checks
}

/// Policy, souls, provider and model; each needs the one before.
async fn config_checks(config: &Config) -> Vec<Check> {
    let mut checks = Vec::new();
    let Some(policy) = needed(
        &mut checks,
        "policy",
        crate::policy::load(&config.policy, &config.paths),
        "correct the policy file, or set `policy` in config.toml to `default` or `strict`",
    ) else {
        return checks;
    };
    checks.push(Check::ok(
        "policy",
        format!("policy `{}` parses", config.policy),
    ));
    let Some(souls) = needed(
        &mut checks,
        "souls",
        SoulSet::load(&config.paths, &policy),
        "correct the soul file it names",
    ) else {
        return checks;
    };
    for err in &souls.errors {
        checks.push(Check::fail(
            "souls",
            err.to_string(),
            format!(
                "correct it (`familiar souls validate {}` shows the error), or remove it",
                err.file
            ),
        ));
    }
    // A soul file valid on its own may name what config.toml lacks.
    let mut broken_refs = 0;
    for soul in souls.souls.values() {
        let crate::soul::SoulOrigin::File(path) = &soul.origin else {
            continue;
        };
        let src = std::fs::read_to_string(path).ok();
        let file = path.display().to_string();
        for err in crate::soul::config_errors(soul, &file, src.as_deref(), config) {
            broken_refs += 1;
            checks.push(Check::fail(
                "souls",
                err.to_string(),
                "name a provider or MCP server config.toml defines, or add its [providers.NAME] / [mcp.NAME] table",
            ));
        }
    }
    let bus_souls: Vec<&str> = souls
        .souls
        .values()
        .filter(|s| !s.sandbox.bus_talk.is_empty())
        .map(|s| s.id.as_str())
        .collect();
    if !bus_souls.is_empty() {
        checks.push(system::bus_proxy_check(&bus_souls));
    }
    let default_fix = default_soul_fix(&souls, config.default_soul.as_str());
    let Some(soul) = needed(
        &mut checks,
        "souls",
        souls.get(config.default_soul.as_str()),
        &default_fix,
    ) else {
        return checks;
    };
    if souls.errors.is_empty() && broken_refs == 0 {
        checks.push(Check::ok(
            "souls",
            format!(
                "{} souls load; the default is `{}`",
                souls.souls.len(),
                soul.id
            ),
        ));
    }
    let Some(provider) = needed(
        &mut checks,
        "provider",
        config.provider(soul.provider.as_deref()),
        "add the [providers.NAME] table the soul names",
    ) else {
        return checks;
    };
    let model = config
        .model_for(soul.provider.as_deref(), soul.model.as_deref())
        .unwrap_or(&provider.model);
    checks.extend(provider::provider_checks(provider, model).await);
    checks
}

/// The fix for a default soul that does not load: a default soul whose own file is
/// broken is fixed in that file (its error is listed above), not by choosing another.
fn default_soul_fix(souls: &SoulSet, id: &str) -> String {
    let file = format!("/{id}.toml");
    match souls.errors.iter().find(|e| e.file.ends_with(&file)) {
        Some(err) => format!(
            "correct {} (`familiar souls validate {}` shows the error): it is the default soul",
            err.file, err.file
        ),
        None => "set `default_soul` in config.toml to one of the souls listed".to_owned(),
    }
}

/// The value a later check needs, or a failed check saying why it is missing (the
/// caller then stops: the checks after it cannot run).
fn needed<T, E: std::fmt::Display>(
    checks: &mut Vec<Check>,
    check: &'static str,
    result: Result<T, E>,
    fix: &str,
) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(e) => {
            checks.push(Check::fail(check, e.to_string(), fix));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Regression: a name longer than the column (sandbox_helper) pushed its detail out
    // of line with the others.
    #[test]
    fn the_details_line_up_under_the_longest_name() {
        let checks = [
            Check::ok("bus", "the session bus answers"),
            Check::fail("sandbox_helper", "not found", "install familiar-sandbox"),
            Check::warn("hyprland", "not running", "start Hyprland"),
        ];
        assert_eq!(
            render(&checks),
            "ok    bus             the session bus answers\n\
             FAIL  sandbox_helper  not found\n      \
             \x20               fix: install familiar-sandbox\n\
             warn  hyprland        not running\n      \
             \x20               fix: start Hyprland\n"
        );
    }
}
