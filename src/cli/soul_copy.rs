//! `familiar souls copy ID`: a shipped soul copied into the user's souls directory with
//! its prompt beside it (`souls/ID.toml`, `souls/prompts/ID.md`), ready to edit; the
//! copy replaces the built-in soul of the same id.
//!
//! Invariant: nothing the user wrote is overwritten: a file already there is an error
//! that names it, and the copy loads as it is (`familiar souls validate` passes on it).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::{Exit, Out};
use crate::config::{Config, ProcessEnv};

/// Copies the shipped soul `id` into the user's souls directory.
pub fn copy(config: &Option<PathBuf>, id: &str, out: &mut Out) -> anyhow::Result<Exit> {
    let config = Config::load(config.as_deref(), &ProcessEnv)?;
    let Some(files) = crate::soul::shipped_files(id) else {
        let shipped: Vec<&str> = crate::soul::BUILTIN_SOULS.iter().map(|(i, _)| *i).collect();
        anyhow::bail!(
            "no shipped soul `{id}` to copy (shipped: {}); a soul of your own is a new file in {}",
            shipped.join(", "),
            config.paths.souls_dir().display()
        );
    };
    let dir = config.paths.souls_dir();
    let soul_path = dir.join(format!("{id}.toml"));
    let prompt = files.prompt.map(|(name, text)| (dir.join(name), text));
    for path in std::iter::once(&soul_path).chain(prompt.as_ref().map(|(p, _)| p)) {
        if path.exists() {
            anyhow::bail!(
                "{} already exists: edit it, or move it away to copy the shipped soul again",
                path.display()
            );
        }
    }
    if let Some((path, text)) = &prompt {
        write_new(path, text)?;
    }
    write_new(&soul_path, &as_copy(files.toml, id))?;
    writeln!(
        out,
        "copied the shipped soul `{id}` to {}",
        soul_path.display()
    )?;
    if let Some((path, _)) = &prompt {
        writeln!(out, "its prompt: {}", path.display())?;
    }
    writeln!(
        out,
        "edit them; your copy replaces the built-in `{id}` (`familiar souls` shows which file each soul comes from; `familiar souls validate {}` checks it)",
        soul_path.display()
    )?;
    Ok(Exit::Completed)
}

/// The shipped file as the user's copy: its header says it is the copy, no longer how
/// to make one.
fn as_copy(toml: &str, id: &str) -> String {
    let how = format!("# To change it: `familiar souls copy {id}`, then edit the copy.");
    let mine =
        format!("# Your copy (`familiar souls copy {id}`): it replaces the built-in `{id}`.");
    let mut out = String::with_capacity(toml.len() + mine.len());
    let mut said = false;
    for (i, line) in toml.lines().enumerate() {
        if line == how {
            out.push_str(&mine);
            said = true;
        } else {
            out.push_str(line);
        }
        out.push('\n');
        if i == 0 && !toml.contains(&how) {
            out.push_str(&mine);
            out.push('\n');
            said = true;
        }
    }
    if !said {
        out.insert_str(0, &format!("{mine}\n"));
    }
    out
}

fn write_new(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::as_copy;

    #[test]
    fn a_copy_does_not_tell_its_reader_to_copy_it() {
        for (id, toml) in crate::soul::BUILTIN_SOULS {
            let copy = as_copy(toml, id);
            assert!(!copy.contains("To change it"), "{id}:\n{copy}");
            assert!(copy.contains("Your copy"), "{id}");
            assert!(copy.contains(&format!("id = \"{id}\"")), "{id}");
        }
        let copy = as_copy(crate::soul::BUILTIN_SOULS[0].1, "safe_assistant");
        assert!(
            copy.contains("# Every key is documented in docs/souls.md."),
            "{copy}"
        );
    }
}
