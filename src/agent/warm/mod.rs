//! A warmed prefix: a soul's system prompt and tools sent to its local model server
//! ahead of the first real request, asking for (almost) no output, so the server's
//! prompt cache holds them when the key is pressed.
//!
//! Invariant: the warm request is built by the same code as a task's first request
//! ([`prefix_request`]: [`system_prompt`] over the same parts, the registry's
//! definitions in the soul's order, the provider's own wire format through
//! [`LlmClient`]), so its prefix is byte for byte the real one's and the cache hits.
//! Only what follows the prefix differs: one short user message, and `max_tokens` 1
//! (llama.cpp caches every prompt it reads by default; Ollama's `num_predict` comes
//! from `max_tokens`, its `keep_alive` from the provider's table).
//!
//! [`Warmth`] is what the process knows of each soul's prefix (cold, warming, warm,
//! skipped, failed), shared through the runtime's [`Services`](crate::agent::Services) and fed by its hooks: a real
//! request cancels a warm request in flight (`before_llm`), and a request whose server
//! reused much less than the warmed prefix marks the soul cold again (`after_llm`: the
//! server restarted or evicted it). When and whether to warm is the daemon's
//! (`daemon::warm`).
//!
//! Here the warm request; [`state`] the warmth.

pub mod state;

use std::time::Instant;

use familiar_protocol::query::WarmState;
use familiar_protocol::task::Usage;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

pub use state::{SoulWarmth, Warmed, Warmth};

use crate::agent::context::memory_notes;
use crate::agent::context::system_prompt::{PromptParts, system_prompt};
use crate::agent::family::subagent::delegates;
use crate::agent::runtime::Runtime;
use crate::llm::{ClientEvent, LlmClient, LlmError, Message, Request, StreamEvent};
use crate::soul::Soul;

/// What follows the prefix in a warm request: a user message must close the prompt,
/// and one this short costs a few tokens.
const WARM_USER_MESSAGE: &str = "ok";
/// Why a soul's prefix was not warmed.
#[derive(Debug, thiserror::Error)]
pub enum WarmError {
    /// Not an error: warming does not apply (a hosted API, MCP tools, config).
    #[error("{0}")]
    Skipped(String),
    #[error("no model for the soul: {0}")]
    Client(LlmError),
    #[error("the warm request failed: {0}")]
    Request(LlmError),
    #[error("a real request went first")]
    Cancelled,
}

/// The request a task of `soul` would start with, up to its first message: the same
/// system prompt and tools, then [`WARM_USER_MESSAGE`], with one token of output. The
/// client is the one a task of the soul gets.
pub fn prefix_request(rt: &Runtime, soul: &Soul) -> Result<(LlmClient, Request), WarmError> {
    if soul
        .grant
        .tools
        .iter()
        .any(|t| t.starts_with(crate::catalog::MCP_PREFIX))
    {
        return Err(WarmError::Skipped(
            "its MCP tools are found when a task starts".to_owned(),
        ));
    }
    let (client, model, _) = rt.settings.llm.client(soul).map_err(WarmError::Client)?;
    let mut tools = rt.services.tools.definitions(&soul.grant.tools);
    // What the task's gate offers: the screen tools go with `screen = "off"`.
    let screen = crate::agent::calls::screen::ScreenRoute::new(soul, &rt.settings.config);
    tools.retain(|t| screen.offers(&t.name));
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    // A task somebody submitted is at depth 1 (`TaskSpec::depth`).
    let system = system_prompt(&PromptParts {
        soul,
        policy: &rt.settings.policy,
        tools: &names,
        memory: &memory_notes(rt, soul),
        delegates: delegates(soul, 1),
    });
    let request = Request {
        model: client.model_override().unwrap_or(&model).to_owned(),
        system,
        messages: vec![Message::user_text(WARM_USER_MESSAGE)],
        tools,
        max_tokens: 1,
        temperature: client.temperature(),
    };
    Ok((client, request))
}

/// A warm request ready to send.
pub struct Prepared {
    client: LlmClient,
    request: Request,
}

/// The warm request of `soul`, unless warming does not apply to it
/// ([`WarmError::Skipped`]: a hosted API without `[warm] enabled = true`, MCP tools).
pub fn prepare(rt: &Runtime, soul: &Soul) -> Result<Prepared, WarmError> {
    let provider = rt
        .settings
        .config
        .provider(soul.provider.as_deref())
        .map_err(|e| WarmError::Skipped(e.to_string()))?;
    if !rt.settings.config.warm.applies_to(&provider.base_url) {
        return Err(WarmError::Skipped(format!(
            "provider `{}` is not on this machine or network ([warm] enabled = true warms it)",
            provider.name
        )));
    }
    let (client, request) = prefix_request(rt, soul)?;
    Ok(Prepared { client, request })
}

/// Sends a prepared warm request of `soul` once and records the outcome in `rt.services.warm`.
/// A real request cancels it.
pub async fn warm(rt: &Runtime, soul: &str, prepared: Prepared) -> Result<Warmed, WarmError> {
    let Prepared {
        mut client,
        request,
    } = prepared;
    rt.services.warm.set(soul, WarmState::Warming, None);
    let cancel = rt.services.warm.start();
    let result = send(&mut client, &request, cancel).await;
    rt.services.warm.finish();
    match &result {
        Ok(done) => rt.services.warm.warmed(soul, done),
        // The real request reads the prefix itself; the next wake-up tries again.
        Err(e @ WarmError::Cancelled) => {
            rt.services
                .warm
                .set(soul, WarmState::Cold, Some(e.to_string()))
        }
        Err(e) => rt
            .services
            .warm
            .set(soul, WarmState::Failed, Some(e.to_string())),
    }
    result
}

async fn send(
    client: &mut LlmClient,
    request: &Request,
    cancel: CancellationToken,
) -> Result<Warmed, WarmError> {
    let started = Instant::now();
    let (mut usage, mut progress_cached, mut progress_total) = (Usage::default(), 0, 0);
    let mut stream = client.stream(request, cancel);
    while let Some(item) = stream.next().await {
        match item {
            Ok(ClientEvent::Event(StreamEvent::Usage { usage: u })) => usage = u,
            Ok(ClientEvent::Event(StreamEvent::PromptProgress { cached, total, .. })) => {
                (progress_cached, progress_total) = (cached, total);
            }
            Ok(_) => {}
            Err(LlmError::Cancelled) => return Err(WarmError::Cancelled),
            Err(e) => return Err(WarmError::Request(e)),
        }
    }
    Ok(Warmed {
        prompt_tokens: usage.input_tokens.max(progress_total),
        cached_tokens: usage.cache_read_tokens.max(progress_cached),
        ms: started.elapsed().as_millis() as u64,
    })
}

#[cfg(test)]
mod tests {
    use familiar_protocol::ids::{SessionId, SoulId, TaskId};

    use super::*;
    use crate::agent::hooks::{Hooks, TaskRef};

    fn usage(input: u64, cached: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: 1,
            cache_read_tokens: cached,
            cache_write_tokens: 0,
        }
    }

    fn on_task(w: &Warmth, soul: &str, f: impl FnOnce(&Warmth, &TaskRef<'_>)) {
        let (task_id, session_id) = (TaskId::generate(), SessionId::generate());
        let soul = SoulId::new(soul).unwrap();
        f(
            w,
            &TaskRef {
                task_id: &task_id,
                session_id: &session_id,
                soul: &soul,
            },
        );
    }

    #[test]
    fn a_server_that_reuses_little_of_a_warm_prefix_lost_it() {
        let w = Warmth::default();
        let done = Warmed {
            prompt_tokens: 2000,
            cached_tokens: 0,
            ms: 10,
        };
        w.warmed("ask", &done);
        // The first real request reuses the prefix: the server counts reused tokens.
        on_task(&w, "ask", |w, t| w.after_llm(t, Ok(&usage(2100, 1990))));
        assert_eq!(w.report()["ask"].state, WarmState::Warm);
        // A later one reused almost nothing: a restart or an eviction.
        on_task(&w, "ask", |w, t| w.after_llm(t, Ok(&usage(2100, 40))));
        assert_eq!(w.report()["ask"].state, WarmState::Cold);
        assert!(w.is_cold("ask"));
    }

    #[test]
    fn a_server_that_never_counts_reused_tokens_is_never_thought_cold() {
        let w = Warmth::default();
        w.warmed(
            "ask",
            &Warmed {
                prompt_tokens: 2000,
                cached_tokens: 0,
                ms: 10,
            },
        );
        on_task(&w, "ask", |w, t| w.after_llm(t, Ok(&usage(2100, 0))));
        assert_eq!(
            w.report()["ask"].state,
            WarmState::Warm,
            "Ollama reports no reuse"
        );
    }

    #[test]
    fn a_real_request_cancels_the_warm_request_in_flight() {
        let w = Warmth::default();
        let token = w.start();
        let request = Request {
            model: "m".into(),
            system: String::new(),
            messages: vec![],
            tools: vec![],
            max_tokens: 1,
            temperature: None,
        };
        on_task(&w, "other", |w, t| w.before_llm(t, &request));
        assert!(token.is_cancelled());
    }

    #[test]
    fn a_reload_makes_every_soul_cold() {
        let w = Warmth::default();
        w.warmed(
            "ask",
            &Warmed {
                prompt_tokens: 2000,
                cached_tokens: 0,
                ms: 10,
            },
        );
        w.after_reload();
        assert_eq!(w.report()["ask"].state, WarmState::Cold);
    }
}
