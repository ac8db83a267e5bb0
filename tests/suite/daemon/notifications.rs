//! Approvals as desktop notifications, against a tiny `org.freedesktop.Notifications`
//! server on the test bus that records `Notify` calls and emits the signals a person's
//! click would.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::json;
use tokio::sync::mpsc;
use zbus::object_server::SignalEmitter;
use zbus::{OwnedVariant, interface};

use super::*;
use crate::common::harness::{text_reply, tools_reply};
use crate::common::llm_server::Reply;

/// One recorded Notify: (id, summary, actions).
type Shown = (u32, String, Vec<String>);

struct FakeNotifications {
    next: u32,
    shown: mpsc::UnboundedSender<Shown>,
    closed: mpsc::UnboundedSender<u32>,
    /// Every body shown, in order.
    bodies: Arc<Mutex<Vec<String>>>,
}

#[interface(name = "org.freedesktop.Notifications")]
impl FakeNotifications {
    #[allow(clippy::too_many_arguments)]
    fn notify(
        &mut self,
        _app_name: String,
        _replaces_id: u32,
        _app_icon: String,
        summary: String,
        body: String,
        actions: Vec<String>,
        _hints: HashMap<String, OwnedVariant>,
        _expire_timeout: i32,
    ) -> u32 {
        self.next += 1;
        self.bodies.lock().unwrap().push(body);
        self.shown.send((self.next, summary, actions)).unwrap();
        self.next
    }

    /// A server like most: it renders the body's markup.
    fn get_capabilities(&self) -> Vec<String> {
        vec!["actions".into(), "body".into(), "body-markup".into()]
    }

    fn close_notification(&mut self, id: u32) {
        self.closed.send(id).unwrap();
    }

    #[zbus(signal)]
    async fn action_invoked(e: &SignalEmitter<'_>, id: u32, action_key: &str) -> zbus::Result<()>;

    #[zbus(signal)]
    async fn notification_closed(e: &SignalEmitter<'_>, id: u32, reason: u32) -> zbus::Result<()>;
}

struct Server {
    conn: zbus::Connection,
    shown: mpsc::UnboundedReceiver<Shown>,
    bodies: Arc<Mutex<Vec<String>>>,
    closed: mpsc::UnboundedReceiver<u32>,
}

impl Server {
    async fn start(bus: &TestBus) -> Server {
        let (tx, shown) = mpsc::unbounded_channel();
        let bodies = Arc::<Mutex<Vec<String>>>::default();
        let (closed_tx, closed) = mpsc::unbounded_channel();
        let fake = FakeNotifications {
            next: 0,
            shown: tx,
            closed: closed_tx,
            bodies: Arc::clone(&bodies),
        };
        let conn = zbus::connection::Builder::address(bus.address.as_str())
            .serve_at("/org/freedesktop/Notifications", fake)
            .name("org.freedesktop.Notifications")
            .build()
            .await
            .unwrap();
        Server {
            conn,
            shown,
            bodies,
            closed,
        }
    }

    async fn emitter(&self) -> SignalEmitter<'static> {
        SignalEmitter::new(&self.conn, "/org/freedesktop/Notifications").unwrap()
    }

    /// The id of the next CloseNotification call.
    async fn next_closed(&mut self) -> u32 {
        tokio::time::timeout(PATIENCE, self.closed.recv())
            .await
            .unwrap()
            .unwrap()
    }

    async fn next_shown(&mut self) -> Shown {
        tokio::time::timeout(PATIENCE, self.shown.recv())
            .await
            .unwrap()
            .unwrap()
    }
}

fn write_call() -> Reply {
    tools_reply(&[("c1", "write_file", json!({"path": "n.txt", "content": "x"}))])
}

const ASK_WRITES: &str = "[tiers]\nread = \"allow\"\nwrite = \"ask\"\n";

async fn fixture(script: Vec<Reply>) -> (Fixture, Server) {
    // The notification server must own its name before the daemon shows anything; the
    // daemon looks it up per request, so starting it on the fixture's bus suffices.
    let f = Fixture::builder(script).policy(ASK_WRITES).start().await;
    let server = Server::start(&f.bus).await;
    (f, server)
}

async fn submit_in_workspace(f: &Fixture) -> String {
    let ws = f.workspace();
    let opts = HashMap::from([("workspace", zbus::Variant::from(ws.to_str().unwrap()))]);
    f.proxy.submit("test", "write", opts).await.unwrap().0
}

#[tokio::test]
async fn the_deny_action_denies_and_the_notification_offers_the_choices_and_a_click() {
    let (f, mut server) = fixture(vec![write_call(), text_reply("ok")]).await;
    let mut w = Watch::new(&f.proxy).await;
    let task = submit_in_workspace(&f).await;
    let (id, summary, actions) = server.next_shown().await;
    assert!(summary.contains("write_file"), "{summary}");
    assert_eq!(
        actions,
        [
            "default",
            "Choose…",
            "approve",
            "Approve",
            "deny",
            "Deny",
            "allow-10min",
            "Allow write_file in ~/work/ for this task (10 min)"
        ]
    );
    FakeNotifications::action_invoked(&server.emitter().await, id, "deny")
        .await
        .unwrap();
    let resolved = w.event(&task, "approval_resolved").await;
    assert_eq!(resolved["approved"], false);
    assert_eq!(resolved["outcome"]["by"], "notification");
    // Regression: the notification is resident and stayed on screen, its
    // buttons live, after its own action; it is closed once answered.
    assert_eq!(server.next_closed().await, id);
    assert_eq!(w.finished(&task).await.0, "completed");
    assert!(!f.workspace().join("n.txt").exists());
}

#[tokio::test]
async fn allow_for_ten_minutes_grants_the_next_call_without_asking() {
    let (f, mut server) = fixture(vec![write_call(), write_call(), text_reply("ok")]).await;
    let mut w = Watch::new(&f.proxy).await;
    let task = submit_in_workspace(&f).await;
    let (id, _, _) = server.next_shown().await;
    FakeNotifications::action_invoked(&server.emitter().await, id, "allow-10min")
        .await
        .unwrap();
    let events = w.events(&task).await;
    let outcomes: Vec<&serde_json::Value> = events
        .iter()
        .filter(|(k, _)| k == "approval_resolved")
        .map(|(_, p)| &p["outcome"]["outcome"])
        .collect();
    assert_eq!(outcomes, [&json!("approved"), &json!("granted")]);
}

/// `Grant` (the chooser's timed grant) approves and covers the task's next call of
/// the tool; a grant past an hour is refused.
#[tokio::test]
async fn a_grant_over_the_bus_covers_the_same_tasks_next_call() {
    let (f, _server) = fixture(vec![write_call(), write_call(), text_reply("ok")]).await;
    let mut w = Watch::new(&f.proxy).await;
    let task = submit_in_workspace(&f).await;
    let (request, ..) = w.approval(&task).await;
    assert!(f.proxy.grant(&request, 3601).await.is_err());
    f.proxy.grant(&request, 600).await.unwrap();
    let events = w.events(&task).await;
    let outcomes: Vec<&serde_json::Value> = events
        .iter()
        .filter(|(k, _)| k == "approval_resolved")
        .map(|(_, p)| &p["outcome"]["outcome"])
        .collect();
    assert_eq!(outcomes, [&json!("approved"), &json!("granted")]);
}

// Regression: a dismissed approval (mako's right click) left the request waiting,
// silently, for the policy's timeout (120 s).
#[tokio::test]
async fn a_dismissed_notification_is_a_denial_at_once() {
    let (f, mut server) = fixture(vec![write_call(), text_reply("ok")]).await;
    let mut w = Watch::new(&f.proxy).await;
    let task = submit_in_workspace(&f).await;
    let (id, _, _) = server.next_shown().await;
    FakeNotifications::notification_closed(&server.emitter().await, id, 2)
        .await
        .unwrap();
    let resolved = w.event(&task, "approval_resolved").await;
    assert_eq!(resolved["approved"], false);
    assert_eq!(resolved["outcome"]["by"], "notification dismissed");
    assert_eq!(w.finished(&task).await.0, "completed");
}

#[tokio::test]
async fn an_expired_notification_is_not_an_answer() {
    let (f, mut server) = fixture(vec![write_call(), text_reply("ok")]).await;
    let mut w = Watch::new(&f.proxy).await;
    let task = submit_in_workspace(&f).await;
    let (request, ..) = w.approval(&task).await;
    let (id, _, _) = server.next_shown().await;
    FakeNotifications::notification_closed(&server.emitter().await, id, 1)
        .await
        .unwrap();
    // A later click on the expired notification answers nothing either.
    FakeNotifications::action_invoked(&server.emitter().await, id, "approve")
        .await
        .unwrap();
    // Still pending: a D-Bus client can still answer it, and its answer is the one.
    f.proxy.respond(&request, false).await.unwrap();
    let resolved = w.event(&task, "approval_resolved").await;
    assert_eq!(resolved["approved"], false);
    assert!(
        resolved["outcome"]["by"]
            .as_str()
            .unwrap()
            .starts_with("dbus:")
    );
    assert_eq!(w.finished(&task).await.0, "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_notify_shows_the_result_as_a_notification() {
    let (f, mut server) = fixture(vec![text_reply("disk is 40% full")]).await;
    let out = super::cli::familiar(
        &f.harness.home,
        &f.bus,
        &["ask", "--notify", "--soul", "test", "how full is my disk?"],
        &[],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The progress, then the answer in its place, both naming the request.
    let (_, progress, _) = server.next_shown().await;
    assert_eq!(progress, "familiar: “how full is my disk?”");
    let (_, summary, actions) = server.next_shown().await;
    assert_eq!(summary, "familiar: “how full is my disk?”");
    assert!(
        actions.is_empty(),
        "a short result needs no click: {actions:?}"
    );
    assert_eq!(
        server.bodies.lock().unwrap().last().unwrap(),
        "disk is 40% full"
    );
}

// A result's markup reached a server that renders it (a link, an image that
// may load a local file), and its escapes went through raw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_notify_shows_a_results_markup_and_escapes_as_text() {
    let (f, mut server) = fixture(vec![text_reply(
        "<img src=\"file:///etc/passwd\"> & \x1b[8mdone",
    )])
    .await;
    let out = super::cli::familiar(
        &f.harness.home,
        &f.bus,
        &["ask", "--notify", "--soul", "test", "anything"],
        &[],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.next_shown().await;
    server.next_shown().await;
    let body = server.bodies.lock().unwrap().last().unwrap().clone();
    assert_eq!(
        body,
        "&lt;img src=\"file:///etc/passwd\"&gt; &amp; \\x1b[8mdone"
    );
}

// The approval notification, the ApprovalRequested signal and GetTask showed
// the first line of the arguments with their escapes raw; a server that renders markup
// would also have turned an argument's `<a href>` into a link hiding its text.
#[tokio::test]
async fn every_daemon_surface_shows_the_whole_hostile_call_made_visible() {
    let content = "ok\n\x1b[2K\r<a href=\"http://x\">fine</a> \u{202E}txt.exe\u{200B}";
    let (f, mut server) = fixture(vec![
        tools_reply(&[(
            "c1",
            "write_file",
            json!({"path": "n.txt", "content": content}),
        )]),
        text_reply("ok"),
    ])
    .await;
    let mut w = Watch::new(&f.proxy).await;
    let task = submit_in_workspace(&f).await;
    let expected = "write_file: n.txt\n  content: ok\\n\\x1b[2K\\r<a href=\"http://x\">fine</a> \\u{202E}txt.exe\\u{200B}";

    let (request, tool, summary, _) = w.approval(&task).await;
    assert_eq!(tool, "write_file");
    assert_eq!(summary, expected);
    // The same text in the task's event (what `--json` prints).
    assert_eq!(
        w.event(&task, "approval_requested").await["summary"],
        expected
    );
    let got: serde_json::Value =
        serde_json::from_str(&f.proxy.get_task_json(&task).await.unwrap()).unwrap();
    assert_eq!(got["approvals"][0]["summary"], expected);

    let (id, _, _) = server.next_shown().await;
    let body = server.bodies.lock().unwrap()[0].clone();
    // What runs and why first (they fit a small notification), then every other
    // argument.
    assert!(body.starts_with("write_file: n.txt\nwhy: "), "{body:?}");
    assert!(
        body.contains(
            "\n  content: ok\\n\\x1b[2K\\r&lt;a href=\"http://x\"&gt;fine&lt;/a&gt; \\u{202E}txt.exe\\u{200B}"
        ),
        "{body:?}"
    );
    for c in body.chars() {
        assert!(
            c == '\n' || !(c.is_control() || is_bidi_or_zero_width(c)),
            "{body:?}"
        );
    }
    FakeNotifications::action_invoked(&server.emitter().await, id, "approve")
        .await
        .unwrap();
    let resolved = w.event(&task, "approval_resolved").await;
    assert_eq!(resolved["request_id"], request.as_str());
    assert_eq!(w.finished(&task).await.0, "completed");
    // The approved text is the text written, byte for byte.
    assert_eq!(
        std::fs::read_to_string(f.workspace().join("n.txt")).unwrap(),
        content
    );
}

/// Bidi controls and zero-width characters.
fn is_bidi_or_zero_width(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

// Regression (issue 42 §5): `ask --dmenu` with a launcher that cannot open (no Wayland
// display) exited 0 and showed nothing: a key that did nothing, with no trace; the
// launcher's own stderr was swallowed. It says why on screen and on stderr, exit 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_dmenu_with_a_launcher_that_cannot_open_says_why_on_screen() {
    use std::os::unix::fs::PermissionsExt;

    let (f, mut server) = fixture(vec![]).await;
    let dir = tempfile::tempdir().unwrap();
    let menu = dir.path().join("menu");
    // What fuzzel 1.8 says and does without a compositor.
    std::fs::write(
        &menu,
        "#!/bin/sh\necho 'info: main.c:1076: version: 1.8.2' >&2\n\
         echo ' err: wayland.c:1804: failed to connect to wayland; no compositor running?' >&2\n\
         exit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&menu, std::fs::Permissions::from_mode(0o755)).unwrap();
    f.harness.home.write_config(
        "config.toml",
        &format!("[desktop]\nmenu = \"{}\"\n", menu.display()),
    );
    let out = super::cli::familiar(&f.harness.home, &f.bus, &["ask", "--dmenu"], &[]).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let cause = "the launcher `menu` could not open (exit 1): err: wayland.c:1804: failed to connect to wayland; no compositor running?";
    assert!(stderr.contains(cause), "{stderr}");
    let (_, summary, _) = server.next_shown().await;
    assert_eq!(summary, "familiar: not asked");
    assert!(
        server
            .bodies
            .lock()
            .unwrap()
            .last()
            .unwrap()
            .contains(cause),
        "{:?}",
        server.bodies.lock().unwrap()
    );
    assert!(f.proxy.list_tasks().await.unwrap().is_empty());

    // The real fuzzel, where installed: no display here either.
    if crate::common::skip::program("fuzzel", "fuzzel").is_some() {
        f.harness
            .home
            .write_config("config.toml", "[desktop]\nmenu = \"fuzzel --dmenu\"\n");
        let out = super::cli::familiar(&f.harness.home, &f.bus, &["ask", "--dmenu"], &[]).await;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("the launcher `fuzzel` could not open (exit 1): "),
            "{stderr}"
        );
    }
}
