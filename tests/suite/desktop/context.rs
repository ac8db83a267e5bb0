//! `familiar ask --context`: what the user points at on the real sway, read by the
//! client at the key press (Debian's `wl-clipboard` sets and reads the selections),
//! reaches the scripted model inside its delimited block, or is held back.

use std::process::{Child, Stdio};

use super::{desktop, held_answer, is_familiar, setup, text};
use crate::common::llm_server::{Gate, LlmServer, Recorded};
use crate::common::skip;
use crate::common::sway::Desktop;

/// A session with the daemon installed for D-Bus activation.
fn session(server: &LlmServer) -> Option<Desktop> {
    let desk = desktop(server)?;
    let out = setup(&desk);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    Some(desk)
}

/// Offers `text` as the primary selection (`primary`) or the clipboard, with
/// `wl-copy ARGS`, and waits until `wl-paste` reads it back: the offer is up.
fn copy(desk: &Desktop, args: &[&str], text: &str, primary: bool) {
    let mut cmd = desk.command("wl-copy");
    if primary {
        cmd.arg("--primary");
    }
    // wl-copy forks a server that keeps the offer: it must not hold our pipes.
    let status = cmd
        .args(args)
        .arg(text)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("wl-copy");
    assert!(status.success());
    let list = if primary {
        vec!["--primary", "--list-types"]
    } else {
        vec!["--list-types"]
    };
    desk.wait_until(|| desk.run("wl-paste", &list).status.success().then_some(()))
        .expect("the offer never showed");
}

/// `familiar ask --notify ARGS` in the session, running.
fn ask(desk: &Desktop, args: &[&str]) -> Child {
    desk.command("familiar")
        .args(["ask", "--notify"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("familiar ask")
}

/// The user message the model was sent first.
fn user_message(r: &Recorded) -> String {
    r.body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["role"] == "user")
        .map(|m| m["content"].to_string())
        .unwrap_or_default()
}

fn wl_clipboard() -> Option<()> {
    skip::program("wl-copy", "wl-clipboard")?;
    skip::program("wl-paste", "wl-clipboard").map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_selection_reaches_the_model_with_its_source_named() {
    let gate = Gate::new();
    let server = LlmServer::start(vec![held_answer(&gate, "Hello, world.")]).await;
    let Some(desk) = session(&server) else { return };
    let Some(()) = wl_clipboard() else { return };
    copy(&desk, &[], "bonjour le monde\nsecond line", true);
    let child = ask(
        &desk,
        &["--context", "selection", "translate this to English"],
    );
    // The bubble shows the first line of what was taken while the task runs.
    let progress = desk.wait_notification(|n| {
        is_familiar(n) && n.body.contains("primary selection: “bonjour le monde”")
    });
    gate.open();
    let out = child.wait_with_output().expect("familiar ask");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let sent = user_message(&server.requests()[0]);
    assert!(
        sent.contains(
            "<context source=\\\"primary selection\\\">\\nbonjour le monde\\nsecond line\\n</context>"
        ),
        "{sent}"
    );
    assert!(sent.starts_with("\"translate this to English"), "{sent}");
    assert!(!progress.body.contains("second line"), "{progress:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clipboard_a_password_manager_marks_secret_is_not_sent() {
    let gate = Gate::new();
    let server = LlmServer::start(vec![held_answer(&gate, "Nothing to explain.")]).await;
    let Some(desk) = session(&server) else { return };
    let Some(()) = wl_clipboard() else { return };
    // wl-copy offers one MIME type: here only the hint, as KeePassXC offers it beside
    // the password (the choice with a text type beside it is a unit test of
    // src/cli/ask/context.rs).
    copy(
        &desk,
        &["--type", "x-kde-passwordManagerHint"],
        "secret",
        false,
    );
    let child = ask(&desk, &["--context", "clipboard", "explain this"]);
    desk.wait_notification(|n| {
        is_familiar(n) && n.body.contains("the clipboard holds a password: not sent")
    });
    gate.open();
    let out = child.wait_with_output().expect("familiar ask");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("familiar: warning: the clipboard holds a password: not sent"),
        "{}",
        text(&out.stderr)
    );
    let sent = user_message(&server.requests()[0]);
    assert!(!sent.contains("<context"), "{sent}");
    assert!(!sent.contains("secret"), "{sent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_window_names_the_focused_foot_window() {
    let gate = Gate::new();
    let server = LlmServer::start(vec![held_answer(&gate, "A terminal.")]).await;
    let Some(mut desk) = session(&server) else {
        return;
    };
    desk.spawn_client(
        "foot",
        &[
            "--app-id",
            "familiar-test-foot",
            "--title",
            "build log",
            "cat",
        ],
    );
    let (_, workspace) = desk.wait_for_window("familiar-test-foot");
    let child = ask(&desk, &["--context", "window", "what is this window?"]);
    gate.open();
    let out = child.wait_with_output().expect("familiar ask");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let sent = user_message(&server.requests()[0]);
    let want = format!(
        "<context source=\\\"focused window\\\">\\napp: familiar-test-foot\\ntitle: build log\\nworkspace: {workspace}\\ncompositor: sway\\n</context>"
    );
    assert!(sent.contains(&want), "{sent}");
}
