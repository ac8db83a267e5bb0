//! A runtime wired to a loopback model, a temp home and a test policy: [`Harness`], made
//! by [`Harness::builder`] (or [`Harness::new`] for the defaults), and the helpers the
//! agent tests share (scripted replies, test tools, what the model was sent).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use familiar::agent::events::{Delivery, EventBus};
use familiar::agent::hooks::{AuditHook, Hooks, MetricsHook};
use familiar::agent::metrics::Metrics;
use familiar::agent::{LlmFactory, Runtime, Services, Settings, TaskOutcome, TaskSpec, run_task};
use familiar::approval::ApprovalBroker;
use familiar::catalog::ToolInfo;
use familiar::config::Config;
use familiar::llm::{LlmClient, LlmError, RetryPolicy, Sleeper};
use familiar::policy::Policy;
use familiar::ratelimit::RateLimiters;
use familiar::sandbox::SandboxLauncher;
use familiar::snapshot::Snapshotter;
use familiar::soul::{PromptSource, Soul, SoulOrigin, SoulSet};
use familiar::store::{Memory, Store};
use familiar::tools::{Registry, Tool, ToolContext, ToolError};
use familiar_protocol::events::{Event, EventPayload};
use familiar_protocol::ids::{SessionId, TaskId};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::common::TestHome;
use crate::common::llm_server::*;

/// A model client with zero-delay retries, from the harness config.
struct TestLlm {
    config: Arc<Config>,
    env: BTreeMap<String, String>,
}

impl LlmFactory for TestLlm {
    fn client(&self, soul: &Soul) -> Result<(LlmClient, String, u32), LlmError> {
        // The soul's provider when the harness config has it (a per-task --provider),
        // else the loopback one.
        let cfg = self
            .config
            .provider(soul.provider.as_deref())
            .or_else(|_| self.config.provider(None))
            .unwrap();
        let providers = self.config.providers.clone();
        let client = LlmClient::from_config(cfg, &self.env, &|n| providers.get(n).cloned())?
            .with_retry(RetryPolicy {
                sleeper: Sleeper::none(),
                ..RetryPolicy::from_config(cfg)
            });
        let model = soul.model.clone().unwrap_or_else(|| cfg.model.clone());
        Ok((client, model, cfg.context_window))
    }
}

pub struct Harness {
    pub home: TestHome,
    pub server: LlmServer,
    pub store: Arc<Store>,
    pub config: Arc<Config>,
    pub policy: Arc<Policy>,
    pub approvals: ApprovalBroker,
    pub metrics: Arc<Metrics>,
    pub limiters: Arc<RateLimiters>,
    env: BTreeMap<String, String>,
}

/// A policy that allows every tier (tests that are not about asking).
pub const OPEN_POLICY: &str = "[tiers]\nread = \"allow\"\nwrite = \"allow\"\nexecute = \"allow\"\nsystem_critical = \"allow\"\n";

/// How a [`Harness`] is made: the model's script, then only what a test changes.
#[must_use]
pub struct HarnessBuilder {
    script: Vec<Reply>,
    provider: Provider,
    policy: String,
}

/// The `[providers.local]` table of a harness.
enum Provider {
    /// The loopback server's `base_url`, `model = "test-model"`, `max_retries = 2`, then
    /// these lines.
    Loopback(String),
    /// This table whole: a real server's `base_url` and model.
    Whole(String),
}

impl HarnessBuilder {
    /// Lines added to `[providers.local]` (after the loopback server's); they may also
    /// open tables of their own after it (`[daemon]`, `[desktop]`).
    pub fn provider(mut self, extra: &str) -> Self {
        self.provider = Provider::Loopback(extra.to_owned());
        self
    }

    /// `[providers.local]` is `provider` whole (a real server's `base_url` and model);
    /// the loopback server gets no request.
    pub fn against(mut self, provider: &str) -> Self {
        self.provider = Provider::Whole(provider.to_owned());
        self
    }

    /// The policy file's text (empty: the built-in defaults).
    pub fn policy(mut self, src: &str) -> Self {
        self.policy = src.to_owned();
        self
    }

    /// The harness, its model on loopback.
    pub async fn build(self) -> Harness {
        let server = LlmServer::start(self.script).await;
        Harness::serving(server, &self.provider, &self.policy)
    }

    /// The harness with the model at this machine's address on its network (what
    /// familiar counts as hosted: only loopback is local), or `None` after a visible
    /// skip where the machine has no such address.
    pub async fn hosted(self) -> Option<Harness> {
        // A UDP "connection" sends nothing: it only picks the address of the route out.
        let ip = std::net::UdpSocket::bind("0.0.0.0:0")
            .and_then(|s| s.connect("203.0.113.1:9").map(|()| s))
            .and_then(|s| s.local_addr())
            .ok()
            .map(|a| a.ip())
            .filter(|ip| !ip.is_loopback() && !ip.is_unspecified());
        let Some(ip) = ip else {
            crate::common::skip::skip("this machine has no address but loopback");
            return None;
        };
        let server = LlmServer::start_at(&ip.to_string(), self.script).await;
        Some(Harness::serving(server, &self.provider, &self.policy))
    }
}

impl Harness {
    /// The defaults: the loopback model playing `script`, the built-in policy.
    pub async fn new(script: Vec<Reply>) -> Harness {
        Harness::builder(script).build().await
    }

    /// A harness whose model plays `script`; the builder's methods change the rest.
    pub fn builder(script: Vec<Reply>) -> HarnessBuilder {
        HarnessBuilder {
            script,
            provider: Provider::Loopback(String::new()),
            policy: String::new(),
        }
    }

    fn serving(server: LlmServer, provider: &Provider, policy_src: &str) -> Harness {
        let provider = match provider {
            Provider::Loopback(extra) => format!(
                "base_url = \"{}/v1\"\nmodel = \"test-model\"\nmax_retries = 2\n{extra}",
                server.base
            ),
            Provider::Whole(table) => table.clone(),
        };
        let home = TestHome::new();
        let env: BTreeMap<String, String> = [
            ("HOME", home.path().display().to_string()),
            (
                "XDG_CONFIG_HOME",
                home.path().join(".config").display().to_string(),
            ),
            (
                "XDG_STATE_HOME",
                home.path().join(".local/state").display().to_string(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let src = format!("[providers.local]\n{provider}");
        // A file the daemon's reload can read again (it re-reads `config.source`), kept
        // out of the config dir so the `familiar` commands of a test use their own.
        let file = home.path().join("harness-config.toml");
        std::fs::write(&file, &src).unwrap();
        let config = Arc::new(Config::from_toml(file.to_str().unwrap(), &src, &env).unwrap());
        let policy = Arc::new(Policy::from_toml("test.toml", policy_src, home.path()).unwrap());
        let store = Arc::new(Store::open(&config.paths.data_dir).unwrap());
        Harness {
            approvals: ApprovalBroker::new(policy.approval_timeout),
            home,
            server,
            store,
            config,
            policy,
            metrics: Arc::new(Metrics::default()),
            limiters: Arc::new(RateLimiters::new()),
            env,
        }
    }

    /// A soul from TOML (`prompt` is added when missing).
    pub fn soul(&self, toml: &str) -> Arc<Soul> {
        let src = if toml.contains("prompt") {
            toml.to_owned()
        } else {
            format!("prompt = \"You are a test soul.\"\n{toml}")
        };
        Arc::new(
            familiar::soul::parse(
                "test.toml",
                "test",
                &src,
                PromptSource::BuiltIn,
                self.home.path(),
                None,
                SoulOrigin::BuiltIn,
            )
            .unwrap(),
        )
    }

    pub fn runtime(&self, tools: Registry) -> Arc<Runtime> {
        self.runtime_with(tools, SoulSet::default(), Vec::new())
    }

    /// A runtime whose `delegate` finds its souls in `souls`.
    pub fn runtime_with_souls(&self, tools: Registry, souls: SoulSet) -> Arc<Runtime> {
        self.runtime_with(tools, souls, Vec::new())
    }

    /// Like `runtime`, with `extra` hooks after the audit and metrics ones.
    pub fn runtime_with_hooks(&self, tools: Registry, extra: Vec<Arc<dyn Hooks>>) -> Arc<Runtime> {
        self.runtime_with(tools, SoulSet::default(), extra)
    }

    fn runtime_with(
        &self,
        tools: Registry,
        souls: SoulSet,
        extra: Vec<Arc<dyn Hooks>>,
    ) -> Arc<Runtime> {
        let mut hooks: Vec<Arc<dyn Hooks>> = vec![
            Arc::new(AuditHook {
                store: Arc::clone(&self.store),
            }),
            Arc::new(MetricsHook {
                metrics: Arc::clone(&self.metrics),
            }),
        ];
        hooks.extend(extra);
        let services = Services {
            store: Arc::clone(&self.store),
            tools: Arc::new(tools),
            limiters: Arc::clone(&self.limiters),
            approvals: self.approvals.clone(),
            metrics: Arc::clone(&self.metrics),
            snapshotter: Arc::new(Mutex::new(Snapshotter::with_hyprland(None).unwrap())),
            hooks,
            launcher: Arc::new(SandboxLauncher::new(env!("CARGO_BIN_EXE_familiar-sandbox"))),
            plans: familiar::sandbox::plan::PlanCache::default(),
            enforcement: familiar_sandbox::status::probe(),
            warm: Default::default(),
        };
        let settings = Settings {
            config: Arc::clone(&self.config),
            policy: Arc::clone(&self.policy),
            souls: Arc::new(souls),
            llm: Arc::new(TestLlm {
                config: Arc::clone(&self.config),
                env: self.env.clone(),
            }),
            memory: Memory::new(
                self.store.data_dir(),
                self.config.memory.max_entries_per_scope,
            ),
            calibrations: Default::default(),
            mcp: Arc::new(familiar::mcp::McpHub::new(
                &self.config.mcp,
                SandboxLauncher::new(env!("CARGO_BIN_EXE_familiar-sandbox")),
                self.policy.protected_paths.clone(),
                self.store.data_dir().join("mcp"),
                self.config.paths.home.clone(),
            )),
        };
        Arc::new(Runtime {
            services: Arc::new(services),
            settings: Arc::new(settings),
        })
    }

    pub fn spec(&self, soul: Arc<Soul>, prompt: &str, session: Option<SessionId>) -> TaskSpec {
        TaskSpec {
            steering: familiar::agent::steering::Steering::new(),
            task_id: TaskId::generate(),
            soul,
            prompt: prompt.to_owned(),
            session,
            workspace: Some(self.home.path().join("work")),
            origin: "test".into(),
            max_iterations: None,
            parent: None,
            when: None,
        }
    }

    /// Runs a task to the end and returns its outcome and every event.
    pub async fn run(&self, rt: Arc<Runtime>, spec: TaskSpec) -> (TaskOutcome, Vec<Arc<Event>>) {
        self.run_with(rt, spec, CancellationToken::new(), |_, _| {})
            .await
    }

    /// Like `run`, calling `on_event` for each event as it arrives (to cancel, say).
    pub async fn run_with(
        &self,
        rt: Arc<Runtime>,
        spec: TaskSpec,
        cancel: CancellationToken,
        mut on_event: impl FnMut(&Event, &CancellationToken) + Send + 'static,
    ) -> (TaskOutcome, Vec<Arc<Event>>) {
        let mut bus = EventBus::new();
        let mut rx = bus.subscribe(Delivery::Lossless);
        let c = cancel.clone();
        let collector = tokio::spawn(async move {
            let mut all = Vec::new();
            while let Some(e) = rx.recv().await {
                on_event(&e, &c);
                all.push(e);
            }
            all
        });
        let outcome = run_task(rt, spec, bus, cancel).await.unwrap();
        (outcome, collector.await.unwrap())
    }

    pub fn workspace(&self) -> std::path::PathBuf {
        self.home.path().join("work")
    }
}

/// A test tool under a catalog name, whose behaviour is a closure.
type ToolFn =
    dyn Fn(Value, ToolContext) -> BoxFuture<'static, Result<String, ToolError>> + Send + Sync;

struct FnTool {
    info: &'static ToolInfo,
    run: Arc<ToolFn>,
}

impl Tool for FnTool {
    fn info(&self) -> &'static ToolInfo {
        self.info
    }
    fn description(&self) -> &'static str {
        "test tool"
    }
    fn schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn execute(
        &self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<String, ToolError>> {
        (self.run)(args, ctx)
    }
}

pub fn fn_tool(
    info: &'static ToolInfo,
    run: impl Fn(Value, ToolContext) -> BoxFuture<'static, Result<String, ToolError>>
    + Send
    + Sync
    + 'static,
) -> Arc<dyn Tool> {
    Arc::new(FnTool {
        info,
        run: Arc::new(run),
    })
}

pub fn kinds(events: &[Arc<Event>]) -> Vec<&'static str> {
    events.iter().map(|e| e.kind()).collect()
}

pub fn count(events: &[Arc<Event>], kind: &str) -> usize {
    events.iter().filter(|e| e.kind() == kind).count()
}

/// An OpenAI-format reply with text only.
/// The `(tokens_before, tokens_after)` of each `compaction` event of `mode`, in order.
pub fn compactions(events: &[Arc<Event>], mode: &str) -> Vec<(u64, u64)> {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::Compaction {
                mode: m,
                tokens_before,
                tokens_after,
                ..
            } if m == mode => Some((*tokens_before, *tokens_after)),
            _ => None,
        })
        .collect()
}

pub fn text_reply(text: &str) -> Reply {
    Reply::sse(sse(vec![
        oa_text(text),
        oa_finish("stop"),
        oa_usage(100, 10),
        oa_done(),
    ]))
}

/// An OpenAI-format reply calling tools (id, name, args).
pub fn tools_reply(calls: &[(&str, &str, Value)]) -> Reply {
    let mut frames: Vec<String> = calls
        .iter()
        .enumerate()
        .map(|(i, (id, name, args))| oa_tool_call(i as u32, id, name, &args.to_string()))
        .collect();
    frames.extend([oa_finish("tool_calls"), oa_usage(100, 10), oa_done()]);
    Reply::sse(sse(frames))
}

/// The tool messages the model was sent in request `n` (OpenAI format).
pub fn tool_messages(server: &LlmServer, n: usize) -> Vec<Value> {
    server.requests()[n].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .cloned()
        .collect()
}

pub fn builtin_plus(extra: Vec<Arc<dyn Tool>>) -> Registry {
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    let builtin = Registry::builtin();
    for name in [
        "read_file",
        "list_dir",
        "write_file",
        "edit_file",
        "trash",
        "system_snapshot",
        "process_list",
    ] {
        if let Some(t) = builtin.get(name) {
            tools.push(Arc::clone(t));
        }
    }
    tools.extend(extra);
    Registry::with(tools)
}

pub fn write(path: &Path, text: &str) {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).unwrap();
    }
    std::fs::write(path, text).unwrap();
}
