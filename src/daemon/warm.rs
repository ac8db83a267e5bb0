//! When the daemon warms the souls' prefixes ([`crate::agent::warm`]): once it serves,
//! after each reload, and when a server lost its cache (the runtime's [`Warmth`] wakes
//! it), each `[warm] souls` soul still cold, in order, one request at a time.
//!
//! Invariant: warming never delays a real request. It starts only when no task is
//! queued or running, a real request cancels the one in flight (a hook of the
//! runtime), and it runs only when the machine allows (on mains power, or the battery
//! above `[warm] min_battery`; a machine without a battery is on mains; not over a
//! metered connection unless `[warm] metered = true`), read by the `--when` checker.
//! Each warm request is reported as the events `warming` and `warm` (docs/events.md),
//! on `TaskEvent` with an empty task id, and kept for `familiar status`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use familiar_protocol::query::WarmState;
use serde_json::json;
use zbus::Connection;
use zbus::object_server::SignalEmitter;

use super::Shared;
use super::service::Service;
use crate::agent::warm::WarmError;
use crate::config::warm::WarmConfig;
use crate::snapshot::conditions::{Checker, Condition, Conditions};

/// After a wake-up, how long the warmer lets things settle: a reload swaps the runtime
/// just after it wakes the warmer, and a key press's task registers as active.
const SETTLE: Duration = Duration::from_secs(1);
/// While tasks run, how often the warmer looks whether they are done.
const BUSY_RECHECK: Duration = Duration::from_secs(2);
/// While the machine does not allow warming, how often it looks again.
const CONDITIONS_RECHECK: Duration = Duration::from_secs(300);

/// Starts the warmer for the daemon's life (it ends with the runtime).
pub fn spawn(shared: Arc<Shared>, conn: &Connection) {
    let emitter = match SignalEmitter::new(conn, familiar_protocol::PATH) {
        Ok(e) => e.into_owned(),
        Err(e) => {
            tracing::warn!("no warming of the souls' prefixes: {e}");
            return;
        }
    };
    tokio::spawn(run(shared, emitter));
}

async fn run(shared: Arc<Shared>, emitter: SignalEmitter<'static>) {
    let checker = Checker::connect().await;
    loop {
        tokio::time::sleep(SETTLE).await;
        while shared.active.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(BUSY_RECHECK).await;
        }
        let rt = shared.runtime.get();
        let warmth = rt.services.warm.clone();
        let cold: Vec<_> = rt
            .settings
            .config
            .warm
            .souls
            .iter()
            .filter(|s| warmth.is_cold(s.as_str()))
            .collect();
        if !cold.is_empty() {
            match machine_forbids(&checker, &rt.settings.config.warm).await {
                None => {
                    for soul_id in cold {
                        if shared.active.load(Ordering::SeqCst) > 0 {
                            break;
                        }
                        warm_one(&shared, &emitter, soul_id.as_str()).await;
                    }
                }
                Some(why) => {
                    for s in cold {
                        warmth.set(s.as_str(), WarmState::Skipped, Some(why.clone()));
                    }
                    tracing::debug!("not warming the souls' prefixes now: {why}");
                    tokio::select! {
                        () = warmth.woken() => {}
                        () = tokio::time::sleep(CONDITIONS_RECHECK) => {}
                    }
                    continue;
                }
            }
        }
        // Start-up and warming are over: the idle daemon keeps only the code it runs.
        if shared.active.load(Ordering::SeqCst) == 0 {
            super::trim::release_code();
        }
        warmth.woken().await;
    }
}

/// `None` when on mains power (or the battery above the threshold) and, unless
/// allowed, not metered; else the unmet conditions in words.
async fn machine_forbids(checker: &Checker, config: &WarmConfig) -> Option<String> {
    let mut power = vec![Condition::Ac];
    let mut battery = vec![Condition::BatteryAbove(config.min_battery)];
    if !config.metered {
        power.push(Condition::Unmetered);
        battery.push(Condition::Unmetered);
    }
    let (first, _) = checker.check(&Conditions(power)).await;
    let first = first?;
    let (second, _) = checker.check(&Conditions(battery)).await;
    second.map(|second| format!("{first}; {second}"))
}

/// Warms one soul of the current runtime and reports it.
async fn warm_one(shared: &Shared, emitter: &SignalEmitter<'static>, soul_id: &str) {
    let rt = shared.runtime.get();
    let soul = match rt.settings.souls.get(soul_id) {
        Ok(s) => Arc::clone(s),
        Err(e) => {
            rt.services
                .warm
                .set(soul_id, WarmState::Skipped, Some(e.to_string()));
            return;
        }
    };
    let model = rt
        .settings
        .config
        .model_for(soul.provider.as_deref(), soul.model.as_deref())
        .map(str::to_owned)
        .unwrap_or_default();
    let who = json!({"soul": soul_id, "provider": soul.provider.as_deref().unwrap_or(&rt.settings.config.default_provider), "model": model});
    let prepared = match crate::agent::warm::prepare(&rt, &soul) {
        Ok(p) => p,
        // A soul warming does not apply to says nothing but in `familiar status`.
        Err(e) => {
            rt.services
                .warm
                .set(soul_id, WarmState::Skipped, Some(e.to_string()));
            tracing::debug!(soul = soul_id, "not warming: {e}");
            return;
        }
    };
    emit(emitter, "warming", &who).await;
    let outcome = crate::agent::warm::warm(&rt, soul_id, prepared).await;
    let mut done = who;
    match outcome {
        Ok(w) => {
            tracing::info!(
                soul = soul_id,
                prompt_tokens = w.prompt_tokens,
                cached = w.cached_tokens,
                ms = w.ms,
                "warmed the soul's prefix"
            );
            done["outcome"] = json!("warm");
            done["prompt_tokens"] = json!(w.prompt_tokens);
            done["cached_tokens"] = json!(w.cached_tokens);
            done["ms"] = json!(w.ms);
        }
        Err(e) => {
            let outcome = if matches!(e, WarmError::Cancelled) {
                "cancelled"
            } else {
                "failed"
            };
            tracing::info!(soul = soul_id, "the soul's prefix was not warmed: {e}");
            done["outcome"] = json!(outcome);
            done["reason"] = json!(e.to_string());
        }
    }
    emit(emitter, "warm", &done).await;
}

async fn emit(emitter: &SignalEmitter<'static>, kind: &str, payload: &serde_json::Value) {
    if let Err(e) = Service::task_event(emitter, "", kind, &payload.to_string()).await {
        tracing::debug!("cannot emit the {kind} event: {e}");
    }
}
