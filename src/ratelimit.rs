//! governor rate limiters keyed by (scope, key).
//!
//! A limit is a [`RateSpec`] (`"30/min"`) that applies within a [`RateScope`] to one key:
//! a session, a (session, tool) pair, a D-Bus caller, or the whole daemon. Souls and
//! policies may set different specs for the same scope, so limiters are kept per
//! (scope, spec) and each holds one GCRA cell per key; when both a soul and the policy
//! limit a scope, both are checked and either can refuse. Memory stays bounded:
//! every [`PRUNE_EVERY`] checks, keys whose cells are back to full are dropped.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use familiar_protocol::events::RateScope;
use governor::clock::{Clock, MonotonicClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};

use crate::policy::RateSpec;

/// Prune idle keys after this many checks.
pub const PRUNE_EVERY: u64 = 256;

/// A refused check: which limit, and when the next call would pass.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize)]
pub struct RateLimited {
    pub scope: RateScope,
    pub key: String,
    #[serde(serialize_with = "ser_spec")]
    pub spec: RateSpec,
    pub retry_after: Duration,
}

fn ser_spec<S: serde::Serializer>(spec: &RateSpec, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(spec)
}

impl fmt::Display for RateLimited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rate limit reached: at most {} {}; slow down and retry in {:.1}s",
            self.spec,
            self.scope.as_str(),
            self.retry_after.as_secs_f64()
        )
    }
}

type Keyed<C> =
    RateLimiter<String, DefaultKeyedStateStore<String>, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// One keyed limiter per (scope, count, period).
type LimiterMap<C> = HashMap<(RateScope, u32, Duration), Arc<Keyed<C>>>;

/// All limiters of one process. The clock is std's `Instant`: governor's default,
/// quanta's TSC clock, spends ~10 ms of CPU calibrating when the first one is made
/// (Cargo.toml), and a check is a few a minute.
pub struct RateLimiters<C: Clock = MonotonicClock> {
    clock: C,
    limiters: Mutex<LimiterMap<C>>,
    checks: AtomicU64,
}

impl RateLimiters<MonotonicClock> {
    pub fn new() -> Self {
        Self::with_clock(MonotonicClock)
    }
}

impl Default for RateLimiters<MonotonicClock> {
    fn default() -> Self {
        Self::new()
    }
}

/// `count` per `per`, all of it available at once (a burst of `count`).
fn quota(spec: RateSpec) -> Quota {
    let per_cell = spec.per / spec.count.get();
    Quota::with_period(per_cell.max(Duration::from_nanos(1)))
        .unwrap_or_else(|| Quota::per_second(spec.count))
        .allow_burst(spec.count)
}

impl<C: Clock + Clone> RateLimiters<C> {
    /// With a given clock (tests use governor's `FakeRelativeClock`).
    pub fn with_clock(clock: C) -> Self {
        RateLimiters {
            clock,
            limiters: Mutex::new(HashMap::new()),
            checks: AtomicU64::new(0),
        }
    }

    /// Takes one cell for `key` under `spec`, or says when one will be free.
    pub fn check(&self, scope: RateScope, key: &str, spec: RateSpec) -> Result<(), RateLimited> {
        let limiter = {
            // A poisoned lock only means another thread panicked mid-insert; the map is
            // still consistent (insert is the only mutation).
            let mut map = self.limiters.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(
                map.entry((scope, spec.count.get(), spec.per))
                    .or_insert_with(|| {
                        Arc::new(RateLimiter::new(
                            quota(spec),
                            DefaultKeyedStateStore::default(),
                            self.clock.clone(),
                        ))
                    }),
            )
        };
        let result = limiter
            .check_key(&key.to_owned())
            .map_err(|not_until| RateLimited {
                scope,
                key: key.to_owned(),
                spec,
                retry_after: not_until.wait_time_from(self.clock.now()),
            });
        if self.checks.fetch_add(1, Ordering::Relaxed) % PRUNE_EVERY == PRUNE_EVERY - 1 {
            self.prune();
        }
        result
    }

    /// Checks every `(scope, key, spec)` in order and stops at the first refusal.
    /// Cells taken before a refusal stay taken: a refused call still counts against
    /// the limits it passed, which errs on the side of slowing down.
    pub fn check_all<'a>(
        &self,
        checks: impl IntoIterator<Item = (RateScope, &'a str, RateSpec)>,
    ) -> Result<(), RateLimited> {
        for (scope, key, spec) in checks {
            self.check(scope, key, spec)?;
        }
        Ok(())
    }

    /// Drops keys whose cells have fully recovered.
    pub fn prune(&self) {
        let map = self.limiters.lock().unwrap_or_else(|e| e.into_inner());
        for limiter in map.values() {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
    }

    /// Keys tracked across all limiters (for tests and `familiar status`).
    pub fn tracked_keys(&self) -> usize {
        let map = self.limiters.lock().unwrap_or_else(|e| e.into_inner());
        map.values().map(|l| l.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use governor::clock::FakeRelativeClock;
    use proptest::prelude::*;

    use super::*;

    fn spec(s: &str) -> RateSpec {
        s.parse().unwrap()
    }

    #[test]
    fn a_burst_is_cut_at_the_limit_with_a_typed_reason() {
        let clock = FakeRelativeClock::default();
        let rl = RateLimiters::with_clock(clock.clone());
        let limit = spec("30/min");
        let passed = (0..100)
            .filter(|_| rl.check(RateScope::SessionTools, "s-1", limit).is_ok())
            .count();
        assert_eq!(passed, 30);
        let err = rl.check(RateScope::SessionTools, "s-1", limit).unwrap_err();
        assert_eq!(err.scope, RateScope::SessionTools);
        assert_eq!(err.retry_after, Duration::from_secs(2));
        assert!(
            err.to_string()
                .contains("at most 30/min tool calls per session")
        );
        clock.advance(Duration::from_secs(2));
        assert!(rl.check(RateScope::SessionTools, "s-1", limit).is_ok());
    }

    #[test]
    fn keys_and_scopes_are_independent() {
        let rl = RateLimiters::with_clock(FakeRelativeClock::default());
        let one = spec("1/min");
        assert!(rl.check(RateScope::SessionTool, "s-1/shell", one).is_ok());
        assert!(rl.check(RateScope::SessionTool, "s-1/shell", one).is_err());
        assert!(rl.check(RateScope::SessionTool, "s-2/shell", one).is_ok());
        assert!(rl.check(RateScope::SessionLlm, "s-1/shell", one).is_ok());
    }

    #[test]
    fn soul_and_policy_limits_both_apply() {
        let rl = RateLimiters::with_clock(FakeRelativeClock::default());
        let soul = spec("2/min");
        let policy = spec("5/min");
        let both = || {
            [
                (RateScope::SessionTools, "s", soul),
                (RateScope::SessionTools, "s", policy),
            ]
        };
        assert!(rl.check_all(both()).is_ok());
        assert!(rl.check_all(both()).is_ok());
        assert_eq!(rl.check_all(both()).unwrap_err().spec, soul);
    }

    #[test]
    fn idle_keys_are_pruned_so_memory_stays_bounded() {
        let clock = FakeRelativeClock::default();
        let rl = RateLimiters::with_clock(clock.clone());
        let limit = spec("10/s");
        for i in 0..1000 {
            rl.check(RateScope::Submit, &format!("caller-{i}"), limit)
                .ok();
        }
        clock.advance(Duration::from_secs(5));
        rl.prune();
        assert_eq!(rl.tracked_keys(), 0);
    }

    proptest! {
        #[test]
        fn never_more_than_count_in_one_window(count in 1u32..50, calls in 1usize..200) {
            let rl = RateLimiters::with_clock(FakeRelativeClock::default());
            let limit = RateSpec { count: std::num::NonZeroU32::new(count).unwrap(), per: Duration::from_secs(60) };
            let passed = (0..calls).filter(|_| rl.check(RateScope::GlobalTools, "g", limit).is_ok()).count();
            prop_assert_eq!(passed, calls.min(count as usize));
        }
    }
}
