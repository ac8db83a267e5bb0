//! A daemon on a private bus with a client's proxy ([`Fixture`], made by
//! [`Fixture::builder`] or [`Fixture::new`]), its runtime wired to the loopback model
//! through a [`Harness`]; and [`Watch`], one client's signal streams, opened before a
//! Submit so no signal is missed.

use std::path::PathBuf;
use std::sync::Arc;

use familiar::catalog::ToolInfo;
use familiar::daemon::{Daemon, DaemonOptions};
use familiar::soul::{PromptSource, SoulOrigin, SoulSet};
use familiar::tools::{Tool, ToolContext, ToolError};
use familiar_protocol::proxy::Agent1Proxy;
use futures::FutureExt;
use futures::StreamExt;
use futures::future::BoxFuture;

use crate::common::PATIENCE;
use crate::common::bus::TestBus;
use crate::common::harness::{Harness, builtin_plus};
use crate::common::llm_server::Reply;

/// A daemon on a private bus, and a client connection to it.
pub struct Fixture {
    pub bus: TestBus,
    pub harness: Harness,
    pub daemon: Option<Daemon>,
    pub proxy: Agent1Proxy<'static>,
}

pub const TEST_SOUL: &str = "id = \"test\"\ndescription = \"a test soul\"\nprompt = \"You are a test soul.\"\nmax_iterations = 5\ntools = [\"read_file\", \"list_dir\", \"write_file\"]\n";

/// How a [`Fixture`] is made: the model's script, then only what a test changes.
#[must_use]
pub struct FixtureBuilder {
    script: Vec<Reply>,
    config: String,
    policy: String,
    options: DaemonOptions,
    souls: Vec<(String, String)>,
    tools: Vec<Arc<dyn Tool>>,
    bus: Option<TestBus>,
}

impl FixtureBuilder {
    /// Appended to the config after `[providers.local]`'s lines, so it may add to that
    /// table or open one of its own (`[daemon]`).
    pub fn config(mut self, extra: &str) -> Self {
        self.config = extra.to_owned();
        self
    }

    /// The policy file's text (empty: the built-in defaults).
    pub fn policy(mut self, src: &str) -> Self {
        self.policy = src.to_owned();
        self
    }

    pub fn options(mut self, options: DaemonOptions) -> Self {
        self.options = options;
        self
    }

    /// A soul besides `test` and `safe_assistant`, from its file `ID.toml`'s text
    /// (which names its `id`).
    pub fn soul(mut self, id: &str, toml: &str) -> Self {
        self.souls.push((id.to_owned(), toml.to_owned()));
        self
    }

    /// Tools besides the builtin ones and the test `write_file`.
    pub fn tools(mut self, tools: Vec<Arc<dyn Tool>>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// On a bus the test started (to name its socket in a soul), not a new one.
    pub fn on(mut self, bus: TestBus) -> Self {
        self.bus = Some(bus);
        self
    }

    /// The daemon served on the bus, and the client's proxy.
    pub async fn start(self) -> Fixture {
        let bus = self.bus.unwrap_or_else(TestBus::start);
        // The daemon's log goes to the test's captured output (shown when it fails).
        tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter("familiar=debug")
            .try_init()
            .ok();
        let harness = Harness::builder(self.script)
            .provider(&self.config)
            .policy(&self.policy)
            .build()
            .await;
        let mut souls = SoulSet::default();
        for id in ["test", "safe_assistant"] {
            let soul = familiar::soul::parse(
                "test.toml",
                id,
                &TEST_SOUL.replace("\"test\"", &format!("\"{id}\"")),
                PromptSource::BuiltIn,
                harness.home.path(),
                None,
                SoulOrigin::BuiltIn,
            )
            .unwrap();
            souls.souls.insert(id.to_owned(), std::sync::Arc::new(soul));
        }
        for (id, toml) in &self.souls {
            let soul = familiar::soul::parse(
                &format!("{id}.toml"),
                id,
                toml,
                PromptSource::BuiltIn,
                harness.home.path(),
                None,
                SoulOrigin::BuiltIn,
            )
            .unwrap();
            souls
                .souls
                .insert(soul.id.to_string(), std::sync::Arc::new(soul));
        }
        let mut extra: Vec<Arc<dyn Tool>> = vec![Arc::new(WriteFile)];
        extra.extend(self.tools);
        let tools = builtin_plus(extra);
        let rt = harness.runtime_with_souls(tools, souls);
        let daemon = Daemon::start(
            rt,
            zbus::connection::Builder::address(bus.address.as_str()),
            self.options,
        )
        .await
        .unwrap();
        // Uncached: a property read asks the daemon, as `busctl get-property` does. A
        // cached read after `task_finished` could still hold the value from before it
        // (the cache follows PropertiesChanged, which the supervisor emits later).
        let proxy = Agent1Proxy::builder(&bus.connect().await)
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await
            .unwrap();
        Fixture {
            bus,
            harness,
            daemon: Some(daemon),
            proxy,
        }
    }
}

impl Fixture {
    /// The defaults: the loopback model playing `script`, the built-in policy and
    /// config, the daemon's default options, the test souls and tools.
    pub async fn new(script: Vec<Reply>) -> Fixture {
        Fixture::builder(script).start().await
    }

    /// A fixture whose model plays `script`; the builder's methods change the rest.
    pub fn builder(script: Vec<Reply>) -> FixtureBuilder {
        FixtureBuilder {
            script,
            config: String::new(),
            policy: String::new(),
            options: DaemonOptions::default(),
            souls: Vec::new(),
            tools: Vec::new(),
            bus: None,
        }
    }

    pub async fn submit(
        &self,
        soul: &str,
        prompt: &str,
    ) -> Result<(String, String), familiar_protocol::Error> {
        self.proxy.submit(soul, prompt, Default::default()).await
    }

    pub fn workspace(&self) -> PathBuf {
        self.harness.workspace()
    }
}

/// Subscribed signal streams of one client, opened before a Submit.
pub struct Watch {
    pub events: familiar_protocol::proxy::TaskEventStream,
    pub finished: familiar_protocol::proxy::TaskFinishedStream,
    pub approvals: familiar_protocol::proxy::ApprovalRequestedStream,
}

impl Watch {
    pub async fn new(proxy: &Agent1Proxy<'static>) -> Watch {
        Watch {
            events: proxy.receive_task_event().await.unwrap(),
            finished: proxy.receive_task_finished().await.unwrap(),
            approvals: proxy.receive_approval_requested().await.unwrap(),
        }
    }

    /// The task's (status, result) from its TaskFinished signal.
    pub async fn finished(&mut self, task: &str) -> (String, String) {
        tokio::time::timeout(PATIENCE, async {
            while let Some(sig) = self.finished.next().await {
                let a = sig.args().unwrap();
                if a.task_id == task {
                    return (a.status.clone(), a.result.clone());
                }
            }
            panic!("signal stream ended")
        })
        .await
        .expect("TaskFinished")
    }

    /// Every TaskEvent (kind, payload) of `task` up to its task_finished.
    pub async fn events(&mut self, task: &str) -> Vec<(String, serde_json::Value)> {
        tokio::time::timeout(PATIENCE, async {
            let mut all = Vec::new();
            while let Some(sig) = self.events.next().await {
                let a = sig.args().unwrap();
                if a.task_id != task {
                    continue;
                }
                let payload: serde_json::Value = serde_json::from_str(&a.payload_json).unwrap();
                let done = a.kind == "task_finished";
                all.push((a.kind.clone(), payload));
                if done {
                    return all;
                }
            }
            panic!("signal stream ended")
        })
        .await
        .expect("TaskEvents")
    }

    /// Waits for an event of `kind` of `task`.
    pub async fn event(&mut self, task: &str, kind: &str) -> serde_json::Value {
        tokio::time::timeout(PATIENCE, async {
            while let Some(sig) = self.events.next().await {
                let a = sig.args().unwrap();
                if a.task_id == task && a.kind == kind {
                    return serde_json::from_str(&a.payload_json).unwrap();
                }
            }
            panic!("signal stream ended")
        })
        .await
        .expect("TaskEvent")
    }

    /// The next ApprovalRequested of `task`: (request_id, tool, summary, tier).
    pub async fn approval(&mut self, task: &str) -> (String, String, String, String) {
        tokio::time::timeout(PATIENCE, async {
            while let Some(sig) = self.approvals.next().await {
                let a = sig.args().unwrap();
                if a.task_id == task {
                    return (
                        a.request_id.clone(),
                        a.tool.clone(),
                        a.summary.clone(),
                        a.tier.clone(),
                    );
                }
            }
            panic!("signal stream ended")
        })
        .await
        .expect("ApprovalRequested")
    }
}

/// `write_file` for the tests (a write-tier tool, so policies can ask about it).
struct WriteFile;

impl Tool for WriteFile {
    fn info(&self) -> &'static ToolInfo {
        familiar::catalog::info("write_file").unwrap()
    }
    fn description(&self) -> &'static str {
        "writes a file"
    }
    fn schema(&self) -> serde_json::Value {
        serde_json::json!({"type": "object"})
    }
    fn execute(
        &self,
        args: serde_json::Value,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<String, ToolError>> {
        async move {
            let path = ctx.resolve(args["path"].as_str().unwrap_or_default());
            std::fs::write(&path, args["content"].as_str().unwrap_or_default())
                .map_err(|e| ToolError::model(e.to_string()))?;
            Ok(format!("wrote {}", path.display()))
        }
        .boxed()
    }
}
