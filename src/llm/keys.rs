//! API keys: read from the environment or `$CREDENTIALS_DIRECTORY` when a provider is
//! built, or from the Secret Service on its first request ([`KeySlot`]); held in a type
//! whose `Debug` prints `***`, never serialised, never put in an error message.
//!
//! The Secret Service is asked over D-Bus, which is async, while providers are built
//! synchronously (`LlmFactory::client`): so a [`KeySlot`] of that kind starts empty and
//! is filled by the first request's own await, once per provider (that is, per task
//! and per `familiar doctor` check), and the key is dropped with the provider.

use std::fmt;
use std::path::PathBuf;

use tokio::sync::OnceCell;

use crate::config::{ApiKeySource, Env, ProviderConfig, ProviderKind};
use crate::secrets::{self, SecretError};

use super::LlmError;

/// A secret. Only [`ApiKey::expose`] reveals it, for the request header.
#[derive(Clone)]
pub(crate) struct ApiKey(String);

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

impl ApiKey {
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// Replaces every occurrence of the key in `text` (servers echo rejected keys).
    pub(crate) fn scrub(&self, text: &str) -> String {
        if self.0.len() < 4 {
            return text.to_owned();
        }
        text.replace(&self.0, "***")
    }
}

/// Where the key was expected, in the words a user would act on.
pub(crate) fn describe_source(cfg: &ProviderConfig) -> String {
    match &cfg.api_key {
        ApiKeySource::Env(var) => format!("${var}"),
        ApiKeySource::CredentialFile(name) => format!("$CREDENTIALS_DIRECTORY/{name}"),
        ApiKeySource::Secret(item) => format!(
            "the keyring item application={} provider={item}",
            secrets::APPLICATION
        ),
        ApiKeySource::None => format!(
            "[providers.{}] (no api_key_env, api_key_file or api_key_secret)",
            cfg.name
        ),
    }
}

/// A provider's key: read when the provider is built, or, from the Secret Service, on
/// its first request.
pub(crate) struct KeySlot {
    key: OnceCell<Option<ApiKey>>,
    /// The item to read on first use, and the bus to find the service on.
    secret: Option<(String, secrets::Bus)>,
}

impl KeySlot {
    /// The slot for `cfg`: filled now from the environment or a credential file (an
    /// error now if the key is missing), or left for the first request to fill from the
    /// Secret Service on the session bus `env` names.
    pub(crate) fn new(cfg: &ProviderConfig, env: &dyn Env) -> Result<KeySlot, LlmError> {
        if let ApiKeySource::Secret(item) = &cfg.api_key {
            let address = env
                .var("DBUS_SESSION_BUS_ADDRESS")
                .and_then(|v| v.into_string().ok())
                .filter(|v| !v.is_empty());
            return Ok(KeySlot {
                key: OnceCell::new(),
                secret: Some((item.clone(), secrets::Bus { address })),
            });
        }
        Ok(KeySlot::ready(resolve(cfg, env)?))
    }

    pub(crate) fn ready(key: Option<ApiKey>) -> KeySlot {
        KeySlot {
            key: OnceCell::new_with(Some(key)),
            secret: None,
        }
    }

    /// The key, reading it from the Secret Service if this is the first request that
    /// needs it. A failed read is not remembered: the next request asks again.
    pub(crate) async fn get(&self, provider: &str) -> Result<Option<&ApiKey>, LlmError> {
        let key = self
            .key
            .get_or_try_init(|| async {
                match &self.secret {
                    Some((item, bus)) => secrets::lookup(bus, item)
                        .await
                        .map(|s| Some(ApiKey(s.into_string())))
                        .map_err(|e| secret_error(provider, item, &e)),
                    None => Ok(None),
                }
            })
            .await?;
        Ok(key.as_ref())
    }

    /// The key if it was read already (for scrubbing server text).
    pub(crate) fn known(&self) -> Option<&ApiKey> {
        self.key.get().and_then(Option::as_ref)
    }
}

/// What a user does about a Secret Service failure for `provider`'s item `item`.
fn secret_error(provider: &str, item: &str, e: &SecretError) -> LlmError {
    let lookup = secrets::lookup_command(item);
    let remedy = match e {
        SecretError::NoService(_) | SecretError::Timeout(_) => format!(
            "start a keyring (GNOME Keyring, KeePassXC with Secret Service integration, \
             KWallet) in the desktop session, or set api_key_env or api_key_file in \
             [providers.{provider}] instead of api_key_secret"
        ),
        SecretError::Locked | SecretError::Dismissed => {
            format!("unlock it (log in to the desktop, or run `{lookup}`, which prompts) and retry")
        }
        SecretError::NotFound(_) | SecretError::Unusable(_) | SecretError::NoDefaultCollection => {
            format!(
                "store the key with `familiar setup --store-key {item}` (or `secret-tool store \
                 --label='{}' application {} provider {item}`)",
                secrets::label(item),
                secrets::APPLICATION
            )
        }
        SecretError::Bus(_) => format!("check the keyring, then `{lookup}`"),
    };
    LlmError::Auth(format!(
        "no API key for provider `{provider}` from the Secret Service: {e}; {remedy}"
    ))
}

/// The key for `cfg` from the environment or a credential file, or `None` for a local
/// server that needs none (and for a Secret Service key: see [`KeySlot`]).
fn resolve(cfg: &ProviderConfig, env: &dyn Env) -> Result<Option<ApiKey>, LlmError> {
    let name = &cfg.name;
    match &cfg.api_key {
        ApiKeySource::Secret(_) => Ok(None),
        ApiKeySource::Env(var) => {
            let value = env
                .var(var)
                .and_then(|v| v.into_string().ok())
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty());
            match value {
                Some(v) => Ok(Some(ApiKey(v))),
                None => Err(LlmError::Auth(format!(
                    "no API key for provider `{name}`: set ${var} or api_key_file in [providers.{name}]"
                ))),
            }
        }
        ApiKeySource::CredentialFile(file) => {
            let Some(dir) = env.path("CREDENTIALS_DIRECTORY") else {
                return Err(LlmError::Auth(format!(
                    "no API key for provider `{name}`: api_key_file = \"{file}\" needs \
                     $CREDENTIALS_DIRECTORY (systemd LoadCredential={file}:...), or set api_key_env"
                )));
            };
            let path: PathBuf = dir.join(file);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                LlmError::Auth(format!(
                    "no API key for provider `{name}`: cannot read {}: {e}",
                    path.display()
                ))
            })?;
            let key = text.trim_end_matches(['\n', '\r']).trim();
            if key.is_empty() {
                return Err(LlmError::Auth(format!(
                    "no API key for provider `{name}`: {} is empty",
                    path.display()
                )));
            }
            Ok(Some(ApiKey(key.to_owned())))
        }
        ApiKeySource::None if is_hosted(cfg) => {
            let var = match cfg.kind {
                ProviderKind::Anthropic => "ANTHROPIC_API_KEY",
                ProviderKind::Openai | ProviderKind::Ollama => "OPENAI_API_KEY",
            };
            Err(LlmError::Auth(format!(
                "no API key for provider `{name}` ({}): set api_key_env = \"{var}\" (and export \
                 {var}), api_key_file or api_key_secret in [providers.{name}]",
                cfg.base_url
            )))
        }
        ApiKeySource::None => Ok(None),
    }
}

/// Hosted services need a key; a local or LAN server usually does not.
fn is_hosted(cfg: &ProviderConfig) -> bool {
    if cfg.kind == ProviderKind::Anthropic {
        return true;
    }
    let Some(rest) = cfg.base_url.strip_prefix("https://") else {
        return false;
    };
    let host = rest.split(['/', ':']).next().unwrap_or("");
    !(host == "localhost" || host.starts_with("127.") || host == "[")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;

    fn cfg(kind: ProviderKind, url: &str, key: ApiKeySource) -> ProviderConfig {
        ProviderConfig {
            name: "p".into(),
            kind,
            base_url: url.into(),
            model: "m".into(),
            api_key: key,
            context_window: 1000,
            context_window_configured: true,
            fallback_model: None,
            fallback_provider: None,
            stall_timeout: Duration::from_secs(1),
            first_token_timeout: Duration::from_secs(1),
            keep_alive: None,
            max_retries: 0,
            max_output_tokens: 10,
            temperature: None,
            vision: false,
        }
    }

    #[test]
    fn debug_never_shows_the_key() {
        let k = ApiKey("sk-secret".into());
        assert_eq!(format!("{k:?}"), "ApiKey(***)");
        assert_eq!(k.scrub("bad key sk-secret!"), "bad key ***!");
    }

    #[test]
    fn missing_env_key_names_the_variable() {
        let env = BTreeMap::new();
        let c = cfg(
            ProviderKind::Openai,
            "https://x",
            ApiKeySource::Env("MY_KEY".into()),
        );
        let err = resolve(&c, &env).unwrap_err().to_string();
        assert!(err.contains("set $MY_KEY or api_key_file"), "{err}");
    }

    #[test]
    fn credential_file_is_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("k"), "sk-file\n").unwrap();
        let env = BTreeMap::from([(
            "CREDENTIALS_DIRECTORY".to_owned(),
            dir.path().display().to_string(),
        )]);
        let c = cfg(
            ProviderKind::Anthropic,
            "https://x",
            ApiKeySource::CredentialFile("k".into()),
        );
        let key = resolve(&c, &env).unwrap().unwrap();
        assert_eq!(key.expose(), "sk-file");
    }

    #[test]
    fn a_secret_service_key_is_read_at_the_first_request_not_at_build() {
        // No bus is reachable at this address: building must not try it.
        let env = BTreeMap::from([(
            "DBUS_SESSION_BUS_ADDRESS".to_owned(),
            "unix:path=/nonexistent/bus".to_owned(),
        )]);
        let c = cfg(
            ProviderKind::Anthropic,
            "https://x",
            ApiKeySource::Secret("claude".into()),
        );
        let slot = KeySlot::new(&c, &env).unwrap();
        assert!(slot.known().is_none());
        assert_eq!(
            describe_source(&c),
            "the keyring item application=familiar provider=claude"
        );
    }

    #[test]
    fn secret_service_errors_name_the_provider_and_the_fix() {
        let locked = secret_error("claude", "anthropic", &SecretError::Locked).to_string();
        assert_eq!(
            locked,
            "no API key for provider `claude` from the Secret Service: the keyring is locked; \
             unlock it (log in to the desktop, or run `secret-tool lookup application familiar \
             provider anthropic`, which prompts) and retry"
        );
        let none = secret_error("claude", "anthropic", &SecretError::NoService("x".into()));
        assert!(
            none.to_string().contains("api_key_env or api_key_file"),
            "{none}"
        );
    }

    #[test]
    fn hosted_provider_without_key_says_what_to_set() {
        let env = BTreeMap::new();
        let c = cfg(
            ProviderKind::Anthropic,
            "https://api.anthropic.com",
            ApiKeySource::None,
        );
        let err = resolve(&c, &env).unwrap_err().to_string();
        assert!(err.contains("ANTHROPIC_API_KEY"), "{err}");
        let local = cfg(
            ProviderKind::Openai,
            "http://127.0.0.1:11434/v1",
            ApiKeySource::None,
        );
        assert!(resolve(&local, &env).unwrap().is_none());
    }
}
