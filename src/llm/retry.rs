//! Retry policy: which waits to use between attempts, and how to wait.
//!
//! Exponential backoff with jitter (base 1 s, cap 30 s, `backon`'s schedule) unless the
//! server said how long to wait (`Retry-After`, `retry-after-ms`), which is honoured as
//! given. The wait itself goes through a [`Sleeper`] so tests run with no delay and
//! still see every delay that would have been used (each is reported in a `Retry`
//! event).
//!
//! Only the schedule is `backon`'s: its retry loop (`Retryable`) retries a future that
//! either succeeds or fails, while ours retries a stream that may fail after it emitted
//! events, reports each retry as an event, falls back to another model with retries of
//! its own, and waits under the task's cancellation token (`llm::client`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use futures::future::BoxFuture;

use super::LlmError;
use crate::config::{DEFAULT_MAX_RETRIES, ProviderConfig};

pub const BACKOFF_BASE: Duration = Duration::from_secs(1);
pub const BACKOFF_CAP: Duration = Duration::from_secs(30);

/// How to wait between attempts.
#[derive(Clone)]
pub struct Sleeper(Arc<dyn Fn(Duration) -> BoxFuture<'static, ()> + Send + Sync>);

impl fmt::Debug for Sleeper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Sleeper")
    }
}

impl Sleeper {
    /// Really waits (tokio's timer).
    pub fn tokio() -> Self {
        Sleeper(Arc::new(|d| Box::pin(tokio::time::sleep(d))))
    }

    /// Never waits: for tests, which assert the delays from the `Retry` events.
    pub fn none() -> Self {
        Sleeper(Arc::new(|_| Box::pin(std::future::ready(()))))
    }

    pub fn new(f: impl Fn(Duration) -> BoxFuture<'static, ()> + Send + Sync + 'static) -> Self {
        Sleeper(Arc::new(f))
    }

    pub(crate) fn sleep(&self, d: Duration) -> BoxFuture<'static, ()> {
        (self.0)(d)
    }
}

/// When and how often to try again.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Retries after the first attempt (so `max_retries + 1` attempts in all).
    pub max_retries: u32,
    pub base: Duration,
    pub cap: Duration,
    /// Spread waits over [d/2, d] so clients that failed together do not retry together.
    pub jitter: bool,
    pub sleeper: Sleeper,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: DEFAULT_MAX_RETRIES,
            base: BACKOFF_BASE,
            cap: BACKOFF_CAP,
            jitter: true,
            sleeper: Sleeper::tokio(),
        }
    }
}

impl RetryPolicy {
    pub fn from_config(cfg: &ProviderConfig) -> Self {
        RetryPolicy {
            max_retries: cfg.max_retries,
            ..RetryPolicy::default()
        }
    }

    /// The wait before retry number `retry` (1-based) after `err`.
    pub fn delay(&self, retry: u32, err: &LlmError) -> Duration {
        if let Some(d) = err.retry_after() {
            return d;
        }
        let nth = usize::try_from(retry.saturating_sub(1)).unwrap_or(usize::MAX);
        self.backoff().nth(nth).unwrap_or(self.cap)
    }

    /// The waits for retries 1, 2, …, with no end: the client counts the retries (a
    /// refused local connection gets fewer, and a fallback starts over).
    fn backoff(&self) -> impl Iterator<Item = Duration> {
        let builder = ExponentialBuilder::new().without_max_times();
        if self.jitter {
            // backon's jitter adds up to the whole delay again, [d, 2d); from half the
            // base and half the cap that is our [d/2, d], and no wait passes the cap.
            builder
                .with_min_delay(self.base / 2)
                .with_max_delay(self.cap / 2)
                .with_jitter()
                .build()
        } else {
            builder
                .with_min_delay(self.base)
                .with_max_delay(self.cap)
                .build()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> LlmError {
        LlmError::Server {
            status: 500,
            message: "x".into(),
            retry_after: None,
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let p = RetryPolicy {
            jitter: false,
            ..RetryPolicy::default()
        };
        let delays: Vec<u64> = (1..=7).map(|n| p.delay(n, &server()).as_secs()).collect();
        assert_eq!(delays, vec![1, 2, 4, 8, 16, 30, 30]);
    }

    #[test]
    fn jitter_stays_within_half_to_full() {
        let p = RetryPolicy::default();
        for n in 1..=6 {
            let full = p.base.saturating_mul(1 << (n - 1)).min(p.cap);
            let d = p.delay(n, &server());
            assert!(d >= full / 2 && d <= full, "retry {n}: {d:?}");
        }
    }

    #[test]
    fn retry_after_wins_over_backoff() {
        let p = RetryPolicy::default();
        let err = LlmError::RateLimited {
            message: "slow down".into(),
            retry_after: Some(Duration::from_secs(3)),
        };
        assert_eq!(p.delay(1, &err), Duration::from_secs(3));
    }
}
