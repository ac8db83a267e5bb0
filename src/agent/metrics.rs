//! Counters of what the loop did, shared by every task of a process (the D-Bus
//! `Metrics` property). Relaxed atomics: they are statistics, not synchronisation.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! metrics {
    ($($name:ident),* $(,)?) => {
        /// The counters of the D-Bus `Metrics` property (docs/dbus.md).
        #[derive(Debug, Default)]
        pub struct Metrics {
            $(pub $name: AtomicU64,)*
        }

        impl Metrics {
            /// Name → value, as the `Metrics` property (`a{st}`) reports them.
            pub fn snapshot(&self) -> BTreeMap<String, u64> {
                let mut m = BTreeMap::new();
                $(m.insert(stringify!($name).to_owned(), self.$name.load(Ordering::Relaxed));)*
                m
            }
        }
    };
}

metrics!(
    llm_requests,
    llm_failures,
    tool_executions,
    tool_failures,
    compactions,
    permission_denials,
    rate_limited,
    tasks_completed,
    tasks_failed,
    tasks_cancelled,
    tasks_skipped,
);

/// Adds one to a counter.
pub fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bus names them as the protocol crate does (`query::metrics`).
    #[test]
    fn the_counters_are_the_contracts_names() {
        let names: Vec<String> = Metrics::default().snapshot().into_keys().collect();
        let mut contract = familiar_protocol::query::metrics::ALL.map(str::to_owned);
        contract.sort();
        assert_eq!(names, contract);
    }

    #[test]
    fn snapshot_names_every_counter() {
        let m = Metrics::default();
        bump(&m.tool_executions);
        let s = m.snapshot();
        assert_eq!(s.len(), 11);
        assert_eq!(s["tasks_skipped"], 0);
        assert_eq!(s["tool_executions"], 1);
        assert_eq!(s["rate_limited"], 0);
    }
}
