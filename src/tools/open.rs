//! `open`: a file or URL in the user's default application (`xdg-open`, or `gio open`).
//!
//! This deliberately runs outside familiar's sandbox: the browser or viewer it starts
//! must work normally, with the user's files and network. That is why the loop always
//! asks before an `open` call, whatever the policy's execute mode
//! (`catalog::runs_outside_sandbox`), and why the target is narrowed here: an existing
//! path, or an `http(s)://` or `mailto:` URL, one line, never something an opener would
//! read as an option. The invariant: the opener is started detached (own process group,
//! no stdio, not waited for) with the daemon's environment minus anything that looks
//! like a credential, and the call returns once it has started.

use std::path::PathBuf;
use std::process::Stdio;

use futures::FutureExt;
use serde_json::{Value, json};

use super::util::{find_program, object_schema, str_arg};
use super::{Tool, ToolContext, ToolError, ToolFuture};
use crate::catalog::{self, ToolInfo};

/// Longest target accepted (URLs included).
pub const MAX_TARGET_LEN: usize = 4096;

/// The program that opens things, and its arguments before the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opener {
    pub program: PathBuf,
    pub args: Vec<String>,
}

pub struct Open {
    /// `None` hides the tool. Tests put `/bin/true` here.
    pub opener: Option<Opener>,
    /// `systemd-run`, when the daemon runs as a systemd unit: the application is then
    /// started by the user manager as a unit of its own, outside familiar.service's
    /// hardening (a syscall filter and address families a browser's own sandbox
    /// needs more than), its memory limit and its lifetime.
    pub launcher: Option<PathBuf>,
}

impl Open {
    /// `xdg-open`, else `gio open`, from the system's `PATH` (never the daemon's, which
    /// a soul might write to: [`crate::programs`]); `systemd-run` as the
    /// launcher when systemd started this process (`INVOCATION_ID`).
    pub fn detect() -> Open {
        let launcher = std::env::var_os("INVOCATION_ID").and_then(|_| find_program("systemd-run"));
        let opener = Self::detect_opener();
        Open { opener, launcher }
    }

    fn detect_opener() -> Option<Opener> {
        find_program("xdg-open")
            .map(|program| Opener {
                program,
                args: Vec::new(),
            })
            .or_else(|| {
                find_program("gio").map(|program| Opener {
                    program,
                    args: vec!["open".to_owned()],
                })
            })
    }

    /// The command that opens `target`: the opener itself, or `systemd-run` asked to
    /// start it as a transient unit of the user manager.
    fn command(&self, opener: &Opener, target: &Target) -> tokio::process::Command {
        let mut cmd = match &self.launcher {
            Some(launcher) => {
                let mut cmd = tokio::process::Command::new(launcher);
                cmd.args(["--user", "--collect", "--quiet", "--"])
                    .arg(&opener.program);
                cmd
            }
            None => tokio::process::Command::new(&opener.program),
        };
        cmd.args(&opener.args).arg(target.as_arg());
        cmd
    }
}

/// What the opener is given: a URL as is, or a path made absolute.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Url(String),
    Path(PathBuf),
}

impl Target {
    fn as_arg(&self) -> String {
        match self {
            Target::Url(u) => u.clone(),
            Target::Path(p) => p.display().to_string(),
        }
    }
}

fn parse_target(raw: &str, ctx: &ToolContext) -> Result<Target, ToolError> {
    let target = raw.trim();
    if target.is_empty() {
        return Err(ToolError::model("`target` is empty"));
    }
    if target.len() > MAX_TARGET_LEN {
        return Err(ToolError::model(format!(
            "`target` is longer than {MAX_TARGET_LEN} bytes"
        )));
    }
    if target.chars().any(char::is_control) {
        return Err(ToolError::model(
            "`target` contains control characters (newlines, tabs, escapes)",
        ));
    }
    let lower = target.to_ascii_lowercase();
    for scheme in ["http://", "https://"] {
        if lower.starts_with(scheme) {
            return if target.len() > scheme.len() && !target.contains(char::is_whitespace) {
                Ok(Target::Url(target.to_owned()))
            } else {
                Err(ToolError::model(format!(
                    "`{target}` is not a URL (no host, or spaces: percent-encode them)"
                )))
            };
        }
    }
    if lower.starts_with("mailto:") {
        return Ok(Target::Url(target.to_owned()));
    }
    if lower.starts_with("file:") {
        return Err(ToolError::model(
            "give the path itself (`/home/me/doc.pdf` or `~/doc.pdf`), not a file: URL",
        ));
    }
    if let Some((scheme, _)) = target.split_once(':')
        && !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    {
        return Err(ToolError::model(format!(
            "`{scheme}:` targets are not opened: only an existing path, an http(s):// URL or \
             a mailto: address"
        )));
    }
    let path = ctx.resolve(target);
    match path.metadata() {
        Ok(_) => Ok(Target::Path(path)),
        Err(e) => Err(ToolError::model(format!("{}: {e}", path.display()))),
    }
}

/// Credentials never cross into the application we start: names that say key, token,
/// secret or password, and systemd's credentials directory.
fn is_secret_var(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    ["API_KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD"]
        .iter()
        .any(|s| upper.contains(s))
        || upper == "CREDENTIALS_DIRECTORY"
}

impl Tool for Open {
    fn info(&self) -> &'static ToolInfo {
        &catalog::OPEN
    }

    fn description(&self) -> &'static str {
        "Open an existing file or directory (absolute or ~ path), an http(s):// URL or a \
         mailto: address in the user's default application. The application runs outside \
         familiar's sandbox, so the user is always asked first."
    }

    fn schema(&self) -> Value {
        object_schema(
            json!({
                "target": {"type": "string", "description": "path, http(s):// URL or mailto:"}
            }),
            &["target"],
        )
    }

    fn available(&self) -> bool {
        self.opener.is_some()
    }

    fn execute(&self, args: Value, ctx: ToolContext) -> ToolFuture {
        let Some(opener) = self.opener.clone() else {
            let e = ToolError::model("no opener here (neither xdg-open nor gio is installed)");
            return async move { Err(e) }.boxed();
        };
        let target = match str_arg(&args, "target").and_then(|t| parse_target(t, &ctx)) {
            Ok(t) => t,
            Err(e) => return async move { Err(e) }.boxed(),
        };
        let mut cmd = self.command(&opener, &target);
        let launched = self.launcher.is_some();
        async move {
            cmd.current_dir(&ctx.home)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                // Its own group: a cancelled task or a stopped daemon does not take the
                // user's browser down with it.
                .process_group(0)
                .kill_on_drop(false);
            for (name, _) in std::env::vars_os() {
                if is_secret_var(&name.to_string_lossy()) {
                    cmd.env_remove(name);
                }
            }
            let mut child = cmd.spawn().map_err(|e| {
                ToolError::model(format!("starting {}: {e}", opener.program.display()))
            })?;
            if launched {
                // systemd-run returns once the user manager has started the unit.
                let status = child
                    .wait()
                    .await
                    .map_err(|e| ToolError::model(format!("waiting for systemd-run: {e}")))?;
                if !status.success() {
                    return Err(ToolError::model(format!(
                        "systemd-run could not start {} ({status})",
                        opener.program.display()
                    )));
                }
                return Ok(format!(
                    "opening {} with {} (a unit of its own)",
                    target.as_arg(),
                    opener.program.display()
                ));
            }
            let pid = child.id().unwrap_or_default();
            // Not waited for: the application lives on; tokio reaps the dropped child
            // in the background, so it does not stay a zombie.
            drop(child);
            Ok(format!(
                "opening {} with {} (pid {pid})",
                target.as_arg(),
                opener.program.display()
            ))
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_kept_from_the_application() {
        for secret in [
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "GITHUB_TOKEN",
            "CREDENTIALS_DIRECTORY",
            "my_secret",
        ] {
            assert!(is_secret_var(secret), "{secret}");
        }
        for kept in [
            "WAYLAND_DISPLAY",
            "DISPLAY",
            "DBUS_SESSION_BUS_ADDRESS",
            "PATH",
        ] {
            assert!(!is_secret_var(kept), "{kept}");
        }
    }
}
