//! The user's launcher as a menu: a dmenu-style program that reads choices on stdin
//! and prints the one picked. `ask --dmenu` reads a prompt with it; the approval
//! chooser offers an approval's choices with it, from the daemon (a click on the
//! notification) and from `familiar approve --dmenu`.
//!
//! Which menu ([`Menu`]): config.toml's `[desktop] menu` ([`crate::config::desktop`]),
//! else the first of [`MENUS`] found on the fixed system `PATH`
//! ([`crate::programs::SYSTEM_PATH`]). Never the `PATH` of the process that opens it
//! and never `$FAMILIAR_DMENU`, which is no longer read (a warning says to set the
//! config key): a soul that may write `~/.local/bin` planted a `fuzzel` there, the
//! daemon ran it unconfined and the "Approve" it printed approved (issue 39).
//!
//! Invariant: the program that runs is a system program or an absolute path outside
//! the home directory; it is run without a shell, its stdin closed after the choices,
//! and nothing it prints but its first line is taken; a menu dismissed (Escape, a
//! non-zero exit with no output) is `None`, never an answer. A menu that could not
//! open (no Wayland display) is an error with its own last words: it exits non-zero
//! like a dismissed one, but says why on stderr (fuzzel's ` err: …` lines; its
//! `info:`/`warn:` chatter, which a dismissed fuzzel prints too, does not count).

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::io::AsyncWriteExt;

use crate::config::{Config, DesktopConfig, ProcessEnv};
use crate::programs::argv::{self, ArgvError};

/// Menus tried when config.toml names none, in order, with the flags that make them
/// read choices and the flag that names the prompt.
pub const MENUS: &[(&str, &[&str], &str)] = &[
    ("fuzzel", &["--dmenu"], "--prompt"),
    ("wofi", &["--dmenu"], "--prompt"),
    ("rofi", &["-dmenu"], "-p"),
    ("bemenu", &[], "-p"),
];

/// The environment variable earlier versions read the menu from; now only warned of.
pub const LEGACY_VARIABLE: &str = "FAMILIAR_DMENU";

#[derive(Debug, thiserror::Error)]
pub enum LauncherError {
    #[error(
        "no launcher: none of fuzzel, wofi, rofi, bemenu is installed in the system's directories; install one, or set `menu` under [desktop] in config.toml to a dmenu-style command"
    )]
    NoneFound,
    #[error("the menu of config.toml ([desktop] menu): {0}")]
    Configured(ArgvError),
    #[error("cannot run the launcher `{program}`: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("the launcher `{program}` could not open ({status}): {said}")]
    Failed {
        program: String,
        /// `exit 1`, `killed by signal 9`.
        status: String,
        /// Its last lines on stderr, joined.
        said: String,
    },
}

/// The lines of a menu's stderr kept in its error.
const LAST_LINES: usize = 3;

/// Which menu opens: config.toml's, or the first installed one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Menu {
    /// `[desktop] menu`'s words, the program first.
    configured: Option<Vec<String>>,
    /// A configured program under it is refused.
    home: PathBuf,
}

/// The menu as config.toml says it now (the daemon's config is reloaded while it runs).
pub type CurrentMenu = std::sync::Arc<dyn Fn() -> Menu + Send + Sync>;

/// Where the menu's program was found, for `familiar doctor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// `[desktop] menu` of config.toml.
    Configured,
    /// The first of [`MENUS`] on the system `PATH`.
    Installed,
}

impl Menu {
    pub fn new(desktop: &DesktopConfig, home: &Path) -> Menu {
        Menu {
            configured: desktop.menu.clone(),
            home: home.to_owned(),
        }
    }

    pub fn from_config(config: &Config) -> Menu {
        Menu::new(&config.desktop, &config.paths.home)
    }

    /// A client's menu (`ask --dmenu`, `approve --dmenu`): from the config.toml the
    /// daemon reads; when it does not load, the first installed menu (and a warning).
    pub fn for_client() -> Menu {
        match Config::load(None, &ProcessEnv) {
            Ok(config) => Menu::from_config(&config),
            Err(e) => {
                tracing::warn!(
                    "config.toml does not load ({e}): the menu is the first installed one"
                );
                let home = crate::config::paths::home_dir(&ProcessEnv);
                Menu::new(&DesktopConfig::default(), &home)
            }
        }
    }

    /// The program that runs and where it was found ([`Origin`]).
    pub fn program(&self) -> Result<(PathBuf, Origin), LauncherError> {
        warn_legacy_variable();
        if let Some(words) = &self.configured {
            let program = words.first().map(String::as_str).unwrap_or_default();
            let path =
                argv::resolve(program, Some(&self.home)).map_err(LauncherError::Configured)?;
            return Ok((path, Origin::Configured));
        }
        MENUS
            .iter()
            .find_map(|(name, _, _)| crate::programs::find(name))
            .map(|path| (path, Origin::Installed))
            .ok_or(LauncherError::NoneFound)
    }

    /// The menu's command line for a menu titled `prompt`: config.toml's as it is (the
    /// user chose its flags), else the first installed menu with its prompt flag; the
    /// program as the file found.
    pub fn command(&self, prompt: &str) -> Result<Vec<String>, LauncherError> {
        let (path, origin) = self.program()?;
        let program = path.display().to_string();
        Ok(match origin {
            Origin::Configured => std::iter::once(program)
                .chain(self.configured.iter().flatten().skip(1).cloned())
                .collect(),
            Origin::Installed => {
                let (_, args, flag) = MENUS
                    .iter()
                    .find(|(name, _, _)| path.file_name().is_some_and(|f| f == *name))
                    .ok_or(LauncherError::NoneFound)?;
                std::iter::once(program)
                    .chain(args.iter().map(|a| (*a).to_owned()))
                    .chain([(*flag).to_owned(), prompt.to_owned()])
                    .collect()
            }
        })
    }
}

/// `$FAMILIAR_DMENU` set: said, never used (whoever can set the environment of the
/// daemon or of a keybinding is not whoever may choose what answers approvals).
fn warn_legacy_variable() {
    if std::env::var_os(LEGACY_VARIABLE).is_some_and(|v| !v.is_empty()) {
        tracing::warn!(
            "{LEGACY_VARIABLE} is set but no longer read: set `menu` under [desktop] in config.toml (docs/config.md)"
        );
    }
}

/// Shows `choices` (one per line; none: a free-text prompt) and returns the line
/// picked or typed, trimmed; `None` when the menu was dismissed.
pub async fn pick(
    menu: &Menu,
    prompt: &str,
    choices: &[String],
) -> Result<Option<String>, LauncherError> {
    run(&menu.command(prompt)?, choices).await
}

/// Runs the menu `cmd` over `choices`: see [`pick`].
async fn run(cmd: &[String], choices: &[String]) -> Result<Option<String>, LauncherError> {
    let Some((program, rest)) = cmd.split_first() else {
        return Err(LauncherError::Configured(ArgvError::NoProgram));
    };
    let spawn_error = |source| LauncherError::Spawn {
        program: program.clone(),
        source,
    };
    let mut child = tokio::process::Command::new(program)
        .args(rest)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(spawn_error)?;
    if let Some(mut stdin) = child.stdin.take() {
        let text: String = choices.iter().map(|c| format!("{c}\n")).collect();
        // A menu that exits before reading them all (dismissed at once) closes the pipe.
        if let Err(e) = stdin.write_all(text.as_bytes()).await {
            tracing::debug!("the launcher did not read every choice: {e}");
        }
    }
    let output = child.wait_with_output().await.map_err(spawn_error)?;
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text.lines().next().unwrap_or_default().trim().to_owned();
    if !line.is_empty() {
        return Ok(Some(line));
    }
    if output.status.success() {
        return Ok(None);
    }
    match failure(&String::from_utf8_lossy(&output.stderr)) {
        Some(said) => Err(LauncherError::Failed {
            program: Path::new(program)
                .file_name()
                .map_or_else(|| program.clone(), |n| n.to_string_lossy().into_owned()),
            status: match output.status.code() {
                Some(code) => format!("exit {code}"),
                None => format!(
                    "killed by signal {}",
                    std::os::unix::process::ExitStatusExt::signal(&output.status)
                        .unwrap_or_default()
                ),
            },
            said,
        }),
        None => Ok(None),
    }
}

/// What a menu that exited non-zero without a pick said of a failure: its last lines
/// on stderr but for fuzzel's `info:` and `warn:` logging (a dismissed fuzzel prints
/// those too); `None` when nothing else, as a dismissed menu says nothing.
fn failure(stderr: &str) -> Option<String> {
    let said: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("info:") && !l.starts_with("warn:"))
        .collect();
    let last = &said[said.len().saturating_sub(LAST_LINES)..];
    (!last.is_empty()).then(|| familiar_protocol::display::terminal_safe(&last.join(" / ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Vec<String> {
        ["sh", "-c", script].map(str::to_owned).to_vec()
    }

    #[tokio::test]
    async fn the_first_line_printed_is_the_pick() {
        let picked = run(&sh("head -n 2 | tail -n 1"), &["one".into(), "two".into()])
            .await
            .unwrap();
        assert_eq!(picked.as_deref(), Some("two"));
    }

    #[tokio::test]
    async fn a_dismissed_menu_is_no_answer() {
        assert_eq!(run(&sh("exit 1"), &["one".into()]).await.unwrap(), None);
        // fuzzel logs its version and config file even when dismissed.
        let chatter = "echo 'info: main.c:1076: version: 1.8.2' >&2; echo 'warn: x' >&2; exit 1";
        assert_eq!(run(&sh(chatter), &["one".into()]).await.unwrap(), None);
    }

    // Regression (issue 42 §5): fuzzel without a Wayland display exited 1 saying why
    // on stderr, which was swallowed: `ask --dmenu` exited 0 and showed nothing.
    #[tokio::test]
    async fn a_menu_that_cannot_open_is_an_error_with_its_last_words() {
        let script = "echo 'info: main.c:1076: version: 1.8.2' >&2; \
             echo ' err: wayland.c:1804: failed to connect to wayland; no compositor running?' >&2; \
             exit 1";
        let err = run(&sh(script), &[]).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "the launcher `sh` could not open (exit 1): err: wayland.c:1804: failed to connect to wayland; no compositor running?"
        );
    }

    fn configured(words: &[&str], home: &Path) -> Menu {
        let desktop = DesktopConfig {
            menu: Some(words.iter().map(|w| (*w).to_owned()).collect()),
        };
        Menu::new(&desktop, home)
    }

    /// A `fuzzel` that would approve, and leave a mark that it ran.
    fn plant(dir: &Path, marker: &Path) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(dir).unwrap();
        let path = dir.join("fuzzel");
        let script = format!("#!/bin/sh\ntouch '{}'\necho Approve\n", marker.display());
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// See: issue 39 (a `fuzzel` planted in `~/.local/bin` answered an approval).
    #[tokio::test]
    async fn a_menu_planted_under_home_never_runs() {
        let home = tempfile::tempdir().unwrap();
        let marker = home.path().join("ran");
        let planted = plant(&home.path().join(".local/bin"), &marker);
        // Found by itself: only on the system PATH, whatever this process's PATH says.
        match Menu::new(&DesktopConfig::default(), home.path()).program() {
            Ok((path, Origin::Installed)) => {
                assert!(
                    crate::programs::SYSTEM_PATH
                        .split(':')
                        .any(|d| path.starts_with(d)),
                    "{}",
                    path.display()
                );
            }
            Ok((path, Origin::Configured)) => panic!("nothing is configured: {}", path.display()),
            Err(LauncherError::NoneFound) => {}
            Err(e) => panic!("{e}"),
        }
        // Named in config.toml (which refuses it at load): still refused here, also
        // through a link from outside home.
        let menu = configured(&[planted.to_str().unwrap(), "--dmenu"], home.path());
        let err = pick(&menu, "approve> ", &["Deny".into(), "Approve".into()])
            .await
            .unwrap_err();
        assert!(
            matches!(err, LauncherError::Configured(ArgvError::UnderHome(_))),
            "{err}"
        );
        let elsewhere = tempfile::tempdir().unwrap();
        let link = elsewhere.path().join("fuzzel");
        std::os::unix::fs::symlink(&planted, &link).unwrap();
        let menu = configured(&[link.to_str().unwrap()], home.path());
        assert!(pick(&menu, "p", &[]).await.is_err());
        assert!(!marker.exists(), "the planted menu ran");
    }

    #[tokio::test]
    async fn a_configured_menu_runs_from_the_system_path_with_its_own_flags() {
        let home = tempfile::tempdir().unwrap();
        let menu = configured(&["sh", "-c", "head -n 2 | tail -n 1"], home.path());
        let cmd = menu.command("ignored> ").unwrap();
        assert_eq!(Some(PathBuf::from(&cmd[0])), crate::programs::find("sh"));
        assert_eq!(cmd[1..], ["-c", "head -n 2 | tail -n 1"]);
        let picked = pick(&menu, "p", &["one".into(), "two".into()])
            .await
            .unwrap();
        assert_eq!(picked.as_deref(), Some("two"));
    }
}
