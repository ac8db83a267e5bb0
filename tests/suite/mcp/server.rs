//! The MCP server the tests start: this test binary run again with
//! `FAMILIAR_TEST_MCP_SERVER` set, serving rmcp's server side on stdin and stderr
//! (libtest's own stdout lines would corrupt the JSON-RPC channel, so the launching
//! shell points stderr at the pipe and stdout at /dev/null).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

/// Selects server mode, and which behaviour: `ok`, `garbage`, `hang`, `bloated` (a tool
/// list past every bound), `garble` (a `garble` tool that answers with garbage).
pub const MODE_ENV: &str = "FAMILIAR_TEST_MCP_SERVER";

/// The argv that starts this binary as the server (through `sh`, for the redirection).
pub fn argv() -> (String, Vec<String>) {
    let exe = std::env::current_exe().unwrap();
    (
        "sh".to_owned(),
        vec![
            "-c".to_owned(),
            "exec \"$0\" --exact suite::mcp::server::serve --nocapture -q --test-threads=1 2>&1 1>/dev/null"
                .to_owned(),
            exe.display().to_string(),
        ],
    )
}

#[derive(Clone)]
pub struct TestServer;

fn schema(props: Value) -> Arc<serde_json::Map<String, Value>> {
    let v = json!({"type": "object", "properties": props});
    Arc::new(v.as_object().cloned().unwrap_or_default())
}

impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mode = std::env::var(MODE_ENV).unwrap_or_default();
        if mode == "bloated" {
            return Ok(ListToolsResult::with_all_items(bloated_tools()));
        }
        let mut tools = vec![
            Tool::new(
                "write_file",
                "Writes text to a path",
                schema(json!({"path": {"type": "string"}, "text": {"type": "string"}})),
            ),
            Tool::new(
                "echo",
                "Echoes",
                schema(json!({"text": {"type": "string"}})),
            ),
            Tool::new("picture", "An image", schema(json!({}))),
        ];
        if mode == "garble" {
            tools.push(Tool::new(
                "garble",
                "Breaks the protocol",
                schema(json!({})),
            ));
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let arg = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or_default();
        let result = match &*request.name {
            "write_file" => match std::fs::write(arg("path"), arg("text")) {
                Ok(()) => CallToolResult::success(vec![ContentBlock::text("written")]),
                Err(e) => CallToolResult::error(vec![ContentBlock::text(format!(
                    "{e} (errno {})",
                    e.raw_os_error().unwrap_or(0)
                ))]),
            },
            "echo" => CallToolResult::success(vec![ContentBlock::text(arg("text"))]),
            "garble" => {
                // Not a JSON-RPC message, on the channel (this server's is stderr), and
                // then no answer ever.
                use std::io::Write;
                let mut channel = std::io::stderr();
                channel
                    .write_all(b"Server ready! \x1b[1mwelcome\x1b[0m\n")
                    .unwrap();
                channel.flush().unwrap();
                std::future::pending::<()>().await;
                unreachable!()
            }
            "picture" => CallToolResult::success(vec![
                ContentBlock::text("here:"),
                ContentBlock::image("aGVsbG8=", "image/png"),
            ]),
            other => return Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        };
        Ok(result.into())
    }
}

/// A 10 MB description, a name twice, a name too long, and hundreds of tools.
fn bloated_tools() -> Vec<Tool> {
    let mut tools = vec![
        Tool::new("echo", "d".repeat(10 << 20), schema(json!({}))),
        Tool::new("echo", "the same name again", schema(json!({}))),
        Tool::new("n".repeat(500), "", schema(json!({}))),
    ];
    tools.extend((0..1000).map(|i| Tool::new(format!("t{i:04}"), "", schema(json!({})))));
    tools
}

/// Does nothing in a normal run; the server when started by [`argv`].
#[test]
fn serve() {
    let Ok(mode) = std::env::var(MODE_ENV) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        match mode.as_str() {
            "garbage" => {
                use tokio::io::AsyncWriteExt;
                let mut err = tokio::io::stderr();
                err.write_all(b"this is not JSON-RPC\n").await.unwrap();
                err.flush().await.unwrap();
            }
            "hang" => std::future::pending::<()>().await,
            _ => {
                // In its working directory (its state folder), for tests that check it
                // is gone when its client is: the pid outside its PID namespace (the
                // host's `/proc` names it; `process::id` is 1 there).
                let pid = std::fs::read_link("/proc/self").unwrap();
                std::fs::write("server.pid", pid.display().to_string()).unwrap();
                // The signal mask this thread started with (inherited from the exec),
                // read here: another thread's mask in /proc/PID/status may be mid-change
                // (glibc blocks everything while it creates a thread).
                let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
                let blocked = status
                    .lines()
                    .find_map(|l| l.strip_prefix("SigBlk:"))
                    .unwrap_or_default()
                    .trim()
                    .to_owned();
                std::fs::write("server.sigblk", blocked).unwrap();
                let running = TestServer
                    .serve((tokio::io::stdin(), tokio::io::stderr()))
                    .await
                    .unwrap();
                running.waiting().await.unwrap();
            }
        }
    });
}
