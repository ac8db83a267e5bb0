//! Building a [`Runtime`] from the user's configuration: the one construction shared by
//! `familiar run` (one task in-process) and `familiar daemon` (many tasks), so the two
//! can never drift apart in which hooks, tools or limits a task runs under.

use std::sync::{Arc, Mutex};

use crate::agent::hooks::{AuditHook, MetricsHook};
use crate::agent::metrics::Metrics;
use crate::agent::{ConfigLlmFactory, Runtime};
use crate::approval::ApprovalBroker;
use crate::config::Config;
use crate::policy::Policy;
use crate::ratelimit::RateLimiters;
use crate::sandbox::{SandboxError, SandboxLauncher};
use crate::snapshot::{SnapshotError, Snapshotter};
use crate::store::{Store, StoreError};
use crate::tools::Registry;

/// Why a runtime could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    // The store error follows as the source; repeating it here printed it twice.
    #[error("cannot open the data dir")]
    Store(#[from] StoreError),
    #[error("cannot read the system state: {0}")]
    Snapshot(#[from] SnapshotError),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
}

impl Runtime {
    /// The runtime for `config` under `policy`: the data dir's store, the built-in tools,
    /// the audit and metrics hooks, fresh limiters and counters, and model clients from
    /// `config.toml`'s providers. Approval frontends are added to the returned broker by
    /// the caller (the TTY for `familiar run`, D-Bus and notifications for the daemon).
    pub fn from_config(config: Arc<Config>, policy: Arc<Policy>) -> Result<Runtime, RuntimeError> {
        let store = Arc::new(Store::open(&config.paths.data_dir)?);
        let snapshotter = Snapshotter::new()?;
        let metrics = Arc::new(Metrics::default());
        Ok(Runtime {
            llm: Arc::new(ConfigLlmFactory::new(Arc::clone(&config))),
            hooks: vec![
                Arc::new(AuditHook {
                    store: Arc::clone(&store),
                }),
                Arc::new(MetricsHook {
                    metrics: Arc::clone(&metrics),
                }),
            ],
            approvals: ApprovalBroker::new(policy.approval_timeout),
            config,
            policy,
            store,
            tools: Arc::new(Registry::builtin()),
            limiters: Arc::new(RateLimiters::new()),
            metrics,
            snapshotter: Arc::new(Mutex::new(snapshotter)),
            launcher: Arc::new(SandboxLauncher::current()?),
            enforcement: crate::sandbox::probe(),
        })
    }
}
