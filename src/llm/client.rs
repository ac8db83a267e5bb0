//! [`LlmClient`]: one task's view of its model. Wraps a [`Provider`] with retries,
//! stall handling and fallback, and tells the loop about each in a [`ClientEvent`].
//!
//! Invariants: an attempt that fails after it emitted anything is followed by
//! `AttemptDiscarded` before any retry, so the loop can void its partial output (no
//! half tool call survives: providers complete a call only once it arrived whole).
//! Once the client falls back it stays on the fallback for the rest of the task, and
//! the fallback gets retries of its own (the same `max_retries`, backoff from the
//! start): a fallback that is overloaded once is not a reason to fail the task.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use tokio_util::sync::CancellationToken;

use super::repetition::RepetitionGuard;
use super::retry::RetryPolicy;
use super::{FinishReason, LlmError, Provider, Request, StreamEvent};
use crate::config::{Env, ProviderConfig};

/// Overload errors (529/503) in a row before switching to the fallback.
pub const OVERLOADS_BEFORE_FALLBACK: u32 = 2;
/// Retries of a connection a server on this machine refused, and the wait before
/// each: enough for a server that is just restarting, not a 12 s wait for one that
/// was never started.
pub const REFUSED_RETRIES: u32 = 1;
pub const REFUSED_RETRY_DELAY: Duration = Duration::from_millis(250);

/// What the loop sees of one model call.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientEvent {
    Event(StreamEvent),
    /// An attempt failed and another follows after `delay`.
    Retry {
        attempt: u32,
        delay: Duration,
        reason: String,
    },
    /// From now on requests go to `to` (a model name, `provider/model` when the
    /// provider changed too).
    ModelFallback {
        from: String,
        to: String,
    },
    /// Everything the failed attempt emitted is void.
    AttemptDiscarded,
    /// The answer turned degenerate (see [`super::repetition`]): the stream was
    /// cancelled, so the server stops generating, and a `Finish` with
    /// [`FinishReason::Length`] follows. Of the text since the last tool call, keep the
    /// first `keep` bytes.
    Repetition {
        keep: usize,
        unit: String,
        repeats: usize,
    },
}

/// Where to go when the model is overloaded or stalls.
pub struct Fallback {
    pub provider: Option<Arc<dyn Provider>>,
    pub model: String,
}

/// A provider with retries, stall handling and fallback, for one task.
pub struct LlmClient {
    provider: Arc<dyn Provider>,
    /// Set once the client fell back to another model.
    model_override: Option<String>,
    fallback: Option<Fallback>,
    retry: RetryPolicy,
    overload_streak: u32,
    /// `temperature` of the task's provider: sent with every request that does not
    /// set its own (the loop's and the compaction summary's), fallback included.
    temperature: Option<f32>,
}

impl LlmClient {
    pub fn new(provider: Arc<dyn Provider>, retry: RetryPolicy) -> Self {
        LlmClient {
            provider,
            model_override: None,
            fallback: None,
            retry,
            overload_streak: 0,
            temperature: None,
        }
    }

    /// Requests that set no temperature get `temperature`.
    pub fn with_temperature(mut self, temperature: Option<f32>) -> Self {
        self.temperature = temperature;
        self
    }

    /// The temperature requests get when they set none.
    pub fn temperature(&self) -> Option<f32> {
        self.temperature
    }

    pub fn with_fallback(mut self, fallback: Fallback) -> Self {
        self.fallback = Some(fallback);
        self
    }

    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Builds the provider in `cfg` and its fallback: `fallback_provider` (resolved by
    /// name through `resolve`, with `fallback_model` as its model if set) or
    /// `fallback_model` on the same provider.
    pub fn from_config(
        cfg: &ProviderConfig,
        env: &dyn Env,
        resolve: &dyn Fn(&str) -> Option<ProviderConfig>,
    ) -> Result<Self, LlmError> {
        Self::from_config_with(cfg, env, resolve, &super::http::new_client()?)
    }

    /// [`LlmClient::from_config`] on a shared HTTP client.
    pub fn from_config_with(
        cfg: &ProviderConfig,
        env: &dyn Env,
        resolve: &dyn Fn(&str) -> Option<ProviderConfig>,
        http: &reqwest::Client,
    ) -> Result<Self, LlmError> {
        let client = LlmClient::new(
            super::build_with(cfg, env, http)?,
            RetryPolicy::from_config(cfg),
        )
        .with_temperature(cfg.temperature);
        let fallback = match (&cfg.fallback_provider, &cfg.fallback_model) {
            (Some(name), model) => {
                let fcfg = resolve(name).ok_or_else(|| {
                    LlmError::Config(format!(
                        "fallback_provider `{name}` of [providers.{}] is not configured",
                        cfg.name
                    ))
                })?;
                Some(Fallback {
                    model: model.clone().unwrap_or_else(|| fcfg.model.clone()),
                    provider: Some(super::build_with(&fcfg, env, http)?),
                })
            }
            (None, Some(model)) => Some(Fallback {
                provider: None,
                model: model.clone(),
            }),
            (None, None) => None,
        };
        Ok(match fallback {
            Some(f) => client.with_fallback(f),
            None => client,
        })
    }

    /// The provider requests go to now.
    pub fn provider(&self) -> &Arc<dyn Provider> {
        &self.provider
    }

    /// The model that replaces the request's, once the client fell back.
    pub fn model_override(&self) -> Option<&str> {
        self.model_override.as_deref()
    }

    /// Streams one response, retrying and falling back as needed. Ends after `Finish`
    /// or after the first `Err`.
    pub fn stream<'a>(
        &'a mut self,
        req: &Request,
        cancel: CancellationToken,
    ) -> BoxStream<'a, Result<ClientEvent, LlmError>> {
        let state = Attempts {
            client: self,
            req: req.clone(),
            cancel,
            inner: None,
            emitted: false,
            retries: 0,
            attempts: 0,
            queue: VecDeque::new(),
            wait: None,
            done: false,
            guard: RepetitionGuard::new(),
        };
        Box::pin(futures::stream::unfold(state, |mut st| async move {
            let item = st.next().await?;
            Some((item, st))
        }))
    }

    /// Switches to the fallback, if there is one left; returns the event to report.
    fn fall_back(&mut self, current_model: &str) -> Option<ClientEvent> {
        let fb = self.fallback.take()?;
        let to = match fb.provider {
            Some(p) => {
                let to = format!("{}/{}", p.name(), fb.model);
                self.provider = p;
                to
            }
            None => fb.model.clone(),
        };
        self.model_override = Some(fb.model);
        self.overload_streak = 0;
        Some(ClientEvent::ModelFallback {
            from: current_model.to_owned(),
            to,
        })
    }
}

struct Attempts<'a> {
    client: &'a mut LlmClient,
    req: Request,
    cancel: CancellationToken,
    inner: Option<BoxStream<'static, Result<StreamEvent, LlmError>>>,
    emitted: bool,
    /// Retries spent on the current model (reset when the client falls back).
    retries: u32,
    /// Failed attempts of this call on any model, for the events and the final error.
    attempts: u32,
    queue: VecDeque<ClientEvent>,
    wait: Option<Duration>,
    done: bool,
    /// Watches the current attempt's text since its last tool call.
    guard: RepetitionGuard,
}

impl Attempts<'_> {
    async fn next(&mut self) -> Option<Result<ClientEvent, LlmError>> {
        loop {
            if let Some(ev) = self.queue.pop_front() {
                return Some(Ok(ev));
            }
            if self.done {
                return None;
            }
            // Wait only after the Retry event was handed out, so the loop can show it.
            if let Some(d) = self.wait.take() {
                let sleep = self.client.retry.sleeper.sleep(d);
                tokio::select! {
                    biased;
                    () = self.cancel.cancelled() => return self.fail(LlmError::Cancelled),
                    () = sleep => {}
                }
            }
            let inner = match &mut self.inner {
                Some(s) => s,
                None => {
                    let mut req = self.req.clone();
                    if let Some(m) = &self.client.model_override {
                        req.model.clone_from(m);
                    }
                    if req.temperature.is_none() {
                        req.temperature = self.client.temperature;
                    }
                    self.emitted = false;
                    self.guard.reset();
                    self.inner
                        .insert(self.client.provider.stream(&req, self.cancel.clone()))
                }
            };
            match inner.next().await {
                Some(Ok(ev)) => {
                    self.emitted = true;
                    match &ev {
                        StreamEvent::Finish { .. } => {
                            self.client.overload_streak = 0;
                            self.done = true;
                        }
                        StreamEvent::TextDelta { text } => {
                            if let Some(r) = self.guard.push(text) {
                                self.cut_degenerate(r);
                            }
                        }
                        StreamEvent::ToolCallComplete { .. } => self.guard.reset(),
                        StreamEvent::ThinkingDelta { .. }
                        | StreamEvent::ThinkingComplete { .. }
                        | StreamEvent::ToolCallStarted { .. }
                        | StreamEvent::Usage { .. }
                        | StreamEvent::PromptProgress { .. } => {}
                    }
                    return Some(Ok(ClientEvent::Event(ev)));
                }
                None => {
                    self.done = true;
                    if self.emitted {
                        return None;
                    }
                    return self.fail(LlmError::Truncated(
                        "the provider ended the stream without a response".to_owned(),
                    ));
                }
                Some(Err(e)) => {
                    self.inner = None;
                    if let Some(err) = self.on_error(e) {
                        return self.fail(err);
                    }
                }
            }
        }
    }

    /// Plans the retry after `e`, or returns the error to give up with.
    fn on_error(&mut self, e: LlmError) -> Option<LlmError> {
        if !e.is_retryable() {
            return Some(e);
        }
        self.attempts += 1;
        if e.is_overload() {
            self.client.overload_streak += 1;
        } else {
            self.client.overload_streak = 0;
        }
        let max_retries = if e.is_refused_locally() {
            REFUSED_RETRIES.min(self.client.retry.max_retries)
        } else {
            self.client.retry.max_retries
        };
        let exhausted = self.retries >= max_retries;
        // Another model on the same unreachable server will not answer either.
        let model_may_help = !matches!(e, LlmError::Connect(_))
            || self
                .client
                .fallback
                .as_ref()
                .is_some_and(|f| f.provider.is_some());
        let wants_fallback = matches!(e, LlmError::Stalled(_))
            || self.client.overload_streak >= OVERLOADS_BEFORE_FALLBACK
            || (exhausted && model_may_help);
        let current = self
            .client
            .model_override
            .clone()
            .unwrap_or_else(|| self.req.model.clone());
        let fell_back = wants_fallback
            .then(|| self.client.fall_back(&current))
            .flatten();
        let delay = match fell_back {
            Some(ev) => {
                // A different model is not the one that is overloaded: no reason to
                // wait, and it starts with its own retries.
                self.retries = 0;
                self.queue.push_back(ev);
                Duration::ZERO
            }
            None if exhausted => {
                return Some(LlmError::RetriesExhausted {
                    attempts: self.attempts,
                    last: Box::new(e),
                });
            }
            None if e.is_refused_locally() => {
                self.retries += 1;
                REFUSED_RETRY_DELAY
            }
            None => {
                self.retries += 1;
                self.client.retry.delay(self.retries, &e)
            }
        };
        if self.emitted {
            self.queue.push_front(ClientEvent::AttemptDiscarded);
        }
        // The final error says the rest; a retry line need not repeat the advice.
        let reason = match &e {
            LlmError::Connect(c) if c.refused_locally => c.short().to_owned(),
            _ => e.to_string(),
        };
        self.queue.push_back(ClientEvent::Retry {
            attempt: self.attempts,
            delay,
            reason,
        });
        self.wait = Some(delay);
        None
    }

    /// Ends a degenerate answer: dropping the response closes the connection, which is
    /// how llama.cpp, Ollama and the hosted APIs learn to stop generating.
    fn cut_degenerate(&mut self, r: super::repetition::Repetition) {
        self.inner = None;
        self.done = true;
        self.client.overload_streak = 0;
        self.queue.push_back(ClientEvent::Repetition {
            keep: r.keep,
            unit: r.unit,
            repeats: r.repeats,
        });
        self.queue
            .push_back(ClientEvent::Event(StreamEvent::Finish {
                reason: FinishReason::Length,
            }));
    }

    fn fail(&mut self, e: LlmError) -> Option<Result<ClientEvent, LlmError>> {
        self.done = true;
        self.inner = None;
        self.queue.clear();
        Some(Err(e))
    }
}
