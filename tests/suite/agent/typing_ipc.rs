//! `type_text`'s focus check on Hyprland and niri, against their IPC as recorded
//! (`tests/common/fake_hyprland.rs`, `fake_niri.rs`): the approval names the window
//! focused when it was asked, and a call whose window lost the focus since is refused
//! before anything reaches a Wayland display. The typing itself is wtype's
//! virtual-keyboard protocol, the same on every wlroots-style compositor; it is tested
//! on a real sway (`typing_sway.rs`).

use std::sync::Arc;

use familiar::compositor::{Compositor, Hyprland, Niri};
use familiar::tools::bus::Bus;
use familiar::tools::typing::TypeText;
use familiar::tools::{Tool, ToolError};
use serde_json::{Value, json};

use crate::common::bus::TestBus;
use crate::common::fake_hyprland::{
    ACTIVE_WINDOW, ACTIVE_WORKSPACE, FOCUSED_ADDRESS, FakeHyprland, MONITORS, NO_ACTIVE_WINDOW,
    Reply as Hypr, WORKSPACES,
};
use crate::common::fake_logind::FakeLogind;
use crate::common::fake_niri::{self, FakeNiri};
use crate::common::harness::*;

/// Asks about `args` and runs the call as the dispatcher runs an approved one.
async fn ask_then_run(tool: &TypeText, args: Value) -> (String, Result<String, ToolError>) {
    let described = tool.describe(&args).unwrap().await.unwrap();
    let mut ctx = crate::suite::desktop_tools::direct_ctx(&Harness::new(vec![]).await);
    ctx.asked_focus = described.focus;
    (described.summary, tool.execute(args, ctx).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_niri_a_window_that_lost_the_focus_gets_nothing() {
    let bus = TestBus::start();
    let _logind = FakeLogind::start(&bus.address).await;
    let dir = tempfile::tempdir().unwrap();
    // Element (13) took the focus from Alacritty (12) after the approval.
    let moved = fake_niri::WINDOWS
        .replace("\"is_focused\":true", "\"is_focused\":X")
        .replace("\"is_focused\":false", "\"is_focused\":true")
        .replace("\"is_focused\":X", "\"is_focused\":false");
    let desktop = |windows: &'static str| {
        [
            ("\"Workspaces\"", fake_niri::WORKSPACES),
            ("\"Outputs\"", fake_niri::OUTPUTS),
            ("\"Windows\"", windows),
        ]
    };
    let moved: &'static str = Box::leak(moved.into_boxed_str());
    let script: Vec<(&str, &str)> = desktop(fake_niri::WINDOWS)
        .into_iter()
        .chain(desktop(moved))
        .collect();
    let fake = FakeNiri::start(dir.path(), script);
    let socket = fake.socket.clone();
    let tool = TypeText {
        locate: Arc::new(move || Some(Compositor::Niri(Niri::at(&socket)))),
        logind: Bus::Address(bus.address.clone()),
    };
    let (summary, result) = ask_then_run(&tool, json!({"text": "ls\n"})).await;
    assert_eq!(
        summary,
        "type_text into Alacritty \"~/src/familiar\"\n  text (3 characters): \"ls\\n\""
    );
    assert_eq!(
        result,
        Err(ToolError::RespondToModel(
            "refused: the focus moved from Alacritty \"~/src/familiar\" to Element \"Element | familiar\"; nothing typed"
                .to_owned()
        ))
    );
    assert_eq!(fake.finish().len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_hyprland_a_window_that_lost_the_focus_gets_nothing() {
    let bus = TestBus::start();
    let _logind = FakeLogind::start(&bus.address).await;
    let dir = tempfile::tempdir().unwrap();
    let desktop = |active: &str| {
        vec![
            ("j/activeworkspace", Hypr::Text(ACTIVE_WORKSPACE.to_owned())),
            ("j/activewindow", Hypr::Text(active.to_owned())),
            ("j/workspaces", Hypr::Text(WORKSPACES.to_owned())),
            ("j/monitors", Hypr::Text(MONITORS.to_owned())),
        ]
    };
    let other = ACTIVE_WINDOW.replace(FOCUSED_ADDRESS, "0x5608aaaa0000");
    let mut script = desktop(ACTIVE_WINDOW);
    script.extend(desktop(&other));
    // Then no window at all.
    script.extend(desktop(ACTIVE_WINDOW));
    script.extend(desktop(NO_ACTIVE_WINDOW));
    let fake = FakeHyprland::start(dir.path(), "sig", script);
    let socket = fake.socket.clone();
    let tool = TypeText {
        locate: Arc::new(move || Some(Compositor::Hyprland(Hyprland::at(socket.clone())))),
        logind: Bus::Address(bus.address.clone()),
    };
    let (summary, result) = ask_then_run(&tool, json!({"keys": ["ctrl+w"]})).await;
    assert!(summary.ends_with("\n  keys: ctrl+w"), "{summary}");
    let err = result.unwrap_err().to_string();
    assert!(
        err.starts_with("refused: the focus moved from ") && err.ends_with("; nothing typed"),
        "{err}"
    );
    let (_, result) = ask_then_run(&tool, json!({"keys": ["ctrl+w"]})).await;
    let err = result.unwrap_err().to_string();
    assert!(err.ends_with(" to no window; nothing typed"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_nobody_was_asked_about_types_nothing() {
    let bus = TestBus::start();
    let _logind = FakeLogind::start(&bus.address).await;
    let tool = TypeText {
        locate: Arc::new(|| None),
        logind: Bus::Address(bus.address.clone()),
    };
    let ctx = crate::suite::desktop_tools::direct_ctx(&Harness::new(vec![]).await);
    let err = tool
        .execute(json!({"text": "x"}), ctx)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("refused: type_text runs only once the person has been asked"),
        "{err}"
    );
    // Without a compositor there is nothing to ask about either.
    let err = tool
        .describe(&json!({"text": "x"}))
        .unwrap()
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "no compositor is running");
}
