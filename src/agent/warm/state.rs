//! What the process knows of each soul's prefix (cold, warming, warm, skipped,
//! failed): [`Warmth`], shared through the runtime's services and fed by its hooks: a real
//! request cancels a warm request in flight (`before_llm`), and a request whose server
//! reused much less than the warmed prefix marks the soul cold again (`after_llm`: the
//! server restarted or evicted it). Apart from the runtime (whose services hold it) so that
//! the runtime and the warm requests do not import each other.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use familiar_protocol::query::WarmState;
use familiar_protocol::task::Usage;
use serde::Serialize;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::agent::hooks::{Hooks, TaskRef};
use crate::llm::{LlmError, Request};
/// A later request that reused less than this share of the warmed prefix found the
/// server's cache gone.
const LOST_SHARE: f64 = 0.5;

/// One soul's prefix, as `familiar status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SoulWarmth {
    pub state: WarmState,
    /// The warm request's prompt tokens and how many the server already held.
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    /// How long the warm request took.
    pub ms: u64,
    /// RFC 3339 UTC of the last change.
    pub at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Whether the server reports reused tokens (llama.cpp does, Ollama does not): only
    /// then can a lost cache be noticed.
    #[serde(skip)]
    counts_cache: bool,
}

impl SoulWarmth {
    /// As the `Configuration` property reports it.
    pub fn reported(&self) -> familiar_protocol::query::SoulWarmth {
        familiar_protocol::query::SoulWarmth {
            state: self.state,
            prompt_tokens: self.prompt_tokens,
            cached_tokens: self.cached_tokens,
            ms: self.ms,
            at: self.at.clone(),
            reason: self.reason.clone(),
        }
    }

    fn new(state: WarmState, reason: Option<String>) -> SoulWarmth {
        SoulWarmth {
            state,
            prompt_tokens: 0,
            cached_tokens: 0,
            ms: 0,
            at: crate::store::now_rfc3339(),
            reason,
            counts_cache: false,
        }
    }
}

/// What the process knows of each soul's prefix; cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct Warmth(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    souls: Mutex<BTreeMap<String, SoulWarmth>>,
    /// The warm request in flight, which a real request cancels.
    in_flight: Mutex<Option<CancellationToken>>,
    /// Wakes the daemon's warmer: a reload, or a soul gone cold.
    wake: Notify,
}

impl Warmth {
    /// Every soul cold again and the warmer woken: what a reload that changed anything
    /// does (the prompts, tools or server may read differently now).
    pub fn after_reload(&self) {
        self.lock().values_mut().for_each(|w| {
            *w = SoulWarmth::new(WarmState::Cold, Some("config reloaded".to_owned()));
        });
        self.0.wake.notify_one();
    }

    /// Waits until something asks for warming again.
    pub async fn woken(&self) {
        self.0.wake.notified().await;
    }

    /// Every soul's state, by soul id.
    pub fn report(&self) -> BTreeMap<String, SoulWarmth> {
        self.lock().clone()
    }

    /// Whether `soul` needs a warm request (never sent, or cold again).
    pub fn is_cold(&self, soul: &str) -> bool {
        self.lock().get(soul).is_none_or(|w| {
            matches!(
                w.state,
                WarmState::Cold | WarmState::Failed | WarmState::Skipped
            )
        })
    }

    /// Records `soul`'s new state.
    pub fn set(&self, soul: &str, state: WarmState, reason: Option<String>) {
        let mut souls = self.lock();
        let counts_cache = souls.get(soul).is_some_and(|w| w.counts_cache);
        let mut w = SoulWarmth::new(state, reason);
        w.counts_cache = counts_cache;
        souls.insert(soul.to_owned(), w);
    }

    pub(super) fn warmed(&self, soul: &str, done: &Warmed) {
        let mut souls = self.lock();
        let counts_cache =
            souls.get(soul).is_some_and(|w| w.counts_cache) || done.cached_tokens > 0;
        souls.insert(
            soul.to_owned(),
            SoulWarmth {
                state: WarmState::Warm,
                prompt_tokens: done.prompt_tokens,
                cached_tokens: done.cached_tokens,
                ms: done.ms,
                at: crate::store::now_rfc3339(),
                reason: None,
                counts_cache,
            },
        );
    }

    /// Registers the warm request about to be sent; a real request cancels it.
    pub(super) fn start(&self) -> CancellationToken {
        let token = CancellationToken::new();
        *self
            .0
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(token.clone());
        token
    }

    pub(super) fn finish(&self) {
        self.0
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, SoulWarmth>> {
        self.0.souls.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Hooks for Warmth {
    /// A real request goes first: a warm request in flight stops (the server keeps what
    /// it had read of the prefix).
    fn before_llm(&self, task: &TaskRef<'_>, _request: &Request) {
        let token = self
            .0
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(token) = token {
            tracing::debug!(task_id = %task.task_id, "a real request cancels the warm request in flight");
            token.cancel();
        }
    }

    /// A request of a warm soul that reused much less than its prefix: the server lost
    /// its cache (a restart, an eviction), so the soul is cold and the warmer woken.
    fn after_llm(&self, task: &TaskRef<'_>, result: Result<&Usage, &LlmError>) {
        let Ok(usage) = result else { return };
        let soul = task.soul.as_str();
        let mut souls = self.lock();
        let Some(w) = souls.get_mut(soul) else { return };
        w.counts_cache |= usage.cache_read_tokens > 0;
        let lost = w.state == WarmState::Warm
            && w.counts_cache
            && usage.input_tokens > 0
            && (usage.cache_read_tokens as f64) < w.prompt_tokens as f64 * LOST_SHARE;
        if lost {
            tracing::info!(
                soul,
                cached = usage.cache_read_tokens,
                prefix = w.prompt_tokens,
                "the model server no longer holds the soul's prefix: warming it again"
            );
            *w = SoulWarmth {
                counts_cache: true,
                ..SoulWarmth::new(
                    WarmState::Cold,
                    Some("the server lost its cache".to_owned()),
                )
            };
            drop(souls);
            self.0.wake.notify_one();
        }
    }
}

/// What a warm request cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Warmed {
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub ms: u64,
}
