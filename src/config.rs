//! The daemon config (`config.toml`) and XDG path resolution.
//!
//! Raw ([`ConfigToml`], exactly the file, every key optional, unknown keys rejected)
//! and effective ([`Config`], every default filled in, paths resolved) are different
//! types. Environment lookups go through [`Env`] so resolution is testable without
//! touching the process environment.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{ConfigError, FileError, parse_toml, read_file};
use crate::ids::SoulId;

pub const DEFAULT_SOUL: &str = "safe_assistant";
pub const DEFAULT_PROVIDER: &str = "local";
pub const DEFAULT_POLICY: &str = "default";
pub const DEFAULT_MAX_CONCURRENT_TASKS: u32 = 4;
pub const DEFAULT_QUEUE_LIMIT: u32 = 64;
pub const DEFAULT_LOCAL_BASE_URL: &str = "http://127.0.0.1:11434/v1";
pub const DEFAULT_LOCAL_MODEL: &str = "qwen2.5:7b-instruct";
pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
pub const DEFAULT_OPENAI_MODEL: &str = "gpt-4.1-mini";
pub const DEFAULT_ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
pub const DEFAULT_ANTHROPIC_MODEL: &str = "claude-sonnet-4-5";
pub const DEFAULT_CONTEXT_WINDOW: u32 = 32_768;
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(30);
pub const DEFAULT_MAX_RETRIES: u32 = 4;
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 4096;
/// Long-term memory entries per scope (one soul, or every soul).
pub const DEFAULT_MEMORY_MAX_PER_SCOPE: usize = 100;

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

/// `config.toml` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigToml {
    pub default_soul: Option<String>,
    pub default_provider: Option<String>,
    pub policy: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub daemon: Option<DaemonToml>,
    pub memory: Option<MemoryToml>,
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderToml>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryToml {
    pub max_entries_per_scope: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonToml {
    pub max_concurrent_tasks: Option<u32>,
    pub queue_limit: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderToml {
    pub kind: Option<ProviderKind>,
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key_env: Option<String>,
    pub api_key_file: Option<String>,
    pub context_window: Option<u32>,
    pub fallback_model: Option<String>,
    /// Another `[providers.NAME]` to switch to after repeated overload or a stall.
    pub fallback_provider: Option<String>,
    pub stall_timeout: Option<String>,
    pub max_retries: Option<u32>,
    pub max_output_tokens: Option<u32>,
    pub temperature: Option<f32>,
}

/// Which wire protocol a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// Chat completions with SSE (Ollama, llama.cpp, vLLM, LM Studio, OpenRouter, OpenAI).
    Openai,
    /// The Messages API with SSE.
    Anthropic,
}

/// Where a provider's API key comes from. The key itself is read only when a request
/// is made and never stored in a type that is logged or serialised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApiKeySource {
    None,
    /// An environment variable's name.
    Env(String),
    /// A file name in `$CREDENTIALS_DIRECTORY` (systemd `LoadCredential=`).
    CredentialFile(String),
}

/// One effective provider.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProviderConfig {
    pub name: String,
    pub kind: ProviderKind,
    pub base_url: String,
    pub model: String,
    pub api_key: ApiKeySource,
    pub context_window: u32,
    pub fallback_model: Option<String>,
    pub fallback_provider: Option<String>,
    #[serde(with = "humantime_serde_compat")]
    pub stall_timeout: Duration,
    pub max_retries: u32,
    pub max_output_tokens: u32,
    pub temperature: Option<f32>,
}

/// Daemon limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DaemonConfig {
    pub max_concurrent_tasks: u32,
    pub queue_limit: u32,
}

/// Long-term memory limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryConfig {
    /// Entries per scope (one soul, or every soul) in `memory.json`.
    pub max_entries_per_scope: usize,
}

/// The effective config.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    pub default_soul: SoulId,
    pub default_provider: String,
    pub policy: String,
    pub daemon: DaemonConfig,
    pub memory: MemoryConfig,
    pub providers: BTreeMap<String, ProviderConfig>,
    pub paths: Paths,
    /// The file this came from, if any.
    pub source: Option<PathBuf>,
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
fn home_dir(env: &dyn Env) -> PathBuf {
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

impl Config {
    /// Reads and resolves the config.
    pub fn load(explicit: Option<&Path>, env: &dyn Env) -> Result<Config, ConfigError> {
        let (raw, source) = match config_source(explicit, env) {
            ConfigSource::Explicit(path) => {
                let src = read_file(&path)?;
                (parse_toml(&path.display().to_string(), &src)?, Some(path))
            }
            ConfigSource::Default(path) => match std::fs::read_to_string(&path) {
                Ok(src) => (parse_toml(&path.display().to_string(), &src)?, Some(path)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => (ConfigToml::default(), None),
                Err(source) => return Err(ConfigError::Read { path, source }),
            },
        };
        Config::resolve(raw, source, env)
    }

    /// Parses a config from a string (for `validate`-style checks and tests).
    pub fn from_toml(file: &str, src: &str, env: &dyn Env) -> Result<Config, ConfigError> {
        let raw: ConfigToml = parse_toml(file, src)?;
        Config::resolve(raw, Some(PathBuf::from(file)), env)
    }

    fn resolve(
        raw: ConfigToml,
        source: Option<PathBuf>,
        env: &dyn Env,
    ) -> Result<Config, ConfigError> {
        let file = source
            .as_ref()
            .map_or_else(|| "config".to_owned(), |p| p.display().to_string());
        let invalid = |key: &str, message: String| {
            ConfigError::File(FileError {
                file: file.clone(),
                line: None,
                key: Some(key.to_owned()),
                message,
            })
        };

        let home = home_dir(env);
        let data_dir = match raw.data_dir {
            Some(p) => expand_home(&p, &home),
            None => default_data_dir(env),
        };
        if !data_dir.is_absolute() {
            return Err(invalid(
                "data_dir",
                format!(
                    "`{}` must be an absolute path (or start with ~/)",
                    data_dir.display()
                ),
            ));
        }
        let paths = Paths {
            config_dir: config_dir(env),
            data_dir,
            home,
        };

        let default_soul = raw.default_soul.unwrap_or_else(|| DEFAULT_SOUL.to_owned());
        let default_soul =
            SoulId::new(default_soul).map_err(|e| invalid("default_soul", e.to_string()))?;

        let daemon_raw = raw.daemon.unwrap_or_default();
        let daemon = DaemonConfig {
            max_concurrent_tasks: daemon_raw
                .max_concurrent_tasks
                .unwrap_or(DEFAULT_MAX_CONCURRENT_TASKS),
            queue_limit: daemon_raw.queue_limit.unwrap_or(DEFAULT_QUEUE_LIMIT),
        };
        if daemon.max_concurrent_tasks == 0 {
            return Err(invalid(
                "daemon.max_concurrent_tasks",
                "must be at least 1".to_owned(),
            ));
        }

        let memory = MemoryConfig {
            max_entries_per_scope: raw
                .memory
                .unwrap_or_default()
                .max_entries_per_scope
                .unwrap_or(DEFAULT_MEMORY_MAX_PER_SCOPE),
        };
        if memory.max_entries_per_scope == 0 {
            return Err(invalid(
                "memory.max_entries_per_scope",
                "must be at least 1".to_owned(),
            ));
        }

        let mut providers = BTreeMap::new();
        for (name, p) in raw.providers {
            let key = |k: &str| format!("providers.{name}.{k}");
            let resolved = resolve_provider(&name, p).map_err(|(k, m)| invalid(&key(k), m))?;
            providers.insert(name, resolved);
        }
        let default_provider = raw
            .default_provider
            .unwrap_or_else(|| DEFAULT_PROVIDER.to_owned());
        if providers.is_empty() && default_provider == DEFAULT_PROVIDER {
            // No providers configured: pick one from the environment (docs/config.md).
            let auto = auto_provider(&default_provider, env);
            providers.insert(default_provider.clone(), auto);
        }
        if !providers.contains_key(&default_provider) {
            return Err(invalid(
                "default_provider",
                format!(
                    "no [providers.{default_provider}] table (configured: {})",
                    providers.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        for p in providers.values() {
            if let Some(fb) = &p.fallback_provider
                && !providers.contains_key(fb)
            {
                return Err(invalid(
                    &format!("providers.{}.fallback_provider", p.name),
                    format!("no [providers.{fb}] table"),
                ));
            }
        }

        Ok(Config {
            default_soul,
            default_provider,
            policy: raw.policy.unwrap_or_else(|| DEFAULT_POLICY.to_owned()),
            daemon,
            memory,
            providers,
            paths,
            source,
        })
    }

    /// The provider a soul names, or the default one.
    pub fn provider(&self, name: Option<&str>) -> Result<&ProviderConfig, ConfigError> {
        let name = name.unwrap_or(&self.default_provider);
        self.providers.get(name).ok_or_else(|| {
            ConfigError::Invalid(format!(
                "unknown provider `{name}` (configured: {})",
                self.providers
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
    }
}

fn resolve_provider(name: &str, p: ProviderToml) -> Result<ProviderConfig, (&'static str, String)> {
    let kind = p.kind.unwrap_or(ProviderKind::Openai);
    let base_url = p.base_url.unwrap_or_else(|| {
        match kind {
            ProviderKind::Openai => DEFAULT_LOCAL_BASE_URL,
            ProviderKind::Anthropic => DEFAULT_ANTHROPIC_BASE_URL,
        }
        .to_owned()
    });
    if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
        return Err((
            "base_url",
            format!("`{base_url}` must start with http:// or https://"),
        ));
    }
    let model = p.model.unwrap_or_else(|| {
        match kind {
            ProviderKind::Openai => DEFAULT_LOCAL_MODEL,
            ProviderKind::Anthropic => DEFAULT_ANTHROPIC_MODEL,
        }
        .to_owned()
    });
    let api_key = match (p.api_key_env, p.api_key_file) {
        (Some(_), Some(_)) => {
            return Err((
                "api_key_file",
                "set either api_key_env or api_key_file, not both".to_owned(),
            ));
        }
        (Some(var), None) => ApiKeySource::Env(var),
        (None, Some(file)) => {
            if file.contains('/') || file.starts_with('.') {
                return Err((
                    "api_key_file",
                    format!("`{file}` must be a plain file name in $CREDENTIALS_DIRECTORY"),
                ));
            }
            ApiKeySource::CredentialFile(file)
        }
        (None, None) => ApiKeySource::None,
    };
    let stall_timeout = match p.stall_timeout {
        Some(s) => parse_duration(&s).map_err(|m| ("stall_timeout", m))?,
        None => DEFAULT_STALL_TIMEOUT,
    };
    if let Some(t) = p.temperature
        && !(0.0..=2.0).contains(&t)
    {
        return Err(("temperature", format!("{t} is outside 0.0..=2.0")));
    }
    Ok(ProviderConfig {
        name: name.to_owned(),
        kind,
        base_url: base_url.trim_end_matches('/').to_owned(),
        model,
        api_key,
        context_window: p.context_window.unwrap_or(DEFAULT_CONTEXT_WINDOW),
        fallback_model: p.fallback_model,
        fallback_provider: p.fallback_provider,
        stall_timeout,
        max_retries: p.max_retries.unwrap_or(DEFAULT_MAX_RETRIES),
        max_output_tokens: p.max_output_tokens.unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS),
        temperature: p.temperature,
    })
}

/// With no providers configured: `ANTHROPIC_API_KEY` → Anthropic, `OPENAI_API_KEY` →
/// OpenAI, otherwise a local OpenAI-compatible server (Ollama's default port).
fn auto_provider(name: &str, env: &dyn Env) -> ProviderConfig {
    let has = |v: &str| env.var(v).is_some_and(|s| !s.is_empty());
    let (kind, base_url, model, api_key, context_window) = if has("ANTHROPIC_API_KEY") {
        (
            ProviderKind::Anthropic,
            DEFAULT_ANTHROPIC_BASE_URL,
            DEFAULT_ANTHROPIC_MODEL,
            ApiKeySource::Env("ANTHROPIC_API_KEY".to_owned()),
            200_000,
        )
    } else if has("OPENAI_API_KEY") {
        (
            ProviderKind::Openai,
            DEFAULT_OPENAI_BASE_URL,
            DEFAULT_OPENAI_MODEL,
            ApiKeySource::Env("OPENAI_API_KEY".to_owned()),
            128_000,
        )
    } else {
        (
            ProviderKind::Openai,
            DEFAULT_LOCAL_BASE_URL,
            DEFAULT_LOCAL_MODEL,
            ApiKeySource::None,
            DEFAULT_CONTEXT_WINDOW,
        )
    };
    ProviderConfig {
        name: name.to_owned(),
        kind,
        base_url: base_url.to_owned(),
        model: model.to_owned(),
        api_key,
        context_window,
        fallback_model: None,
        fallback_provider: None,
        stall_timeout: DEFAULT_STALL_TIMEOUT,
        max_retries: DEFAULT_MAX_RETRIES,
        max_output_tokens: DEFAULT_MAX_OUTPUT_TOKENS,
        temperature: None,
    }
}

/// `"30s"`, `"10m"`, `"1h 30m"` (humantime syntax).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("invalid duration `{s}`: {e} (examples: \"30s\", \"10m\", \"1h\")"))
}

/// `~` and `~/x` become the home directory; other paths are returned as they are.
pub fn expand_home(path: &Path, home: &Path) -> PathBuf {
    match path.strip_prefix("~") {
        Ok(rest) if rest.as_os_str().is_empty() => home.to_owned(),
        Ok(rest) => home.join(rest),
        Err(_) => path.to_owned(),
    }
}

/// Serialises a `Duration` as humantime text (`"30s"`) in JSON output.
mod humantime_serde_compat {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(*d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn empty_config_uses_every_default() {
        let e = env(&[("HOME", "/home/u")]);
        let c = Config::from_toml("c.toml", "", &e).unwrap();
        assert_eq!(c.default_soul.as_str(), DEFAULT_SOUL);
        assert_eq!(c.policy, "default");
        assert_eq!(c.daemon.max_concurrent_tasks, 4);
        assert_eq!(c.daemon.queue_limit, 64);
        assert_eq!(
            c.paths.config_dir,
            PathBuf::from("/home/u/.config/familiar")
        );
        assert_eq!(
            c.paths.data_dir,
            PathBuf::from("/home/u/.local/state/familiar")
        );
        let p = &c.providers["local"];
        assert_eq!(p.kind, ProviderKind::Openai);
        assert_eq!(p.base_url, DEFAULT_LOCAL_BASE_URL);
        assert_eq!(p.api_key, ApiKeySource::None);
    }

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

    #[test]
    fn api_keys_pick_the_provider_when_nothing_is_configured() {
        let c = Config::from_toml("c", "", &env(&[("ANTHROPIC_API_KEY", "k")])).unwrap();
        assert_eq!(c.providers["local"].kind, ProviderKind::Anthropic);
        let c = Config::from_toml("c", "", &env(&[("OPENAI_API_KEY", "k")])).unwrap();
        assert_eq!(c.providers["local"].base_url, DEFAULT_OPENAI_BASE_URL);
    }

    #[test]
    fn full_config_resolves() {
        let src = r#"
default_soul = "system_admin"
default_provider = "claude"
policy = "strict"
data_dir = "~/familiar-data"

[daemon]
max_concurrent_tasks = 2
queue_limit = 8

[providers.claude]
kind = "anthropic"
model = "claude-x"
api_key_file = "anthropic"
stall_timeout = "45s"
fallback_provider = "local"

[providers.local]
base_url = "http://127.0.0.1:8080/v1/"
"#;
        let c = Config::from_toml("c.toml", src, &env(&[("HOME", "/h")])).unwrap();
        assert_eq!(c.paths.data_dir, PathBuf::from("/h/familiar-data"));
        let claude = &c.providers["claude"];
        assert_eq!(
            claude.api_key,
            ApiKeySource::CredentialFile("anthropic".into())
        );
        assert_eq!(claude.stall_timeout, Duration::from_secs(45));
        assert_eq!(claude.base_url, DEFAULT_ANTHROPIC_BASE_URL);
        assert_eq!(c.providers["local"].base_url, "http://127.0.0.1:8080/v1");
    }

    #[test]
    fn bad_configs_name_the_key() {
        let e = env(&[("HOME", "/h")]);
        let cases = [
            (
                "polcy = \"x\"\n",
                "c.toml:1: key `polcy`: unknown field `polcy`",
            ),
            (
                "[daemon]\nqueue_limit = -1\n",
                "c.toml:2: key `daemon.queue_limit`:",
            ),
            (
                "[providers.x]\nkind = \"gemini\"\n",
                "c.toml:2: key `providers.x.kind`: unknown variant `gemini`, expected `openai` or `anthropic`",
            ),
            (
                "default_provider = \"nope\"\n",
                "c.toml: key `default_provider`: no [providers.nope] table",
            ),
            (
                "[providers.x]\nstall_timeout = \"soon\"\n",
                "key `providers.x.stall_timeout`: invalid duration `soon`",
            ),
            (
                "[providers.x]\nbase_url = \"localhost:1\"\n",
                "key `providers.x.base_url`: `localhost:1` must start with http:// or https://",
            ),
        ];
        for (src, want) in cases {
            let err = Config::from_toml("c.toml", src, &e)
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{src:?}\n got: {err}\nwant: {want}");
        }
    }
}
