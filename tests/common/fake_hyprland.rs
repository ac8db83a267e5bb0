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
                let mut buf = [0u8; 8192];
                // A connection that sends nothing is a liveness probe (`detect`): not a
                // request, and not part of the script.
                let (mut conn, n) = loop {
                    let (mut conn, _) = listener.accept().unwrap();
                    let n = conn.read(&mut buf).unwrap();
                    if n > 0 || matches!(reply, Reply::Hang) {
                        break (conn, n);
                    }
                };
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

// What a real Hyprland 0.55.2 answered (tests/fixtures/hyprland-0.55.2/README.md): the
// focused window is a foot on workspace `two`, the monitor a headless one.

pub const ACTIVE_WORKSPACE: &str = include_str!("../fixtures/hyprland-0.55.2/activeworkspace.json");

pub const ACTIVE_WINDOW: &str = include_str!("../fixtures/hyprland-0.55.2/activewindow.json");

/// `j/activewindow` with no window focused.
pub const NO_ACTIVE_WINDOW: &str =
    include_str!("../fixtures/hyprland-0.55.2/activewindow-none-focused.json");

pub const WORKSPACES: &str = include_str!("../fixtures/hyprland-0.55.2/workspaces.json");

pub const MONITORS: &str = include_str!("../fixtures/hyprland-0.55.2/monitors.json");

pub const CLIENTS: &str = include_str!("../fixtures/hyprland-0.55.2/clients.json");

/// The focused window's address in the replies above.
pub const FOCUSED_ADDRESS: &str = "0x560849b6e250";
