//! Which models a provider serves, for `familiar doctor` (never the loop): `GET
//! {base_url}/models` on OpenAI-compatible servers, `GET /v1/models` on Anthropic, and
//! Ollama's native `/api/tags` when the compatible listing is missing or lacks the
//! model (it also tells that the server is Ollama, so the fix can be `ollama pull`).

use std::time::Duration;

use serde::Deserialize;

use super::http::HttpCtx;
use super::{LlmError, keys};
use crate::config::{Env, ProviderConfig, ProviderKind};

/// How long one listing may take before the server counts as not answering.
pub const LIST_TIMEOUT: Duration = Duration::from_secs(5);

/// What the server said it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelList {
    pub models: Vec<String>,
    /// The server answered Ollama's native listing.
    pub ollama: bool,
    /// The server is llama.cpp's `llama-server` (`owned_by: "llamacpp"`): it answers
    /// every request with the one model it loaded, whatever name the request gives.
    pub llamacpp: bool,
}

impl ModelList {
    /// Whether `model` is served, Ollama's implicit `:latest` tag included.
    pub fn contains(&self, model: &str) -> bool {
        let bare = |m: &str| m.strip_suffix(":latest").unwrap_or(m).to_owned();
        self.models.iter().any(|m| bare(m) == bare(model))
    }

    /// The one model a `llama-server` serves under any name a request gives it, when
    /// `model` is not its own name (so runs work although the listing lacks it).
    pub fn serves_under_another_name(&self, model: &str) -> Option<&str> {
        match &self.models[..] {
            [only] if self.llamacpp && !self.contains(model) => Some(only),
            _ => None,
        }
    }
}

#[derive(Deserialize)]
struct OpenAiList {
    data: Vec<OpenAiModel>,
}

#[derive(Deserialize)]
struct OpenAiModel {
    id: String,
    #[serde(default)]
    owned_by: Option<String>,
}

#[derive(Deserialize)]
struct OllamaTags {
    models: Vec<OllamaModel>,
}

#[derive(Deserialize)]
struct OllamaModel {
    name: String,
}

/// Lists the models of the server `cfg` points at, checking for `model`.
pub async fn list_models(
    cfg: &ProviderConfig,
    model: &str,
    env: &dyn Env,
    client: &reqwest::Client,
) -> Result<ModelList, LlmError> {
    let ctx = HttpCtx::new(cfg, keys::KeySlot::new(cfg, env)?, client.clone());
    let key = ctx.key().await?;
    match cfg.kind {
        ProviderKind::Anthropic => {
            let url = format!("{}/v1/models?limit=1000", cfg.base_url);
            let mut req = ctx
                .client
                .get(url)
                .header("anthropic-version", super::anthropic::API_VERSION);
            if let Some(k) = key {
                req = req.header("x-api-key", k.expose());
            }
            let list: OpenAiList = get_json(&ctx, req, model).await?;
            Ok(ModelList {
                models: list.data.into_iter().map(|m| m.id).collect(),
                ollama: false,
                llamacpp: false,
            })
        }
        ProviderKind::Ollama => {
            let req = ctx.client.get(format!("{}/api/tags", cfg.base_url));
            let tags: OllamaTags = get_json(&ctx, req, model).await?;
            Ok(ModelList {
                models: tags.models.into_iter().map(|m| m.name).collect(),
                ollama: true,
                llamacpp: false,
            })
        }
        ProviderKind::Openai => {
            let mut req = ctx.client.get(format!("{}/models", cfg.base_url));
            if let Some(k) = key {
                req = req.bearer_auth(k.expose());
            }
            let compatible = get_json::<OpenAiList>(&ctx, req, model).await;
            let listed = match &compatible {
                Ok(list) => list.data.iter().any(|m| m.id == model),
                Err(_) => false,
            };
            if !listed && let Some(tags) = ollama_tags(&ctx, model).await {
                return Ok(tags);
            }
            compatible.map(|list| ModelList {
                llamacpp: list
                    .data
                    .iter()
                    .any(|m| m.owned_by.as_deref() == Some("llamacpp")),
                models: list.data.into_iter().map(|m| m.id).collect(),
                ollama: false,
            })
        }
    }
}

/// Ollama's native listing, next to its `/v1` API; `None` when this is not Ollama.
async fn ollama_tags(ctx: &HttpCtx, model: &str) -> Option<ModelList> {
    let base = ctx.cfg.base_url.strip_suffix("/v1")?;
    let req = ctx.client.get(format!("{base}/api/tags"));
    let tags: OllamaTags = get_json(ctx, req, model).await.ok()?;
    Some(ModelList {
        models: tags.models.into_iter().map(|m| m.name).collect(),
        ollama: true,
        llamacpp: false,
    })
}

async fn get_json<T: serde::de::DeserializeOwned>(
    ctx: &HttpCtx,
    req: reqwest::RequestBuilder,
    model: &str,
) -> Result<T, LlmError> {
    let response = match tokio::time::timeout(LIST_TIMEOUT, req.send()).await {
        Err(_) => return Err(LlmError::Stalled(LIST_TIMEOUT)),
        Ok(Err(e)) => return Err(ctx.connect_error(&e)),
        Ok(Ok(r)) => r,
    };
    let status = response.status();
    let headers = response.headers().clone();
    let body = match tokio::time::timeout(LIST_TIMEOUT, response.text()).await {
        Ok(Ok(b)) => b,
        Ok(Err(_)) | Err(_) => String::new(),
    };
    if !status.is_success() {
        return Err(ctx.status_error(status.as_u16(), &headers, &body, model));
    }
    serde_json::from_str(&body)
        .map_err(|e| LlmError::Protocol(format!("the model listing did not parse: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ollama_latest_tag_is_implicit() {
        let list = ModelList {
            models: vec!["qwen2.5:latest".into(), "llama3.1:8b".into()],
            ollama: true,
            llamacpp: false,
        };
        assert!(list.contains("qwen2.5"));
        assert!(list.contains("qwen2.5:latest"));
        assert!(list.contains("llama3.1:8b"));
        assert!(!list.contains("llama3.1"));
    }

    #[test]
    fn llama_server_serves_its_one_model_under_any_name() {
        let list = ModelList {
            models: vec!["/models/SmolLM2-135M-Instruct.Q4_1.gguf".into()],
            ollama: false,
            llamacpp: true,
        };
        assert_eq!(
            list.serves_under_another_name("smollm2"),
            Some("/models/SmolLM2-135M-Instruct.Q4_1.gguf")
        );
        let vllm = ModelList {
            llamacpp: false,
            ..list.clone()
        };
        assert_eq!(vllm.serves_under_another_name("smollm2"), None);
    }
}
