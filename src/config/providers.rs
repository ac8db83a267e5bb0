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
/// Ollama's own API (`kind = "ollama"`), the built-in default provider's.
pub const DEFAULT_OLLAMA_BASE_URL: &str = "http://127.0.0.1:11434";
pub const DEFAULT_LOCAL_MODEL: &str = "qwen2.5:7b-instruct";
pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
pub const DEFAULT_OPENAI_MODEL: &str = "gpt-4.1-mini";
pub const DEFAULT_ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
pub const DEFAULT_ANTHROPIC_MODEL: &str = "claude-sonnet-4-5";
pub const DEFAULT_CONTEXT_WINDOW: u32 = 32_768;
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The wait for the first token from a server on this machine or the local network: a
/// CPU reading a 2k-token prompt takes tens of seconds, a 30k one many minutes, and
/// nothing else is waiting for that server.
pub const DEFAULT_LOCAL_FIRST_TOKEN_TIMEOUT: Duration = Duration::from_secs(600);
/// The wait for the first token from a hosted API: its prefill takes seconds, so a
/// longer silence is a stuck connection worth retrying.
pub const DEFAULT_HOSTED_FIRST_TOKEN_TIMEOUT: Duration = Duration::from_secs(120);
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
            ProviderKind::Ollama => DEFAULT_OLLAMA_BASE_URL,
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
            ProviderKind::Openai | ProviderKind::Ollama => DEFAULT_LOCAL_MODEL,
            ProviderKind::Anthropic => DEFAULT_ANTHROPIC_MODEL,
        }
        .to_owned()
    });
    let api_key = api_key_source(p.api_key_env, p.api_key_file, p.api_key_secret)?;
    let stall_timeout = match p.stall_timeout {
        Some(s) => parse_duration(&s).map_err(|e| ("stall_timeout", e.to_string()))?,
        None => DEFAULT_STALL_TIMEOUT,
    };
    let first_token_timeout = match p.first_token_timeout {
        Some(s) => parse_duration(&s).map_err(|e| ("first_token_timeout", e.to_string()))?,
        None => default_first_token_timeout(&base_url),
    };
    if p.keep_alive.is_some() && kind != ProviderKind::Ollama {
        return Err((
            "keep_alive",
            "only kind = \"ollama\" sends keep_alive (set OLLAMA_KEEP_ALIVE on the server for \
             its OpenAI-compatible API)"
                .to_owned(),
        ));
    }
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
        context_window_configured: p.context_window.is_some(),
        fallback_model: p.fallback_model,
        fallback_provider: p.fallback_provider,
        stall_timeout,
        first_token_timeout,
        keep_alive: p.keep_alive,
        max_retries: p.max_retries.unwrap_or(DEFAULT_MAX_RETRIES),
        max_output_tokens: p.max_output_tokens.unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS),
        temperature: p.temperature,
        vision: p.vision.unwrap_or(false),
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
/// OpenAI, otherwise Ollama's own API at its default port (its context length read
/// from the model, since no `context_window` says it).
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
            ProviderKind::Ollama,
            DEFAULT_OLLAMA_BASE_URL,
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
        context_window_configured: kind != ProviderKind::Ollama,
        fallback_model: None,
        fallback_provider: None,
        stall_timeout: DEFAULT_STALL_TIMEOUT,
        first_token_timeout: default_first_token_timeout(base_url),
        keep_alive: None,
        max_retries: DEFAULT_MAX_RETRIES,
        max_output_tokens: DEFAULT_MAX_OUTPUT_TOKENS,
        temperature: None,
        vision: false,
    }
}

/// [`DEFAULT_LOCAL_FIRST_TOKEN_TIMEOUT`] for a server on this machine or the local
/// network, else [`DEFAULT_HOSTED_FIRST_TOKEN_TIMEOUT`].
pub fn default_first_token_timeout(base_url: &str) -> Duration {
    if is_local_url(base_url) {
        DEFAULT_LOCAL_FIRST_TOKEN_TIMEOUT
    } else {
        DEFAULT_HOSTED_FIRST_TOKEN_TIMEOUT
    }
}

/// Whether `url` points at this machine or the local network: a loopback, private,
/// link-local or unique-local address, `localhost`, a single-label host name, or a
/// `.local` / `.lan` / `.home.arpa` / `.internal` one. Such a server is the user's own,
/// usually one model on one CPU or GPU: slow to read a prompt, and serving nobody else.
pub fn is_local_url(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host_port.split(':').next().unwrap_or_default(),
    };
    let host = host.to_ascii_lowercase();
    match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => {
            ip.is_loopback() || ip.is_private() || ip.is_link_local() || ip.is_unspecified()
        }
        Ok(std::net::IpAddr::V6(ip)) => {
            let first = ip.segments()[0];
            ip.is_loopback()
                || ip.is_unspecified()
                // fc00::/7 unique local, fe80::/10 link-local
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
        }
        Err(_) => {
            !host.is_empty()
                && (host == "localhost"
                    || !host.contains('.')
                    || [".localhost", ".local", ".lan", ".home.arpa", ".internal"]
                        .iter()
                        .any(|suffix| host.ends_with(suffix)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_urls_are_this_machine_and_the_lan() {
        for url in [
            "http://127.0.0.1:8080/v1",
            "http://localhost:11434",
            "http://[::1]:8080",
            "http://192.168.1.20:11434",
            "http://10.0.0.5/v1",
            "http://172.20.1.1:8000/v1",
            "http://gpu-box:8080/v1",
            "http://studio.local:1234/v1",
            "http://[fd00::1]:8080",
        ] {
            assert!(is_local_url(url), "{url}");
        }
        for url in [
            "https://api.openai.com/v1",
            "https://api.anthropic.com",
            "https://openrouter.ai/api/v1",
            "http://8.8.8.8:8080",
            "https://[2001:db8::1]/v1",
        ] {
            assert!(!is_local_url(url), "{url}");
        }
    }

    #[test]
    fn the_first_token_wait_is_generous_for_local_servers_only() {
        assert_eq!(
            default_first_token_timeout("http://127.0.0.1:8080/v1"),
            DEFAULT_LOCAL_FIRST_TOKEN_TIMEOUT
        );
        assert_eq!(
            default_first_token_timeout(DEFAULT_ANTHROPIC_BASE_URL),
            DEFAULT_HOSTED_FIRST_TOKEN_TIMEOUT
        );
    }
}
