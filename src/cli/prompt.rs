//! What a task is asked from the command line: the prompt (words or stdin) and the
//! workspace directory. Shared by `run`, `ask` and `steer`.

use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// The longest prompt read from stdin.
const MAX_STDIN_PROMPT: u64 = 1 << 20;

/// The prompt from the arguments, or stdin for `-` (or no argument with piped stdin).
pub fn read_prompt(words: &[String]) -> anyhow::Result<String> {
    let from_stdin = words == ["-"] || (words.is_empty() && !std::io::stdin().is_terminal());
    let prompt = if from_stdin {
        let mut s = String::new();
        std::io::stdin()
            .take(MAX_STDIN_PROMPT)
            .read_to_string(&mut s)
            .context("cannot read the prompt from stdin")?;
        s
    } else {
        words.join(" ")
    };
    let prompt = prompt.trim().to_owned();
    anyhow::ensure!(
        !prompt.is_empty(),
        "the prompt is empty: give it as an argument, or `-` to read stdin"
    );
    Ok(prompt)
}

/// A workspace given on the command line: an existing directory, made absolute.
pub fn resolve_workspace(dir: &Path) -> anyhow::Result<PathBuf> {
    let abs = std::fs::canonicalize(dir)
        .with_context(|| format!("workspace {} does not exist", dir.display()))?;
    anyhow::ensure!(
        abs.is_dir(),
        "workspace {} is not a directory",
        abs.display()
    );
    Ok(abs)
}
