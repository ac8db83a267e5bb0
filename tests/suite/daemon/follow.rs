//! `familiar ask` follows its daemon: the real daemon binary on a private bus, a task
//! held mid-answer by the loopback model, and the daemon killed (`kill -9`) or stopped
//! (SIGTERM, as `systemctl --user restart` does) under it. `ask` says so at once and
//! exits with the documented status instead of waiting forever.

use std::process::Stdio;

use super::data_dir::{notify_socket, ready};
use super::systemd::spawn_daemon;
use super::*;
use crate::common::TestHome;
use crate::common::llm_server::Reply;
use crate::common::llm_server::{Gate, LlmServer, Step, oa_text, sse};

/// A daemon whose model holds every answer (headers sent, then nothing), and an `ask`
/// running against it once the model has the request.
struct HeldTask {
    _home: TestHome,
    _server: LlmServer,
    daemon: std::process::Child,
    ask: Option<std::process::Child>,
    _bus: TestBus,
    _sock: std::os::unix::net::UnixDatagram,
    _sock_dir: tempfile::TempDir,
}

impl HeldTask {
    async fn start() -> HeldTask {
        HeldTask::start_with(Reply::sse_steps(vec![Step::Hold(Gate::new())])).await
    }

    async fn start_with(reply: Reply) -> HeldTask {
        let server = LlmServer::start(vec![]).await;
        server.set_default(reply);
        let home = TestHome::new();
        home.write_config(
            "config.toml",
            &format!(
                "[providers.local]\nbase_url = \"{}/v1\"\nmax_retries = 0\n",
                server.base
            ),
        );
        let bus = TestBus::start();
        let (sock_dir, sock_path, sock) = notify_socket();
        let daemon = spawn_daemon(&bus, &home, &sock_path, &[]);
        let sock = ready(sock).await;
        let ask = home
            .familiar_process()
            .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
            .args(["ask", "a slow one"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        tokio::time::timeout(PATIENCE, server.wait_requests(1))
            .await
            .expect("the task reached the model");
        HeldTask {
            _home: home,
            _server: server,
            daemon,
            ask: Some(ask),
            _bus: bus,
            _sock: sock,
            _sock_dir: sock_dir,
        }
    }

    /// `ask`'s exit code and stderr, within [`PATIENCE`].
    async fn ask_ends(&mut self) -> (Option<i32>, String) {
        let ask = self.ask.take().unwrap();
        let out = tokio::time::timeout(
            PATIENCE,
            tokio::task::spawn_blocking(move || ask.wait_with_output().unwrap()),
        )
        .await
        .expect("ask noticed the daemon was gone")
        .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

// Regression: `ask` printed nothing and waited forever after its daemon was killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_says_at_once_that_a_killed_daemon_took_its_task_and_exits_3() {
    let mut held = HeldTask::start().await;
    let kill = std::process::Command::new("kill")
        .args(["-KILL", &held.daemon.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    held.daemon.wait().unwrap();
    let (code, err) = held.ask_ends().await;
    assert_eq!(code, Some(3), "{err}");
    let said = err.lines().last().unwrap_or_default();
    assert!(
        said.starts_with("familiar: the daemon stopped (it is not running now"),
        "{err}"
    );
    assert!(
        said.contains("task t-") && said.contains("was cancelled: its session s-"),
        "{err}"
    );
    assert!(said.contains("`familiar ask --session s-"), "{err}");
    assert!(!err.contains("D-Bus activation"), "{err}");
}

// Regression: after `systemctl --user restart familiar` during a task, `ask` said only
// `cancelled`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_stopped_mid_task_says_why_the_task_was_cancelled() {
    let mut held = HeldTask::start().await;
    sigterm(held.daemon.id());
    let (code, err) = held.ask_ends().await;
    assert!(held.daemon.wait().unwrap().success());
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("the daemon stopped while the task ran; its session kept what was done"),
        "{err}"
    );
}

// Regression: Ctrl-C under `ask` said `no task … [UnknownTask]` with exit 2, or that D-Bus
// activation was not installed (exit 3): both false. It is 130, with the plain line
// `run` prints too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_under_ask_cancels_the_task_and_exits_130() {
    let mut held = HeldTask::start_with(Reply::sse_steps(vec![
        Step::Send(sse(vec![oa_text("Thinking about it")]).into_bytes()),
        Step::Hang,
    ]))
    .await;
    // The streamed text on stdout: `ask` follows the task, its Ctrl-C handler set.
    let mut stdout = held.ask.as_mut().unwrap().stdout.take().unwrap();
    // Kept open to the end: a closed stdout ends `ask` quietly (a closed pipe).
    let _stdout = tokio::task::spawn_blocking(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 256];
        while !String::from_utf8_lossy(&seen).contains("Thinking") {
            let n = std::io::Read::read(&mut stdout, &mut buf).unwrap();
            assert!(n > 0, "ask closed stdout");
            seen.extend_from_slice(&buf[..n]);
        }
        stdout
    })
    .await
    .unwrap();
    let pid = held.ask.as_ref().unwrap().id().to_string();
    let int = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(int.success());
    let (code, err) = held.ask_ends().await;
    assert_eq!(code, Some(130), "{err}");
    assert!(
        err.contains("familiar: Ctrl-C: cancelling task t-")
            && err.contains("its session keeps what was done"),
        "{err}"
    );
    assert!(
        !err.contains("UnknownTask") && !err.contains("activation"),
        "{err}"
    );
    // What streamed is kept, and the footer says so.
    assert!(
        err.contains("cancelled while the model was still answering; ")
            && err.contains(" tokens of its answer kept in the session"),
        "{err}"
    );
    assert_eq!(stop_daemon(held.daemon).await, Some(0));
}
