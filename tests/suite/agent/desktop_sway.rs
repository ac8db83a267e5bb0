//! The desktop layer against a real headless sway with a real window (`foot`): the
//! snapshot and the first reminder's glance name the window, and `desktop_dispatch`
//! moves it to workspace 2, which sway's own tree (`swaymsg -t get_tree`) shows.

use std::collections::BTreeMap;
use std::sync::Arc;

use familiar::compositor::{Compositor, Sway};
use familiar::snapshot::Snapshotter;
use familiar::tools::desktop::{DesktopDispatch, DesktopState, Locate};
use familiar::tools::{Registry, Tool};
use familiar_protocol::task::TaskStatus;
use serde_json::json;

use crate::common::harness::*;
use crate::common::skip;
use crate::common::sway::{Desktop, Options, window_in};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foot_window_is_seen_and_moved_to_workspace_2_on_a_real_sway() {
    if skip::program("foot", "foot").is_none() {
        return;
    }
    let Some(mut sway) = Desktop::start(&Options::default()) else {
        return;
    };
    sway.spawn_client("foot", &["-e", "sleep", "600"]);
    let (id, workspace) = sway.wait_for_window("foot");
    assert_eq!(workspace, "1");

    // Found as the daemon finds it: from SWAYSOCK.
    let env: BTreeMap<String, String> = [
        ("SWAYSOCK".to_owned(), sway.swaysock().display().to_string()),
        (
            "XDG_RUNTIME_DIR".to_owned(),
            sway.runtime_dir().display().to_string(),
        ),
    ]
    .into();
    let compositor = Compositor::detect(&env).expect("sway is found");
    assert_eq!(compositor, Compositor::Sway(Sway::at(sway.swaysock())));
    let snap = Snapshotter::with_compositor(Some(compositor.clone()))
        .unwrap()
        .take(None);
    let desktop = snap.desktop.clone().expect("the desktop section");
    assert_eq!(desktop.compositor, "sway");
    let focused = desktop.focused_window.expect("foot has the focus");
    assert_eq!(
        (focused.app_id.as_str(), focused.id.clone()),
        ("foot", id.to_string())
    );
    assert_eq!(desktop.focused_workspace.as_deref(), Some("1"));
    assert_eq!(desktop.outputs[0].name, "HEADLESS-1");

    let h = Harness::builder(vec![
        tools_reply(&[("c1", "desktop_state", json!({}))]),
        tools_reply(&[(
            "c2",
            "desktop_dispatch",
            json!({"action": "move_to_workspace", "window": id.to_string(), "workspace": "2"}),
        )]),
        text_reply("The terminal is on workspace 2."),
    ])
    .policy(OPEN_POLICY)
    .build()
    .await;
    let locate: Locate = {
        let c = compositor.clone();
        Arc::new(move || Some(c.clone()))
    };
    let tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(DesktopState {
            locate: Arc::clone(&locate),
        }),
        Arc::new(DesktopDispatch { locate }),
    ];
    let rt = h.runtime(Registry::with(tools));
    *rt.services.snapshotter.lock().unwrap() =
        Snapshotter::with_compositor(Some(compositor)).unwrap();
    let soul = h.soul("tools = [\"desktop_state\", \"desktop_dispatch\"]\n");
    let (out, _) = h
        .run(rt, h.spec(soul, "move the terminal to workspace 2", None))
        .await;
    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);

    // The first request's reminder glances at the focused window.
    let first = h.server.requests()[0].body["messages"].to_string();
    assert!(first.contains("focused: foot"), "{first}");
    let state = tool_messages(&h.server, 1)[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        state.contains("\"compositor\": \"sway\"") && state.contains("\"app_id\": \"foot\""),
        "{state}"
    );
    let done = tool_messages(&h.server, 2).last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        done.contains(&format!(
            "[con_id={id}] move container to workspace number 2"
        )),
        "{done}"
    );
    assert_eq!(
        window_in(&sway.tree(), "foot", None),
        Some((id, "2".to_owned()))
    );
}

/// See: issue 39 (`launch` reached sway's `exec`, a shell, as a command line). Words
/// with a space, a quote, a backslash, `$` and sway's own separators arrive whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launch_passes_each_word_whole_through_a_real_sway() {
    use std::os::unix::fs::PermissionsExt;
    let words = ["a b'c", "\\", "$HOME;x,y", "$$", "&& touch x"];
    let dir = tempfile::tempdir().unwrap();
    let recorder = dir.path().join("recorder");
    std::fs::write(
        &recorder,
        "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done > \"$HOME/launched.part\"\nmv \"$HOME/launched.part\" \"$HOME/launched\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&recorder, std::fs::Permissions::from_mode(0o755)).unwrap();
    let Some(sway) = Desktop::start(&Options {
        programs: vec![recorder],
        ..Options::default()
    }) else {
        return;
    };
    // The session's own bin directory: outside any home, readable by its user.
    let program = sway.home().parent().unwrap().join("bin/recorder");
    let h = Harness::new(vec![]).await;
    let compositor = Compositor::Sway(Sway::at(sway.swaysock()));
    let locate: Locate = Arc::new(move || Some(compositor.clone()));
    let ctx = crate::suite::desktop_tools::direct_ctx(&h);
    let sent = DesktopDispatch { locate }
        .execute(
            json!({"action": "launch", "program": program, "args": words}),
            ctx,
        )
        .await
        .unwrap();
    assert!(sent.starts_with("ok (sway): exec exec '"), "{sent}");
    let launched = sway.home().join("launched");
    let got = sway
        .wait_until(|| std::fs::read_to_string(&launched).ok())
        .expect("the program ran");
    assert_eq!(got.split_terminator('\0').collect::<Vec<_>>(), words);
    assert!(!sway.home().join("x").exists());
}
