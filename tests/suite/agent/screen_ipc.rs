//! grim's arguments from Hyprland's and niri's IPC, against fakes that answer in their
//! real reply shapes (Hyprland 0.55.2's recorded replies, niri's `--json` shapes): the
//! focused window's `at`/`size` becomes `-g`, an output's name `-o`, its logical size
//! the `-s` that brings the longest side to `max_edge`; the Wayland display is the one
//! beside the compositor's socket. niri says no window's place: `target = "window"`
//! asks for `output`. No Hyprland or niri runs here (docs/tools.md says so).

use std::os::unix::net::UnixListener;

use familiar::compositor::{Compositor, Hyprland, Niri};
use familiar::tools::screen::{Target, grim};
use serde_json::{Value, json};

use crate::common::fake_hyprland::{
    ACTIVE_WINDOW, ACTIVE_WORKSPACE, FakeHyprland, MONITORS, Reply, WORKSPACES,
};
use crate::common::fake_niri::{self, FakeNiri};

/// The recorded reply with `edit` applied: the recording is of a headless session,
/// whose window has no size and whose monitor is 0x0.
fn edited(recorded: &str, edit: impl FnOnce(&mut Value)) -> Reply {
    let mut v: Value = serde_json::from_str(recorded).unwrap();
    edit(&mut v);
    Reply::Text(v.to_string())
}

#[test]
fn hyprlands_focused_window_and_monitor_drive_grim() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("run");
    let window = edited(ACTIVE_WINDOW, |w| {
        w["at"] = json!([100, 50]);
        w["size"] = json!([1600, 900]);
    });
    let monitors = edited(MONITORS, |m| {
        m[0]["width"] = json!(2560);
        m[0]["height"] = json!(1440);
    });
    let fake = FakeHyprland::start(
        &runtime,
        "sig",
        vec![
            ("j/activewindow", window.clone()),
            ("j/activewindow", window.clone()),
            ("j/activeworkspace", Reply::Text(ACTIVE_WORKSPACE.into())),
            ("j/activewindow", window),
            ("j/workspaces", Reply::Text(WORKSPACES.into())),
            ("j/monitors", monitors),
        ],
    );
    let _display = UnixListener::bind(runtime.join("wayland-1")).unwrap();
    let c = Compositor::Hyprland(Hyprland::at(fake.socket.clone()));

    let plan = grim::plan(&c, &Target::Window, 800).unwrap();
    assert_eq!(
        plan.args,
        ["-g", "100,50 1600x900", "-s", "0.5000", "-t", "png", "-"]
    );
    assert_eq!(plan.display, runtime.join("wayland-1"));
    assert!(plan.what.starts_with("the window foot"), "{}", plan.what);

    let output = Target::Output(Some("HEADLESS-2".to_owned()));
    let plan = grim::plan(&c, &output, 1280).unwrap();
    assert_eq!(
        plan.args,
        ["-o", "HEADLESS-2", "-s", "0.5000", "-t", "png", "-"]
    );
    let seen = fake.finish();
    assert_eq!(seen.len(), 6, "{seen:?}");
}

#[test]
fn niris_focused_output_drives_grim_and_a_window_asks_for_output() {
    let dir = tempfile::tempdir().unwrap();
    let desktop = [
        ("\"Workspaces\"", fake_niri::WORKSPACES),
        ("\"Outputs\"", fake_niri::OUTPUTS),
        ("\"Windows\"", fake_niri::WINDOWS),
    ];
    let script: Vec<(&str, &str)> = desktop.iter().copied().cycle().take(9).collect();
    let fake = FakeNiri::start(dir.path(), script);
    let _display = UnixListener::bind(dir.path().join("wayland-1")).unwrap();
    let c = Compositor::Niri(Niri::at(&fake.socket));

    // The focused output (eDP-1, logical 1504x1002 at scale 1.5) named for grim.
    let plan = grim::plan(&c, &Target::Output(None), 1280).unwrap();
    assert_eq!(plan.args, ["-o", "eDP-1", "-s", "0.8511", "-t", "png", "-"]);
    assert_eq!(plan.display, dir.path().join("wayland-1"));

    let err = grim::plan(&c, &Target::Window, 1280).unwrap_err();
    assert!(err.to_string().contains("use target output"), "{err}");
    let seen = fake.finish();
    assert_eq!(seen.len(), 9, "{seen:?}");
}
