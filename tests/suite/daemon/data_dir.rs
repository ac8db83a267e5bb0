//! One data dir for the daemon and the CLI on every systemd: the real
//! daemon binary started with the environment systemd 252 gives a user unit with
//! `StateDirectory=familiar` (`STATE_DIRECTORY=~/.config/familiar`), and the CLI, which
//! has no `STATE_DIRECTORY`, reading what the daemon wrote.

use std::os::unix::net::UnixDatagram;

use familiar::store::{Memory, MemoryScope, Store};
use familiar_protocol::ids::SessionId;
use serde_json::Value;

use super::cli::familiar;
use super::systemd::spawn_daemon;
use super::*;
use crate::common::TestHome;
use crate::common::llm_server::Reply;
use crate::common::llm_server::{LlmServer, oa_done, oa_finish, oa_text, sse};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Waits on `sock` for the daemon's READY=1.
pub(super) async fn ready(sock: UnixDatagram) -> UnixDatagram {
    tokio::task::spawn_blocking(move || {
        let mut buf = [0u8; 512];
        loop {
            let n = sock.recv(&mut buf).expect("READY=1");
            if String::from_utf8_lossy(&buf[..n])
                .lines()
                .any(|l| l == "READY=1")
            {
                return sock;
            }
        }
    })
    .await
    .unwrap()
}

pub(super) fn notify_socket() -> (tempfile::TempDir, std::path::PathBuf, UnixDatagram) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(PATIENCE)).unwrap();
    (dir, path, sock)
}

/// The `daemon_data` line of `familiar doctor --json`.
fn daemon_data_check(stdout: &[u8]) -> Value {
    text(stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["check"] == "daemon_data")
        .unwrap_or_else(|| panic!("no daemon_data check in {}", text(stdout)))
}

/// What the daemon wrote under systemd 252 before the fix (a session with its workspace,
/// an audit line and a memory, in the config dir), and the CLI's own data.
fn leave_an_old_daemons_data(home: &TestHome, old: &SessionId) {
    let config_dir = home.config_dir();
    let stray = Store::open(&config_dir).unwrap();
    let mut ctx = familiar::store::Context::new(
        old.clone(),
        familiar_protocol::ids::SoulId::new("safe_assistant").unwrap(),
        "an old question",
    );
    stray.save_context(&mut ctx).unwrap();
    let ws = stray.ensure_workspace(old).unwrap();
    std::fs::write(ws.join("notes.txt"), "kept").unwrap();
    std::fs::write(
        config_dir.join("audit.jsonl"),
        "{\"tool\":\"old_daemon\"}\n",
    )
    .unwrap();
    Memory::new(&config_dir, 10)
        .remember("the daemon's fact", MemoryScope::All, old)
        .unwrap();
    Store::open(&home.data_dir()).unwrap();
    Memory::new(&home.data_dir(), 10)
        .remember("the cli's fact", MemoryScope::All, old)
        .unwrap();
}

/// Regression: under systemd 252 the daemon kept its sessions, transcripts,
/// audit log, memory and workspaces in `~/.config/familiar` and the CLI never saw them.
/// Now the daemon uses the CLI's data dir, and takes in what an earlier daemon left in
/// the config dir, merged with what the data dir already holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_systemd_252_the_daemon_and_the_cli_share_one_data_dir() {
    let server = LlmServer::start(vec![Reply::sse(sse(vec![
        oa_text("hello from the daemon"),
        oa_finish("stop"),
        oa_done(),
    ]))])
    .await;
    let home = TestHome::new();
    home.write_config(
        "config.toml",
        &format!(
            "[providers.local]\nbase_url = \"{}/v1\"\nmax_retries = 0\n",
            server.base
        ),
    );
    let old = SessionId::new("s-from-the-old-daemon").unwrap();
    let config_dir = home.config_dir();
    leave_an_old_daemons_data(&home, &old);

    let bus = TestBus::start();
    let (_sock_dir, sock_path, sock) = notify_socket();
    let systemd_252 = config_dir.to_str().unwrap();
    let child = spawn_daemon(&bus, &home, &sock_path, &[("STATE_DIRECTORY", systemd_252)]);
    let _sock = ready(sock).await;

    let out = familiar(&home, &bus, &["ask", "--json", "hi"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let last: Value = serde_json::from_str(text(&out.stdout).lines().last().unwrap()).unwrap();
    let session = last["session_id"].as_str().unwrap().to_owned();

    // The CLI sees the daemon's new session and the old daemon's one.
    let out = familiar(&home, &bus, &["sessions", "show", &session], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("hello from the daemon"),
        "{}",
        text(&out.stdout)
    );
    let out = familiar(&home, &bus, &["sessions", "--json"], &[]).await;
    let listed = text(&out.stdout);
    assert!(listed.contains(old.as_str()), "{listed}");
    assert!(listed.contains(&session), "{listed}");
    // The daemon's workspace for the task is in the data dir, not the config dir.
    assert!(home.data_dir().join("workspaces").join(&session).is_dir());
    assert_eq!(
        std::fs::read_to_string(
            home.data_dir()
                .join("workspaces/s-from-the-old-daemon/notes.txt")
        )
        .unwrap(),
        "kept"
    );
    // Both memories, in one file.
    let out = familiar(&home, &bus, &["memory", "--json"], &[]).await;
    let memory = text(&out.stdout);
    assert!(
        memory.contains("the daemon's fact") && memory.contains("the cli's fact"),
        "{memory}"
    );
    let audit = std::fs::read_to_string(home.data_dir().join("audit.jsonl")).unwrap();
    assert!(audit.contains("old_daemon"), "{audit}");
    // The config dir holds its config and none of the data any more.
    for gone in [
        "context",
        "transcripts",
        "workspaces",
        "audit.jsonl",
        "memory.json",
    ] {
        assert!(
            !config_dir.join(gone).exists(),
            "{gone} is still in the config dir"
        );
    }
    assert!(config_dir.join("config.toml").is_file());

    // status and doctor name the data dir the daemon uses, and find no split.
    let out = familiar(&home, &bus, &["status"], &[]).await;
    let said = text(&out.stdout);
    let want = format!("daemon data dir: {}", home.data_dir().display());
    assert!(said.contains(&want), "{said}");
    assert!(!said.contains("warning"), "{said}");
    let out = familiar(&home, &bus, &["doctor", "--json"], &[]).await;
    let check = daemon_data_check(&out.stdout);
    assert_eq!(check["status"], "ok", "{check}");
    assert_eq!(stop_daemon(child).await, Some(0));
}

/// A daemon whose `XDG_STATE_HOME` is not the shell's keeps its sessions elsewhere:
/// `status` warns and `doctor` fails, each saying what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_doctor_flag_a_daemon_with_another_data_dir() {
    let home = TestHome::new();
    home.write_unreachable_provider();
    let elsewhere = home.path().join("elsewhere");
    let bus = TestBus::start();
    let (_sock_dir, sock_path, sock) = notify_socket();
    let child = spawn_daemon(
        &bus,
        &home,
        &sock_path,
        &[("XDG_STATE_HOME", elsewhere.to_str().unwrap())],
    );
    let _sock = ready(sock).await;
    let out = familiar(&home, &bus, &["status"], &[]).await;
    let said = text(&out.stdout);
    let there = elsewhere.join("familiar");
    assert!(
        said.contains(&format!("daemon data dir: {}", there.display())),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "warning: the daemon keeps its sessions in {}, this shell in {}",
            there.display(),
            home.data_dir().display()
        )),
        "{said}"
    );
    let out = familiar(&home, &bus, &["doctor", "--json"], &[]).await;
    let check = daemon_data_check(&out.stdout);
    assert_eq!(check["status"], "fail", "{check}");
    assert!(
        check["fix"].as_str().unwrap().contains("restart familiar"),
        "{check}"
    );
    assert_eq!(stop_daemon(child).await, Some(0));
}
