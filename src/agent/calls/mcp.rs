//! A task's MCP tools: the ones its soul's `mcp:NAME` and `mcp:NAME/TOOL` entries name.
//!
//! They are found once, when the task starts (starting their servers through the
//! runtime's [`McpHub`] if no earlier task did), and kept for the task's life: every
//! request offers the same tools in the same order, so the request prefix stays
//! byte-stable for the prompt cache even if a server restarts meanwhile. A server that
//! cannot be started leaves its tools out and the model is told why in the next
//! reminder; the task goes on with the rest.
//!
//! A call of one goes through the same gate as a built-in's (soul allowlist, blocked
//! patterns and protected paths on its arguments, tier mode, rate limits, approval,
//! audit); the tier is the server's `tier` or its per-tool entry in config.toml.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use familiar_protocol::tier::Tier;
use tokio_util::sync::CancellationToken;

use crate::catalog::{self, ToolInfo};
use crate::config::mcp::McpTransport;
use crate::llm::ToolDef;
use crate::mcp::{McpError, McpHub, tool_name};
use crate::tools::{Tool, ToolContext, ToolError, ToolFuture};

/// How long one call of an MCP tool may take before it fails with a tool error (the
/// server keeps running; the task's own wall clock still applies).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(300);

/// What the dispatcher's `Tool` trait asks of every tool; an MCP tool's real name, tier
/// and description live in [`McpTools`], not here.
static MCP_TOOL_INFO: ToolInfo = ToolInfo {
    name: "mcp",
    tier: Tier::Execute,
    mutating: true,
    summary: "a tool of an MCP server",
};

/// One offered MCP tool.
struct Offered {
    server: String,
    tool: String,
    tier: Tier,
    /// A `url` server runs outside familiar's sandbox.
    remote: bool,
}

/// The MCP tools one task offers, by the name the model sees (`NAME__TOOL`).
#[derive(Default)]
pub(in crate::agent) struct McpTools {
    /// Sorted by name.
    defs: Vec<ToolDef>,
    offered: BTreeMap<String, Offered>,
}

impl McpTools {
    /// The tools `allowlist`'s `mcp:` entries name, from servers started as needed; and
    /// a note for the model for each server that is unknown or could not be started.
    pub(in crate::agent) async fn for_allowlist(
        hub: &McpHub,
        allowlist: &[String],
        cancel: &CancellationToken,
    ) -> (McpTools, Vec<String>) {
        let servers: BTreeSet<&str> = allowlist
            .iter()
            .filter_map(|e| catalog::mcp_entry(e).map(|(server, _)| server))
            .collect();
        let mut out = McpTools::default();
        let mut notes = Vec::new();
        for server in servers {
            let Some(config) = hub.config(server) else {
                tracing::warn!(
                    "the soul lists `mcp:{server}` but config.toml has no [mcp.{server}]"
                );
                notes.push(format!(
                    "The MCP server `{server}` is not configured, so its tools are not available."
                ));
                continue;
            };
            let tools = match hub.tools(server, cancel).await {
                Ok(tools) => tools,
                Err(McpError::Cancelled) => return (out, notes),
                Err(e) => {
                    tracing::warn!("{e}");
                    notes.push(format!(
                        "The tools of the MCP server `{server}` are not available: {e}."
                    ));
                    continue;
                }
            };
            let remote = matches!(config.transport, McpTransport::Http { .. });
            for t in tools {
                let name = tool_name(server, &t.name);
                if !catalog::allowlist_allows(allowlist, &name) {
                    continue;
                }
                if !callable(&name) {
                    tracing::warn!(
                        "MCP tool `{name}` left out: providers take only 1-64 letters, digits, `_` and `-` in a tool name"
                    );
                    notes.push(format!(
                        "The MCP tool `{name}` is not available: its name has characters models cannot call."
                    ));
                    continue;
                }
                out.defs.push(ToolDef {
                    name: name.clone(),
                    description: t.description,
                    input_schema: t.input_schema,
                });
                let offered = Offered {
                    server: server.to_owned(),
                    tier: config.tool_tier(&t.name),
                    tool: t.name,
                    remote,
                };
                out.offered.insert(name, offered);
            }
        }
        out.defs.sort_by(|a, b| a.name.cmp(&b.name));
        (out, notes)
    }

    /// Definitions for the model request, sorted by name.
    pub(in crate::agent) fn definitions(&self) -> &[ToolDef] {
        &self.defs
    }

    /// The offered names, sorted.
    pub(in crate::agent) fn names(&self) -> impl Iterator<Item = &str> {
        self.defs.iter().map(|d| d.name.as_str())
    }

    /// The tier of an offered tool.
    pub(in crate::agent) fn tier(&self, name: &str) -> Option<Tier> {
        self.offered.get(name).map(|o| o.tier)
    }

    /// Why a call of `name` runs outside familiar's sandbox, if it does (a `url`
    /// server): such calls are always asked.
    pub(in crate::agent) fn outside_sandbox(&self, name: &str) -> Option<&'static str> {
        self.offered
            .get(name)
            .filter(|o| o.remote)
            .map(|_| "the MCP server runs outside familiar's sandbox, at its URL")
    }

    /// The tool that runs a call of `name` on its server, if it is offered.
    pub(in crate::agent) fn tool(&self, hub: &Arc<McpHub>, name: &str) -> Option<Arc<dyn Tool>> {
        let o = self.offered.get(name)?;
        Some(Arc::new(McpCall {
            hub: Arc::clone(hub),
            server: o.server.clone(),
            tool: o.tool.clone(),
            // What only reads may run beside other reads; anything else runs alone.
            mutating: o.tier != Tier::Read,
        }))
    }
}

/// Whether providers accept `name` as a function name (OpenAI's and Anthropic's rule:
/// 1 to 64 ASCII letters, digits, `_` and `-`).
fn callable(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// One call of an MCP tool, for the dispatcher.
struct McpCall {
    hub: Arc<McpHub>,
    server: String,
    tool: String,
    mutating: bool,
}

impl Tool for McpCall {
    fn info(&self) -> &'static ToolInfo {
        &MCP_TOOL_INFO
    }

    fn description(&self) -> &'static str {
        MCP_TOOL_INFO.summary
    }

    fn schema(&self) -> serde_json::Value {
        serde_json::json!({"type": "object"})
    }

    fn is_mutating(&self, _args: &serde_json::Value) -> bool {
        self.mutating
    }

    fn execute(&self, args: serde_json::Value, ctx: ToolContext) -> ToolFuture {
        let (hub, server, tool) = (
            Arc::clone(&self.hub),
            self.server.clone(),
            self.tool.clone(),
        );
        Box::pin(async move {
            let call = hub.call(&server, &tool, args, &ctx.cancel);
            match tokio::time::timeout(CALL_TIMEOUT, call).await {
                Ok(Ok(text)) => Ok(text),
                Ok(Err(McpError::Cancelled)) => {
                    Err(ToolError::model("cancelled: the task was stopped"))
                }
                // Every other failure is the server's, not the task's: the model reads
                // it and may go on without the tool.
                Ok(Err(e)) => Err(ToolError::model(e.to_string())),
                Err(_) => Err(ToolError::model(format!(
                    "MCP server `{server}`: the tool `{tool}` did not answer within {} s",
                    CALL_TIMEOUT.as_secs()
                ))),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_providers_accept_are_offered() {
        assert!(callable("notes__search-all_2"));
        assert!(!callable("notes__search.all"));
        assert!(!callable("notes__recherche_é"));
        assert!(!callable(&format!("notes__{}", "x".repeat(60))));
    }
}
