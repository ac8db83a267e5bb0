//! The daemon config (`config.toml`): loading and resolving it.
//!
//! Raw ([`ConfigToml`], exactly the file, every key optional, unknown keys rejected)
//! and effective ([`Config`], every default filled in, paths resolved) are different
//! types ([`types`]). Where files live is [`paths`] (XDG and systemd directories,
//! through [`Env`] so resolution is testable without touching the process
//! environment); `[providers.*]` tables resolve in [`providers`]; [`parse`] holds the
//! small helpers (durations, `~`) that souls and policies use too. This module owns
//! the order: read, parse, resolve, check cross-references.

pub mod desktop;
pub mod mcp;
pub mod parse;
pub mod paths;
pub mod providers;
pub mod screen;
pub mod types;
pub mod versions;
pub mod warm;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use familiar_protocol::ids::SoulId;

use crate::error::{ConfigError, FileError, parse_toml, read_file};

pub use desktop::DesktopConfig;
pub use parse::{DurationError, expand_home, parse_bytes, parse_duration};
pub use paths::{
    ConfigSource, Env, Paths, ProcessEnv, config_dir, config_source, default_data_dir,
    ignored_state_directory,
};
pub use providers::{
    DEFAULT_ANTHROPIC_BASE_URL, DEFAULT_ANTHROPIC_MODEL, DEFAULT_CONTEXT_WINDOW,
    DEFAULT_HOSTED_FIRST_TOKEN_TIMEOUT, DEFAULT_LOCAL_BASE_URL, DEFAULT_LOCAL_FIRST_TOKEN_TIMEOUT,
    DEFAULT_LOCAL_MODEL, DEFAULT_MAX_OUTPUT_TOKENS, DEFAULT_MAX_RETRIES, DEFAULT_OLLAMA_BASE_URL,
    DEFAULT_OPENAI_BASE_URL, DEFAULT_OPENAI_MODEL, DEFAULT_STALL_TIMEOUT,
    default_first_token_timeout, is_local_url,
};
pub use types::{
    ApiKeySource, Config, ConfigToml, DaemonConfig, DaemonToml, MemoryConfig, MemoryToml,
    NotificationsConfig, NotificationsToml, ProviderConfig, ProviderKind, ProviderToml,
};

pub const DEFAULT_SOUL: &str = "safe_assistant";
pub const DEFAULT_PROVIDER: &str = "local";
pub const DEFAULT_POLICY: &str = "default";
pub const DEFAULT_MAX_CONCURRENT_TASKS: u32 = 4;
pub const DEFAULT_QUEUE_LIMIT: u32 = 64;
/// Long-term memory entries per scope (one soul, or every soul).
pub const DEFAULT_MEMORY_MAX_PER_SCOPE: usize = 100;
/// How long `ask --notify`'s result stays on screen (servers' own defaults differ:
/// mako's is never).
pub const DEFAULT_RESULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

impl Config {
    /// Reads and resolves the config.
    pub fn load(explicit: Option<&Path>, env: &dyn Env) -> Result<Config, ConfigError> {
        let (path, src) = match config_source(explicit, env) {
            ConfigSource::Explicit(path) => {
                let src = read_file(&path)?;
                (path, Some(src))
            }
            ConfigSource::Default(path) => match std::fs::read_to_string(&path) {
                Ok(src) => (path, Some(src)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => (path, None),
                Err(source) => return Err(ConfigError::Read { path, source }),
            },
        };
        match src {
            Some(src) => Config::from_toml(&path.display().to_string(), &src, env),
            None => Config::resolve(ConfigToml::default(), None, None, env),
        }
    }

    /// Parses a config from a string (for `validate`-style checks and tests).
    pub fn from_toml(file: &str, src: &str, env: &dyn Env) -> Result<Config, ConfigError> {
        let raw: ConfigToml = parse_toml(file, src)?;
        Config::resolve(raw, Some(PathBuf::from(file)), Some(src), env)
    }

    /// Fills in the defaults and checks values and cross-references; an error names the
    /// key and, when the file sets it, the line.
    fn resolve(
        raw: ConfigToml,
        source: Option<PathBuf>,
        src: Option<&str>,
        env: &dyn Env,
    ) -> Result<Config, ConfigError> {
        let file = source
            .as_ref()
            .map_or_else(|| "config".to_owned(), |p| p.display().to_string());
        let invalid = |(key, message): (String, String)| {
            ConfigError::File(FileError::at_key(&file, src, &key, message))
        };
        let data_dir_setting = raw.data_dir.clone();
        let paths = resolve_paths(raw.data_dir.as_deref(), env).map_err(invalid)?;
        let default_soul = raw.default_soul.unwrap_or_else(|| DEFAULT_SOUL.to_owned());
        let default_soul = SoulId::new(default_soul)
            .map_err(|e| invalid(("default_soul".to_owned(), e.to_string())))?;
        let daemon = resolve_daemon(raw.daemon.unwrap_or_default()).map_err(invalid)?;
        let memory = resolve_memory(raw.memory.unwrap_or_default()).map_err(invalid)?;
        let warm = warm::resolve(raw.warm.unwrap_or_default(), &default_soul).map_err(invalid)?;
        let notifications =
            resolve_notifications(raw.notifications.unwrap_or_default()).map_err(invalid)?;
        let desktop =
            desktop::resolve(raw.desktop.unwrap_or_default(), &paths.home).map_err(invalid)?;
        let versions = versions::resolve(raw.versions.unwrap_or_default()).map_err(invalid)?;
        let screen = screen::resolve(raw.screen.unwrap_or_default()).map_err(invalid)?;
        let default_provider = raw
            .default_provider
            .unwrap_or_else(|| DEFAULT_PROVIDER.to_owned());
        let providers =
            resolve_providers(raw.providers, &default_provider, env).map_err(invalid)?;
        let mut mcp = BTreeMap::new();
        for (name, m) in raw.mcp {
            let resolved = mcp::resolve_server(&name, m, &paths.home).map_err(|(k, msg)| {
                let key = if k.is_empty() {
                    format!("mcp.{name}")
                } else {
                    format!("mcp.{name}.{k}")
                };
                invalid((key, msg))
            })?;
            mcp.insert(name, resolved);
        }
        Ok(Config {
            default_soul,
            default_provider,
            policy: raw.policy.unwrap_or_else(|| DEFAULT_POLICY.to_owned()),
            daemon,
            memory,
            warm,
            notifications,
            desktop,
            versions,
            screen,
            providers,
            mcp,
            paths,
            source,
            data_dir_setting,
        })
    }

    /// The model a soul runs, from its own `model` and `provider` settings: its own model,
    /// else its provider's (the default provider when it names none).
    pub fn model_for<'a>(
        &'a self,
        provider: Option<&str>,
        model: Option<&'a str>,
    ) -> Result<&'a str, ConfigError> {
        match model {
            Some(m) => Ok(m),
            None => self.provider(provider).map(|p| p.model.as_str()),
        }
    }

    /// The provider a soul names, or the default one: a `[providers.NAME]` table, else
    /// a built-in name (`anthropic`, `openai`, `ollama`: [`providers::builtin_provider`]).
    pub fn provider(&self, name: Option<&str>) -> Result<&ProviderConfig, ConfigError> {
        let name = name.unwrap_or(&self.default_provider);
        self.providers
            .get(name)
            .or_else(|| providers::builtin_provider(name))
            .ok_or_else(|| {
                ConfigError::Invalid(format!(
                    "unknown provider `{name}` (configured: {}; built in: {}): add a [providers.{name}] table to config.toml (docs/providers.md)",
                    self.providers
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", "),
                    providers::BUILTIN_PROVIDERS.join(", ")
                ))
            })
    }
}

/// A value error: the dotted key and what is wrong with it.
type KeyError = (String, String);

fn resolve_paths(data_dir: Option<&Path>, env: &dyn Env) -> Result<Paths, KeyError> {
    let home = paths::home_dir(env);
    let data_dir = match data_dir {
        Some(p) => expand_home(p, &home),
        None => default_data_dir(env),
    };
    if !data_dir.is_absolute() {
        return Err((
            "data_dir".to_owned(),
            format!(
                "`{}` must be an absolute path (or start with ~/)",
                data_dir.display()
            ),
        ));
    }
    Ok(Paths {
        config_dir: config_dir(env),
        data_dir,
        home,
    })
}

fn resolve_daemon(raw: DaemonToml) -> Result<DaemonConfig, KeyError> {
    let daemon = DaemonConfig {
        max_concurrent_tasks: raw
            .max_concurrent_tasks
            .unwrap_or(DEFAULT_MAX_CONCURRENT_TASKS),
        queue_limit: raw.queue_limit.unwrap_or(DEFAULT_QUEUE_LIMIT),
    };
    if daemon.max_concurrent_tasks == 0 {
        return Err((
            "daemon.max_concurrent_tasks".to_owned(),
            "must be at least 1".to_owned(),
        ));
    }
    Ok(daemon)
}

fn resolve_memory(raw: MemoryToml) -> Result<MemoryConfig, KeyError> {
    let memory = MemoryConfig {
        max_entries_per_scope: raw
            .max_entries_per_scope
            .unwrap_or(DEFAULT_MEMORY_MAX_PER_SCOPE),
    };
    if memory.max_entries_per_scope == 0 {
        return Err((
            "memory.max_entries_per_scope".to_owned(),
            "must be at least 1".to_owned(),
        ));
    }
    Ok(memory)
}

fn resolve_notifications(raw: NotificationsToml) -> Result<NotificationsConfig, KeyError> {
    let result_timeout = match raw.result_timeout {
        None => DEFAULT_RESULT_TIMEOUT,
        Some(s) if s.trim() == "0" => std::time::Duration::ZERO,
        Some(s) => parse_duration(s.trim()).map_err(|e| {
            (
                "notifications.result_timeout".to_owned(),
                format!("{e} (e.g. \"30s\", \"2m\"; \"0\": until dismissed)"),
            )
        })?,
    };
    Ok(NotificationsConfig { result_timeout })
}

/// The `[providers.*]` tables resolved (or, when there are none and the default is
/// `local`, one picked from the environment: docs/config.md), with the default and
/// every fallback checked to name one of them.
fn resolve_providers(
    raw: BTreeMap<String, ProviderToml>,
    default_provider: &str,
    env: &dyn Env,
) -> Result<BTreeMap<String, ProviderConfig>, KeyError> {
    let mut providers = BTreeMap::new();
    for (name, p) in raw {
        let resolved = providers::resolve_provider(&name, p)
            .map_err(|(k, m)| (format!("providers.{name}.{k}"), m))?;
        providers.insert(name, resolved);
    }
    if providers.is_empty() && default_provider == DEFAULT_PROVIDER {
        let auto = providers::auto_provider(default_provider, env);
        providers.insert(default_provider.to_owned(), auto);
    }
    let known =
        |name: &str| providers.contains_key(name) || providers::builtin_provider(name).is_some();
    if !known(default_provider) {
        return Err((
            "default_provider".to_owned(),
            format!(
                "no [providers.{default_provider}] table (configured: {})",
                providers.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    for p in providers.values() {
        if let Some(fb) = &p.fallback_provider
            && !known(fb)
        {
            return Err((
                format!("providers.{}.fallback_provider", p.name),
                format!("no [providers.{fb}] table"),
            ));
        }
    }
    Ok(providers)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use super::*;

    pub(crate) fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
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
        assert_eq!(p.kind, ProviderKind::Ollama);
        assert_eq!(p.base_url, DEFAULT_OLLAMA_BASE_URL);
        assert_eq!(p.api_key, ApiKeySource::None);
        assert!(!p.context_window_configured, "read from /api/show");
        assert_eq!(p.first_token_timeout, DEFAULT_LOCAL_FIRST_TOKEN_TIMEOUT);
    }

    #[test]
    fn api_keys_pick_the_provider_when_nothing_is_configured() {
        let c = Config::from_toml("c", "", &env(&[("ANTHROPIC_API_KEY", "k")])).unwrap();
        assert_eq!(c.providers["local"].kind, ProviderKind::Anthropic);
        let c = Config::from_toml("c", "", &env(&[("OPENAI_API_KEY", "k")])).unwrap();
        assert_eq!(c.providers["local"].base_url, DEFAULT_OPENAI_BASE_URL);
    }

    /// Regression: `familiar run --provider anthropic` (a README example)
    /// failed with "unknown provider `anthropic`" with no config, key set or not.
    #[test]
    fn builtin_provider_names_work_without_a_table_and_a_table_replaces_them() {
        let c = Config::from_toml("c", "", &env(&[("HOME", "/h")])).unwrap();
        let anthropic = c.provider(Some("anthropic")).unwrap();
        assert_eq!(anthropic.kind, ProviderKind::Anthropic);
        assert_eq!(
            anthropic.api_key,
            ApiKeySource::Env("ANTHROPIC_API_KEY".into())
        );
        let openai = c.provider(Some("openai")).unwrap();
        assert_eq!(openai.base_url, DEFAULT_OPENAI_BASE_URL);
        assert_eq!(openai.api_key, ApiKeySource::Env("OPENAI_API_KEY".into()));
        let ollama = c.provider(Some("ollama")).unwrap();
        assert_eq!(ollama.kind, ProviderKind::Ollama);
        assert_eq!(ollama.base_url, providers::DEFAULT_OLLAMA_BASE_URL);
        assert_eq!(ollama.api_key, ApiKeySource::None);
        let err = c.provider(Some("gemini")).unwrap_err().to_string();
        assert!(
            err.contains("built in: anthropic, openai, ollama): add a [providers.gemini] table"),
            "{err}"
        );
        let src = "default_provider = \"ollama\"\n[providers.openai]\nbase_url = \"http://127.0.0.1:1/v1\"\n";
        let c = Config::from_toml("c", src, &env(&[("HOME", "/h")])).unwrap();
        assert_eq!(c.provider(None).unwrap().name, "ollama");
        assert_eq!(
            c.provider(Some("openai")).unwrap().base_url,
            "http://127.0.0.1:1/v1"
        );
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
    fn api_key_secret_names_the_item() {
        let src = "[providers.local]\napi_key_secret = \"openai\"\n";
        let c = Config::from_toml("c.toml", src, &env(&[("HOME", "/h")])).unwrap();
        assert_eq!(
            c.providers["local"].api_key,
            ApiKeySource::Secret("openai".into())
        );
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
                "c.toml:2: key `providers.x.kind`: unknown variant `gemini`, expected one of `openai`, `anthropic`, `ollama`",
            ),
            (
                "default_provider = \"nope\"\n",
                "c.toml:1: key `default_provider`: no [providers.nope] table",
            ),
            (
                "[providers.x]\nstall_timeout = \"soon\"\n",
                "key `providers.x.stall_timeout`: invalid duration `soon`",
            ),
            (
                "[providers.x]\nbase_url = \"localhost:1\"\n",
                "c.toml:2: key `providers.x.base_url`: `localhost:1` must start with http:// or https://",
            ),
            (
                "[providers.x]\nmodel = \"m\"\ntemperature = 3.0\n",
                "c.toml:3: key `providers.x.temperature`: 3 is outside 0.0..=2.0",
            ),
            (
                "[providers.x]\nkind = \"vllm\"\n",
                "c.toml:2: key `providers.x.kind`: unknown variant `vllm`: `kind` is the protocol, and vllm speaks OpenAI's: use kind = \"openai\"",
            ),
            (
                "\n\ndefault_soul = \"Bad Soul\"\n",
                "c.toml:3: key `default_soul`:",
            ),
            (
                "data_dir = \"rel/dir\"\n",
                "c.toml:1: key `data_dir`: `rel/dir` must be an absolute path",
            ),
            (
                "[providers.x]\napi_key_env = \"K\"\napi_key_secret = \"x\"\n",
                "c.toml:3: key `providers.x.api_key_secret`: set only one of api_key_env, api_key_file and api_key_secret (this table sets api_key_env and api_key_secret)",
            ),
            (
                "[providers.x]\napi_key_file = \"k\"\napi_key_env = \"K\"\n",
                "c.toml:2: key `providers.x.api_key_file`: set only one of",
            ),
            (
                "[providers.x]\napi_key_secret = \" \"\n",
                "c.toml:2: key `providers.x.api_key_secret`: must name the item",
            ),
            (
                "[daemon]\nmax_concurrent_tasks = 0\n",
                "c.toml:2: key `daemon.max_concurrent_tasks`: must be at least 1",
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
