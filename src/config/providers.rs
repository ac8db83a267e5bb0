//! Provider resolution: a `[providers.NAME]` table becomes a [`ProviderConfig`] with
//! every default filled in, and with no table at all the environment picks one.
//!
//! Invariant: a resolved provider has an http(s) base URL without a trailing slash,
//! at most one key source (environment, credential file or Secret Service), and a
//! temperature within 0.0..=2.0.

use std::time::Duration;

use super::parse::parse_duration;
use super::paths::Env;
use super::types::{ApiKeySource, ProviderConfig, ProviderKind, ProviderToml};

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

/// A key of a provider table and what is wrong with its value.
pub(super) type KeyError = (&'static str, String);

/// One `[providers.NAME]` table, resolved; an error names the key within the table.
pub(super) fn resolve_provider(name: &str, p: ProviderToml) -> Result<ProviderConfig, KeyError> {
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
    let api_key = api_key_source(p.api_key_env, p.api_key_file, p.api_key_secret)?;
    let stall_timeout = match p.stall_timeout {
        Some(s) => parse_duration(&s).map_err(|e| ("stall_timeout", e.to_string()))?,
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

/// The one key source a table sets; setting two is an error naming the later key.
fn api_key_source(
    env: Option<String>,
    file: Option<String>,
    secret: Option<String>,
) -> Result<ApiKeySource, KeyError> {
    let set: Vec<&str> = [
        ("api_key_env", env.is_some()),
        ("api_key_file", file.is_some()),
        ("api_key_secret", secret.is_some()),
    ]
    .into_iter()
    .filter_map(|(key, is_set)| is_set.then_some(key))
    .collect();
    if let [.., last] = set[..]
        && set.len() > 1
    {
        return Err((
            last,
            format!(
                "set only one of api_key_env, api_key_file and api_key_secret (this table sets {})",
                set.join(" and ")
            ),
        ));
    }
    Ok(match (env, file, secret) {
        (Some(var), _, _) => ApiKeySource::Env(var),
        (None, Some(file), _) => {
            if file.contains('/') || file.starts_with('.') {
                return Err((
                    "api_key_file",
                    format!("`{file}` must be a plain file name in $CREDENTIALS_DIRECTORY"),
                ));
            }
            ApiKeySource::CredentialFile(file)
        }
        (None, None, Some(name)) => {
            if name.trim().is_empty() {
                return Err((
                    "api_key_secret",
                    "must name the item (its `provider` attribute), e.g. the table's name"
                        .to_owned(),
                ));
            }
            ApiKeySource::Secret(name)
        }
        (None, None, None) => ApiKeySource::None,
    })
}

/// The provider names that work without a `[providers.NAME]` table, each with its
/// conventional key variable: `anthropic` (`ANTHROPIC_API_KEY`), `openai`
/// (`OPENAI_API_KEY`) and `ollama` (the local server, no key). A table of the same name
/// replaces it.
pub const BUILTIN_PROVIDERS: [&str; 3] = ["anthropic", "openai", "ollama"];

/// A built-in provider ([`BUILTIN_PROVIDERS`]) by name.
pub fn builtin_provider(name: &str) -> Option<&'static ProviderConfig> {
    static BUILTIN: std::sync::LazyLock<[ProviderConfig; 3]> = std::sync::LazyLock::new(|| {
        [
            preset("anthropic", Preset::Anthropic),
            preset("openai", Preset::Openai),
            preset("ollama", Preset::Local),
        ]
    });
    BUILTIN.iter().find(|p| p.name == name)
}

/// With no providers configured: `ANTHROPIC_API_KEY` → Anthropic, `OPENAI_API_KEY` →
/// OpenAI, otherwise a local OpenAI-compatible server (Ollama's default port).
pub(super) fn auto_provider(name: &str, env: &dyn Env) -> ProviderConfig {
    let has = |v: &str| env.var(v).is_some_and(|s| !s.is_empty());
    let which = if has("ANTHROPIC_API_KEY") {
        Preset::Anthropic
    } else if has("OPENAI_API_KEY") {
        Preset::Openai
    } else {
        Preset::Local
    };
    preset(name, which)
}

#[derive(Clone, Copy)]
enum Preset {
    Anthropic,
    Openai,
    Local,
}

fn preset(name: &str, which: Preset) -> ProviderConfig {
    let (kind, base_url, model, api_key, context_window) = match which {
        Preset::Anthropic => (
            ProviderKind::Anthropic,
            DEFAULT_ANTHROPIC_BASE_URL,
            DEFAULT_ANTHROPIC_MODEL,
            ApiKeySource::Env("ANTHROPIC_API_KEY".to_owned()),
            200_000,
        ),
        Preset::Openai => (
            ProviderKind::Openai,
            DEFAULT_OPENAI_BASE_URL,
            DEFAULT_OPENAI_MODEL,
            ApiKeySource::Env("OPENAI_API_KEY".to_owned()),
            128_000,
        ),
        Preset::Local => (
            ProviderKind::Openai,
            DEFAULT_LOCAL_BASE_URL,
            DEFAULT_LOCAL_MODEL,
            ApiKeySource::None,
            DEFAULT_CONTEXT_WINDOW,
        ),
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
