//! What the tasks of one process share ([`Runtime`]), how a task gets its model client
//! ([`LlmFactory`]), and building both from the user's configuration: the one
//! construction shared by `familiar run` (one task in-process) and `familiar daemon`
//! (many tasks), so the two can never drift apart in which hooks, tools or limits a task
//! runs under.

use std::sync::{Arc, Mutex, OnceLock};

use crate::agent::context::learned::Calibrations;
use crate::agent::hooks::{AuditHook, Hooks, MetricsHook};
use crate::agent::metrics::Metrics;
use crate::agent::warm::state::Warmth;
use crate::approval::ApprovalBroker;
use crate::config::Config;
use crate::llm::{LlmClient, LlmError};
use crate::mcp::McpHub;
use crate::policy::Policy;
use crate::ratelimit::RateLimiters;
use crate::sandbox::plan::PlanCache;
use crate::sandbox::{Enforcement, SandboxError, SandboxLauncher};
use crate::snapshot::{SnapshotError, Snapshotter};
use crate::soul::{Soul, SoulSet};
use crate::store::{Memory, Store, StoreError};
use crate::tools::Registry;

/// What tasks of one process share.
pub struct Runtime {
    pub config: Arc<Config>,
    pub policy: Arc<Policy>,
    pub store: Arc<Store>,
    pub tools: Arc<Registry>,
    pub limiters: Arc<RateLimiters>,
    pub approvals: ApprovalBroker,
    pub metrics: Arc<Metrics>,
    pub snapshotter: Arc<Mutex<Snapshotter>>,
    pub hooks: Vec<Arc<dyn Hooks>>,
    pub llm: Arc<dyn LlmFactory>,
    /// Starts the sandboxed helper for tools.
    pub launcher: Arc<SandboxLauncher>,
    /// Sandbox plans shared by tasks: a soul and workspace used again start with their
    /// plan made (docs/sandbox.md).
    pub plans: PlanCache,
    /// What the kernel enforces ([`crate::sandbox::probe`], taken once).
    pub enforcement: Enforcement,
    /// Every soul, for `delegate` to find the one a task hands a sub-task to.
    pub souls: Arc<SoulSet>,
    /// Long-term memory (`data_dir/memory.json`).
    pub memory: Memory,
    /// The MCP servers of `config.toml`, started when a task first uses one and kept
    /// for the process's life ([`McpHub::shutdown`] when it ends).
    pub mcp: Arc<McpHub>,
    /// What the model servers' counts taught earlier tasks (their token ratio and
    /// context size), per provider and model.
    pub calibrations: Calibrations,
    /// Where each soul's prefix stands on its model server (also one of the `hooks`:
    /// a real request cancels a warm one, a lost cache makes the soul cold).
    pub warm: Warmth,
}

/// Builds a model client for a soul.
pub trait LlmFactory: Send + Sync {
    /// The client, the model name requests use, and that model's context window.
    fn client(&self, soul: &Soul) -> Result<(LlmClient, String, u32), LlmError>;
}

/// The factory that reads `config.toml`'s providers and the process environment.
///
/// Its tasks share one HTTP client (built on first use): the TLS roots are loaded once
/// per process and connections to the model server stay alive from task to task. A
/// runtime lives on one tokio runtime, which the client's pooled connections need.
pub struct ConfigLlmFactory {
    config: Arc<Config>,
    http: OnceLock<reqwest::Client>,
}

impl ConfigLlmFactory {
    pub fn new(config: Arc<Config>) -> Self {
        ConfigLlmFactory {
            config,
            http: OnceLock::new(),
        }
    }

    fn http(&self) -> Result<reqwest::Client, LlmError> {
        if let Some(c) = self.http.get() {
            return Ok(c.clone());
        }
        let client = crate::llm::new_client()?;
        // Two tasks racing here both build one; the first stored wins, which is fine.
        Ok(self.http.get_or_init(|| client).clone())
    }
}

impl LlmFactory for ConfigLlmFactory {
    fn client(&self, soul: &Soul) -> Result<(LlmClient, String, u32), LlmError> {
        let cfg = self
            .config
            .provider(soul.provider.as_deref())
            .map_err(|e| LlmError::Config(e.to_string()))?;
        let providers = &self.config.providers;
        let client = LlmClient::from_config_with(
            cfg,
            &crate::config::ProcessEnv,
            &|name| {
                providers
                    .get(name)
                    .or_else(|| crate::config::providers::builtin_provider(name))
                    .cloned()
            },
            &self.http()?,
        )?;
        let model = self
            .config
            .model_for(soul.provider.as_deref(), soul.model.as_deref())
            .map_err(|e| LlmError::Config(e.to_string()))?
            .to_owned();
        Ok((client, model, cfg.context_window))
    }
}

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
    /// The runtime for `config` under `policy` with `souls`: the data dir's store and
    /// memory, the built-in tools, the audit and metrics hooks, fresh limiters and
    /// counters, and model clients from `config.toml`'s providers. Approval frontends are
    /// added to the returned broker by the caller (the TTY for `familiar run`, D-Bus and
    /// notifications for the daemon).
    pub fn from_config(
        config: Arc<Config>,
        policy: Arc<Policy>,
        souls: Arc<SoulSet>,
    ) -> Result<Runtime, RuntimeError> {
        let store = Arc::new(Store::open(&config.paths.data_dir)?);
        let memory = Memory::new(store.data_dir(), config.memory.max_entries_per_scope);
        let snapshotter = Snapshotter::new()?;
        let metrics = Arc::new(Metrics::default());
        let launcher = Arc::new(SandboxLauncher::current()?);
        let mcp = Arc::new(McpHub::new(
            &config.mcp,
            SandboxLauncher::clone(&launcher),
            policy.protected_paths.clone(),
            config.paths.data_dir.join("mcp"),
            config.paths.home.clone(),
        ));
        let warm = Warmth::default();
        Ok(Runtime {
            llm: Arc::new(ConfigLlmFactory::new(Arc::clone(&config))),
            hooks: vec![
                Arc::new(warm.clone()),
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
            launcher,
            plans: PlanCache::default(),
            enforcement: crate::sandbox::probe(),
            souls,
            memory,
            mcp,
            calibrations: Calibrations::default(),
            warm,
        })
    }
}
