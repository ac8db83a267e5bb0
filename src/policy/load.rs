//! Loading a policy by name: the user's `policies/NAME.toml`, else the compiled-in
//! policy of that name; every policy file inherits the keys it leaves out from the
//! built-in `default`. familiar's own files are added to every policy's protected paths.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use super::Policy;
use super::file::{PolicyToml, Source};
use super::paths::lexical_normalize;
use crate::config::Paths;
use crate::error::{ConfigError, FileError, parse_toml};

const BUILTINS: &[(&str, &str)] = &[
    ("default", include_str!("../../policies/default.toml")),
    ("strict", include_str!("../../policies/strict.toml")),
];

/// The names of the compiled-in policies.
pub fn builtin_names() -> &'static [&'static str] {
    &["default", "strict"]
}

/// The text of a compiled-in policy.
pub fn builtin_source(name: &str) -> Option<&'static str> {
    BUILTINS.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

fn builtin_label(name: &str) -> String {
    format!("built-in:policies/{name}.toml")
}

impl Policy {
    /// Parses and validates a policy file. The policy is named after the file's stem;
    /// keys the file leaves out keep the built-in `default` policy's values.
    pub fn from_toml(file_label: &str, src: &str, home: &Path) -> Result<Policy, FileError> {
        let base = builtin_default(home)?;
        let name = Path::new(file_label).file_stem().map_or_else(
            || file_label.to_owned(),
            |s| s.to_string_lossy().into_owned(),
        );
        let raw: PolicyToml = parse_toml(file_label, src)?;
        Source {
            file: file_label,
            src,
            home,
            builtin: BUILTINS.iter().any(|(_, text)| *text == src),
        }
        .resolve(&name, raw, Some(&base))
    }
}

/// The built-in `default` policy for `home`, the base every policy file inherits
/// from. Made once per home directory and kept, with its patterns: a policy that repeats
/// one shares its regex, compiled once (a reload, `familiar policy check` and the fuzzers
/// parse many policies).
fn builtin_default(home: &Path) -> Result<Policy, FileError> {
    static CACHE: Mutex<Option<(PathBuf, Policy)>> = Mutex::new(None);
    let mut cache = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((h, policy)) = cache.as_ref()
        && h == home
    {
        return Ok(policy.clone());
    }
    let label = builtin_label("default");
    let src = builtin_source("default").unwrap_or_default();
    let raw: PolicyToml = parse_toml(&label, src)?;
    let policy = Source {
        file: &label,
        src,
        home,
        builtin: true,
    }
    .resolve("default", raw, None)?;
    *cache = Some((home.to_owned(), policy.clone()));
    Ok(policy)
}

/// Loads the policy `name`: `<config_dir>/policies/NAME.toml` if it exists, else the
/// built-in of that name. familiar's own config directory and its audit log, contexts,
/// transcripts and long-term memory are added to the protected paths whatever the file says: a tool
/// must never rewrite the rules it runs under or the record of what it did.
pub fn load(name: &str, paths: &Paths) -> Result<Policy, ConfigError> {
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    let user_file = paths.policies_dir().join(format!("{name}.toml"));
    let mut policy = if plain && user_file.is_file() {
        let src = crate::error::read_file(&user_file)?;
        Policy::from_toml(&user_file.display().to_string(), &src, &paths.home)?
    } else if let Some(src) = builtin_source(name) {
        Policy::from_toml(&builtin_label(name), src, &paths.home)?
    } else {
        return Err(ConfigError::UnknownPolicy {
            name: name.to_owned(),
            known: known_names(paths).join(", "),
            dir: paths.policies_dir().display().to_string(),
        });
    };
    policy.name = name.to_owned();
    let own = [
        paths.config_dir.clone(),
        paths.data_dir.join("audit.jsonl"),
        paths.data_dir.join("context"),
        paths.data_dir.join("transcripts"),
        // Long-term memory goes into system prompts: a tool writing it could plant
        // instructions the user never approved. Its lock, temp files and corrupt
        // copies live under context/.
        paths.data_dir.join("memory.json"),
    ];
    for p in own {
        let p = lexical_normalize(&p);
        if !policy.protected_paths.contains(&p) {
            policy.protected_paths.push(p);
        }
    }
    Ok(policy)
}

/// Built-in names and the user's policy files, sorted, for error messages.
fn known_names(paths: &Paths) -> Vec<String> {
    let mut names: Vec<String> = builtin_names().iter().map(|s| (*s).to_owned()).collect();
    if let Ok(entries) = std::fs::read_dir(paths.policies_dir()) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "toml")
                && let Some(stem) = path.file_stem()
            {
                names.push(stem.to_string_lossy().into_owned());
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use familiar_protocol::tier::Mode;

    use super::*;
    use crate::config::expand_home;
    use crate::policy::tests::{HOME, parse};

    fn builtin(name: &str) -> Policy {
        Policy::from_toml(
            &builtin_label(name),
            builtin_source(name).unwrap(),
            Path::new(HOME),
        )
        .unwrap()
    }

    #[test]
    fn builtin_default_parses() {
        insta::assert_debug_snapshot!("builtin_default", builtin("default"));
    }

    #[test]
    fn builtin_strict_parses() {
        insta::assert_debug_snapshot!("builtin_strict", builtin("strict"));
    }

    #[test]
    fn every_builtin_name_has_a_source() {
        for name in builtin_names() {
            assert!(builtin_source(name).is_some(), "{name}");
        }
        assert_eq!(builtin_names().len(), BUILTINS.len());
    }

    #[test]
    fn strict_keeps_every_protection_of_default() {
        let d = parse(builtin_source("default").unwrap()).unwrap();
        let s = parse(builtin_source("strict").unwrap()).unwrap();
        assert_eq!(s.protected_paths, d.protected_paths);
        assert_eq!(s.blocked, d.blocked);
        assert!(d.ask.iter().all(|r| s.ask.contains(r)));
        assert!(s.ask.len() > d.ask.len());
        for tier in familiar_protocol::tier::Tier::ALL {
            assert!(s.tiers.get(tier) >= d.tiers.get(tier), "{tier}");
        }
    }

    #[test]
    fn shipped_protected_paths_cover_the_secrets() {
        let d = parse(builtin_source("default").unwrap()).unwrap();
        for must in [
            "~/.ssh",
            "~/.gnupg",
            "~/.password-store",
            "~/.local/share/keyrings",
            "~/.pki",
            "~/.mozilla",
            "~/.librewolf",
            "~/.config/google-chrome",
            "~/.config/chromium",
            "~/.config/BraveSoftware",
            "~/.config/vivaldi",
            "~/.aws",
            "~/.kube/config",
            "~/.docker/config.json",
            "~/.netrc",
            "~/.git-credentials",
            "~/.config/gh/hosts.yml",
            "~/.config/familiar",
            "/etc/shadow",
            "/etc/gshadow",
            "/etc/sudoers",
            "/etc/sudoers.d",
        ] {
            let p = expand_home(Path::new(must), Path::new(HOME));
            assert!(d.protected_paths.contains(&p), "{must} missing");
        }
    }

    #[test]
    fn unknown_policy_lists_the_known_ones() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths {
            config_dir: dir.path().join("cfg"),
            data_dir: dir.path().join("data"),
            home: PathBuf::from(HOME),
        };
        std::fs::create_dir_all(paths.policies_dir()).unwrap();
        std::fs::write(paths.policies_dir().join("mine.toml"), "").unwrap();
        let err = load("nope", &paths).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "unknown policy `nope` (known: default, mine, strict; a policy of your own goes in {}/nope.toml)",
                paths.policies_dir().display()
            )
        );
        assert!(load("../x", &paths).is_err());
    }

    #[test]
    fn user_file_overrides_the_builtin_and_own_files_stay_protected() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths {
            config_dir: dir.path().join("cfg"),
            data_dir: dir.path().join("data"),
            home: PathBuf::from(HOME),
        };
        std::fs::create_dir_all(paths.policies_dir()).unwrap();
        std::fs::write(
            paths.policies_dir().join("strict.toml"),
            "protected_paths = []\n[tiers]\nexecute = \"ask\"\n",
        )
        .unwrap();
        let p = load("strict", &paths).unwrap();
        assert_eq!(p.name, "strict");
        assert_eq!(p.tiers.execute, Mode::Ask);
        assert_eq!(
            p.protected_paths,
            vec![
                paths.config_dir.clone(),
                paths.data_dir.join("audit.jsonl"),
                paths.data_dir.join("context"),
                paths.data_dir.join("transcripts"),
                paths.data_dir.join("memory.json"),
            ]
        );
        let builtin = load("default", &paths).unwrap();
        assert_eq!(builtin.tiers.execute, Mode::Ask);
        assert!(builtin.protected_paths.contains(&paths.config_dir));
    }

    #[test]
    fn bad_user_file_names_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths {
            config_dir: dir.path().join("cfg"),
            data_dir: dir.path().join("data"),
            home: PathBuf::from(HOME),
        };
        std::fs::create_dir_all(paths.policies_dir()).unwrap();
        let file = paths.policies_dir().join("mine.toml");
        std::fs::write(&file, "[tiers]\nwrite = \"yes\"\n").unwrap();
        let err = load("mine", &paths).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("{}:2: key `tiers.write`:", file.display())),
            "{err}"
        );
    }

    /// The built-in policies' patterns are compiled at their first match, not checked at
    /// load: this is the check (see policy/pattern.rs).
    #[test]
    fn builtin_patterns_compile() {
        for name in builtin_names() {
            let p = builtin(name);
            for rule in p.blocked.iter().chain(&p.ask) {
                let source = rule.pattern.as_str();
                assert!(regex::Regex::new(source).is_ok(), "{name}: {source}");
            }
            assert!(!p.blocked.is_empty(), "{name}");
        }
    }
}
