//! What the servers' own counts taught earlier tasks, per provider and model: the
//! estimator's ratio and a context size smaller than the configured one. A task starts
//! from it, so its first request is sized by the server's tokenizer and limit, and hands
//! back what it learned when it ends. It lives in the runtime's settings
//! ([`crate::agent::Settings`]): the daemon's until it restarts or a reload changes its
//! providers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// One provider and model's calibration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Learned {
    /// The estimator's factor (see `llm::tokens`).
    pub factor: f64,
    /// The context size a task ended with (the server's, when it said it was smaller).
    pub context_window: u32,
}

/// Every provider and model's calibration, shared by a process's tasks.
#[derive(Debug, Clone, Default)]
pub struct Calibrations(Arc<Mutex<HashMap<String, Learned>>>);

impl Calibrations {
    /// What earlier tasks learned about `key`.
    pub fn get(&self, key: &str) -> Option<Learned> {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.get(key).copied()
    }

    /// Keeps what a task learned about `key` for the next.
    pub fn remember(&self, key: String, learned: Learned) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.insert(key, learned);
    }
}

/// The key of a provider's model: its name, address and model.
pub fn key(provider: &str, base_url: &str, model: &str) -> String {
    format!("{provider} {base_url} {model}")
}
