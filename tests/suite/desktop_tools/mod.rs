//! `systemd_user`, `notify` and `power` against small fake services on a private
//! `dbus-daemon`: a systemd user manager, a notification server and logind, written
//! with zbus at the real names, paths and interfaces. Each fake records the calls it
//! gets, so the tests assert what was called with which arguments.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use familiar::agent::TaskOutcome;
use familiar::sandbox::SandboxPolicy;
use familiar::snapshot::Snapshotter;
use familiar::tools::bus::Bus;
use familiar::tools::notify::Notify;
use familiar::tools::power::Power;
use familiar::tools::systemd::SystemdUser;
use familiar::tools::{Registry, Tool, ToolContext, ToolError};
use familiar_protocol::events::Event;
use familiar_protocol::task::TaskStatus;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use zbus::object_server::SignalEmitter;
use zbus::{OwnedObjectPath, OwnedVariant, interface};

use crate::common::bus::TestBus;
use crate::common::harness::*;

mod launch;
mod portal;
mod systemd;

/// Calls a fake received: (method, arguments).
type Calls = Arc<Mutex<Vec<(String, Vec<String>)>>>;

fn record(calls: &Calls, method: &str, args: &[&str]) {
    calls.lock().unwrap().push((
        method.to_owned(),
        args.iter().map(|a| (*a).to_owned()).collect(),
    ));
}

fn calls(calls: &Calls) -> Vec<(String, Vec<String>)> {
    calls.lock().unwrap().clone()
}

/// Runs a task whose soul may use `tool` only, and returns its outcome and events.
async fn run(h: &Harness, tool: Arc<dyn Tool>, prompt: &str) -> (TaskOutcome, Vec<Arc<Event>>) {
    let soul = h.soul(&format!("tools = [\"{}\"]\n", tool.info().name));
    let rt = h.runtime(Registry::with(vec![tool]));
    h.run(rt, h.spec(soul, prompt, None)).await
}

/// The content of the last tool message the model was sent in request `n`.
fn last_tool_result(h: &Harness, n: usize) -> String {
    tool_messages(&h.server, n).last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A context for calling a tool directly, outside the loop.
pub(crate) fn direct_ctx(h: &Harness) -> ToolContext {
    let soul = h.soul("tools = []\n");
    let workspace = h.workspace();
    ToolContext {
        sandbox: Arc::new(
            SandboxPolicy::new(
                &soul.sandbox,
                &h.policy.protected_paths,
                &workspace,
                h.home.path(),
            )
            .unwrap(),
        ),
        workspace,
        home: h.home.path().to_owned(),
        snapshotter: Arc::new(Mutex::new(Snapshotter::with_hyprland(None).unwrap())),
        cancel: CancellationToken::new(),
        launcher: Arc::new(familiar::sandbox::SandboxLauncher::new(env!(
            "CARGO_BIN_EXE_familiar-sandbox"
        ))),
        soul: soul.id.clone(),
        session: familiar_protocol::ids::SessionId::new("s-direct").unwrap(),
        memory: familiar::store::Memory::new(h.store.data_dir(), 100),
        subagents: None,
        changes: None,
        screen: familiar::tools::screen::ScreenPlace {
            dir: h.home.path().join("screens"),
            max_edge: 1280,
        },
        asked_focus: None,
    }
}

// ---------------------------------------------------------------- notification server

struct FakeNotifications {
    calls: Calls,
}

#[interface(name = "org.freedesktop.Notifications")]
impl FakeNotifications {
    #[allow(clippy::too_many_arguments)]
    fn notify(
        &self,
        app_name: String,
        _replaces_id: u32,
        _app_icon: String,
        summary: String,
        body: String,
        _actions: Vec<String>,
        _hints: HashMap<String, OwnedVariant>,
        _expire_timeout: i32,
    ) -> u32 {
        record(&self.calls, "Notify", &[&app_name, &summary, &body]);
        7
    }

    fn get_capabilities(&self) -> Vec<String> {
        vec!["body".to_owned(), "body-markup".to_owned()]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_shows_a_cleaned_notification_as_familiar() {
    let bus = TestBus::start();
    let recorded = Calls::default();
    let _server = zbus::connection::Builder::address(bus.address.as_str())
        .serve_at(
            "/org/freedesktop/Notifications",
            FakeNotifications {
                calls: Arc::clone(&recorded),
            },
        )
        .name("org.freedesktop.Notifications")
        .build()
        .await
        .unwrap();
    let h = Harness::builder(vec![
            tools_reply(&[(
                "c1",
                "notify",
                json!({"summary": "Backup\u{1b}[31m done", "body": "3 files\nsee <a href=\"file:///etc\">log</a>"}),
            )]),
            text_reply("told you"),
        ]).policy(OPEN_POLICY).build()
    .await;
    let notify: Arc<dyn Tool> = Arc::new(Notify::new(Bus::Address(bus.address.clone())));
    assert!(tokio::task::block_in_place(|| notify.available()));
    let (out, _) = run(&h, notify, "tell me when done").await;
    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);
    let result = last_tool_result(&h, 1);
    assert!(result.contains("notification shown (id 7)"), "{result}");
    assert_eq!(
        calls(&recorded),
        [(
            "Notify".to_owned(),
            vec![
                "familiar".to_owned(),
                "Backup[31m done".to_owned(),
                "3 files\nsee &lt;a href=\"file:///etc\"&gt;log&lt;/a&gt;".to_owned(),
            ]
        )]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_is_hidden_without_a_notification_server() {
    let bus = TestBus::start();
    let notify = Notify::new(Bus::Address(bus.address.clone()));
    assert!(!tokio::task::block_in_place(|| notify.available()));
}

// ---------------------------------------------------------------- logind

struct FakeLogind {
    calls: Calls,
    /// What every `Can*` answers.
    can: &'static str,
}

#[interface(name = "org.freedesktop.login1.Manager")]
impl FakeLogind {
    fn can_suspend(&self) -> String {
        record(&self.calls, "CanSuspend", &[]);
        self.can.to_owned()
    }
    fn can_reboot(&self) -> String {
        record(&self.calls, "CanReboot", &[]);
        self.can.to_owned()
    }
    fn can_power_off(&self) -> String {
        record(&self.calls, "CanPowerOff", &[]);
        self.can.to_owned()
    }
    fn suspend(&self, interactive: bool) {
        record(&self.calls, "Suspend", &[&interactive.to_string()]);
    }
    fn reboot(&self, interactive: bool) {
        record(&self.calls, "Reboot", &[&interactive.to_string()]);
    }
    fn power_off(&self, interactive: bool) {
        record(&self.calls, "PowerOff", &[&interactive.to_string()]);
    }
}

/// A fake logind owning `org.freedesktop.login1` on the private bus (standing in for
/// the system bus).
async fn fake_logind(bus: &TestBus, can: &'static str) -> (zbus::Connection, Calls) {
    let calls = Calls::default();
    let conn = zbus::connection::Builder::address(bus.address.as_str())
        .serve_at(
            "/org/freedesktop/login1",
            FakeLogind {
                calls: Arc::clone(&calls),
                can,
            },
        )
        .name("org.freedesktop.login1")
        .build()
        .await
        .unwrap();
    (conn, calls)
}

fn power_tool(bus: &TestBus) -> Arc<dyn Tool> {
    Arc::new(Power::new(Bus::Address(bus.address.clone())))
}

fn suspend_then(text: &str) -> Vec<crate::common::llm_server::Reply> {
    vec![
        tools_reply(&[("c1", "power", json!({"action": "suspend"}))]),
        text_reply(text),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_suspend_checks_logind_then_suspends_without_a_prompt() {
    let bus = TestBus::start();
    let (_logind, recorded) = fake_logind(&bus, "yes").await;
    let h = Harness::builder(suspend_then("suspending"))
        .policy(OPEN_POLICY)
        .build()
        .await;
    let tool = power_tool(&bus);
    assert!(tokio::task::block_in_place(|| tool.available()));
    let (out, _) = run(&h, tool, "suspend").await;
    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);
    let result = last_tool_result(&h, 1);
    assert!(
        result.contains("suspend: requested from logind"),
        "{result}"
    );
    assert_eq!(
        calls(&recorded),
        [
            ("CanSuspend".to_owned(), vec![]),
            ("Suspend".to_owned(), vec!["false".to_owned()]),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_reports_na_and_does_not_suspend() {
    let bus = TestBus::start();
    let (_logind, recorded) = fake_logind(&bus, "na").await;
    let h = Harness::builder(suspend_then("cannot"))
        .policy(OPEN_POLICY)
        .build()
        .await;
    let (out, _) = run(&h, power_tool(&bus), "suspend").await;
    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);
    let result = last_tool_result(&h, 1);
    assert!(
        result.contains("not available on this machine (logind: na)"),
        "{result}"
    );
    assert_eq!(calls(&recorded), [("CanSuspend".to_owned(), vec![])]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_is_asked_under_the_default_policy_and_denied_with_nobody_to_ask() {
    let bus = TestBus::start();
    let (_logind, recorded) = fake_logind(&bus, "yes").await;
    // The shipped default policy: system_critical is asked.
    let h = Harness::builder(suspend_then("not allowed")).build().await;
    let (out, events) = run(&h, power_tool(&bus), "suspend").await;
    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);
    assert_eq!(count(&events, "approval_requested"), 1);
    let result = last_tool_result(&h, 1);
    assert!(result.contains("nobody could be asked"), "{result}");
    assert_eq!(calls(&recorded), [], "logind must not be called");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_is_hidden_without_logind() {
    let bus = TestBus::start();
    let tool = power_tool(&bus);
    assert!(!tokio::task::block_in_place(|| tool.available()));
}

// ---------------------------------------------------------------- familiar status

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_the_sandbox_enforcement() {
    let f = crate::common::fixture::Fixture::new(vec![]).await;
    let status = |args: &'static [&'static str]| {
        let mut cmd = f.harness.home.familiar();
        cmd.env("DBUS_SESSION_BUS_ADDRESS", &f.bus.address)
            .args(args);
        // Off the runtime's threads: the daemon under test runs on them.
        tokio::task::spawn_blocking(move || cmd.output().unwrap())
    };
    let out = status(&["status", "--json"]).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let expected = familiar_sandbox::status::probe();
    assert_eq!(
        got["sandbox"],
        json!({
            "abi": expected.abi,
            "status": expected.status.as_str(),
            "missing": expected.missing,
            "unix_sockets": expected.unix_sockets.as_str(),
        })
    );

    let out = status(&["status"]).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("sandbox: "))
        .unwrap_or_else(|| panic!("no sandbox line in {text}"));
    assert!(line.contains(expected.status.as_str()), "{line}");
}
