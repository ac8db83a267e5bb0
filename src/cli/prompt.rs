//! What a task is asked from the command line: the prompt (words or stdin) and the
//! workspace directory. Shared by `run`, `ask` and `steer`.

use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// The longest prompt read from stdin: what the daemon's `Submit` takes, so `run` and
/// `ask` agree.
pub const MAX_STDIN_PROMPT: usize = familiar_protocol::MAX_PROMPT_BYTES;

/// The prompt from the arguments, or stdin for `-` (or no argument with piped stdin).
pub fn read_prompt(words: &[String]) -> anyhow::Result<String> {
    let from_stdin = words == ["-"] || (words.is_empty() && !std::io::stdin().is_terminal());
    let prompt = if from_stdin {
        read_limited(std::io::stdin(), MAX_STDIN_PROMPT)?
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

/// All of `input` as text, refused when longer than `max` bytes: a prompt cut short
/// would be a different question.
fn read_limited(input: impl Read, max: usize) -> anyhow::Result<String> {
    let mut bytes = Vec::new();
    input
        .take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .context("cannot read the prompt from stdin")?;
    anyhow::ensure!(
        bytes.len() <= max,
        "the prompt on stdin is longer than the limit of {max} bytes ({} MiB); put the long text in a file in the workspace and ask about the file",
        max >> 20
    );
    String::from_utf8(bytes).context("the prompt on stdin is not UTF-8 text")
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

#[cfg(test)]
mod tests {
    use super::*;

    // Regression: a 10 MB prompt was cut at 1 MiB without a word.
    #[test]
    fn a_prompt_over_the_limit_is_refused_naming_the_limit() {
        let err = read_limited(&[b'a'; 11][..], 10).unwrap_err().to_string();
        assert!(err.contains("limit of 10 bytes"), "{err}");
        assert_eq!(read_limited(&[b'a'; 10][..], 10).unwrap(), "a".repeat(10));
    }
}
