//! The provider checks: does the default soul's provider answer, and does it serve
//! the model (`/v1/models`, or Ollama's native listing)?

use super::Check;
use crate::config::{ProcessEnv, ProviderConfig};
use crate::llm::{LlmError, models};

/// Whether the default soul's provider answers and serves its model.
pub(super) async fn provider_checks(cfg: &ProviderConfig, model: &str) -> Vec<Check> {
    let url = &cfg.base_url;
    let name = &cfg.name;
    let listed = match crate::llm::new_client() {
        Ok(http) => models::list_models(cfg, model, &ProcessEnv, &http).await,
        Err(e) => Err(e),
    };
    let list = match listed {
        Ok(list) => list,
        Err(e) => {
            let (provider, model_check) = provider_failure(cfg, model, &e);
            return [Some(provider), model_check]
                .into_iter()
                .flatten()
                .collect();
        }
    };
    let answers = Check::ok("provider", format!("[providers.{name}] answers at {url}"));
    let model_check = if list.contains(model) {
        Check::ok("model", format!("`{model}` is served at {url}"))
    } else if let Some(own) = list.serves_under_another_name(model) {
        // llama-server answers any model name with the model it loaded, so runs work.
        Check::ok(
            "model",
            format!(
                "`{model}` is served at {url} by llama-server, as its one model `{own}` \
                 (it answers requests for any name with it)"
            ),
        )
    } else {
        let shown: Vec<&str> = list.models.iter().take(8).map(String::as_str).collect();
        let detail = if shown.is_empty() {
            format!("`{model}` is not served at {url}: the server lists no models")
        } else {
            format!(
                "`{model}` is not served at {url} (it has: {}{})",
                shown.join(", "),
                if list.models.len() > shown.len() {
                    ", …"
                } else {
                    ""
                }
            )
        };
        let fix = if list.ollama {
            format!("`ollama pull {model}`, or set `model` in [providers.{name}] to one listed")
        } else {
            format!("set `model` in [providers.{name}] (or the soul's `model`) to one listed")
        };
        Check::fail("model", detail, fix)
    };
    vec![answers, model_check]
}

/// The provider check for a listing that failed, and the model check if the server
/// answered well enough to tell anything about the model.
fn provider_failure(cfg: &ProviderConfig, model: &str, e: &LlmError) -> (Check, Option<Check>) {
    let url = &cfg.base_url;
    let name = &cfg.name;
    let not_checked = || {
        Check::warn(
            "model",
            format!("`{model}` not checked: the provider does not answer"),
            "fix the provider first",
        )
    };
    match e {
        LlmError::Connect(c) if c.refused_locally => (
            Check::fail(
                "provider",
                format!("nothing answers at {url} (connection refused)"),
                format!(
                    "start the server at {url} (Ollama: `ollama serve`; llama.cpp: `llama-server -m \
                     MODEL.gguf --port PORT`), or set `base_url` in [providers.{name}] to where one runs"
                ),
            ),
            Some(not_checked()),
        ),
        LlmError::Connect(_) | LlmError::Stalled(_) | LlmError::NoFirstToken(_) => (
            Check::fail(
                "provider",
                e.to_string(),
                format!("check `base_url` in [providers.{name}] and the network"),
            ),
            Some(not_checked()),
        ),
        LlmError::Auth(_) => (
            Check::fail(
                "provider",
                e.to_string(),
                format!(
                    "set the key: api_key_env, api_key_file or api_key_secret (`familiar setup \
                     --store-key {name}`) in [providers.{name}]"
                ),
            ),
            Some(not_checked()),
        ),
        // The server answers but has no listing (some proxies): it cannot tell.
        LlmError::NotFound(_) | LlmError::Http { .. } | LlmError::Protocol(_) => (
            Check::ok("provider", format!("[providers.{name}] answers at {url}")),
            Some(Check::warn(
                "model",
                format!("`{model}` not checked: the server has no model listing ({e})"),
                "run a task to see whether the model answers",
            )),
        ),
        LlmError::BadRequest(_)
        | LlmError::ContextOverflow(_)
        | LlmError::NoToolSupport(_)
        | LlmError::RateLimited { .. }
        | LlmError::Overloaded { .. }
        | LlmError::Server { .. }
        | LlmError::Truncated(_)
        | LlmError::Cancelled
        | LlmError::Config(_)
        | LlmError::RetriesExhausted { .. } => (
            Check::fail(
                "provider",
                e.to_string(),
                format!("check [providers.{name}] in config.toml (docs/providers.md)"),
            ),
            None,
        ),
    }
}
