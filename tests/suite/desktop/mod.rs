//! familiar on a real Wayland desktop: a headless sway with mako, fuzzel and wtype,
//! the daemon started by D-Bus activation, a scripted loopback model
//! (tests/common/sway/). Every step is what a person does: a key press, a prompt
//! typed into the launcher, a notification's action, a click, a dismissal.
// The key-to-answer test prints its timings (BENCHMARKS.md).
#![allow(clippy::print_stderr)]

mod context;

use std::path::Path;
use std::time::Instant;

use serde_json::json;

use crate::common::harness::{text_reply, tools_reply};
use crate::common::llm_server::{Gate, LlmServer, Reply, Step, oa_done, oa_finish, oa_text, sse};
use crate::common::sway::{Desktop, Options};

mod undo;

const SOUL: &str = "id = \"test\"\ndescription = \"a test soul\"\nprompt = \"You are a test soul.\"\nmax_iterations = 5\ntools = [\"read_file\", \"list_dir\", \"write_file\"]\n";
const ASK_WRITES: &str = "[tiers]\nread = \"allow\"\nwrite = \"ask\"\n";

/// A session whose `familiar` talks to `server`: config, the test soul, a policy
/// that asks before writes, and the keybindings the README gives.
fn desktop(server: &LlmServer) -> Option<Desktop> {
    desktop_with(server, Vec::new())
}

/// [`desktop`], with `extra` programs on the session's `PATH` before the system's.
fn desktop_with(server: &LlmServer, extra: Vec<std::path::PathBuf>) -> Option<Desktop> {
    let familiar = Path::new(env!("CARGO_BIN_EXE_familiar"));
    let sandbox = Path::new(env!("CARGO_BIN_EXE_familiar-sandbox")).to_path_buf();
    let mut programs = vec![familiar.to_path_buf(), sandbox];
    programs.extend(extra);
    let desk = Desktop::start(&Options {
        sway_config: "bindsym Mod4+a exec familiar ask --dmenu --notify\nbindsym Mod4+Shift+a exec familiar approve --dmenu\n".to_owned(),
        programs,
    })?;
    desk.write(
        ".config/familiar/config.toml",
        &format!(
            "default_soul = \"test\"\npolicy = \"askwrites\"\n[providers.local]\nbase_url = \"{}/v1\"\nmodel = \"m\"\nmax_retries = 0\n[notifications]\nresult_timeout = \"2m\"\n",
            server.base
        ),
    );
    desk.write(".config/familiar/souls/test.toml", SOUL);
    desk.write(".config/familiar/policies/askwrites.toml", ASK_WRITES);
    Some(desk)
}

/// `familiar setup` in the session: no user manager there, D-Bus activation works.
fn setup(desk: &Desktop) -> std::process::Output {
    desk.run("familiar", &["setup"])
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A model answer held back until `gate` opens.
fn held_answer(gate: &Gate, answer: &str) -> Reply {
    Reply::sse_steps(vec![
        Step::Hold(gate.clone()),
        Step::Send(sse(vec![oa_text(answer), oa_finish("stop"), oa_done()]).into_bytes()),
    ])
}

fn is_familiar(n: &crate::common::sway::Notification) -> bool {
    n.app_name == "familiar"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_press_asks_and_one_notification_goes_from_progress_to_the_answer() {
    let gate = Gate::new();
    let server = LlmServer::start(vec![held_answer(&gate, "Your disk is 40% full.")]).await;
    let Some(desk) = desktop(&server) else { return };
    let out = setup(&desk);
    // No user manager in this session, but the bus can start the daemon: that is a
    // working install.
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("D-Bus activation starts the daemon"),
        "{}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stdout).contains("bindsym $mod+a exec familiar ask --dmenu --notify"),
        "{}",
        text(&out.stdout)
    );

    let before = desk.centre();
    let mut keys = desk.keyboard(&["-M", "logo", "-k", "a", "-m", "logo"]);
    desk.wait_window(&before);
    keys.type_text("how full is my disk?\n");
    let enter = Instant::now();
    keys.finish();
    let progress =
        desk.wait_notification(|n| is_familiar(n) && n.summary.contains("how full is my disk?"));
    let first = enter.elapsed();
    assert!(!progress.body.contains("40%"), "{progress:?}");
    gate.open();
    let answer = desk.wait_notification(|n| is_familiar(n) && n.body.contains("40% full"));
    let done = enter.elapsed();
    eprintln!(
        "enter → first notification: {} ms; enter → answer: {} ms",
        first.as_millis(),
        done.as_millis()
    );
    // One bubble per task: the answer replaced the progress, same id.
    assert_eq!(answer.id, progress.id, "{answer:?} {progress:?}");
    assert_eq!(answer.summary, "familiar: “how full is my disk?”");
    let familiar: Vec<_> = desk
        .notifications()
        .into_iter()
        .filter(is_familiar)
        .collect();
    assert_eq!(familiar.len(), 1, "{familiar:#?}");
    // Under a keybinding nothing goes to the compositor's log.
    assert_eq!(desk.compositor_stdout(), "");
}

/// Submits a task that writes a file, as the session user; returns the process
/// (its `--json` events on stdout).
fn ask_to_write(desk: &Desktop) -> std::process::Child {
    desk.command("familiar")
        .args(["ask", "--json", "write the note"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("familiar ask")
}

/// The task's `approval_resolved` outcome and its exit code.
fn resolved(child: std::process::Child) -> (serde_json::Value, Option<i32>) {
    let out = child.wait_with_output().expect("familiar ask");
    let events: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let resolved = events
        .iter()
        .find(|e| e["kind"] == "approval_resolved")
        .cloned()
        .unwrap_or_else(|| panic!("no approval_resolved: {events:#?} {}", text(&out.stderr)));
    (resolved["outcome"].clone(), out.status.code())
}

fn write_call() -> Reply {
    tools_reply(&[("c1", "write_file", json!({"path": "n.txt", "content": "x"}))])
}

fn approval(desk: &Desktop) -> crate::common::sway::Notification {
    desk.wait_notification(|n| is_familiar(n) && n.summary.contains("write_file"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_and_deny_through_makos_actions() {
    let server = LlmServer::start(vec![
        write_call(),
        text_reply("written"),
        write_call(),
        text_reply("not written"),
    ])
    .await;
    let Some(desk) = desktop(&server) else { return };
    assert_eq!(setup(&desk).status.code(), Some(0));

    let task = ask_to_write(&desk);
    let n = approval(&desk);
    // Its first lines say what will run and why, and how to answer without buttons.
    let lines: Vec<&str> = n.body.lines().collect();
    assert_eq!(lines[0], "write_file: n.txt", "{n:?}");
    assert!(lines[1].starts_with("why: "), "{n:?}");
    assert!(lines[2].contains("click"), "{n:?}");
    assert_eq!(
        n.actions.get("default").map(String::as_str),
        Some("Choose…")
    );
    // The timed grant names its scope: the workspace the note is written in.
    let grant = n.actions.get("allow-10min").map(String::as_str);
    assert!(
        grant.is_some_and(|g| g
            .starts_with("Allow write_file in ~/.local/state/familiar/workspaces/")
            && g.ends_with("/ for this task (10 min)")),
        "{n:?}"
    );
    desk.invoke(n.id, "approve");
    let (outcome, code) = resolved(task);
    assert_eq!(
        outcome,
        json!({"outcome": "approved", "by": "notification"})
    );
    assert_eq!(code, Some(0));
    // Answered, it goes.
    assert!(
        desk.wait_until(|| (!desk.notifications().iter().any(|x| x.id == n.id)).then_some(()))
            .is_some()
    );

    let task = ask_to_write(&desk);
    let n = approval(&desk);
    desk.invoke(n.id, "deny");
    let (outcome, _) = resolved(task);
    assert_eq!(outcome, json!({"outcome": "denied", "by": "notification"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_click_opens_the_chooser_in_the_launcher_and_its_choice_answers() {
    let server = LlmServer::start(vec![write_call(), text_reply("written")]).await;
    let Some(desk) = desktop(&server) else { return };
    assert_eq!(setup(&desk).status.code(), Some(0));
    let task = ask_to_write(&desk);
    let n = approval(&desk);
    // The keyboard first: fuzzel 1.8 exits when a keyboard appears while it runs.
    let mut keys = desk.keyboard(&[]);
    let before = desk.centre();
    desk.click(n.id);
    desk.wait_window(&before);
    keys.type_text("Approve\n");
    keys.finish();
    let (outcome, code) = resolved(task);
    assert_eq!(
        outcome,
        json!({"outcome": "approved", "by": "notification chooser"})
    );
    assert_eq!(code, Some(0));
}

/// See: issue 39 (a `fuzzel` planted on the daemon's `PATH` answered "Approve").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_menu_planted_on_the_session_path_never_answers_a_click() {
    use std::os::unix::fs::PermissionsExt;
    let server = LlmServer::start(vec![write_call(), text_reply("not written")]).await;
    let planted = tempfile::tempdir().unwrap();
    let fuzzel = planted.path().join("fuzzel");
    std::fs::write(
        &fuzzel,
        "#!/bin/sh\ntouch \"$HOME/planted-menu-ran\"\necho Approve\n",
    )
    .unwrap();
    std::fs::set_permissions(&fuzzel, std::fs::Permissions::from_mode(0o755)).unwrap();
    // On the session's PATH (the daemon's too) ahead of /usr/bin/fuzzel.
    let Some(desk) = desktop_with(&server, vec![fuzzel]) else {
        return;
    };
    assert_eq!(setup(&desk).status.code(), Some(0));
    let task = ask_to_write(&desk);
    let n = approval(&desk);
    let mut keys = desk.keyboard(&[]);
    let before = desk.centre();
    desk.click(n.id);
    // The system's fuzzel opens: the planted one would have answered at once.
    desk.wait_window(&before);
    keys.type_text("Deny\n");
    keys.finish();
    let (outcome, _) = resolved(task);
    assert_eq!(
        outcome,
        json!({"outcome": "denied", "by": "notification chooser"})
    );
    assert!(!desk.home().join("planted-menu-ran").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chooser_binding_answers_the_one_pending_request() {
    let server = LlmServer::start(vec![write_call(), text_reply("not written")]).await;
    let Some(desk) = desktop(&server) else { return };
    assert_eq!(setup(&desk).status.code(), Some(0));
    let task = ask_to_write(&desk);
    approval(&desk);
    let before = desk.centre();
    let mut keys = desk.keyboard(&[
        "-M", "logo", "-M", "shift", "-k", "a", "-m", "shift", "-m", "logo",
    ]);
    desk.wait_window(&before);
    keys.type_text("Deny\n");
    keys.finish();
    let (outcome, _) = resolved(task);
    assert_eq!(outcome["outcome"], "denied");
    assert!(
        outcome["by"].as_str().unwrap().starts_with("dbus:"),
        "{outcome}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dismissed_approval_is_denied_at_once() {
    let server = LlmServer::start(vec![write_call(), text_reply("not written")]).await;
    let Some(desk) = desktop(&server) else { return };
    assert_eq!(setup(&desk).status.code(), Some(0));
    let task = ask_to_write(&desk);
    let n = approval(&desk);
    desk.dismiss(n.id);
    // At once: the policy's approval timeout (120 s) is far beyond the test's patience.
    let (outcome, _) = resolved(task);
    assert_eq!(
        outcome,
        json!({"outcome": "denied", "by": "notification dismissed"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_that_cannot_start_is_a_notification_before_any_menu() {
    let server = LlmServer::start(vec![]).await;
    let Some(desk) = desktop(&server) else { return };
    // No `familiar setup`: nothing owns the name and the bus cannot start it.
    let out = desk.run("familiar", &["ask", "--dmenu", "--notify"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let n = desk.wait_notification(is_familiar);
    assert_eq!(n.summary, "familiar: not asked");
    assert!(n.body.contains("familiar setup"), "{n:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_that_fails_to_start_closes_the_menu_and_says_why() {
    let server = LlmServer::start(vec![]).await;
    let Some(desk) = desktop(&server) else { return };
    assert_eq!(setup(&desk).status.code(), Some(0));
    // The daemon cannot load its config: activation starts it, and it exits.
    desk.write(".config/familiar/config.toml", "no_such_key = 1\n");
    // Nobody types: the menu must go by itself when the start fails.
    let out = desk.run("familiar", &["ask", "--dmenu", "--notify"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let n = desk.wait_notification(is_familiar);
    assert_eq!(n.summary, "familiar: not asked");
    assert!(n.body.contains("familiar doctor"), "{n:?}");
}

/// `familiar ask --notify PROMPT` in the session, as under a keybinding (stdout not a
/// terminal).
fn ask_notify(desk: &Desktop, prompt: &str) -> std::process::Child {
    desk.command("familiar")
        .args(["ask", "--notify", prompt])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("familiar ask")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_requests_are_two_notifications_and_their_results_expire() {
    let (one, two) = (Gate::new(), Gate::new());
    let server = LlmServer::start(vec![]).await;
    let (a, b) = (one.clone(), two.clone());
    server.set_responder(std::sync::Arc::new(move |r| {
        if r.body.to_string().contains("first question") {
            held_answer(&a, "answer one")
        } else {
            held_answer(&b, "answer two")
        }
    }));
    let Some(desk) = desktop(&server) else { return };
    assert_eq!(setup(&desk).status.code(), Some(0));
    desk.write(
        ".config/familiar/config.toml",
        &format!(
            "default_soul = \"test\"\n[providers.local]\nbase_url = \"{}/v1\"\nmodel = \"m\"\nmax_retries = 0\n[notifications]\nresult_timeout = \"1s\"\n",
            server.base
        ),
    );
    let first = ask_notify(&desk, "first question about the disk");
    let second = ask_notify(&desk, "second question about the fan");
    let p1 = desk.wait_notification(|n| n.summary.contains("first question"));
    let p2 = desk.wait_notification(|n| n.summary.contains("second question"));
    assert_ne!(p1.id, p2.id);
    one.open();
    two.open();
    let r1 = desk.wait_notification(|n| n.body == "answer one");
    let r2 = desk.wait_notification(|n| n.body == "answer two");
    assert_eq!((r1.id, r2.id), (p1.id, p2.id));
    // A task that changed nothing offers no Undo (issue 40).
    assert!(
        r1.actions.is_empty() && r2.actions.is_empty(),
        "{r1:?} {r2:?}"
    );
    for child in [first, second] {
        let out = child.wait_with_output().expect("familiar ask");
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        // Under a keybinding nothing but warnings and errors.
        assert_eq!(text(&out.stdout), "");
        assert_eq!(text(&out.stderr), "");
    }
    // `result_timeout` was sent: mako (whose own default is never) takes them down.
    desk.wait_until(|| (!desk.notifications().iter().any(is_familiar)).then_some(()))
        .expect("the results did not expire");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_click_on_a_long_answer_shows_all_of_it_in_the_launcher() {
    // Words that do not repeat (a repeated sentence would be cut as degenerate output).
    let long: String = (0..80)
        .map(|i| format!("all of this, part {i}, is the answer. "))
        .collect();
    let server = LlmServer::start(vec![text_reply(&long)]).await;
    let Some(desk) = desktop(&server) else { return };
    assert_eq!(setup(&desk).status.code(), Some(0));
    let task = ask_notify(&desk, "tell me everything");
    let n = desk.wait_notification(|n| n.body.starts_with("all of this") && n.body.ends_with('…'));
    assert_eq!(
        n.actions.get("default").map(String::as_str),
        Some("Show all")
    );
    let mut keys = desk.keyboard(&[]);
    let before = desk.centre();
    desk.click(n.id);
    desk.wait_window(&before);
    keys.type_text("\n");
    keys.finish();
    // Shown, the command is done.
    let out = task.wait_with_output().expect("familiar ask");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}
