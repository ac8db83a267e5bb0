//! Windows in the session: a Wayland client started on sway's display, sway's tree
//! (`swaymsg -t get_tree`) and a window found in it.

use std::path::Path;
use std::process::Stdio;

use super::{Desktop, text};

impl Desktop {
    /// sway's IPC socket (`SWAYSOCK`).
    pub fn swaysock(&self) -> &Path {
        &self.swaysock
    }

    /// The session's `XDG_RUNTIME_DIR`.
    pub fn runtime_dir(&self) -> &Path {
        &self.runtime
    }

    /// Starts a Wayland client in the session; it is stopped with the session.
    pub fn spawn_client(&mut self, program: &str, args: &[&str]) {
        let child = self
            .command(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {program}: {e}"));
        self.children.push(child);
    }

    /// `swaymsg ARGS` against this sway; its stdout.
    pub fn swaymsg(&self, args: &[&str]) -> String {
        let out = self.run("swaymsg", args);
        assert!(
            out.status.success(),
            "swaymsg {args:?}: {}",
            text(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// sway's tree, parsed.
    pub fn tree(&self) -> serde_json::Value {
        serde_json::from_str(&self.swaymsg(&["-t", "get_tree"])).expect("sway's tree as JSON")
    }

    /// Waits until a window of `app_id` is in the tree; its container id and
    /// workspace's name.
    #[track_caller]
    pub fn wait_for_window(&self, app_id: &str) -> (u64, String) {
        self.wait_until(|| window_in(&self.tree(), app_id, None))
            .unwrap_or_else(|| panic!("no {app_id} window in sway's tree"))
    }
}

/// `(container id, workspace)` of the first window of `app_id` under `node`.
pub fn window_in(
    node: &serde_json::Value,
    app_id: &str,
    workspace: Option<&str>,
) -> Option<(u64, String)> {
    let ws = match node["type"].as_str() {
        Some("workspace") => node["name"].as_str(),
        _ => workspace,
    };
    if node["app_id"].as_str() == Some(app_id) {
        return Some((node["id"].as_u64()?, ws?.to_owned()));
    }
    ["nodes", "floating_nodes"]
        .iter()
        .filter_map(|k| node[*k].as_array())
        .flatten()
        .find_map(|child| window_in(child, app_id, ws))
}
