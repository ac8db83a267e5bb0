//! `desktop_dispatch launch` called directly against the fake compositors: one
//! program and its words, never a shell line (issue 39). What Hyprland's `exec` would
//! hand to `sh -c` is run by a real `sh`, so each word is seen arriving whole.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use familiar::compositor::{Compositor, Hyprland, Niri};
use familiar::tools::Tool;
use familiar::tools::desktop::{DesktopDispatch, Locate};
use serde_json::{Value, json};

use super::*;
use crate::common::fake_hyprland::{FakeHyprland, Reply as Hypr};
use crate::common::fake_niri::{FakeNiri, HANDLED};

/// Words with a space, a single quote, a backslash, `$` and shell syntax.
const WORDS: &[&str] = &["a b'c", "\\", "$HOME && touch x", "|sh"];

/// A program outside the test's home that writes each of its arguments, NUL-ended,
/// to `args` beside it.
fn recorder(dir: &Path) -> PathBuf {
    let path = dir.join("recorder");
    let script = format!(
        "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done > '{}'\n",
        dir.join("args").display()
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn recorded(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("args"))
        .unwrap()
        .split_terminator('\0')
        .map(str::to_owned)
        .collect()
}

async fn dispatch(h: &Harness, compositor: Compositor, args: Value) -> Result<String, ToolError> {
    let locate: Locate = Arc::new(move || Some(compositor.clone()));
    DesktopDispatch { locate }
        .execute(args, direct_ctx(h))
        .await
}

/// See: issue 39 (`a && b` reached Hyprland's and sway's `exec`, a shell).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_syntax_is_refused_before_the_compositor_sees_anything() {
    let h = Harness::new(vec![]).await;
    let work = tempfile::tempdir().unwrap();
    // The fake expects nothing: a request would be recorded.
    let fake = FakeHyprland::start(&h.home.path().join("run"), "sig", vec![]);
    let hypr = Compositor::Hyprland(Hyprland::at(fake.socket.clone()));
    for command in [
        "foot && touch x",
        "foot | sh",
        "foot $(touch x)",
        "foot; touch x",
    ] {
        let err = dispatch(
            &h,
            hypr.clone(),
            json!({"action": "launch", "command": command}),
        )
        .await
        .unwrap_err();
        let ToolError::RespondToModel(message) = err else {
            panic!("{command}: not an error for the model: {err:?}");
        };
        assert!(message.contains("is shell syntax"), "{command}: {message}");
    }
    // A program that is not installed in the system's directories, or under home.
    let planted = h.home.path().join(".local/bin/foot");
    std::fs::create_dir_all(planted.parent().unwrap()).unwrap();
    std::fs::copy(recorder(work.path()), &planted).unwrap();
    for program in ["familiar-no-such-terminal", planted.to_str().unwrap()] {
        let err = dispatch(
            &h,
            hypr.clone(),
            json!({"action": "launch", "program": program}),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, ToolError::RespondToModel(_)), "{err:?}");
    }
    assert!(fake.finish().is_empty());
    assert!(!work.path().join("x").exists() && !work.path().join("args").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hyprland_gets_each_word_quoted_for_its_shell() {
    let h = Harness::new(vec![]).await;
    let work = tempfile::tempdir().unwrap();
    let program = std::fs::canonicalize(recorder(work.path())).unwrap();
    let mut line = format!("exec '{}'", program.display());
    for w in WORDS {
        line.push(' ');
        line.push_str(&familiar::programs::argv::quote(w));
    }
    let expected = format!("/dispatch exec {line}");
    let fake = FakeHyprland::start(
        &h.home.path().join("run"),
        "sig",
        vec![(expected.as_str(), Hypr::Text("ok".into()))],
    );
    let sent = dispatch(
        &h,
        Compositor::Hyprland(Hyprland::at(fake.socket.clone())),
        json!({"action": "launch", "program": program, "args": WORDS}),
    )
    .await
    .unwrap();
    assert!(
        sent.starts_with("ok (hyprland): dispatch exec exec '"),
        "{sent}"
    );
    let request = fake.finish().remove(0);
    assert_eq!(request, expected);
    // What Hyprland does with it: `sh -c` on the dispatcher's arguments.
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(request.strip_prefix("/dispatch exec ").unwrap())
        .current_dir(work.path())
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(recorded(work.path()), WORDS);
    assert!(!work.path().join("x").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn niri_spawns_the_found_program_with_the_words_as_they_are() {
    let h = Harness::new(vec![]).await;
    let sh = familiar::programs::find("sh").unwrap();
    let spawn =
        json!({"Action": {"Spawn": {"command": [sh.display().to_string(), "-c", "a b'c"]}}})
            .to_string();
    let fake = FakeNiri::start(h.home.path(), vec![(&spawn, HANDLED)]);
    let sent = dispatch(
        &h,
        Compositor::Niri(Niri::at(&fake.socket)),
        // The older `command` string, when it is plain words.
        json!({"action": "launch", "command": "sh -c \"a b'c\""}),
    )
    .await
    .unwrap();
    assert!(sent.contains("ok (niri)"), "{sent}");
    assert_eq!(fake.finish(), [spawn]);
}
