//! The user's launcher as a menu: a dmenu-style program (`$FAMILIAR_DMENU`, else the
//! first of fuzzel, wofi, rofi, bemenu on PATH) that reads choices on stdin and prints
//! the one picked. `ask --dmenu` reads a prompt with it; the approval chooser offers
//! an approval's choices with it, from the daemon (a click on the notification) and
//! from `familiar approve --dmenu`.
//!
//! Invariant: the menu is run without a shell, its stdin closed after the choices, and
//! nothing it prints but its first line is taken; a menu dismissed (Escape, a non-zero
//! exit with no output) is `None`, never an answer.

use std::process::Stdio;

use tokio::io::AsyncWriteExt;

/// Menus tried when `$FAMILIAR_DMENU` is not set, in order, with the flag that names
/// the prompt.
const MENUS: &[(&str, &[&str], &str)] = &[
    ("fuzzel", &["--dmenu"], "--prompt"),
    ("wofi", &["--dmenu"], "--prompt"),
    ("rofi", &["-dmenu"], "-p"),
    ("bemenu", &[], "-p"),
];

#[derive(Debug, thiserror::Error)]
pub enum LauncherError {
    #[error(
        "no launcher: none of fuzzel, wofi, rofi, bemenu is on PATH; install one or set FAMILIAR_DMENU to a dmenu-style command"
    )]
    NoneFound,
    #[error("cannot parse $FAMILIAR_DMENU: {0}")]
    BadVariable(String),
    #[error("cannot run the launcher `{program}`: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
}

/// The launcher's command line for a menu titled `prompt`: `$FAMILIAR_DMENU` as it is
/// (the user chose its flags), else the first known menu on PATH with its prompt flag.
pub fn command(prompt: &str) -> Result<Vec<String>, LauncherError> {
    if let Ok(s) = std::env::var("FAMILIAR_DMENU")
        && !s.trim().is_empty()
    {
        return shell_words::split(&s).map_err(|e| LauncherError::BadVariable(e.to_string()));
    }
    let (bin, args, flag) = MENUS
        .iter()
        .find(|(bin, _, _)| which::which_global(bin).is_ok())
        .ok_or(LauncherError::NoneFound)?;
    Ok(std::iter::once(*bin)
        .chain(args.iter().copied())
        .map(str::to_owned)
        .chain([(*flag).to_owned(), prompt.to_owned()])
        .collect())
}

/// Shows `choices` (one per line; none: a free-text prompt) and returns the line
/// picked or typed, trimmed; `None` when the menu was dismissed.
pub async fn pick(prompt: &str, choices: &[String]) -> Result<Option<String>, LauncherError> {
    run(&command(prompt)?, choices).await
}

/// Runs the menu `cmd` over `choices`: see [`pick`].
async fn run(cmd: &[String], choices: &[String]) -> Result<Option<String>, LauncherError> {
    let Some((program, rest)) = cmd.split_first() else {
        return Err(LauncherError::BadVariable("it is empty".to_owned()));
    };
    let spawn_error = |source| LauncherError::Spawn {
        program: program.clone(),
        source,
    };
    let mut child = tokio::process::Command::new(program)
        .args(rest)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
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
    Ok((!line.is_empty()).then_some(line))
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
    }
}
