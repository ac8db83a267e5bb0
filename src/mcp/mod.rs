//! MCP tool servers: the client side of the Model Context Protocol (the `rmcp` SDK).
//!
//! This module owns the connections to the servers a user declares in `[mcp.NAME]`
//! (see [`crate::config::mcp`]): starting a stdio server inside the Landlock helper
//! ([`stdio`]), keeping it while souls use it and restarting it a bounded number of
//! times ([`hub`]), and turning its tools and results into ours ([`client`]).
//!
//! Invariants: a stdio server only ever runs under the sandbox helper
//! (`familiar-sandbox`) with the system directories, its `read` paths readable, only
//! its `write` paths (and its own state directory) writable, TCP only if declared, in
//! its own session, with a scrubbed environment plus its `env`; a server's tools are named `NAME__TOOL`
//! ([`tool_name`]), which no built-in tool can be; a server that crashes, hangs at
//! start or sends garbage fails calls with an [`McpError`], never the daemon.

pub mod client;
pub mod hub;
pub mod stdio;

pub use client::{McpConnection, McpTool};
pub use hub::{McpHub, ServerState, ServerView};

pub use crate::catalog::MCP_SEPARATOR as SEPARATOR;

/// The name a server's tool is offered under.
pub fn tool_name(server: &str, tool: &str) -> String {
    format!("{server}{SEPARATOR}{tool}")
}

/// `(server, tool)` from a name made by [`tool_name`]; server names hold no `__`.
pub fn split_tool_name(name: &str) -> Option<(&str, &str)> {
    crate::catalog::mcp_parts(name)
}

#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("no MCP server `{0}` in config.toml")]
    UnknownServer(String),
    #[error("MCP server `{server}` has no tool `{tool}`")]
    UnknownTool { server: String, tool: String },
    #[error("MCP server `{server}` could not be started: {message}")]
    Start { server: String, message: String },
    #[error("MCP server `{server}` did not finish starting within {secs} s")]
    StartTimeout { server: String, secs: u64 },
    #[error("MCP server `{server}` failed {restarts} restarts; not starting it again")]
    GaveUp { server: String, restarts: u32 },
    #[error("MCP server `{server}`: {message}")]
    Protocol { server: String, message: String },
    #[error("MCP server `{server}`: the tool `{tool}` failed: {message}")]
    ToolFailed {
        server: String,
        tool: String,
        message: String,
    },
    #[error("cancelled")]
    Cancelled,
    #[error(transparent)]
    Sandbox(#[from] crate::sandbox::SandboxError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let n = tool_name("git-hub_2", "read_file");
        assert_eq!(n, "git-hub_2__read_file");
        assert_eq!(split_tool_name(&n), Some(("git-hub_2", "read_file")));
        assert_eq!(split_tool_name("shell"), None);
        assert_eq!(split_tool_name("__x"), None);
    }
}
