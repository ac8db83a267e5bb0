//! The environment snapshot on this machine, and the Hyprland client against a fake
//! compositor socket.

use std::collections::BTreeMap;
use std::path::Path;

use familiar::hyprland::{HyprError, Hyprland, Window, Workspace, WorkspaceRef};
use familiar::snapshot::Snapshotter;

use crate::common::fake_hyprland::{
    ACTIVE_WINDOW, ACTIVE_WORKSPACE, CLIENTS, FOCUSED_ADDRESS, FakeHyprland, MONITORS,
    NO_ACTIVE_WINDOW, Reply, WORKSPACES,
};

fn env(runtime: &Path, signature: Option<&str>) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    env.insert("XDG_RUNTIME_DIR".to_owned(), runtime.display().to_string());
    if let Some(sig) = signature {
        env.insert("HYPRLAND_INSTANCE_SIGNATURE".to_owned(), sig.to_owned());
    }
    env
}

fn text(s: &str) -> Reply {
    Reply::Text(s.to_owned())
}

/// What the recorded replies of a real Hyprland 0.55.2 say (tests/fixtures/).
fn expected_workspace() -> Workspace {
    Workspace {
        id: 2,
        name: "two".into(),
        windows: 2,
    }
}

fn expected_window() -> Window {
    Window {
        class: "foot".into(),
        title: "foot".into(),
        pid: 19244,
        workspace: WorkspaceRef {
            id: 2,
            name: "two".into(),
        },
    }
}

#[test]
fn snapshot_of_this_machine_has_every_documented_key() {
    let runtime = tempfile::tempdir().unwrap();
    // No Hyprland in this runtime dir.
    let hypr = Hyprland::detect(&env(runtime.path(), None));
    assert_eq!(hypr, None);
    let mut snapshotter = Snapshotter::with_hyprland(hypr).unwrap();
    let workspace = Path::new("/tmp/ws");
    let snap = snapshotter.take(Some(workspace));
    let v = serde_json::to_value(&snap).unwrap();

    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    let mut want = vec![
        "taken_at",
        "hostname",
        "kernel",
        "uptime_secs",
        "load_average",
        "memory",
        "processes",
        "disks",
        "battery",
        "workspace",
        "desktop",
        "hyprland",
    ];
    want.sort_unstable();
    let mut keys = keys;
    keys.sort_unstable();
    assert_eq!(keys, want);

    assert!(v["taken_at"].as_str().unwrap().ends_with('Z'));
    for k in ["one", "five", "fifteen"] {
        assert!(v["load_average"][k].is_number(), "{k}");
    }
    for k in ["total", "used", "available", "swap_total", "swap_used"] {
        assert!(v["memory"][k].is_u64(), "{k}");
    }
    assert!(snap.memory.total > 0);
    assert!(snap.processes.count > 0);
    let top = v["processes"]["top_memory"].as_array().unwrap();
    assert!(!top.is_empty() && top.len() <= 5);
    for k in ["pid", "name", "user", "cpu_percent", "rss_bytes"] {
        assert!(top[0].get(k).is_some(), "{k}");
    }
    assert!(v["processes"]["top_cpu"].is_array());
    for d in v["disks"].as_array().unwrap() {
        for k in ["mount_point", "fs", "total", "available"] {
            assert!(d.get(k).is_some(), "{k}");
        }
    }
    assert_eq!(v["workspace"], "/tmp/ws");
    assert!(v["hyprland"].is_null() && v["desktop"].is_null());
    // This machine has no battery (a container or a desktop): absence is null, not an error.
    let has_battery = std::fs::read_dir("/sys/class/power_supply")
        .map(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("BAT"))
        })
        .unwrap_or(false);
    if !has_battery {
        assert!(v["battery"].is_null());
    }

    // The second snapshot (steady state) is just as complete.
    let again = snapshotter.take(None);
    assert!(again.processes.count > 0);
    assert!(serde_json::to_value(&again).unwrap()["workspace"].is_null());
    let text = again.to_prompt_text();
    assert!(
        text.contains("memory:") && text.contains("battery:"),
        "{text}"
    );
}

#[test]
fn hyprland_is_found_by_signature_and_answers() {
    let runtime = tempfile::tempdir().unwrap();
    let fake = FakeHyprland::start(
        runtime.path(),
        "abc_123_456",
        vec![
            ("j/activeworkspace", text(ACTIVE_WORKSPACE)),
            ("j/activewindow", text(ACTIVE_WINDOW)),
            ("j/activewindow", text(NO_ACTIVE_WINDOW)),
            ("/dispatch workspace 3", text("ok")),
        ],
    );
    let h = Hyprland::detect(&env(runtime.path(), Some("abc_123_456"))).unwrap();
    assert_eq!(h.socket(), fake.socket);
    assert_eq!(h.active_workspace().unwrap(), expected_workspace());
    assert_eq!(h.active_window().unwrap(), Some(expected_window()));
    assert_eq!(h.active_window().unwrap(), None);
    h.dispatch("workspace", "3").unwrap();
    assert_eq!(
        fake.finish(),
        [
            "j/activeworkspace",
            "j/activewindow",
            "j/activewindow",
            "/dispatch workspace 3"
        ]
    );
}

#[test]
fn without_the_signature_the_live_instance_is_found_by_scanning() {
    let runtime = tempfile::tempdir().unwrap();
    let fake = FakeHyprland::start(
        runtime.path(),
        "live_instance",
        // detect's probe connection sends nothing (the fake does not count it).
        vec![("j/activeworkspace", text(ACTIVE_WORKSPACE))],
    );
    // A crashed instance leaves its directory and a socket nobody listens on; created
    // last, it is the newest, so detect must skip it by probing.
    let dead = runtime.path().join("hypr/dead_instance");
    std::fs::create_dir_all(&dead).unwrap();
    drop(std::os::unix::net::UnixListener::bind(dead.join(".socket.sock")).unwrap());
    let h = Hyprland::detect(&env(runtime.path(), None)).unwrap();
    assert_eq!(h.socket(), fake.socket);
    assert_eq!(h.active_workspace().unwrap(), expected_workspace());
    fake.finish();
}

/// Regression (issue 42 §6): a `HYPRLAND_INSTANCE_SIGNATURE` left from an instance that
/// has ended made familiar see no compositor while another instance ran.
#[test]
fn a_stale_signature_falls_back_to_the_live_instance() {
    let runtime = tempfile::tempdir().unwrap();
    let stale = runtime.path().join("hypr/ended_instance");
    std::fs::create_dir_all(&stale).unwrap();
    drop(std::os::unix::net::UnixListener::bind(stale.join(".socket.sock")).unwrap());
    let fake = FakeHyprland::start(
        runtime.path(),
        "live_instance",
        vec![("j/activeworkspace", text(ACTIVE_WORKSPACE))],
    );
    let h = Hyprland::detect(&env(runtime.path(), Some("ended_instance"))).unwrap();
    assert_eq!(h.socket(), fake.socket);
    assert_eq!(h.active_workspace().unwrap(), expected_workspace());
    fake.finish();
}

/// Hyprland answers `ok` to `closewindow` of an address that is no window: familiar
/// checks the clients first and says so.
#[test]
fn closing_a_window_that_is_not_there_says_so() {
    use familiar::compositor::Action;

    let runtime = tempfile::tempdir().unwrap();
    let fake = FakeHyprland::start(
        runtime.path(),
        "sig",
        vec![
            ("j/clients", text(CLIENTS)),
            ("j/clients", text(CLIENTS)),
            (
                &format!("/dispatch closewindow address:{FOCUSED_ADDRESS}"),
                text("ok"),
            ),
        ],
    );
    let h = Hyprland::at(&fake.socket);
    let close = |w: &str| Action::CloseWindow {
        window: Some(w.to_owned()),
    };
    let err = h.perform(&close("0xdeadbeef")).unwrap_err().to_string();
    assert!(err.contains("no window `0xdeadbeef`"), "{err}");
    // Events give addresses without the prefix; either form names the window.
    let done = h
        .perform(&close(FOCUSED_ADDRESS.trim_start_matches("0x")))
        .unwrap();
    assert_eq!(
        done,
        format!("dispatch closewindow address:{FOCUSED_ADDRESS}")
    );
    fake.finish();
}

#[test]
fn garbage_answers_are_typed_errors() {
    let runtime = tempfile::tempdir().unwrap();
    let fake = FakeHyprland::start(
        runtime.path(),
        "sig",
        vec![
            ("j/activeworkspace", text("unknown request")),
            ("j/activewindow", text(r#"{"class": 7}"#)),
            ("/dispatch nope", text("Invalid dispatcher")),
        ],
    );
    let h = Hyprland::at(&fake.socket);
    let err = h.active_workspace().unwrap_err();
    assert!(
        matches!(&err, HyprError::InvalidReply { cmd, snippet, .. }
            if cmd == "j/activeworkspace" && snippet == "unknown request"),
        "{err}"
    );
    assert!(matches!(
        h.active_window(),
        Err(HyprError::InvalidReply { .. })
    ));
    assert!(matches!(
        h.dispatch("nope", ""),
        Err(HyprError::InvalidReply { .. })
    ));
    fake.finish();
}

#[test]
fn a_hung_compositor_times_out() {
    let runtime = tempfile::tempdir().unwrap();
    let fake = FakeHyprland::start(runtime.path(), "sig", vec![("", Reply::Hang)]);
    let h = Hyprland::at(&fake.socket);
    assert!(matches!(
        h.request("j/activewindow"),
        Err(HyprError::Timeout { .. })
    ));
    fake.finish();
}

#[test]
fn snapshot_includes_hyprland_when_it_runs() {
    let runtime = tempfile::tempdir().unwrap();
    let fake = FakeHyprland::start(
        runtime.path(),
        "sig",
        vec![
            ("j/activeworkspace", text(ACTIVE_WORKSPACE)),
            ("j/activewindow", text(ACTIVE_WINDOW)),
            ("j/workspaces", text(WORKSPACES)),
            ("j/monitors", text(MONITORS)),
        ],
    );
    let h = Hyprland::detect(&env(runtime.path(), Some("sig")));
    let mut snapshotter = Snapshotter::with_hyprland(h).unwrap();
    let snap = snapshotter.take(None);
    let v = serde_json::to_value(&snap).unwrap();
    assert_eq!(
        v["hyprland"],
        serde_json::json!({
            "active_workspace": {"id": 2, "name": "two", "windows": 2},
            "active_window": {"class": "foot", "title": "foot", "pid": 19244,
                              "workspace": {"id": 2, "name": "two"}},
        })
    );
    // The desktop section, from the same replies plus the workspaces and monitors (a
    // headless output reports 0×0).
    assert_eq!(
        v["desktop"],
        serde_json::json!({
            "compositor": "hyprland",
            "focused_window": {"id": FOCUSED_ADDRESS, "app_id": "foot", "title": "foot",
                               "pid": 19244, "workspace": "two", "focused": true},
            "focused_workspace": "two",
            "workspaces": [
                {"name": "two", "output": "HEADLESS-2", "focused": true, "windows": 2}],
            "outputs": [{"name": "HEADLESS-2", "focused": true, "width": 0, "height": 0,
                         "scale": 1.0}],
        })
    );
    assert!(snap.to_prompt_text().contains("focused: foot \"foot\""));
    assert!(
        snap.to_brief_text().contains("focused: foot \"foot\""),
        "the first reminder's glance names the window"
    );
    fake.finish();
}

#[test]
fn snapshot_includes_niri_when_it_runs() {
    use crate::common::fake_niri::{FakeNiri, OUTPUTS, WINDOWS, WORKSPACES as NIRI_WORKSPACES};
    use familiar::compositor::{Compositor, Niri};
    let runtime = tempfile::tempdir().unwrap();
    let fake = FakeNiri::start(
        runtime.path(),
        vec![
            ("\"Workspaces\"", NIRI_WORKSPACES),
            ("\"Outputs\"", OUTPUTS),
            ("\"Windows\"", WINDOWS),
        ],
    );
    let mut env = env(runtime.path(), None);
    env.insert("NIRI_SOCKET".to_owned(), fake.socket.display().to_string());
    let niri = Compositor::detect(&env);
    assert_eq!(niri, Some(Compositor::Niri(Niri::at(&fake.socket))));
    let mut snapshotter = Snapshotter::with_compositor(niri).unwrap();
    let snap = snapshotter.take(None);
    let v = serde_json::to_value(&snap).unwrap();
    assert_eq!(
        v["desktop"],
        serde_json::json!({
            "compositor": "niri",
            "focused_window": {"id": "12", "app_id": "Alacritty", "title": "~/src/familiar",
                               "pid": 3141, "workspace": "1", "focused": true},
            "focused_workspace": "1",
            "workspaces": [
                {"name": "1", "output": "eDP-1", "focused": true, "windows": 1},
                {"name": "chat", "output": "eDP-1", "focused": false, "windows": 1}],
            "outputs": [{"name": "eDP-1", "focused": true, "width": 1504, "height": 1002,
                         "scale": 1.5}],
        })
    );
    assert!(v["hyprland"].is_null());
    let brief = snap.to_brief_text();
    assert!(
        brief.contains("focused: Alacritty \"~/src/familiar\""),
        "{brief}"
    );
    assert!(
        snap.to_prompt_text()
            .contains("desktop: niri, workspace 1 (1 windows)"),
        "{}",
        snap.to_prompt_text()
    );
    fake.finish();
}

#[test]
fn a_niri_error_reply_is_a_typed_refusal() {
    use crate::common::fake_niri::FakeNiri;
    use familiar::compositor::{IpcError, Niri};
    let runtime = tempfile::tempdir().unwrap();
    let fake = FakeNiri::start(
        runtime.path(),
        vec![("\"Workspaces\"", r#"{"Err":"compositor is shutting down"}"#)],
    );
    let err = Niri::at(&fake.socket).windows().unwrap_err();
    assert!(
        matches!(&err, IpcError::Refused { message, .. } if message == "compositor is shutting down"),
        "{err}"
    );
    fake.finish();
}
