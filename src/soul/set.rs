//! Every soul available ([`SoulSet`]): the built-ins, replaced by the user's soul files
//! of the same id; loading one file; checking a soul against config.toml.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::builtin::BUILTIN_SOULS;
use super::{PromptSource, Soul, SoulOrigin, parse};
use crate::config::Paths;
use crate::error::{ConfigError, FileError};
use crate::policy::Policy;

/// Every soul available: built-ins, replaced by user files of the same id.
#[derive(Debug, Default)]
pub struct SoulSet {
    /// Shared: a task holds its soul as an `Arc` of this one (unless it overrides the
    /// model), not a copy of the persona prompt per task.
    pub souls: BTreeMap<String, Arc<Soul>>,
    /// User soul files that failed to load; they do not hide the others.
    pub errors: Vec<FileError>,
}

impl SoulSet {
    /// Loads built-ins, then `paths.souls_dir()/*.toml`. Built-in souls are not checked
    /// against the policy (they are clamped at decision time); user files are.
    pub fn load(paths: &Paths, policy: &Policy) -> Result<SoulSet, ConfigError> {
        let mut set = SoulSet::default();
        for (id, src) in BUILTIN_SOULS {
            let soul = parse(
                &format!("built-in:souls/{id}.toml"),
                id,
                src,
                PromptSource::BuiltIn,
                &paths.home,
                None,
                SoulOrigin::BuiltIn,
            )?;
            set.souls.insert((*id).to_owned(), Arc::new(soul));
        }
        let dir = paths.souls_dir();
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(set),
            Err(source) => return Err(ConfigError::Read { path: dir, source }),
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        files.sort();
        for path in files {
            match load_file(&path, &paths.home, Some(policy)) {
                Ok(soul) => {
                    set.souls.insert(soul.id.to_string(), Arc::new(soul));
                }
                Err(ConfigError::File(e)) => set.errors.push(e),
                Err(e) => set.errors.push(FileError::whole_file(
                    path.display().to_string(),
                    e.to_string(),
                )),
            }
        }
        Ok(set)
    }

    /// One soul by id, with the known ids in the error. A user file of that id that
    /// failed to load is that error, not the built-in of the same id in its place: the
    /// user meant their file.
    pub fn get(&self, id: &str) -> Result<&Arc<Soul>, ConfigError> {
        if let Some(soul) = self.souls.get(id)
            && soul.origin == SoulOrigin::BuiltIn
            && let Some(err) = self.file_error(id)
        {
            return Err(ConfigError::File(err.clone()));
        }
        self.souls.get(id).ok_or_else(|| {
            let mut msg = self.souls.keys().cloned().collect::<Vec<_>>().join(", ");
            if let Some(err) = self.file_error(id) {
                msg.push_str(&format!("; {err}"));
            }
            ConfigError::UnknownSoul {
                id: id.to_owned(),
                known: msg,
            }
        })
    }
}

impl SoulSet {
    /// The load error of the user's soul file `ID.toml`, if it failed.
    fn file_error(&self, id: &str) -> Option<&FileError> {
        let name = format!("/{id}.toml");
        self.errors.iter().find(|e| e.file.ends_with(&name))
    }
}

/// Loads and validates one soul file (what `familiar souls validate FILE` runs).
pub fn load_file(path: &Path, home: &Path, policy: Option<&Policy>) -> Result<Soul, ConfigError> {
    let src = crate::error::read_file(path)?;
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .ok_or_else(|| ConfigError::Invalid(format!("{}: not a soul file name", path.display())))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    Ok(parse(
        &path.display().to_string(),
        stem,
        &src,
        PromptSource::Dir(dir),
        home,
        policy,
        SoulOrigin::File(path.to_owned()),
    )?)
}

/// The errors of a soul whose `provider` or `mcp:NAME` names nothing in config.toml,
/// each at its file, line and key (`src` is the soul file's text). Not part of
/// [`parse`]: a soul file is valid on its own, and config.toml may change after it
/// (the daemon reloads both); `souls validate` and `doctor` check the pair.
pub fn config_errors(
    soul: &Soul,
    file: &str,
    src: Option<&str>,
    config: &crate::config::Config,
) -> Vec<FileError> {
    let configured = |names: Vec<&String>| {
        if names.is_empty() {
            "none".to_owned()
        } else {
            names
                .into_iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let mut errors = Vec::new();
    if let Some(provider) = &soul.provider
        && config.provider(Some(provider)).is_err()
    {
        errors.push(FileError::at_key(
            file,
            src,
            "provider",
            format!(
                "unknown provider `{provider}`: config.toml has no [providers.{provider}] (configured: {})",
                configured(config.providers.keys().collect())
            ),
        ));
    }
    let servers: std::collections::BTreeSet<&str> = soul
        .grant
        .tools
        .iter()
        .filter_map(|e| crate::catalog::mcp_entry(e).map(|(server, _)| server))
        .collect();
    for server in servers {
        if !config.mcp.contains_key(server) {
            errors.push(FileError::at_key(
                file,
                src,
                "tools",
                format!(
                    "`mcp:{server}`: config.toml has no [mcp.{server}] (configured: {}), so its tools would never be offered",
                    configured(config.mcp.keys().collect())
                ),
            ));
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use familiar_protocol::tier::Mode;

    use super::*;
    use crate::soul::tests::policy;

    #[test]
    fn user_soul_files_replace_builtins_and_bad_ones_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let souls = dir.path().join("souls");
        std::fs::create_dir_all(souls.join("prompts")).unwrap();
        std::fs::write(souls.join("prompts/mine.md"), "You are mine.").unwrap();
        std::fs::write(
            souls.join("safe_assistant.toml"),
            "prompt_file = \"prompts/mine.md\"\nmax_iterations = 3\n",
        )
        .unwrap();
        std::fs::write(souls.join("broken.toml"), "prompt = 5\n").unwrap();
        let paths = Paths {
            config_dir: dir.path().to_owned(),
            data_dir: dir.path().join("data"),
            home: "/home/user".into(),
        };
        let set = SoulSet::load(&paths, &policy(Mode::Ask, Mode::Ask)).unwrap();
        let soul = set.get("safe_assistant").unwrap();
        assert_eq!(soul.max_iterations, 3);
        assert_eq!(soul.prompt, "You are mine.");
        assert_eq!(
            soul.origin,
            SoulOrigin::File(souls.join("safe_assistant.toml"))
        );
        assert_eq!(set.souls.len(), BUILTIN_SOULS.len());
        assert_eq!(set.errors.len(), 1);
        assert!(
            set.errors[0]
                .to_string()
                .contains("broken.toml:1: key `prompt`")
        );
        let err = set.get("broken").unwrap_err().to_string();
        assert!(
            err.contains("unknown soul `broken`") && err.contains("broken.toml:1"),
            "{err}"
        );
    }
}
