//! Every configured MCP server and its connection: started lazily on first use, kept
//! while the daemon runs, restarted after a crash at most [`MAX_RESTARTS`] times.
//!
//! Invariant: at most one connection per server exists at a time (its slot's lock is
//! held while it starts), and a server that used up its restarts is not started again
//! until the daemon restarts; its calls fail with [`McpError::GaveUp`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::client::{McpConnection, McpTool};
use super::{McpError, stdio};
use crate::config::mcp::{McpServerConfig, McpTransport};
use crate::sandbox::{SandboxLauncher, SandboxPolicy, SandboxSpec};

/// Starts after the first one, per daemon run.
pub const MAX_RESTARTS: u32 = 3;
/// From spawning the server to its tool list.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);

/// What `familiar mcp list` shows of one server.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerView {
    pub name: String,
    /// `stdio: COMMAND ARGS` or `http: URL`.
    pub transport: String,
    pub state: ServerState,
    /// Empty unless it is running.
    pub tools: Vec<McpTool>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "error")]
pub enum ServerState {
    NotStarted,
    Running,
    /// The last start or the connection failed; the next use starts it again.
    Failed(String),
    /// Used up its restarts.
    GaveUp(String),
}

struct Slot {
    config: McpServerConfig,
    inner: Mutex<SlotState>,
}

#[derive(Default)]
struct SlotState {
    conn: Option<Arc<McpConnection>>,
    starts: u32,
    last_error: Option<String>,
}

/// The daemon's MCP servers.
pub struct McpHub {
    slots: BTreeMap<String, Slot>,
    launcher: SandboxLauncher,
    protected: Vec<PathBuf>,
    /// `<data_dir>/mcp`: each stdio server's working directory and `TMPDIR` is a
    /// folder in it, named after the server.
    state_dir: PathBuf,
    home: PathBuf,
}

impl McpHub {
    pub fn new(
        servers: &BTreeMap<String, McpServerConfig>,
        launcher: SandboxLauncher,
        protected: Vec<PathBuf>,
        state_dir: PathBuf,
        home: PathBuf,
    ) -> McpHub {
        let slots = servers
            .iter()
            .map(|(name, config)| {
                let slot = Slot {
                    config: config.clone(),
                    inner: Mutex::new(SlotState::default()),
                };
                (name.clone(), slot)
            })
            .collect();
        McpHub {
            slots,
            launcher,
            protected,
            state_dir,
            home,
        }
    }

    pub fn config(&self, server: &str) -> Option<&McpServerConfig> {
        self.slots.get(server).map(|s| &s.config)
    }

    /// The server's connection, started (or restarted) if needed.
    pub async fn connection(
        &self,
        server: &str,
        cancel: &CancellationToken,
    ) -> Result<Arc<McpConnection>, McpError> {
        let slot = self
            .slots
            .get(server)
            .ok_or_else(|| McpError::UnknownServer(server.to_owned()))?;
        let mut state = tokio::select! {
            s = slot.inner.lock() => s,
            () = cancel.cancelled() => return Err(McpError::Cancelled),
        };
        if let Some(conn) = &state.conn {
            if !conn.is_closed() {
                return Ok(conn.clone());
            }
            state.last_error = Some("the server exited or broke the protocol".to_owned());
            state.conn = None;
        }
        if state.starts > MAX_RESTARTS {
            return Err(McpError::GaveUp {
                server: server.to_owned(),
                restarts: MAX_RESTARTS,
            });
        }
        state.starts += 1;
        match self.start(&slot.config, cancel).await {
            Ok(conn) => {
                let conn = Arc::new(conn);
                state.conn = Some(conn.clone());
                state.last_error = None;
                Ok(conn)
            }
            Err(McpError::Cancelled) => {
                // Not the server's fault: this start does not count.
                state.starts -= 1;
                Err(McpError::Cancelled)
            }
            Err(e) => {
                state.last_error = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// The server's tools (starting it if needed), sorted by name.
    pub async fn tools(
        &self,
        server: &str,
        cancel: &CancellationToken,
    ) -> Result<Vec<McpTool>, McpError> {
        Ok(self.connection(server, cancel).await?.tools.clone())
    }

    /// Calls `tool` on `server`. A connection that broke during the call is dropped,
    /// so the next use restarts the server.
    pub async fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: Value,
        cancel: &CancellationToken,
    ) -> Result<String, McpError> {
        let conn = self.connection(server, cancel).await?;
        if !conn.tools.iter().any(|t| t.name == tool) {
            return Err(McpError::UnknownTool {
                server: server.to_owned(),
                tool: tool.to_owned(),
            });
        }
        conn.call(tool, arguments, cancel).await
    }

    /// Every server, in name order, as it is now (nothing is started).
    pub async fn views(&self) -> Vec<ServerView> {
        let mut out = Vec::with_capacity(self.slots.len());
        for (name, slot) in &self.slots {
            let state = slot.inner.lock().await;
            let (state_now, tools) = match (&state.conn, &state.last_error) {
                (Some(c), _) if !c.is_closed() => (ServerState::Running, c.tools.clone()),
                (_, Some(e)) if state.starts > MAX_RESTARTS => {
                    (ServerState::GaveUp(e.clone()), Vec::new())
                }
                (_, Some(e)) => (ServerState::Failed(e.clone()), Vec::new()),
                (Some(_), None) => (
                    ServerState::Failed("the server exited".to_owned()),
                    Vec::new(),
                ),
                (None, None) => (ServerState::NotStarted, Vec::new()),
            };
            out.push(ServerView {
                name: name.clone(),
                transport: describe(&slot.config.transport),
                state: state_now,
                tools,
            });
        }
        out
    }

    /// Stops every running server (the daemon is exiting).
    pub async fn shutdown(&self) {
        for slot in self.slots.values() {
            let conn = slot.inner.lock().await.conn.take();
            if let Some(conn) = conn {
                match Arc::try_unwrap(conn) {
                    Ok(conn) => {
                        if let Some(status) = conn.shutdown().await {
                            tracing::debug!(server = %slot.config.name, "stopped: {status}");
                        }
                    }
                    // A call still holds it; dropping the last clone kills the helper.
                    Err(shared) => drop(shared),
                }
            }
        }
    }

    async fn start(
        &self,
        config: &McpServerConfig,
        cancel: &CancellationToken,
    ) -> Result<McpConnection, McpError> {
        match &config.transport {
            McpTransport::Stdio { command, args } => {
                let policy = self.policy(config)?;
                let mut argv = vec![command.clone()];
                argv.extend(args.iter().cloned());
                // Not raced with `cancel`: this only waits for the helper's report,
                // and dropping it halfway would leave nobody to stop the server.
                let started = stdio::spawn(&config.name, &self.launcher, &policy, &argv).await?;
                McpConnection::over_stdio(&config.name, started, START_TIMEOUT, cancel).await
            }
            McpTransport::Http { url } => {
                McpConnection::over_http(&config.name, url, START_TIMEOUT, cancel).await
            }
        }
    }

    /// The server's sandbox: system directories and its `read` readable, its `write`
    /// and its state folder writable, TCP only if declared, the scrubbed environment
    /// plus its `env`.
    fn policy(&self, config: &McpServerConfig) -> Result<SandboxPolicy, McpError> {
        let spec = SandboxSpec {
            read: config.read.clone(),
            write: config.write.clone(),
            network: config.network,
            udp: config.udp,
            require: false,
            // Nor a startup file: nothing it writes runs later.
            startup: vec![],
            destroy: Vec::new(),
            // A server gets no unix socket: it starts before any approval.
            sockets: vec![],
            bus_talk: vec![],
        };
        let workspace = self.state_dir.join(&config.name);
        let mut policy = SandboxPolicy::new(&spec, &self.protected, &workspace, &self.home)?
            .with_owner(format!("mcp server {}", config.name));
        policy.env.retain(|(k, _)| !config.env.contains_key(k));
        policy
            .env
            .extend(config.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        // A server lives as long as the daemon: the launcher's per-call wall clock does
        // not apply (the helper never enforces it), and CPU time adds up over days.
        policy.limits.cpu_seconds = 30 * 24 * 3600;
        Ok(policy)
    }
}

fn describe(t: &McpTransport) -> String {
    match t {
        McpTransport::Stdio { command, args } => {
            let mut s = format!("stdio: {command}");
            for a in args {
                s.push(' ');
                s.push_str(a);
            }
            s
        }
        McpTransport::Http { url } => format!("http: {url}"),
    }
}
