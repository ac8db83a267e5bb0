//! The daemon end to end: a private `dbus-daemon` per test, the daemon served on it
//! with a runtime wired to the loopback model, driven by the zbus proxy and by real
//! clients (`busctl`, `gdbus`, the `familiar` binary). Tests wait for signals, never
//! for time.

mod bar;
mod cli;
mod data_dir;
mod doctor;
mod follow;
mod grants;
mod menus;
mod name;
mod notifications;
mod pinned;
mod reload;
mod resources;
mod service;
mod steering;
mod systemd;
mod unit_hardening;
mod user_manager;
mod warm;
mod when;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use familiar::catalog::ToolInfo;
use familiar::daemon::{Daemon, DaemonOptions};
use familiar::soul::{PromptSource, SoulOrigin, SoulSet};
use familiar::tools::{Tool, ToolContext, ToolError};
use familiar_protocol::proxy::Agent1Proxy;
use futures::FutureExt;
use futures::StreamExt;
use futures::future::BoxFuture;
use zbus::Connection;

use super::agent::harness::Harness;
use crate::common::llm_server::Reply;

/// Upper bound on any one wait: a safety net so a broken test fails instead of hanging,
/// never a timing assertion.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A private session bus, killed on drop.
pub struct TestBus {
    child: Child,
    pub address: String,
    _dir: tempfile::TempDir,
}

impl TestBus {
    pub fn start() -> TestBus {
        TestBus::start_with(None, &[])
    }

    /// A bus that activates services from `servicedir`, started with `env` (what an
    /// activated service inherits besides the bus address).
    pub fn start_with(
        servicedir: Option<&std::path::Path>,
        env: &[(&str, &std::ffi::OsStr)],
    ) -> TestBus {
        let dir = tempfile::tempdir().unwrap();
        // Reachable by other users: the test of the uid check connects as `nobody`.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let config = dir.path().join("bus.conf");
        std::fs::write(
            &config,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={}/bus</listen>
  <auth>EXTERNAL</auth>
  {}
  <policy context="default">
    <allow user="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"#,
                dir.path().display(),
                servicedir
                    .map(|d| format!("<servicedir>{}</servicedir>", d.display()))
                    .unwrap_or_default()
            ),
        )
        .unwrap();
        let mut cmd = Command::new("dbus-daemon");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("dbus-daemon must be installed for the daemon tests");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        TestBus {
            child,
            address: line.trim().to_owned(),
            _dir: dir,
        }
    }

    /// Stops the bus daemon now (SIGKILL), as a crashed or restarted bus would go.
    pub fn stop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }

    /// The bus's socket, from its `unix:path=…` address.
    pub fn socket_path(&self) -> PathBuf {
        let rest = self.address.strip_prefix("unix:path=").unwrap_or_default();
        PathBuf::from(rest.split(',').next().unwrap_or_default())
    }

    pub async fn connect(&self) -> Connection {
        zbus::connection::Builder::address(self.address.as_str())
            .build()
            .await
            .unwrap()
    }
}

impl Drop for TestBus {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

/// A daemon on a private bus, and a client connection to it.
pub struct Fixture {
    pub bus: TestBus,
    pub harness: Harness,
    pub daemon: Option<Daemon>,
    pub proxy: Agent1Proxy<'static>,
}

pub const TEST_SOUL: &str = "id = \"test\"\ndescription = \"a test soul\"\nprompt = \"You are a test soul.\"\nmax_iterations = 5\ntools = [\"read_file\", \"list_dir\", \"write_file\"]\n";

impl Fixture {
    pub async fn new(script: Vec<Reply>) -> Fixture {
        Fixture::with(script, "", "", DaemonOptions::default()).await
    }

    /// `config_extra` is appended to the config (after `[providers.local]`, so it may
    /// open a `[daemon]` table); `policy` is a policy file's text.
    pub async fn with(
        script: Vec<Reply>,
        config_extra: &str,
        policy: &str,
        options: DaemonOptions,
    ) -> Fixture {
        Fixture::custom(script, config_extra, policy, options, &[], Vec::new()).await
    }

    /// [`Fixture::with`], plus souls (TOML texts, each with its `id`) and tools.
    pub async fn custom(
        script: Vec<Reply>,
        config_extra: &str,
        policy: &str,
        options: DaemonOptions,
        extra_souls: &[(&str, &str)],
        extra_tools: Vec<Arc<dyn Tool>>,
    ) -> Fixture {
        let bus = TestBus::start();
        Fixture::custom_on(
            bus,
            script,
            config_extra,
            policy,
            options,
            extra_souls,
            extra_tools,
        )
        .await
    }

    /// [`Fixture::custom`] on a bus the test started (to name its socket in a soul).
    pub async fn custom_on(
        bus: TestBus,
        script: Vec<Reply>,
        config_extra: &str,
        policy: &str,
        options: DaemonOptions,
        extra_souls: &[(&str, &str)],
        extra_tools: Vec<Arc<dyn Tool>>,
    ) -> Fixture {
        // The daemon's log goes to the test's captured output (shown when it fails).
        tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter("familiar=debug")
            .try_init()
            .ok();
        let harness = Harness::with(script, config_extra, policy).await;
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
        for (id, toml) in extra_souls {
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
        extra.extend(extra_tools);
        let tools = super::agent::harness::builtin_plus(extra);
        let rt = harness.runtime_with_souls(tools, souls);
        let daemon = Daemon::start(
            rt,
            zbus::connection::Builder::address(bus.address.as_str()),
            options,
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

/// The D-Bus error name of a failed call.
pub fn error_name(r: Result<impl std::fmt::Debug, familiar_protocol::Error>) -> String {
    match r.expect_err("the call should fail") {
        familiar_protocol::Error::ZBus(e) => {
            familiar_protocol::proxy::method_error(&e)
                .unwrap_or_else(|| panic!("not an error reply: {e:?}"))
                .0
        }
        ours => zbus::DBusError::name(&ours).to_string(),
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

/// Sends SIGTERM to `pid`, as systemd does to stop the unit.
pub fn sigterm(pid: u32) {
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
}

/// Stops a daemon started as a child process with SIGTERM and returns its exit code.
pub async fn stop_daemon(mut child: std::process::Child) -> Option<i32> {
    sigterm(child.id());
    tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap()
        .code()
}
