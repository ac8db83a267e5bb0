//! A fake niri IPC socket: a `UnixListener` answering scripted JSON lines on a thread,
//! one connection per request as familiar's client makes them, with replies recorded
//! from niri (`niri msg --json`'s shapes: `{"Ok": {"Windows": [...]}}`).
// A test helper: a panic here is the test's failure report.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

pub struct FakeNiri {
    pub socket: PathBuf,
    thread: Option<JoinHandle<Vec<String>>>,
}

impl FakeNiri {
    /// Serves `script` in order at `dir/niri.sock`: each entry is the request line we
    /// expect (without its newline) and the reply line. A request that differs is
    /// answered `{"Err": "unexpected request"}` and still recorded.
    pub fn start(dir: &Path, script: Vec<(&str, &str)>) -> FakeNiri {
        let socket = dir.join("niri.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let script: Vec<(String, String)> = script
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let thread = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for (expected, reply) in script {
                let (conn, _) = listener.accept().unwrap();
                let mut line = String::new();
                BufReader::new(&conn).read_line(&mut line).unwrap();
                let request = line.trim_end().to_owned();
                let answer = if request == expected {
                    reply
                } else {
                    r#"{"Err":"unexpected request"}"#.to_owned()
                };
                (&conn).write_all(format!("{answer}\n").as_bytes()).unwrap();
                seen.push(request);
            }
            seen
        });
        FakeNiri {
            socket,
            thread: Some(thread),
        }
    }

    /// Waits until the script is served; returns the requests received, in order.
    pub fn finish(mut self) -> Vec<String> {
        self.thread.take().unwrap().join().unwrap()
    }
}

pub const WORKSPACES: &str = r#"{"Ok":{"Workspaces":[{"id":1,"idx":1,"name":null,"output":"eDP-1","is_urgent":false,"is_active":true,"is_focused":true,"active_window_id":12},{"id":2,"idx":2,"name":"chat","output":"eDP-1","is_urgent":false,"is_active":false,"is_focused":false,"active_window_id":13}]}}"#;

pub const OUTPUTS: &str = r#"{"Ok":{"Outputs":{"eDP-1":{"name":"eDP-1","make":"BOE","model":"0x0BCA","serial":null,"physical_size":[300,190],"modes":[{"width":2256,"height":1504,"refresh_rate":59999,"is_preferred":true}],"current_mode":0,"vrr_supported":false,"vrr_enabled":false,"logical":{"x":0,"y":0,"width":1504,"height":1002,"scale":1.5,"transform":"Normal"}}}}}"#;

pub const WINDOWS: &str = r#"{"Ok":{"Windows":[{"id":12,"title":"~/src/familiar","app_id":"Alacritty","pid":3141,"workspace_id":1,"is_focused":true,"is_floating":false,"is_urgent":false},{"id":13,"title":"Element | familiar","app_id":"Element","pid":3200,"workspace_id":2,"is_focused":false,"is_floating":false,"is_urgent":false}]}}"#;

pub const HANDLED: &str = r#"{"Ok":"Handled"}"#;
