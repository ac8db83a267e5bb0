//! What a task runs under ([`Runtime`]), split by lifetime: the process's [`Services`]
//! (built once, kept until it exits) and the [`Settings`] read from the user's files
//! (config.toml, the policy, the souls: what a reload replaces). Also how a task gets
//! its model client ([`LlmFactory`]). The one construction shared by `familiar run`
//! (one task in-process) and `familiar daemon` (many tasks), so the two can never drift
//! apart in which hooks, tools or limits a task runs under.
//!
//! Invariant: nothing in [`Services`] depends on what a reload can change; a task holds
//! the [`Settings`] it started with to its end, whatever is reloaded meanwhile.

mod settings;

pub use settings::{Reloaded, Settings};

use std::sync::{Arc, Mutex, OnceLock};

use familiar_sandbox::status::Enforcement;

use crate::agent::hooks::{AuditHook, Hooks, MetricsHook};
use crate::agent::metrics::Metrics;
use crate::agent::warm::state::Warmth;
use crate::approval::ApprovalBroker;
use crate::config::Config;
use crate::llm::{LlmClient, LlmError};
use crate::policy::Policy;
use crate::ratelimit::RateLimiters;
use crate::sandbox::plan::PlanCache;
use crate::sandbox::{SandboxError, SandboxLauncher};
use crate::snapshot::{SnapshotError, Snapshotter};
use crate::soul::{Soul, SoulSet};
use crate::store::{Store, StoreError};
use crate::tools::Registry;

/// What a task runs under: the process's services and the settings in force when it
/// started. The daemon holds one at a time and swaps its settings on a reload
/// (`daemon::reload`); `familiar run` builds one for its task.
#[derive(Clone)]
pub struct Runtime {
    pub services: Arc<Services>,
    pub settings: Arc<Settings>,
}

/// What lives as long as the process: opened or probed once, never replaced by a
/// reload.
pub struct Services {
    /// The data dir's sessions, tasks and audit log (its place is fixed at start:
    /// a changed `data_dir` waits for a restart).
    pub store: Arc<Store>,
    pub tools: Arc<Registry>,
    pub limiters: Arc<RateLimiters>,
    /// Asks people; its frontends are added by the caller (the TTY for `familiar run`,
    /// D-Bus and notifications for the daemon), its timeout follows the policy.
    pub approvals: ApprovalBroker,
    pub metrics: Arc<Metrics>,
    pub snapshotter: Arc<Mutex<Snapshotter>>,
    pub hooks: Vec<Arc<dyn Hooks>>,
    /// Starts the sandboxed helper for tools.
    pub launcher: Arc<SandboxLauncher>,
    /// Sandbox plans shared by tasks: a soul and workspace used again start with their
    /// plan made (docs/sandbox.md).
    pub plans: PlanCache,
    /// What the kernel enforces ([`familiar_sandbox::status::probe`], taken once).
    pub enforcement: Enforcement,
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

impl Services {
    /// The services of a process reading `config` under `policy`: the data dir's store,
    /// the built-in tools, the audit and metrics hooks, fresh limiters and counters.
    pub fn open(config: &Config, policy: &Policy) -> Result<Services, RuntimeError> {
        let store = Arc::new(Store::open(&config.paths.data_dir)?);
        let snapshotter = Snapshotter::new()?;
        let metrics = Arc::new(Metrics::default());
        let warm = Warmth::default();
        Ok(Services {
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
            store,
            tools: Arc::new(Registry::builtin()),
            limiters: Arc::new(RateLimiters::new()),
            metrics,
            snapshotter: Arc::new(Mutex::new(snapshotter)),
            launcher: Arc::new(SandboxLauncher::current()?),
            plans: PlanCache::default(),
            enforcement: familiar_sandbox::status::probe(),
            warm,
        })
    }
}

impl Runtime {
    /// The runtime for `config` under `policy` with `souls`: [`Services::open`], and
    /// settings whose model clients come from `config.toml`'s providers. Approval
    /// frontends are added to the services' broker by the caller.
    pub fn from_config(
        config: Arc<Config>,
        policy: Arc<Policy>,
        souls: Arc<SoulSet>,
    ) -> Result<Runtime, RuntimeError> {
        let services = Arc::new(Services::open(&config, &policy)?);
        let settings = Arc::new(Settings::new(config, policy, souls, &services));
        Ok(Runtime { services, settings })
    }

    /// The same services under other settings (a reload's).
    pub fn with_settings(&self, settings: Arc<Settings>) -> Runtime {
        Runtime {
            services: Arc::clone(&self.services),
            settings,
        }
    }
}

#[cfg(test)]
impl Services {
    /// Services over `data_dir` for unit tests: no helper binary (a tool call cannot
    /// start), no Hyprland, no hooks.
    pub(crate) fn for_tests(data_dir: &std::path::Path) -> Services {
        Services {
            store: Arc::new(Store::open(data_dir).expect("a data dir for the test")),
            tools: Arc::new(Registry::builtin()),
            limiters: Arc::new(RateLimiters::new()),
            approvals: ApprovalBroker::new(std::time::Duration::from_secs(60)),
            metrics: Arc::default(),
            snapshotter: Arc::new(Mutex::new(
                Snapshotter::with_hyprland(None).expect("/proc for the test"),
            )),
            hooks: Vec::new(),
            launcher: Arc::new(SandboxLauncher::new("/nonexistent/familiar-sandbox")),
            plans: PlanCache::default(),
            enforcement: familiar_sandbox::status::probe(),
            warm: Warmth::default(),
        }
    }
}
