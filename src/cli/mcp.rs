//! `familiar mcp list`: the configured MCP servers, their state and their tools.
//!
//! Runs in this process, not in the daemon: to list a server's tools it has to start
//! it (inside the same sandbox the daemon would use) and says so on stderr first;
//! `--no-start` shows the configuration only. Every server started here is stopped
//! before the command returns.

use std::io::Write;
use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

use super::{Exit, Out};
use crate::config::{Config, ProcessEnv};
use crate::mcp::{McpHub, ServerState, tool_name};
use crate::sandbox::SandboxLauncher;

/// A server's JSON line. Every server this command started is stopped before it
/// prints, so one that answered is `ok` (it started and listed its tools), not
/// `running`.
fn listed(view: &crate::mcp::ServerView) -> serde_json::Value {
    let mut line = serde_json::json!(view);
    if view.state == ServerState::Running {
        line["state"] = serde_json::json!("ok");
    }
    line
}

pub fn list(
    config: &Option<PathBuf>,
    no_start: bool,
    json: bool,
    out: &mut Out,
) -> anyhow::Result<Exit> {
    let config = Config::load(config.as_deref(), &ProcessEnv)?;
    if config.mcp.is_empty() {
        writeln!(
            std::io::stderr().lock(),
            "familiar: no [mcp.NAME] servers in the config (docs/mcp.md)"
        )?;
        return Ok(Exit::Completed);
    }
    let policy = crate::policy::load(&config.policy, &config.paths)?;
    let hub = McpHub::new(
        &config.mcp,
        SandboxLauncher::current()?,
        policy.protected_paths.clone(),
        config.paths.data_dir.join("mcp"),
        config.paths.home.clone(),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let views = runtime.block_on(async {
        if !no_start {
            writeln!(
                std::io::stderr().lock(),
                "familiar: starting {} MCP server(s) to list their tools",
                config.mcp.len()
            )?;
            let cancel = CancellationToken::new();
            for name in config.mcp.keys() {
                // A failure shows as the server's state below.
                if let Err(e) = hub.connection(name, &cancel).await {
                    tracing::debug!("{e}");
                }
            }
        }
        let views = hub.views().await;
        hub.shutdown().await;
        anyhow::Ok(views)
    })?;
    let mut exit = Exit::Completed;
    for v in &views {
        if json {
            out.json_line(&listed(v))?;
            continue;
        }
        let server = &config.mcp[&v.name];
        let state = match &v.state {
            ServerState::NotStarted => "not started".to_owned(),
            ServerState::Running => format!("ok, {} tools", v.tools.len()),
            ServerState::Failed(e) | ServerState::GaveUp(e) => {
                exit = Exit::Failed;
                format!("failed: {e}")
            }
        };
        writeln!(out, "{}\t{}\t{state}", v.name, v.transport)?;
        for t in &v.tools {
            let tier = server.tool_tier(&t.name);
            let first = familiar_protocol::display::visible(
                t.description.lines().next().unwrap_or_default(),
            );
            writeln!(out, "  {}\t{tier}\t{first}", tool_name(&v.name, &t.name))?;
        }
    }
    Ok(exit)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Regression: a server the command had started and stopped again was `running`.
    #[test]
    fn a_server_started_to_be_listed_is_ok_not_running() {
        let view = crate::mcp::ServerView {
            name: "files".into(),
            transport: "stdio: mcp-files".into(),
            state: ServerState::Running,
            tools: Vec::new(),
        };
        assert_eq!(
            listed(&view),
            serde_json::json!({"name": "files", "transport": "stdio: mcp-files",
                "state": "ok", "tools": []})
        );
    }
}
