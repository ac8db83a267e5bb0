//! The environment snapshot on this machine, and the Hyprland client against a fake
//! compositor socket.

use std::collections::BTreeMap;
use std::path::Path;

use familiar::hyprland::{HyprError, Hyprland, Window, Workspace, WorkspaceRef};
use familiar::snapshot::Snapshotter;

use crate::common::fake_hyprland::{
    ACTIVE_WINDOW, ACTIVE_WORKSPACE, FakeHyprland, MONITORS, Reply, WORKSPACES,
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

fn expected_workspace() -> Workspace {
    Workspace {
        id: 2,
        name: "2".into(),
        windows: 3,
    }
}

fn expected_window() -> Window {
    Window {
        class: "kitty".into(),
        title: "vim ~/notes.md".into(),
        pid: 4242,
        workspace: WorkspaceRef {
            id: 2,
            name: "2".into(),
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
            ("j/activewindow", text("{}")),
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
        // detect's probe connection sends nothing.
        vec![
            ("", text("")),
            ("j/activeworkspace", text(ACTIVE_WORKSPACE)),
        ],
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
            "active_workspace": {"id": 2, "name": "2", "windows": 3},
            "active_window": {"class": "kitty", "title": "vim ~/notes.md", "pid": 4242,
                              "workspace": {"id": 2, "name": "2"}},
        })
    );
    // The desktop section, from the same replies plus the workspaces and monitors.
    assert_eq!(
        v["desktop"],
        serde_json::json!({
            "compositor": "hyprland",
            "focused_window": {"id": "0x55d1", "app_id": "kitty", "title": "vim ~/notes.md",
                               "pid": 4242, "workspace": "2", "focused": true},
            "focused_workspace": "2",
            "workspaces": [
                {"name": "1", "output": "DP-1", "focused": false, "windows": 1},
                {"name": "2", "output": "DP-1", "focused": true, "windows": 3}],
            "outputs": [{"name": "DP-1", "focused": true, "width": 2560, "height": 1440,
                         "scale": 1.25}],
        })
    );
    assert!(
        snap.to_prompt_text()
            .contains("focused: kitty \"vim ~/notes.md\"")
    );
    assert!(
        snap.to_brief_text()
            .contains("focused: kitty \"vim ~/notes.md\""),
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
