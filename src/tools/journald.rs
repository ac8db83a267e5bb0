//! `journal`: recent entries of the user journal, through `journalctl --user`.
//!
//! The invariant: `journalctl` runs in the task's sandbox, with only the journal
//! directories (and `/etc/machine-id`, which names the journal's subdirectory) added
//! to that call's read paths, never to the task's; every argument it gets is validated
//! here, so a model-chosen value can never become an option (`--file=...`,
//! `--directory=...`). The tool is hidden when there is no `journalctl` or no journal.

use std::path::{Path, PathBuf};

use futures::FutureExt;
use serde_json::{Value, json};

use super::util::{find_program, object_schema, opt_u64};
use super::{Tool, ToolContext, ToolError, ToolFuture};
use crate::catalog::{self, ToolInfo};

pub const DEFAULT_LINES: u64 = 100;
pub const MAX_LINES: u64 = 1000;
/// Where journald keeps persistent and volatile journals.
pub const JOURNAL_DIRS: &[&str] = &["/var/log/journal", "/run/log/journal"];

pub struct Journal {
    /// `journalctl`, when found.
    pub journalctl: Option<PathBuf>,
    /// The journal directories that exist.
    pub dirs: Vec<PathBuf>,
}

impl Journal {
    /// What this machine has.
    pub fn detect() -> Journal {
        Journal {
            journalctl: find_program("journalctl"),
            dirs: JOURNAL_DIRS
                .iter()
                .map(PathBuf::from)
                .filter(|d| d.is_dir())
                .collect(),
        }
    }
}

/// A unit name: `[A-Za-z0-9@._:-]`, not starting with `-`.
fn valid_unit(unit: &str) -> bool {
    !unit.is_empty()
        && unit.len() <= 256
        && !unit.starts_with('-')
        && unit
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "@._:-".contains(c))
}

/// A `--since` value: `[A-Za-z0-9 :._-]`, not starting with `-` ("1 hour ago",
/// "today", "2026-01-31 08:00").
fn valid_since(since: &str) -> bool {
    !since.trim().is_empty()
        && since.len() <= 64
        && !since.starts_with('-')
        && since
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || " :._-".contains(c))
}

fn opt_str<'a>(args: &'a Value, key: &str) -> Result<Option<&'a str>, ToolError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(other) => Err(ToolError::model(format!(
            "`{key}` must be a string, got {other}"
        ))),
    }
}

/// The `journalctl` arguments for a call, or why the call is refused.
fn journalctl_args(args: &Value) -> Result<Vec<String>, ToolError> {
    let lines = match opt_u64(args, "lines")? {
        None => DEFAULT_LINES,
        Some(n @ 1..=MAX_LINES) => n,
        Some(n) => {
            return Err(ToolError::model(format!(
                "`lines` must be between 1 and {MAX_LINES}, got {n}"
            )));
        }
    };
    let mut argv: Vec<String> = ["--user", "--no-pager", "-o", "short-iso", "-n"]
        .map(str::to_owned)
        .into();
    argv.push(lines.to_string());
    if let Some(unit) = opt_str(args, "unit")? {
        if !valid_unit(unit) {
            return Err(ToolError::model(format!(
                "`unit` {unit:?} is not a unit name (letters, digits and @._:- only)"
            )));
        }
        argv.extend(["-u".to_owned(), unit.to_owned()]);
    }
    if let Some(since) = opt_str(args, "since")? {
        if !valid_since(since) {
            return Err(ToolError::model(format!(
                "`since` {since:?} is not a journalctl time (e.g. \"1 hour ago\", \"today\", \
                 \"2026-01-31 08:00\"; letters, digits, spaces and :._- only)"
            )));
        }
        argv.extend(["--since".to_owned(), since.to_owned()]);
    }
    Ok(argv)
}

impl Tool for Journal {
    fn info(&self) -> &'static ToolInfo {
        &catalog::JOURNAL
    }

    fn description(&self) -> &'static str {
        "Read the user's systemd journal (journalctl --user), newest last. `unit` filters by \
         user unit, `lines` is the number of entries (default 100, max 1000), `since` is a \
         journalctl time such as \"1 hour ago\" or \"today\"."
    }

    fn schema(&self) -> Value {
        object_schema(
            json!({
                "unit": {"type": "string", "description": "user unit, e.g. pipewire.service"},
                "lines": {"type": "integer", "minimum": 1, "maximum": MAX_LINES},
                "since": {"type": "string", "description": "e.g. \"1 hour ago\", \"today\""}
            }),
            &[],
        )
    }

    fn available(&self) -> bool {
        self.journalctl.is_some() && !self.dirs.is_empty()
    }

    fn execute(&self, args: Value, ctx: ToolContext) -> ToolFuture {
        let program = self.journalctl.clone();
        let dirs = self.dirs.clone();
        async move {
            let program =
                program.ok_or_else(|| ToolError::model("journalctl is not installed here"))?;
            let mut argv = vec![program.display().to_string()];
            argv.extend(journalctl_args(&args)?);
            let mut policy = (*ctx.sandbox).clone();
            policy.read.extend(dirs);
            policy.read.push(Path::new("/etc/machine-id").to_owned());
            let out = ctx.launcher.run(&policy, &argv, None, &ctx.cancel).await?;
            if out.timed_out {
                return Err(ToolError::model(
                    "journalctl did not finish in time: ask for fewer lines or a later `since`",
                ));
            }
            match out.exit_code {
                Some(0) => {
                    let mut text = out.stdout;
                    if text.trim().is_empty() {
                        text = "-- No entries --\n".to_owned();
                    }
                    if !out.stderr.trim().is_empty() {
                        text.push_str(&format!("\n--- journalctl said ---\n{}", out.stderr));
                    }
                    Ok(text)
                }
                code => Err(ToolError::model(format!(
                    "journalctl failed ({}): {}",
                    code.map_or("killed".to_owned(), |c| format!("exit {c}")),
                    out.stderr.trim()
                ))),
            }
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_validated_and_never_become_options() {
        assert_eq!(
            journalctl_args(
                &json!({"unit": "pipewire.service", "lines": 5, "since": "1 hour ago"})
            )
            .unwrap(),
            [
                "--user",
                "--no-pager",
                "-o",
                "short-iso",
                "-n",
                "5",
                "-u",
                "pipewire.service",
                "--since",
                "1 hour ago"
            ]
        );
        assert!(journalctl_args(&json!({"unit": "--file=/etc/x"})).is_err());
        assert!(journalctl_args(&json!({"unit": "a b"})).is_err());
        assert!(journalctl_args(&json!({"since": "-1h"})).is_err());
        assert!(journalctl_args(&json!({"since": "today; rm"})).is_err());
        assert!(journalctl_args(&json!({"lines": 1001})).is_err());
        assert!(journalctl_args(&json!({"lines": 0})).is_err());
        assert_eq!(journalctl_args(&json!({})).unwrap()[5], "100");
    }

    #[test]
    fn hidden_without_journalctl_or_journal() {
        let none = Journal {
            journalctl: None,
            dirs: vec![PathBuf::from("/var/log/journal")],
        };
        assert!(!none.available());
        let no_dirs = Journal {
            journalctl: Some(PathBuf::from("/usr/bin/journalctl")),
            dirs: vec![],
        };
        assert!(!no_dirs.available());
    }
}
