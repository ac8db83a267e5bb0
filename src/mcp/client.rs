//! One live connection to an MCP server, and the translation between its tools and
//! results and ours.
//!
//! A result becomes plain text: text blocks as they are, an image as a short
//! placeholder (no provider we talk to takes images in a tool result yet), other
//! blocks as one line naming them. The caller wraps it as data like any tool output.

use std::time::Duration;

use familiar_sandbox::status::Enforcement;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ContentBlock};
use rmcp::service::{RoleClient, RunningService};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::McpError;
use super::stdio::{self, StdioServer};

/// One tool a server offers, under the server's own name for it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct McpTool {
    pub name: String,
    pub description: String,
    /// The JSON schema of its arguments (an object schema).
    pub input_schema: Value,
}

/// A running, initialised server.
pub struct McpConnection {
    server: String,
    service: RunningService<RoleClient, ()>,
    child: Option<tokio::process::Child>,
    /// Why a stdio server's stdout was cut off, once it broke the protocol.
    fault: stdio::StdoutFault,
    pub enforcement: Option<Enforcement>,
    /// Sorted by name, so what the model sees is stable from request to request.
    pub tools: Vec<McpTool>,
}

/// `message` with what to do when it says a file could not be opened: under the
/// sandbox a stdio server reads only the system directories and its own `read` paths,
/// so a script or an interpreter elsewhere (a venv, `~/.local`, a version manager's
/// directory) is refused with EACCES.
fn with_read_hint(server: &str, message: String) -> String {
    let denied = ["Permission denied", "os error 13", "Errno 13", "EACCES"]
        .iter()
        .any(|m| message.contains(m));
    if !denied {
        return message;
    }
    format!(
        "{message}; the sandbox lets the server read only the system directories and its \
         own paths: add the file it could not open (its script, its interpreter, or their \
         directory) to `read` in [mcp.{server}.sandbox]"
    )
}

impl McpConnection {
    /// Initialises the protocol over a started stdio server and lists its tools.
    /// Gives up after `timeout`, or at once when `cancel` fires; either way the server
    /// is stopped.
    pub async fn over_stdio(
        server: &str,
        started: StdioServer,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<McpConnection, McpError> {
        let StdioServer {
            mut child,
            stdout,
            stdin,
            enforcement,
            stderr_tail,
            stderr_reader,
            stdout_fault,
        } = started;
        match initialise(server, (stdout, stdin), timeout, cancel).await {
            Ok((service, tools)) => Ok(McpConnection {
                server: server.to_owned(),
                service,
                child: Some(child),
                fault: stdout_fault,
                enforcement,
                tools,
            }),
            Err(McpError::Protocol { server, message }) => {
                stdio::stop(&mut child, Duration::from_secs(2)).await;
                // The server is gone: its stderr ends at once, and what it said last
                // (why it failed) is in the tail only once the reader got there.
                if tokio::time::timeout(Duration::from_secs(2), stderr_reader)
                    .await
                    .is_err()
                {
                    tracing::debug!(server, "the server's stderr stayed open after it stopped");
                }
                let message = format!(
                    "{message}{}{}",
                    stdio::fault_clause(&stdout_fault),
                    stdio::tail_clause(&stderr_tail)
                );
                let message = with_read_hint(&server, message);
                Err(McpError::Protocol { server, message })
            }
            Err(e) => {
                stdio::stop(&mut child, Duration::from_secs(2)).await;
                Err(e)
            }
        }
    }

    /// Initialises the protocol with a streamable-HTTP endpoint and lists its tools.
    /// The server is not ours to start or sandbox: it already runs somewhere.
    pub async fn over_http(
        server: &str,
        url: &str,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<McpConnection, McpError> {
        // rmcp builds its own reqwest client, which needs the process's TLS provider.
        crate::llm::install_tls_provider();
        let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url.to_owned());
        let (service, tools) = initialise(server, transport, timeout, cancel).await?;
        Ok(McpConnection {
            server: server.to_owned(),
            service,
            child: None,
            fault: stdio::StdoutFault::default(),
            enforcement: None,
            tools,
        })
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    /// Whether the connection has ended (the server exited or broke the protocol).
    pub fn is_closed(&self) -> bool {
        self.service.is_closed()
    }

    /// Calls the server's tool `tool` with `arguments` (a JSON object); the result as
    /// text. A result the server marks as an error is [`McpError::ToolFailed`].
    pub async fn call(
        &self,
        tool: &str,
        arguments: Value,
        cancel: &CancellationToken,
    ) -> Result<String, McpError> {
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = match arguments {
            Value::Object(map) => Some(map),
            Value::Null => None,
            other => {
                return Err(McpError::ToolFailed {
                    server: self.server.clone(),
                    tool: tool.to_owned(),
                    message: format!("arguments must be a JSON object, not {other}"),
                });
            }
        };
        let result = tokio::select! {
            r = self.service.call_tool(params) => r,
            () = cancel.cancelled() => return Err(McpError::Cancelled),
        }
        .map_err(|e| McpError::Protocol {
            server: self.server.clone(),
            message: format!("calling `{tool}`: {e}{}", stdio::fault_clause(&self.fault)),
        })?;
        let text = render(&result.content, result.structured_content.as_ref());
        if result.is_error == Some(true) {
            return Err(McpError::ToolFailed {
                server: self.server.clone(),
                tool: tool.to_owned(),
                message: text,
            });
        }
        Ok(text)
    }

    /// Ends the session and stops the server and everything it started; returns how
    /// a stdio server's helper ended (the way the server did), when it could be seen.
    pub async fn shutdown(mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        stdio::stop(&mut child, Duration::from_secs(3)).await
    }
}

impl Drop for McpConnection {
    /// A connection dropped without [`McpConnection::shutdown`] still stops its server.
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            stdio::terminate(child);
        }
    }
}

type Initialised = (RunningService<RoleClient, ()>, Vec<McpTool>);

async fn initialise<T, E, A>(
    server: &str,
    transport: T,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<Initialised, McpError>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    let protocol = |message: String| McpError::Protocol {
        server: server.to_owned(),
        message,
    };
    let work = async {
        let service =
            ().serve(transport)
                .await
                .map_err(|e| protocol(format!("initialising: {e}")))?;
        let listed = service
            .list_all_tools()
            .await
            .map_err(|e| protocol(format!("listing tools: {e}")))?;
        let tools: Vec<McpTool> = listed
            .into_iter()
            .map(|t| McpTool {
                name: t.name.into_owned(),
                description: t.description.map(|d| d.into_owned()).unwrap_or_default(),
                input_schema: Value::Object((*t.input_schema).clone()),
            })
            .collect();
        Ok((service, bounded_tools(server, tools)))
    };
    tokio::select! {
        r = tokio::time::timeout(timeout, work) => r.unwrap_or_else(|_| Err(McpError::StartTimeout {
            server: server.to_owned(),
            secs: timeout.as_secs(),
        })),
        () = cancel.cancelled() => Err(McpError::Cancelled),
    }
}

/// Most tools taken from one server (the first by name; the rest are dropped).
pub const MAX_TOOLS: usize = 128;
/// Longest tool name taken, in bytes (with `NAME__` it must still fit the providers'
/// 64-character function names; a longer one is dropped).
pub const MAX_TOOL_NAME: usize = 64;
/// Longest description sent to the model, in characters (a longer one is cut).
pub const MAX_DESCRIPTION_CHARS: usize = 2048;
/// Largest argument schema taken, in bytes of JSON (a tool with a larger one is
/// dropped: a schema cannot be cut and stay one).
pub const MAX_SCHEMA_BYTES: usize = 32 << 10;

/// A server's tool list as offered to the model: sorted by name, so what the model sees
/// is stable from request to request, and bounded, since every tool goes into every
/// request (a server's 10 MB description would be in each one). Each tool dropped or
/// cut is logged.
pub fn bounded_tools(server: &str, mut tools: Vec<McpTool>) -> Vec<McpTool> {
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    let mut kept: Vec<McpTool> = Vec::with_capacity(tools.len().min(MAX_TOOLS));
    for mut t in tools {
        let shown =
            familiar_protocol::display::visible(&t.name.chars().take(80).collect::<String>());
        if t.name.is_empty()
            || t.name.len() > MAX_TOOL_NAME
            || t.name.chars().any(|c| c.is_control() || c.is_whitespace())
        {
            tracing::warn!(
                server,
                "MCP tool `{shown}` dropped: its name is empty, longer than {MAX_TOOL_NAME} bytes, or holds spaces or control characters"
            );
            continue;
        }
        if kept.last().is_some_and(|k| k.name == t.name) {
            tracing::warn!(
                server,
                "MCP tool `{shown}` listed twice: the second one dropped"
            );
            continue;
        }
        let schema_bytes = t.input_schema.to_string().len();
        if schema_bytes > MAX_SCHEMA_BYTES {
            tracing::warn!(
                server,
                "MCP tool `{shown}` dropped: its argument schema is {schema_bytes} bytes, over {MAX_SCHEMA_BYTES}"
            );
            continue;
        }
        if kept.len() == MAX_TOOLS {
            tracing::warn!(
                server,
                "MCP server lists more than {MAX_TOOLS} tools: `{shown}` and the ones after it dropped"
            );
            break;
        }
        if t.description.chars().count() > MAX_DESCRIPTION_CHARS {
            let mut cut: String = t.description.chars().take(MAX_DESCRIPTION_CHARS).collect();
            cut.push_str(" […]");
            tracing::warn!(
                server,
                "MCP tool `{shown}`: description cut to {MAX_DESCRIPTION_CHARS} characters"
            );
            t.description = cut;
        }
        kept.push(t);
    }
    kept
}

/// The result's content as text for the model.
pub fn render(content: &[ContentBlock], structured: Option<&Value>) -> String {
    let mut parts: Vec<String> = content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(t) => t.text.clone(),
            ContentBlock::Image(i) => format!(
                "[image: {}, {} bytes of base64 not shown]",
                i.mime_type,
                i.data.len()
            ),
            ContentBlock::Audio(a) => format!("[audio: {} not shown]", a.mime_type),
            ContentBlock::Resource(_) => "[embedded resource not shown]".to_owned(),
            ContentBlock::ResourceLink(r) => format!("[resource: {}]", r.uri),
            // `#[non_exhaustive]` upstream: a kind newer than this SDK.
            _ => "[content of an unknown kind not shown]".to_owned(),
        })
        .collect();
    if parts.is_empty()
        && let Some(v) = structured
    {
        parts.push(v.to_string());
    }
    parts.join("\n")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_refused_file_points_at_the_sandbox_read_list() {
        assert_eq!(
            with_read_hint(
                "notes",
                "the server closed the connection (its stderr: python3: can't open file \
                 '/home/u/notes.py': [Errno 13] Permission denied)"
                    .to_owned()
            ),
            "the server closed the connection (its stderr: python3: can't open file \
             '/home/u/notes.py': [Errno 13] Permission denied); the sandbox lets the server \
             read only the system directories and its own paths: add the file it could not \
             open (its script, its interpreter, or their directory) to `read` in \
             [mcp.notes.sandbox]"
        );
        assert_eq!(
            with_read_hint("notes", "it said nothing".to_owned()),
            "it said nothing"
        );
    }

    fn tool(name: &str, description: &str) -> McpTool {
        McpTool {
            name: name.to_owned(),
            description: description.to_owned(),
            input_schema: json!({"type": "object"}),
        }
    }

    // Regression: a 10 MB description went into every request; duplicates and
    // thousands of tools were all offered.
    #[test]
    fn a_tool_list_is_bounded_deduplicated_and_sorted() {
        let mut tools = vec![
            tool("b", &"d".repeat(10 << 20)),
            tool("a", "first"),
            tool("a", "second"),
            tool(&"n".repeat(MAX_TOOL_NAME + 1), ""),
            tool("bad\nname", ""),
            McpTool {
                input_schema: json!({"type": "object", "description": "s".repeat(MAX_SCHEMA_BYTES)}),
                ..tool("huge_schema", "")
            },
        ];
        tools.extend((0..MAX_TOOLS * 2).map(|i| tool(&format!("t{i:04}"), "")));
        let kept = bounded_tools("srv", tools);
        assert_eq!(kept.len(), MAX_TOOLS);
        assert_eq!(kept[0], tool("a", "first"));
        assert_eq!(kept[1].name, "b");
        assert_eq!(
            kept[1].description.chars().count(),
            MAX_DESCRIPTION_CHARS + " […]".chars().count()
        );
        assert!(kept.windows(2).all(|w| w[0].name < w[1].name));
        assert!(
            !kept
                .iter()
                .any(|t| t.name == "huge_schema" || t.name.contains('\n'))
        );
    }
}
