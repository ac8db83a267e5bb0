//! One live connection to an MCP server, and the translation between its tools and
//! results and ours.
//!
//! A result becomes plain text: text blocks as they are, an image as a short
//! placeholder (no provider we talk to takes images in a tool result yet), other
//! blocks as one line naming them. The caller wraps it as data like any tool output.

use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ContentBlock};
use rmcp::service::{RoleClient, RunningService};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::McpError;
use super::stdio::{self, StdioServer};
use crate::sandbox::Enforcement;

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
    pub enforcement: Option<Enforcement>,
    /// Sorted by name, so what the model sees is stable from request to request.
    pub tools: Vec<McpTool>,
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
        } = started;
        match initialise(server, (stdout, stdin), timeout, cancel).await {
            Ok((service, tools)) => Ok(McpConnection {
                server: server.to_owned(),
                service,
                child: Some(child),
                enforcement,
                tools,
            }),
            Err(McpError::Protocol { server, message }) => {
                stdio::stop(&mut child, Duration::from_secs(2)).await;
                let message = format!("{message}{}", stdio::tail_clause(&stderr_tail));
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
            message: format!("calling `{tool}`: {e}"),
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
        let mut tools: Vec<McpTool> = listed
            .into_iter()
            .map(|t| McpTool {
                name: t.name.into_owned(),
                description: t.description.map(|d| d.into_owned()).unwrap_or_default(),
                input_schema: Value::Object((*t.input_schema).clone()),
            })
            .collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        Ok((service, tools))
    };
    tokio::select! {
        r = tokio::time::timeout(timeout, work) => r.unwrap_or_else(|_| Err(McpError::StartTimeout {
            server: server.to_owned(),
            secs: timeout.as_secs(),
        })),
        () = cancel.cancelled() => Err(McpError::Cancelled),
    }
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
