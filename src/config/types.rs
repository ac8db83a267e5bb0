//! The config's types: raw ([`ConfigToml`] and its tables, exactly the file, every key
//! optional, unknown keys rejected) and effective ([`Config`], every default filled
//! in, paths resolved).
//!
//! Invariant: the effective types hold no secret (an API key is only ever named by
//! [`ApiKeySource`]), so a `Config` can be logged and printed as JSON.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use familiar_protocol::ids::SoulId;
use serde::{Deserialize, Serialize};

use super::paths::Paths;

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
    pub warm: Option<super::warm::WarmToml>,
    pub notifications: Option<NotificationsToml>,
    pub desktop: Option<super::desktop::DesktopToml>,
    pub versions: Option<super::versions::VersionsToml>,
    pub screen: Option<super::screen::ScreenToml>,
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderToml>,
    #[serde(default)]
    pub mcp: BTreeMap<String, super::mcp::McpServerToml>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryToml {
    pub max_entries_per_scope: Option<usize>,
}

/// `[notifications]`: how `familiar ask --notify` shows a task.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotificationsToml {
    /// How long a result stays on screen (`"30s"`; `"0"`: until dismissed).
    pub result_timeout: Option<String>,
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
    /// The `provider` attribute of a Secret Service item (`application = "familiar"`).
    pub api_key_secret: Option<String>,
    pub context_window: Option<u32>,
    pub fallback_model: Option<String>,
    /// Another `[providers.NAME]` to switch to after repeated overload or a stall.
    pub fallback_provider: Option<String>,
    pub stall_timeout: Option<String>,
    /// The wait for the first token (a prefill); default by where `base_url` points.
    pub first_token_timeout: Option<String>,
    /// `kind = "ollama"`: how long Ollama keeps the model loaded after a request.
    pub keep_alive: Option<String>,
    pub max_retries: Option<u32>,
    pub max_output_tokens: Option<u32>,
    pub temperature: Option<f32>,
    /// Whether the model takes images (a screenshot); default false.
    pub vision: Option<bool>,
}

/// Which wire protocol a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// Chat completions with SSE (Ollama, llama.cpp, vLLM, LM Studio, OpenRouter, OpenAI).
    Openai,
    /// The Messages API with SSE.
    Anthropic,
    /// Ollama's native `/api/chat` (NDJSON), which takes `options.num_ctx`.
    Ollama,
}

/// Servers people name as a `kind` that speak the OpenAI protocol.
const OPENAI_COMPATIBLE: &[&str] = &[
    "llama.cpp",
    "llamacpp",
    "llama-cpp",
    "vllm",
    "lmstudio",
    "lm-studio",
    "openrouter",
    "localai",
    "groq",
    "mistral",
    "deepseek",
];

impl<'de> Deserialize<'de> for ProviderKind {
    /// By hand for the hint: `kind = "vllm"` is a protocol mix-up, not a typo.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        const VARIANTS: &[&str] = &["openai", "anthropic", "ollama"];
        let name = String::deserialize(d)?;
        match name.as_str() {
            "openai" => Ok(ProviderKind::Openai),
            "anthropic" => Ok(ProviderKind::Anthropic),
            "ollama" => Ok(ProviderKind::Ollama),
            other if OPENAI_COMPATIBLE.contains(&other.to_ascii_lowercase().as_str()) => {
                Err(serde::de::Error::custom(format!(
                    "unknown variant `{other}`: `kind` is the protocol, and {other} speaks OpenAI's: use kind = \"openai\" with its base_url"
                )))
            }
            other => Err(serde::de::Error::unknown_variant(other, VARIANTS)),
        }
    }
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
    /// The Secret Service item with the attributes `application = "familiar"` and
    /// `provider = ` this name (see [`crate::secrets`]).
    Secret(String),
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
    /// The most time between two chunks once the answer streams.
    #[serde(with = "humantime_serde_compat")]
    pub stall_timeout: Duration,
    /// The most time from sending a request to its first token: the server reads the
    /// whole prompt first, which on a laptop CPU takes minutes for a long one.
    #[serde(with = "humantime_serde_compat")]
    pub first_token_timeout: Duration,
    /// `kind = "ollama"`: sent as `keep_alive` (Ollama's own duration text, e.g. "30m").
    pub keep_alive: Option<String>,
    /// Whether `context_window` was set in the table (else `kind = "ollama"` reads the
    /// model's own from `/api/show`).
    pub context_window_configured: bool,
    pub max_retries: u32,
    pub max_output_tokens: u32,
    pub temperature: Option<f32>,
    /// Whether the model takes images: a screenshot is sent to it as one, else the
    /// model is told it cannot see and offered `ui_read`.
    pub vision: bool,
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

/// `[notifications]`, resolved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NotificationsConfig {
    /// How long `ask --notify`'s result stays; zero: until dismissed.
    #[serde(with = "humantime_serde_compat")]
    pub result_timeout: Duration,
}

/// The effective config.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    pub default_soul: SoulId,
    pub default_provider: String,
    pub policy: String,
    pub daemon: DaemonConfig,
    pub memory: MemoryConfig,
    /// `[warm]`: the prefixes sent ahead to local servers.
    pub warm: super::warm::WarmConfig,
    pub notifications: NotificationsConfig,
    /// `[desktop]`: the menu familiar opens.
    pub desktop: super::desktop::DesktopConfig,
    /// `[versions]`: what is kept of the files tasks change, for undo.
    pub versions: super::versions::VersionsConfig,
    /// `[screen]`: the size of screenshots sent to a model.
    pub screen: super::screen::ScreenConfig,
    pub providers: BTreeMap<String, ProviderConfig>,
    /// `[mcp.NAME]` tool servers, by name.
    pub mcp: BTreeMap<String, super::mcp::McpServerConfig>,
    pub paths: Paths,
    /// The file this came from, if any.
    pub source: Option<PathBuf>,
    /// `data_dir` as the file sets it (`paths.data_dir` is it resolved): a reload
    /// compares what the file says, whatever the environment.
    #[serde(skip)]
    pub data_dir_setting: Option<PathBuf>,
}

/// Serialises a `Duration` as humantime text (`"30s"`) in JSON output.
mod humantime_serde_compat {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(*d))
    }
}
