//! A fake Hyprland command socket: a `UnixListener` laid out like the real one
//! (`RUNTIME/hypr/SIGNATURE/.socket.sock`), answering scripted replies on a thread.
// A test helper: a panic here is the test's failure report.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

/// What the fake does with one connection.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Answer with these bytes, then close.
    Text(String),
    /// Read the request and never answer (a hung compositor); closes when the client does.
    Hang,
}

pub struct FakeHyprland {
    pub socket: PathBuf,
    thread: Option<JoinHandle<Vec<String>>>,
}

impl FakeHyprland {
    /// Serves `script` in order, one connection per entry: each entry is the request we
    /// expect and the reply. Requests that differ from the script are answered
    /// `unknown request` (as Hyprland does) and still recorded.
    pub fn start(runtime_dir: &Path, signature: &str, script: Vec<(&str, Reply)>) -> FakeHyprland {
        let dir = runtime_dir.join("hypr").join(signature);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join(".socket.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let script: Vec<(String, Reply)> =
            script.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        let thread = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for (expected, reply) in script {
                let (mut conn, _) = listener.accept().unwrap();
                let mut buf = [0u8; 8192];
                let n = conn.read(&mut buf).unwrap();
                let request = String::from_utf8_lossy(&buf[..n]).into_owned();
                match reply {
                    Reply::Text(text) if request == expected => {
                        conn.write_all(text.as_bytes()).unwrap();
                    }
                    Reply::Text(_) => conn.write_all(b"unknown request").unwrap(),
                    // Wait for the client to give up and close its end.
                    Reply::Hang => while conn.read(&mut buf).is_ok_and(|n| n > 0) {},
                }
                seen.push(request);
            }
            seen
        });
        FakeHyprland {
            socket,
            thread: Some(thread),
        }
    }

    /// Waits until the script is served; returns the requests received, in order.
    pub fn finish(mut self) -> Vec<String> {
        self.thread.take().unwrap().join().unwrap()
    }
}

pub const ACTIVE_WORKSPACE: &str = r#"{"id": 2, "name": "2", "monitor": "DP-1", "monitorID": 0,
 "windows": 3, "hasfullscreen": false, "lastwindow": "0x55d1", "lastwindowtitle": "vim"}"#;

pub const ACTIVE_WINDOW: &str = r#"{"address": "0x55d1", "mapped": true, "hidden": false,
 "at": [0, 0], "size": [800, 600], "workspace": {"id": 2, "name": "2"}, "floating": false,
 "monitor": 0, "class": "kitty", "title": "vim ~/notes.md", "initialClass": "kitty",
 "initialTitle": "kitty", "pid": 4242, "xwayland": false, "pinned": false,
 "fullscreen": 0, "grouped": [], "tags": [], "swallowing": "0x0", "focusHistoryID": 0}"#;

pub const WORKSPACES: &str = r#"[{"id": 1, "name": "1", "monitor": "DP-1", "monitorID": 0,
 "windows": 1, "hasfullscreen": false, "lastwindow": "0x4410", "lastwindowtitle": "mail"},
 {"id": 2, "name": "2", "monitor": "DP-1", "monitorID": 0, "windows": 3,
 "hasfullscreen": false, "lastwindow": "0x55d1", "lastwindowtitle": "vim"}]"#;

pub const MONITORS: &str = r#"[{"id": 0, "name": "DP-1", "description": "Dell", "width": 2560,
 "height": 1440, "refreshRate": 59.95, "x": 0, "y": 0,
 "activeWorkspace": {"id": 2, "name": "2"}, "scale": 1.25, "transform": 0,
 "focused": true, "dpmsStatus": true, "disabled": false}]"#;
