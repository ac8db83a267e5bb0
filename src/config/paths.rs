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
    /// `data_dir` from the config, else `$XDG_STATE_HOME/familiar` (see
    /// [`default_data_dir`] for when `$STATE_DIRECTORY` counts).
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
pub fn home_dir(env: &dyn Env) -> PathBuf {
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

/// `$XDG_STATE_HOME/familiar`, else `~/.local/state/familiar`: the same for the daemon
/// and for every command a person runs.
///
/// `$STATE_DIRECTORY` is not a different answer, only a systemd unit's name for this one:
/// systemd before 254 gives a user unit's `StateDirectory=` `$XDG_CONFIG_HOME` (the
/// config dir) instead of `$XDG_STATE_HOME`, and a daemon that took it wrote its sessions
/// where no shell looks for them. So a `$STATE_DIRECTORY` other than this dir is
/// ignored (with a warning: [`ignored_state_directory`]).
pub fn default_data_dir(env: &dyn Env) -> PathBuf {
    env.path("XDG_STATE_HOME")
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| home_dir(env).join(".local/state"))
        .join("familiar")
}

/// `$STATE_DIRECTORY` when systemd set one that is not [`default_data_dir`] (systemd
/// before 254 sets the config dir), for a warning; `None` when it agrees or is unset.
pub fn ignored_state_directory(env: &dyn Env) -> Option<PathBuf> {
    systemd_dir(env, "STATE_DIRECTORY").filter(|d| *d != default_data_dir(env))
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
    fn the_configuration_directory_comes_first() {
        let e = env(&[
            ("HOME", "/home/u"),
            ("XDG_CONFIG_HOME", "/x/config"),
            ("CONFIGURATION_DIRECTORY", "/etc/cfg/familiar"),
        ]);
        assert_eq!(config_dir(&e), PathBuf::from("/etc/cfg/familiar"));
    }

    /// Regression: systemd 252 gives a user unit's `StateDirectory=familiar`
    /// as `$XDG_CONFIG_HOME/familiar`; the daemon took it and its sessions, audit and
    /// memory split from the CLI's. The daemon's environment there, and on systemd 254+.
    #[test]
    fn the_daemon_and_the_cli_resolve_one_data_dir_on_every_systemd() {
        let cli = env(&[("HOME", "/home/u")]);
        let want = PathBuf::from("/home/u/.local/state/familiar");
        assert_eq!(default_data_dir(&cli), want);
        assert_eq!(ignored_state_directory(&cli), None);
        let systemd_252 = env(&[
            ("HOME", "/home/u"),
            ("STATE_DIRECTORY", "/home/u/.config/familiar"),
        ]);
        assert_eq!(default_data_dir(&systemd_252), want);
        assert_eq!(
            ignored_state_directory(&systemd_252),
            Some(PathBuf::from("/home/u/.config/familiar"))
        );
        let systemd_254 = env(&[
            ("HOME", "/home/u"),
            ("STATE_DIRECTORY", "/home/u/.local/state/familiar"),
        ]);
        assert_eq!(default_data_dir(&systemd_254), want);
        assert_eq!(ignored_state_directory(&systemd_254), None);
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
