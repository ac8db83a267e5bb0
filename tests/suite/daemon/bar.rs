//! `familiar bar`: the line it prints at each change, driven by the daemon's signals.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::Stdio;

use serde_json::json;
use tokio::sync::mpsc;

use super::*;
use crate::common::harness::{text_reply, tools_reply};

const ASK_WRITES: &str = "[tiers]\nread = \"allow\"\nwrite = \"ask\"\n";

/// Waits for the bar to print `line`, skipping the lines before it.
async fn wait_line(lines: &mut mpsc::UnboundedReceiver<String>, line: &str) {
    let mut seen = Vec::new();
    let found = tokio::time::timeout(PATIENCE, async {
        while let Some(l) = lines.recv().await {
            if l == line {
                return;
            }
            seen.push(l);
        }
    })
    .await;
    assert!(found.is_ok(), "never printed {line:?}; printed {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bar_goes_from_idle_to_working_to_asking_and_back() {
    let f = Fixture::builder(vec![
        tools_reply(&[("c1", "write_file", json!({"path": "n.txt", "content": "x"}))]),
        text_reply("not written"),
    ])
    .policy(ASK_WRITES)
    .start()
    .await;
    let mut child = f
        .harness
        .home
        .familiar_process()
        .env("DBUS_SESSION_BUS_ADDRESS", &f.bus.address)
        .args(["bar", "--plain"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, mut lines) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    wait_line(&mut lines, "familiar: idle").await;
    let mut w = Watch::new(&f.proxy).await;
    let ws = f.workspace();
    let opts = HashMap::from([("workspace", zbus::Variant::from(ws.to_str().unwrap()))]);
    let task = f.proxy.submit("test", "write", opts).await.unwrap().0;
    wait_line(&mut lines, "familiar: working (1)").await;
    let (request, ..) = w.approval(&task).await;
    wait_line(&mut lines, "familiar: asking (1)").await;
    f.proxy.respond(&request, false).await.unwrap();
    w.finished(&task).await;
    wait_line(&mut lines, "familiar: idle").await;
    child.kill().unwrap();
    child.wait().unwrap();
}

// Regression (issue 39): a prompt's `<span size="1">hidden</span>` reached waybar's
// tooltip as Pango markup; the JSON line carries it escaped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompts_markup_reaches_waybar_escaped() {
    let f = Fixture::builder(vec![
        tools_reply(&[("c1", "write_file", json!({"path": "n.txt", "content": "x"}))]),
        text_reply("not written"),
    ])
    .policy(ASK_WRITES)
    .start()
    .await;
    let mut child = f
        .harness
        .home
        .familiar_process()
        .env("DBUS_SESSION_BUS_ADDRESS", &f.bus.address)
        .arg("bar")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, mut lines) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut w = Watch::new(&f.proxy).await;
    let ws = f.workspace();
    let opts = HashMap::from([("workspace", zbus::Variant::from(ws.to_str().unwrap()))]);
    let prompt = r#"<span size="1">hidden</span> & more"#;
    let task = f.proxy.submit("test", prompt, opts).await.unwrap().0;
    let (request, ..) = w.approval(&task).await;
    let asking = tokio::time::timeout(PATIENCE, async {
        while let Some(l) = lines.recv().await {
            let v: serde_json::Value = serde_json::from_str(&l).unwrap();
            if v["alt"] == "asking" {
                return v;
            }
        }
        panic!("the bar ended")
    })
    .await
    .expect("an `asking` line");
    let tooltip = asking["tooltip"].as_str().unwrap();
    assert!(
        tooltip.contains(r#"&lt;span size="1"&gt;hidden&lt;/span&gt; &amp; more"#),
        "{tooltip}"
    );
    assert!(!tooltip.contains('<'), "{tooltip}");
    f.proxy.respond(&request, false).await.unwrap();
    w.finished(&task).await;
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The protocol crate's example, built beside the binary (`cargo test` builds
/// examples), or `None` after a visible skip.
fn watch_example() -> Option<std::path::PathBuf> {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_familiar"));
    let example = bin.parent()?.join("examples/watch");
    if example.is_file() {
        return Some(example);
    }
    crate::common::skip::skip(
        "the watch example is not built (`cargo build -p familiar-protocol --example watch`)",
    );
    None
}

/// Lines of `child`'s stdout, as they come.
fn lines_of(child: &mut std::process::Child) -> mpsc::UnboundedReceiver<String> {
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    lines
}

/// The `familiar: …` lines up to `last` after `after` was seen, each change once.
async fn states(
    lines: &mut mpsc::UnboundedReceiver<String>,
    after: &str,
    last: &str,
) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    let found = tokio::time::timeout(PATIENCE, async {
        while let Some(l) = lines.recv().await {
            if !l.starts_with("familiar: ") || seen.last() == Some(&l) {
                continue;
            }
            seen.push(l.clone());
            if l == last && seen.iter().any(|s| s == after) {
                return;
            }
        }
    })
    .await;
    assert!(found.is_ok(), "never {last:?} after {after:?}: {seen:?}");
    seen
}

// Issue 42: a third-party watcher on the protocol crate's board shows what the bar shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_protocol_crates_watcher_shows_what_the_bar_shows() {
    let Some(example) = watch_example() else {
        return;
    };
    let f = Fixture::builder(vec![
        tools_reply(&[("c1", "write_file", json!({"path": "n.txt", "content": "x"}))]),
        text_reply("not written"),
    ])
    .policy(ASK_WRITES)
    .start()
    .await;
    let spawn = |cmd: &mut std::process::Command| {
        cmd.env("DBUS_SESSION_BUS_ADDRESS", &f.bus.address)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut bar = spawn(f.harness.home.familiar_process().args(["bar", "--plain"]));
    let mut watcher = spawn(&mut std::process::Command::new(example));
    let (mut bar_lines, mut watcher_lines) = (lines_of(&mut bar), lines_of(&mut watcher));
    wait_line(&mut bar_lines, "familiar: idle").await;
    wait_line(&mut watcher_lines, "familiar: idle").await;
    let mut w = Watch::new(&f.proxy).await;
    let ws = f.workspace();
    let opts = HashMap::from([("workspace", zbus::Variant::from(ws.to_str().unwrap()))]);
    let task = f.proxy.submit("test", "write", opts).await.unwrap().0;
    let (request, ..) = w.approval(&task).await;
    f.proxy.respond(&request, false).await.unwrap();
    w.finished(&task).await;
    let shown = states(&mut bar_lines, "familiar: asking (1)", "familiar: idle").await;
    let watched = states(&mut watcher_lines, "familiar: asking (1)", "familiar: idle").await;
    // The bar's signals come on several streams, so a passing state can be skipped;
    // both show the question and end idle, and show nothing the other does not.
    for seen in [&shown, &watched] {
        assert_eq!(
            seen.first().map(String::as_str),
            Some("familiar: working (1)")
        );
        assert_eq!(seen.last().map(String::as_str), Some("familiar: idle"));
        let known = [
            "familiar: working (1)",
            "familiar: asking (1)",
            "familiar: idle",
        ];
        assert!(seen.iter().all(|l| known.contains(&l.as_str())), "{seen:?}");
    }
    for mut child in [bar, watcher] {
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

// Regression (issue 42 §5): with no session bus `familiar bar` exited 3 naming the
// daemon's activation (a bar module that exits leaves its slot empty). It says `off`
// with the cause and goes on once a bus appears at the address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bar_waits_off_for_a_session_bus_and_goes_on_when_one_appears() {
    let home = crate::common::TestHome::new();
    let dir = tempfile::tempdir().unwrap();
    let address = format!("unix:path={}/bus", dir.path().display());
    let mut child = home
        .familiar_process()
        .env("DBUS_SESSION_BUS_ADDRESS", &address)
        .args(["bar", "--plain"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = lines_of(&mut child);
    wait_line(&mut lines, "familiar: off (no session bus)").await;
    // The bus comes after the bar, as it may at login.
    let mut bus = std::process::Command::new("dbus-daemon")
        .args(["--session", "--nofork", "--print-address"])
        .arg(format!("--address={address}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut printed = String::new();
    BufReader::new(bus.stdout.take().unwrap())
        .read_line(&mut printed)
        .unwrap();
    wait_line(&mut lines, "familiar: off").await;
    // And it follows the daemon's name on that bus like any other (a stand-in that
    // answers every call with an error: an empty board).
    let conn = zbus::connection::Builder::address(address.as_str())
        .serve_at("/elsewhere", Nothing)
        .name(familiar_protocol::NAME)
        .build()
        .await
        .unwrap();
    wait_line(&mut lines, "familiar: idle").await;
    assert_eq!(child.try_wait().unwrap(), None, "the bar exited");
    drop(conn);
    child.kill().unwrap();
    child.wait().unwrap();
    bus.kill().unwrap();
    bus.wait().unwrap();
}

/// An object that serves nothing of the daemon's.
struct Nothing;

#[zbus::interface(name = "org.example.Nothing")]
impl Nothing {
    fn nothing(&self) {}
}

#[test]
fn no_session_bus_is_off_with_its_cause_in_waybars_line() {
    let home = crate::common::TestHome::new();
    let dir = tempfile::tempdir().unwrap();
    let mut child = home
        .familiar_process()
        .env(
            "DBUS_SESSION_BUS_ADDRESS",
            format!("unix:path={}/bus", dir.path().display()),
        )
        .arg("bar")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let line: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(line["alt"], "off");
    assert_eq!(line["text"], "off");
    let tooltip = line["tooltip"].as_str().unwrap();
    assert!(
        tooltip.starts_with("no session bus at unix:path=") && tooltip.contains("waiting for it"),
        "{tooltip}"
    );
}
