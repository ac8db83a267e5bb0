//! Where familiar's files live: the environment ([`Env`]), the XDG and systemd
//! directories ([`Paths`]), and which config file to read.
//!
//! Invariant: every lookup goes through [`Env`], so resolution is testable without
//! touching the process environment.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// Where a value came from the environment. The process environment in production,
/// a map in tests.
pub trait Env {
    fn var(&self, name: &str) -> Option<OsString>;

    /// A non-empty variable as a path.
    fn path(&self, name: &str) -> Option<PathBuf> {
        self.var(name).filter(|v| !v.is_empty()).map(PathBuf::from)
    }
}

/// The real process environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<OsString> {
        std::env::var_os(name)
    }
}

impl Env for BTreeMap<String, String> {
    fn var(&self, name: &str) -> Option<OsString> {
        self.get(name).map(OsString::from)
    }
}

/// Resolved directories.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Paths {
    /// `$CONFIGURATION_DIRECTORY`, else `$XDG_CONFIG_HOME/familiar`.
    pub config_dir: PathBuf,
    /// `data_dir` from the config, else `$STATE_DIRECTORY`, else `$XDG_STATE_HOME/familiar`.
    pub data_dir: PathBuf,
    /// The user's home, for `~` in souls and policies.
    pub home: PathBuf,
}

impl Paths {
    pub fn souls_dir(&self) -> PathBuf {
        self.config_dir.join("souls")
    }

    pub fn policies_dir(&self) -> PathBuf {
        self.config_dir.join("policies")
    }
}

/// Which config file to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// `--config FILE` or `FAMILIAR_CONFIG`: must exist.
    Explicit(PathBuf),
    /// The default location: may be missing (then every default applies).
    Default(PathBuf),
}

/// The user's home directory: `$HOME`, else the passwd entry.
pub(super) fn home_dir(env: &dyn Env) -> PathBuf {
    env.path("HOME")
        .or_else(|| etcetera::home_dir().ok())
        .unwrap_or_else(|| PathBuf::from("/"))
}

/// systemd's `*_DIRECTORY` variables hold a colon-separated list; the first is ours.
fn systemd_dir(env: &dyn Env, name: &str) -> Option<PathBuf> {
    let v = env.var(name)?;
    let v = v.to_str()?;
    v.split(':').find(|s| !s.is_empty()).map(PathBuf::from)
}

/// `$CONFIGURATION_DIRECTORY`, else `$XDG_CONFIG_HOME/familiar`, else `~/.config/familiar`.
pub fn config_dir(env: &dyn Env) -> PathBuf {
    systemd_dir(env, "CONFIGURATION_DIRECTORY").unwrap_or_else(|| {
        env.path("XDG_CONFIG_HOME")
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| home_dir(env).join(".config"))
            .join("familiar")
    })
}

/// `$STATE_DIRECTORY`, else `$XDG_STATE_HOME/familiar`, else `~/.local/state/familiar`.
pub fn default_data_dir(env: &dyn Env) -> PathBuf {
    systemd_dir(env, "STATE_DIRECTORY").unwrap_or_else(|| {
        env.path("XDG_STATE_HOME")
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| home_dir(env).join(".local/state"))
            .join("familiar")
    })
}

/// `--config` beats `FAMILIAR_CONFIG` beats the default location.
pub fn config_source(explicit: Option<&Path>, env: &dyn Env) -> ConfigSource {
    if let Some(p) = explicit {
        return ConfigSource::Explicit(p.to_owned());
    }
    if let Some(p) = env.path("FAMILIAR_CONFIG") {
        return ConfigSource::Explicit(p);
    }
    ConfigSource::Default(config_dir(env).join("config.toml"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::env;

    #[test]
    fn systemd_directories_come_first() {
        let e = env(&[
            ("HOME", "/home/u"),
            ("XDG_STATE_HOME", "/x/state"),
            ("XDG_CONFIG_HOME", "/x/config"),
            ("STATE_DIRECTORY", "/run/state/familiar:/other"),
            ("CONFIGURATION_DIRECTORY", "/etc/cfg/familiar"),
        ]);
        assert_eq!(default_data_dir(&e), PathBuf::from("/run/state/familiar"));
        assert_eq!(config_dir(&e), PathBuf::from("/etc/cfg/familiar"));
        let e = env(&[("HOME", "/home/u"), ("XDG_STATE_HOME", "/x/state")]);
        assert_eq!(default_data_dir(&e), PathBuf::from("/x/state/familiar"));
    }

    #[test]
    fn explicit_config_beats_the_environment() {
        let e = env(&[("FAMILIAR_CONFIG", "/a.toml"), ("HOME", "/h")]);
        assert_eq!(
            config_source(Some(Path::new("/b.toml")), &e),
            ConfigSource::Explicit("/b.toml".into())
        );
        assert_eq!(
            config_source(None, &e),
            ConfigSource::Explicit("/a.toml".into())
        );
        let e = env(&[("HOME", "/h")]);
        assert_eq!(
            config_source(None, &e),
            ConfigSource::Default("/h/.config/familiar/config.toml".into())
        );
    }
}
