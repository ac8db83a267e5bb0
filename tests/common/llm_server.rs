//! A scripted loopback LLM server: plain HTTP/1.1 over tokio, one scripted reply per
//! request, every request recorded. Replies can pause mid-body until the test releases
//! them, hang, or cut the connection, so streaming faults are tested without sleeps.
//! TCP_NODELAY is set and headers go out in the same write as the first body bytes,
//! else Nagle plus delayed ACK adds ~40 ms per response.
// Test helpers: a failed setup step should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// One recorded request.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Lowercased names.
    pub headers: BTreeMap<String, String>,
    pub body: Value,
    /// The body's bytes exactly as sent (prompt-cache prefix checks compare these).
    pub raw: Vec<u8>,
}

/// A step of a reply body.
#[derive(Clone)]
pub enum Step {
    Send(Vec<u8>),
    /// Wait until the gate is opened (or the client goes away).
    Wait(Gate),
    /// As `Wait`, but send nothing before it, not even the headers (a server that
    /// answers only once it has read the whole prompt).
    Hold(Gate),
    /// Never send more; wait for the client to go away.
    Hang,
    /// Close the connection now, before the declared length was sent.
    Cut,
}

/// A one-shot release for a paused reply.
#[derive(Clone, Default)]
pub struct Gate(Arc<Notify>);

impl Gate {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn open(&self) {
        self.0.notify_one();
    }
}

/// One scripted reply.
#[derive(Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub steps: Vec<Step>,
}

impl Reply {
    pub fn sse(body: impl Into<String>) -> Self {
        Reply {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            steps: vec![Step::Send(body.into().into_bytes())],
        }
    }

    /// An SSE reply sent as `steps`.
    pub fn sse_steps(steps: Vec<Step>) -> Self {
        Reply {
            steps,
            ..Reply::sse("")
        }
    }

    /// A streamed `/api/chat` reply (Ollama).
    pub fn ndjson(body: impl Into<String>) -> Self {
        Reply {
            status: 200,
            headers: vec![("content-type".into(), "application/x-ndjson".into())],
            steps: vec![Step::Send(body.into().into_bytes())],
        }
    }

    pub fn status(status: u16, body: Value) -> Self {
        Reply {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            steps: vec![Step::Send(body.to_string().into_bytes())],
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

#[derive(Default)]
struct State {
    script: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<Recorded>>,
    closed: Mutex<usize>,
    closed_notify: Notify,
    received: Notify,
    /// Answers when the script is empty (load and leak tests answer many tasks alike).
    default: Mutex<Option<Responder>>,
}

/// Picks the reply to a request from the request itself.
pub type Responder = Arc<dyn Fn(&Recorded) -> Reply + Send + Sync>;

pub struct LlmServer {
    pub base: String,
    state: Arc<State>,
}

impl LlmServer {
    pub async fn start(script: Vec<Reply>) -> Self {
        LlmServer::start_at("127.0.0.1", script).await
    }

    /// A server listening on `ip` (a port of its own), for a test whose provider must
    /// not be on loopback.
    pub async fn start_at(ip: &str, script: Vec<Reply>) -> Self {
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            script: Mutex::new(script.into()),
            ..State::default()
        });
        let st = Arc::clone(&state);
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                sock.set_nodelay(true).unwrap();
                tokio::spawn(serve(sock, Arc::clone(&st)));
            }
        });
        LlmServer {
            base: format!("http://{addr}"),
            state,
        }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }

    /// Waits until `n` requests have arrived.
    pub async fn wait_requests(&self, n: usize) {
        loop {
            let notified = self.state.received.notified();
            if self.state.requests.lock().unwrap().len() >= n {
                return;
            }
            notified.await;
        }
    }

    /// The reply to send once the script is exhausted (instead of a 500).
    pub fn set_default(&self, reply: Reply) {
        self.set_responder(Arc::new(move |_| reply.clone()));
    }

    /// Answers every request past the script with `f(request)`.
    pub fn set_responder(&self, f: Responder) {
        *self.state.default.lock().unwrap() = Some(f);
    }

    /// Drops the recorded requests (long runs would otherwise keep every body).
    pub fn forget_requests(&self) {
        self.state.requests.lock().unwrap().clear();
    }

    /// Appends replies to the script (for tests that learn what to send as they go).
    pub fn push(&self, replies: Vec<Reply>) {
        self.state.script.lock().unwrap().extend(replies);
    }

    /// Waits until `n` connections were closed by the client while a reply was paused.
    pub async fn wait_closed(&self, n: usize) {
        loop {
            let notified = self.state.closed_notify.notified();
            if *self.state.closed.lock().unwrap() >= n {
                return;
            }
            notified.await;
        }
    }
}

async fn serve(mut sock: TcpStream, st: Arc<State>) {
    let Some(req) = read_request(&mut sock).await else {
        return;
    };
    let next = st.script.lock().unwrap().pop_front();
    let responder = st.default.lock().unwrap().clone();
    let reply = next.or_else(|| responder.map(|f| f(&req)));
    st.requests.lock().unwrap().push(req);
    st.received.notify_waiters();
    let reply = reply.unwrap_or_else(|| {
        Reply::status(
            500,
            json!({"error": {"message": "the test script has no reply left"}}),
        )
    });
    let len: usize = reply
        .steps
        .iter()
        .map(|s| match s {
            Step::Send(b) => b.len(),
            // Promise a byte that never comes, so the client keeps waiting.
            Step::Hang => 1,
            Step::Wait(_) | Step::Hold(_) | Step::Cut => 0,
        })
        .sum();
    let mut head = format!("HTTP/1.1 {} X\r\n", reply.status);
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!(
        "content-length: {len}\r\nconnection: close\r\n\r\n"
    ));
    let mut pending = head.into_bytes();
    for step in reply.steps {
        let hold = matches!(step, Step::Hold(_));
        match step {
            Step::Send(b) => pending.extend_from_slice(&b),
            Step::Wait(gate) | Step::Hold(gate) => {
                if !hold && !flush(&mut sock, &mut pending).await {
                    return;
                }
                let mut buf = [0u8; 64];
                tokio::select! {
                    () = gate.0.notified() => {}
                    _ = sock.read(&mut buf) => return mark_closed(&st),
                }
            }
            Step::Hang => {
                if flush(&mut sock, &mut pending).await {
                    let mut buf = [0u8; 64];
                    while let Ok(n) = sock.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                    }
                }
                return mark_closed(&st);
            }
            Step::Cut => {
                flush(&mut sock, &mut pending).await;
                return;
            }
        }
    }
    flush(&mut sock, &mut pending).await;
    sock.shutdown().await.ok();
}

fn mark_closed(st: &State) {
    *st.closed.lock().unwrap() += 1;
    st.closed_notify.notify_waiters();
}

async fn flush(sock: &mut TcpStream, pending: &mut Vec<u8>) -> bool {
    let ok = pending.is_empty() || sock.write_all(pending).await.is_ok();
    pending.clear();
    ok
}

async fn read_request(sock: &mut TcpStream) -> Option<Recorded> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_owned();
    let path = first.next()?.to_owned();
    let headers: BTreeMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let raw = buf[head_end..head_end + len].to_vec();
    let body = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    Some(Recorded {
        method,
        path,
        headers,
        body,
        raw,
    })
}

// SSE body builders, one frame per helper; `sse(frames)` joins them.

pub fn sse(frames: Vec<String>) -> String {
    frames.concat()
}

fn data(v: Value) -> String {
    format!("data: {v}\n\n")
}

fn event(name: &str, v: Value) -> String {
    format!("event: {name}\ndata: {v}\n\n")
}

fn oa_chunk(delta: Value, finish: Option<&str>) -> String {
    data(json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }))
}

pub fn oa_text(text: &str) -> String {
    oa_chunk(json!({"content": text}), None)
}

/// A whole tool call in one chunk, arguments as the raw string given.
pub fn oa_tool_call(index: u32, id: &str, name: &str, args: &str) -> String {
    oa_chunk(
        json!({"tool_calls": [{"index": index, "id": id, "type": "function",
            "function": {"name": name, "arguments": args}}]}),
        None,
    )
}

/// More argument text for the call at `index`.
pub fn oa_tool_args(index: u32, args: &str) -> String {
    oa_chunk(
        json!({"tool_calls": [{"index": index, "function": {"arguments": args}}]}),
        None,
    )
}

pub fn oa_finish(reason: &str) -> String {
    oa_chunk(json!({}), Some(reason))
}

pub fn oa_usage(input: u64, output: u64) -> String {
    data(
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [],
        "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output}}),
    )
}

pub fn oa_done() -> String {
    "data: [DONE]\n\n".to_owned()
}

/// llama.cpp's prefill report (`return_progress`): a chunk with an empty assistant
/// delta and `prompt_progress`, as `llama-server` sends it.
pub fn oa_progress(processed: u64, total: u64, cache: u64) -> String {
    data(json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": null},
            "finish_reason": null}],
        "prompt_progress": {"total": total, "cache": cache, "processed": processed,
            "time_ms": 1.5},
    }))
}

// Ollama `/api/chat` NDJSON lines, one per helper; `ndjson(lines)` joins them.

pub fn ndjson(lines: Vec<Value>) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

pub fn ol_text(text: &str) -> Value {
    json!({"model": "m", "created_at": "2026-01-01T00:00:00Z",
        "message": {"role": "assistant", "content": text}, "done": false})
}

pub fn ol_tool_call(name: &str, args: Value) -> Value {
    json!({"model": "m", "created_at": "2026-01-01T00:00:00Z",
        "message": {"role": "assistant", "content": "",
            "tool_calls": [{"function": {"index": 0, "name": name, "arguments": args}}]},
        "done": false})
}

pub fn ol_done(reason: &str, prompt_eval_count: u64, eval_count: u64) -> Value {
    json!({"model": "m", "created_at": "2026-01-01T00:00:00Z",
        "message": {"role": "assistant", "content": ""}, "done": true, "done_reason": reason,
        "total_duration": 1000, "load_duration": 10, "prompt_eval_count": prompt_eval_count,
        "prompt_eval_duration": 100, "eval_count": eval_count, "eval_duration": 100})
}

pub fn an_message_start(input: u64) -> String {
    event(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "content": [], "model": "m", "stop_reason": null,
            "usage": {"input_tokens": input, "output_tokens": 1}}}),
    )
}

pub fn an_text(index: u32, text: &str) -> String {
    [
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                "content_block": {"type": "text", "text": ""}}),
        ),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "text_delta", "text": text}}),
        ),
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ),
    ]
    .concat()
}

pub fn an_tool_start(index: u32, id: &str, name: &str) -> String {
    event(
        "content_block_start",
        json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
    )
}

pub fn an_tool_json(index: u32, partial: &str) -> String {
    event(
        "content_block_delta",
        json!({"type": "content_block_delta", "index": index,
            "delta": {"type": "input_json_delta", "partial_json": partial}}),
    )
}

pub fn an_block_stop(index: u32) -> String {
    event(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": index}),
    )
}

/// A whole tool_use block, the arguments in one fragment.
pub fn an_tool(index: u32, id: &str, name: &str, args: &str) -> String {
    [
        an_tool_start(index, id, name),
        an_tool_json(index, args),
        an_block_stop(index),
    ]
    .concat()
}

pub fn an_message_delta(stop_reason: &str, output: u64) -> String {
    event(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason,
            "stop_sequence": null}, "usage": {"output_tokens": output}}),
    )
}

pub fn an_message_stop() -> String {
    event("message_stop", json!({"type": "message_stop"}))
}

pub fn an_ping() -> String {
    event("ping", json!({"type": "ping"}))
}

pub fn an_error(kind: &str, message: &str) -> String {
    event(
        "error",
        json!({"type": "error", "error": {"type": kind, "message": message}}),
    )
}
