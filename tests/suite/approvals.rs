//! What a person is shown when asked to approve a hostile call: on the
//! terminal of `familiar run` and `familiar ask` (a real pty from script(1)), and in
//! `--json`. The daemon's surfaces (the signal, `GetTask`, the notification) are in
//! `daemon::notifications`.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};

use futures::StreamExt;
use std::sync::mpsc;

use serde_json::{Value, json};

use crate::common::PATIENCE;
use crate::common::TestHome;
use crate::common::fixture::{Fixture, Watch};
use crate::common::harness::{text_reply, tools_reply};
use crate::common::llm_server::LlmServer;

/// A command that hides a second one behind a newline and a line erase, then reverses
/// what follows.
const HOSTILE: &str = "ls -la ~/Documents\n\x1b[2K\rtouch x #\u{202E}txt.exe";
/// [`HOSTILE`] as every surface must show it.
const HOSTILE_SHOWN: &str = r"ls -la ~/Documents\n\x1b[2K\rtouch x #\u{202E}txt.exe";

fn config(home: &TestHome, server: &LlmServer) {
    home.write_config(
        "config.toml",
        &format!(
            "[providers.local]\nbase_url = \"{}/v1\"\nmodel = \"test-model\"\nmax_retries = 0\n",
            server.base
        ),
    );
}

/// Runs `program args` on a pty of its own (script(1)), in `home`'s environment plus
/// `env`; once its output holds `allow?`, types `answer`. Returns what the terminal
/// showed and how it exited.
fn on_pty(
    home: &Path,
    program_and_args: &[&str],
    env: &[(&str, &str)],
    answer: &str,
) -> (String, ExitStatus) {
    let line = program_and_args
        .iter()
        .map(|a| shell_words::quote(a).into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    let mut cmd = Command::new("script");
    cmd.env_clear()
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().copied())
        .current_dir(home.join("work"))
        .args(["-q", "-e", "-c", &line, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = cmd.spawn().expect("script(1) from util-linux");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let mut answered = false;
    while let Ok(chunk) = rx.recv_timeout(PATIENCE) {
        seen.extend_from_slice(&chunk);
        if !answered && String::from_utf8_lossy(&seen).contains("allow?") {
            stdin.write_all(answer.as_bytes()).unwrap();
            stdin.flush().unwrap();
            answered = true;
        }
    }
    assert!(answered, "no prompt: {:?}", String::from_utf8_lossy(&seen));
    let status = child.wait().unwrap();
    drop(stdin);
    reader.join().unwrap();
    (String::from_utf8_lossy(&seen).into_owned(), status)
}

/// No escape, bidi or zero-width character reached the terminal raw (the pty adds
/// `\r` before each `\n`; that one is the terminal's own).
fn assert_nothing_raw(shown: &str) {
    for c in shown.chars() {
        assert!(
            c == '\n' || c == '\r' || !(c.is_control() || is_bidi_or_zero_width(c)),
            "{c:?} reached the terminal raw in {shown:?}"
        );
    }
}

// The terminal showed `shell: ls -la ~/Documents`; approved, the hidden
// `touch x` ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_asks_on_the_terminal_with_the_whole_command_made_visible() {
    let server = LlmServer::start(vec![
        tools_reply(&[("c1", "shell", json!({ "command": HOSTILE }))]),
        text_reply("not run\x1b[8m"),
    ])
    .await;
    let home = TestHome::new();
    config(&home, &server);
    let exe = env!("CARGO_BIN_EXE_familiar");
    let (shown, status) = tokio::task::spawn_blocking(move || {
        let out = on_pty(
            home.path(),
            &[exe, "run", "--soul", "system_admin", "list my documents"],
            &[],
            "n\n",
        );
        assert!(!home.path().join("work/x").exists());
        out
    })
    .await
    .unwrap();
    assert!(status.success(), "{shown}");
    assert!(
        shown.contains(&format!("│ shell: {HOSTILE_SHOWN}")),
        "{shown}"
    );
    // The model's answer cannot hide what comes after it.
    assert!(shown.contains(r"not run\x1b[8m"), "{shown}");
    assert_nothing_raw(&shown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_json_reports_the_approval_with_the_whole_command_made_visible() {
    let server = LlmServer::start(vec![
        tools_reply(&[("c1", "shell", json!({ "command": HOSTILE }))]),
        text_reply("denied"),
    ])
    .await;
    let home = TestHome::new();
    config(&home, &server);
    let mut cmd = home.familiar();
    cmd.args([
        "run",
        "--json",
        "--soul",
        "system_admin",
        "list my documents",
    ]);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let asked: Value = stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["kind"] == "approval_requested")
        .unwrap_or_else(|| panic!("no approval_requested in {stdout}"));
    assert_eq!(asked["summary"], format!("shell: {HOSTILE_SHOWN}"));
    assert_eq!(asked["tool"], "shell");
}

// A 100 KB command: its head and tail are shown with its size, never its first line
// alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_command_is_shown_as_head_and_tail_with_its_size() {
    let command = format!("echo {}\nrm -rf ~/precious", "a".repeat(100_000));
    let server = LlmServer::start(vec![
        tools_reply(&[("c1", "shell", json!({ "command": command }))]),
        text_reply("denied"),
    ])
    .await;
    let home = TestHome::new();
    config(&home, &server);
    let mut cmd = home.familiar();
    cmd.args(["run", "--json", "--soul", "system_admin", "clean up"]);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let asked: Value = stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["kind"] == "approval_requested")
        .unwrap_or_else(|| panic!("no approval_requested in {stdout}"));
    let summary = asked["summary"].as_str().unwrap();
    assert!(summary.starts_with("shell: echo aaaa"), "{summary}");
    assert!(summary.ends_with(r"\nrm -rf ~/precious"), "{summary}");
    assert!(
        summary.contains(&format!("of {} in all", command.len())),
        "{summary}"
    );
    assert!(summary.len() < 4096, "{}", summary.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_asks_on_the_terminal_with_the_whole_call_made_visible() {
    let content = "hi\n\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\\u{202E}";
    let f = Fixture::builder(vec![
        tools_reply(&[(
            "c1",
            "write_file",
            json!({"path": "note.txt", "content": content}),
        )]),
        text_reply("not written"),
    ])
    .policy("[tiers]\nread = \"allow\"\nwrite = \"ask\"\n")
    .options(familiar::daemon::DaemonOptions {
        notifications: false,
        ..Default::default()
    })
    .start()
    .await;
    let mut w = Watch::new(&f.proxy).await;
    let ws = f.workspace();
    let exe = env!("CARGO_BIN_EXE_familiar");
    let bus = f.bus.address.clone();
    let home = f.harness.home.path().to_owned();
    let ws_arg = ws.to_str().unwrap().to_owned();
    let pty = tokio::task::spawn_blocking(move || {
        on_pty(
            &home,
            &[
                exe,
                "ask",
                "--soul",
                "test",
                "--workspace",
                &ws_arg,
                "write a note",
            ],
            &[("DBUS_SESSION_BUS_ADDRESS", &bus)],
            "n\n",
        )
    });
    let summary = tokio::time::timeout(PATIENCE, w.approvals.next())
        .await
        .unwrap()
        .unwrap()
        .args()
        .unwrap()
        .summary
        .clone();
    let (shown, status) = pty.await.unwrap();
    assert!(status.success(), "{shown}");
    let expected = concat!(
        "write_file: note.txt\n  content: ",
        r"hi\n\x1b]8;;http://evil\x1b\click\x1b]8;;\x1b\\\u{202E}"
    );
    assert_eq!(summary, expected);
    assert!(
        shown.contains("│ write_file: note.txt\r\n│   content: hi\\n\\x1b]8;;http://evil"),
        "{shown}"
    );
    assert_nothing_raw(&shown);
    assert!(!ws.join("note.txt").exists());
}

/// Bidi controls and zero-width characters.
fn is_bidi_or_zero_width(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}
