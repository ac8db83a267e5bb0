//! The Hyprland tools through the loop, against the fake compositor socket.

use std::sync::Arc;

use familiar::hyprland::Hyprland;
use familiar::tools::hypr::{HyprDispatch, HyprState, Locate};
use familiar::tools::{Registry, Tool};
use familiar_protocol::task::TaskStatus;
use serde_json::json;

use crate::common::fake_hyprland::{
    ACTIVE_WINDOW, ACTIVE_WORKSPACE, CLIENTS, FOCUSED_ADDRESS, FakeHyprland, Reply as Hypr,
};
use crate::common::harness::*;

fn hypr_tools(socket: std::path::PathBuf) -> Registry {
    let locate: Locate = Arc::new(move || Some(Hyprland::at(socket.clone())));
    let tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(HyprState {
            locate: Arc::clone(&locate),
        }),
        Arc::new(HyprDispatch { locate }),
    ];
    Registry::with(tools)
}

const DESKTOP: &str = "tools = [\"hypr_state\", \"hypr_dispatch\"]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_reads_the_desktop_and_switches_workspace() {
    let h = Harness::builder(vec![
        tools_reply(&[("c1", "hypr_state", json!({}))]),
        tools_reply(&[(
            "c2",
            "hypr_dispatch",
            json!({"dispatcher": "workspace", "args": "3"}),
        )]),
        text_reply("Switched to workspace 3."),
    ])
    .policy(OPEN_POLICY)
    .build()
    .await;
    let fake = FakeHyprland::start(
        &h.home.path().join("run"),
        "sig",
        vec![
            ("j/activeworkspace", Hypr::Text(ACTIVE_WORKSPACE.into())),
            ("j/activewindow", Hypr::Text(ACTIVE_WINDOW.into())),
            ("j/workspaces", Hypr::Text("[]".into())),
            ("j/clients", Hypr::Text("[]".into())),
            ("/dispatch workspace 3", Hypr::Text("ok".into())),
        ],
    );
    let rt = h.runtime(hypr_tools(fake.socket.clone()));
    let (out, _) = h
        .run(rt, h.spec(h.soul(DESKTOP), "go to workspace 3", None))
        .await;
    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);
    let state = tool_messages(&h.server, 1)[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(state.contains(FOCUSED_ADDRESS), "{state}");
    assert_eq!(
        fake.finish().last().map(String::as_str),
        Some("/dispatch workspace 3")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_is_always_asked_even_when_the_policy_allows_execute() {
    let h = Harness::builder(vec![
        tools_reply(&[(
            "c1",
            "hypr_dispatch",
            json!({"dispatcher": "exec", "args": "kitty"}),
        )]),
        text_reply("I could not start kitty."),
    ])
    .policy(OPEN_POLICY)
    .build()
    .await;
    // The fake expects nothing: no request may reach the compositor.
    let fake = FakeHyprland::start(&h.home.path().join("run"), "sig", vec![]);
    let rt = h.runtime(hypr_tools(fake.socket.clone()));
    let (out, events) = h
        .run(rt, h.spec(h.soul(DESKTOP), "open a terminal", None))
        .await;
    assert_eq!(out.status, TaskStatus::Completed);
    assert_eq!(count(&events, "approval_requested"), 1);
    let msg = tool_messages(&h.server, 1)[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(msg.contains("nobody could be asked"), "{msg}");
    assert!(fake.finish().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn desktop_tools_are_not_offered_without_hyprland() {
    let h = Harness::new(vec![text_reply("No desktop here.")]).await;
    let locate: Locate = Arc::new(|| None);
    let tools: Vec<Arc<dyn Tool>> = vec![Arc::new(HyprState { locate })];
    let rt = h.runtime(Registry::with(tools));
    let (out, _) = h
        .run(rt, h.spec(h.soul(DESKTOP), "what is on screen?", None))
        .await;
    assert_eq!(out.status, TaskStatus::Completed);
    assert!(
        h.server.requests()[0].body["tools"]
            .as_array()
            .is_none_or(|t| t.is_empty())
    );
}

fn desktop_tools(compositor: familiar::compositor::Compositor) -> Registry {
    use familiar::tools::desktop::{DesktopDispatch, DesktopState, Locate as DesktopLocate};
    let locate: DesktopLocate = Arc::new(move || Some(compositor.clone()));
    let tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(DesktopState {
            locate: Arc::clone(&locate),
        }),
        Arc::new(DesktopDispatch { locate }),
    ];
    Registry::with(tools)
}

const NEUTRAL: &str = "tools = [\"desktop_state\", \"desktop_dispatch\"]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn desktop_dispatch_moves_a_niri_window_to_a_workspace() {
    use crate::common::fake_niri::{FakeNiri, HANDLED, OUTPUTS, WINDOWS, WORKSPACES};
    use familiar::compositor::{Compositor, Niri};
    let h = Harness::builder(vec![
        tools_reply(&[("c1", "desktop_state", json!({}))]),
        tools_reply(&[(
            "c2",
            "desktop_dispatch",
            json!({"action": "move_to_workspace", "window": "13", "workspace": "1"}),
        )]),
        text_reply("Moved Element to workspace 1."),
    ])
    .policy(OPEN_POLICY)
    .build()
    .await;
    let action = json!({"Action": {"MoveWindowToWorkspace":
        {"window_id": 13, "reference": {"Index": 1}, "focus": false}}})
    .to_string();
    let fake = FakeNiri::start(
        h.home.path(),
        vec![
            ("\"Workspaces\"", WORKSPACES),
            ("\"Outputs\"", OUTPUTS),
            ("\"Windows\"", WINDOWS),
            ("\"Workspaces\"", WORKSPACES),
            ("\"Windows\"", WINDOWS),
            (&action, HANDLED),
        ],
    );
    let rt = h.runtime(desktop_tools(Compositor::Niri(Niri::at(&fake.socket))));
    let (out, _) = h
        .run(
            rt,
            h.spec(h.soul(NEUTRAL), "put Element on workspace 1", None),
        )
        .await;
    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);
    let state = tool_messages(&h.server, 1)[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        state.contains("\"compositor\": \"niri\"") && state.contains("Element | familiar"),
        "{state}"
    );
    let done = tool_messages(&h.server, 2).last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(done.contains("ok (niri)"), "{done}");
    assert_eq!(fake.finish().last(), Some(&action));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn desktop_dispatch_on_hyprland_is_a_dispatcher_and_launch_is_always_asked() {
    use familiar::compositor::Compositor;
    let h = Harness::builder(vec![
        tools_reply(&[(
            "c1",
            "desktop_dispatch",
            json!({"action": "move_to_workspace", "window": FOCUSED_ADDRESS, "workspace": "3"}),
        )]),
        tools_reply(&[(
            "c2",
            "desktop_dispatch",
            json!({"action": "launch", "command": "kitty"}),
        )]),
        text_reply("Moved; kitty was not started."),
    ])
    .policy(OPEN_POLICY)
    .build()
    .await;
    // Only the move reaches the compositor: the launch waits for an approval nobody gives.
    let move_request = format!("/dispatch movetoworkspacesilent 3,address:{FOCUSED_ADDRESS}");
    let fake = FakeHyprland::start(
        &h.home.path().join("run"),
        "sig",
        vec![
            // The window must be one of Hyprland's clients (it answers `ok` for any).
            ("j/clients", Hypr::Text(CLIENTS.into())),
            (&move_request, Hypr::Text("ok".into())),
        ],
    );
    let rt = h.runtime(desktop_tools(Compositor::Hyprland(Hyprland::at(
        fake.socket.clone(),
    ))));
    let (out, events) = h
        .run(
            rt,
            h.spec(h.soul(NEUTRAL), "move it and open a terminal", None),
        )
        .await;
    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);
    assert_eq!(count(&events, "approval_requested"), 1);
    assert_eq!(fake.finish(), ["j/clients".to_owned(), move_request]);
}
