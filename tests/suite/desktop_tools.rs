//! `systemd_user`, `notify` and `power` against small fake services on a private
//! `dbus-daemon`: a systemd user manager, a notification server and logind, written
//! with zbus at the real names, paths and interfaces. Each fake records the calls it
//! gets, so the tests assert what was called with which arguments.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use familiar::agent::TaskOutcome;
use familiar::agent::events::Event;
use familiar::sandbox::SandboxPolicy;
use familiar::snapshot::Snapshotter;
use familiar::store::TaskStatus;
use familiar::tools::bus::Bus;
use familiar::tools::notify::Notify;
use familiar::tools::power::Power;
use familiar::tools::systemd::SystemdUser;
use familiar::tools::{Registry, Tool, ToolContext, ToolError};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use zbus::object_server::SignalEmitter;
use zbus::{OwnedObjectPath, OwnedVariant, interface};

use super::agent::harness::*;
use super::daemon::TestBus;

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
fn direct_ctx(h: &Harness) -> ToolContext {
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
            "CARGO_BIN_EXE_familiar"
        ))),
        soul: soul.id.clone(),
        session: familiar::ids::SessionId::new("s-direct").unwrap(),
        memory: familiar::store::Memory::new(h.store.data_dir(), 100),
        subagents: None,
    }
}

// ---------------------------------------------------------------- systemd user manager

/// systemd's object path escaping: every byte outside `[A-Za-z0-9]` becomes `_XX`.
fn unit_path(name: &str) -> String {
    let escaped: String = name
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("_{b:02x}")
            }
        })
        .collect();
    format!("/org/freedesktop/systemd1/unit/{escaped}")
}

/// (name, description, load state, active state, sub state).
type FakeUnitRow = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
);

const UNITS: &[FakeUnitRow] = &[
    ("a.service", "Alpha", "loaded", "active", "running"),
    (
        "broken.service",
        "Broken thing",
        "loaded",
        "failed",
        "failed",
    ),
    ("idle.service", "Idle thing", "loaded", "inactive", "dead"),
    ("foo.service", "Foo daemon", "loaded", "active", "running"),
];

struct FakeManager {
    calls: Calls,
    next_job: u32,
}

impl FakeManager {
    async fn job(
        &mut self,
        emitter: &SignalEmitter<'_>,
        method: &str,
        name: &str,
        mode: &str,
    ) -> zbus::fdo::Result<OwnedObjectPath> {
        record(&self.calls, method, &[name, mode]);
        if !UNITS.iter().any(|u| u.0 == name) {
            return Err(zbus::fdo::Error::Failed(format!("Unit {name} not found.")));
        }
        self.next_job += 1;
        let job =
            OwnedObjectPath::try_from(format!("/org/freedesktop/systemd1/job/{}", self.next_job))
                .unwrap();
        // Sent before the reply: the tool subscribes before it queues the job, so it
        // must find the signal waiting.
        Self::job_removed(emitter, self.next_job, job.clone(), name, "done")
            .await
            .unwrap();
        Ok(job)
    }
}

type UnitRow = (
    String,
    String,
    String,
    String,
    String,
    String,
    OwnedObjectPath,
    u32,
    String,
    OwnedObjectPath,
);

#[interface(name = "org.freedesktop.systemd1.Manager")]
impl FakeManager {
    fn list_units(&self) -> Vec<UnitRow> {
        record(&self.calls, "ListUnits", &[]);
        UNITS
            .iter()
            .map(|u| {
                (
                    u.0.to_owned(),
                    u.1.to_owned(),
                    u.2.to_owned(),
                    u.3.to_owned(),
                    u.4.to_owned(),
                    String::new(),
                    OwnedObjectPath::try_from(unit_path(u.0)).unwrap(),
                    0,
                    String::new(),
                    OwnedObjectPath::try_from("/").unwrap(),
                )
            })
            .collect()
    }

    fn load_unit(&self, name: String) -> zbus::fdo::Result<OwnedObjectPath> {
        record(&self.calls, "LoadUnit", &[&name]);
        Ok(OwnedObjectPath::try_from(unit_path(&name)).unwrap())
    }

    async fn start_unit(
        &mut self,
        name: String,
        mode: String,
        #[zbus(signal_emitter)] e: SignalEmitter<'_>,
    ) -> zbus::fdo::Result<OwnedObjectPath> {
        self.job(&e, "StartUnit", &name, &mode).await
    }

    async fn stop_unit(
        &mut self,
        name: String,
        mode: String,
        #[zbus(signal_emitter)] e: SignalEmitter<'_>,
    ) -> zbus::fdo::Result<OwnedObjectPath> {
        self.job(&e, "StopUnit", &name, &mode).await
    }

    async fn restart_unit(
        &mut self,
        name: String,
        mode: String,
        #[zbus(signal_emitter)] e: SignalEmitter<'_>,
    ) -> zbus::fdo::Result<OwnedObjectPath> {
        self.job(&e, "RestartUnit", &name, &mode).await
    }

    async fn reload_unit(
        &mut self,
        name: String,
        mode: String,
        #[zbus(signal_emitter)] e: SignalEmitter<'_>,
    ) -> zbus::fdo::Result<OwnedObjectPath> {
        self.job(&e, "ReloadUnit", &name, &mode).await
    }

    #[zbus(signal)]
    async fn job_removed(
        e: &SignalEmitter<'_>,
        id: u32,
        job: OwnedObjectPath,
        unit: &str,
        result: &str,
    ) -> zbus::Result<()>;
}

struct FakeUnit(FakeUnitRow);

#[interface(name = "org.freedesktop.systemd1.Unit")]
impl FakeUnit {
    #[zbus(property)]
    fn description(&self) -> String {
        self.0.1.to_owned()
    }
    #[zbus(property)]
    fn load_state(&self) -> String {
        self.0.2.to_owned()
    }
    #[zbus(property)]
    fn active_state(&self) -> String {
        self.0.3.to_owned()
    }
    #[zbus(property)]
    fn sub_state(&self) -> String {
        self.0.4.to_owned()
    }
}

/// A fake user manager owning `org.freedesktop.systemd1` on `bus`.
async fn fake_systemd(bus: &TestBus) -> (zbus::Connection, Calls) {
    let calls = Calls::default();
    let mut builder = zbus::connection::Builder::address(bus.address.as_str()).serve_at(
        "/org/freedesktop/systemd1",
        FakeManager {
            calls: Arc::clone(&calls),
            next_job: 0,
        },
    );
    for u in UNITS {
        builder = builder.serve_at(unit_path(u.0), FakeUnit(*u));
    }
    let conn = builder
        .name("org.freedesktop.systemd1")
        .build()
        .await
        .unwrap();
    (conn, calls)
}

fn systemd_tool(bus: &TestBus) -> Arc<dyn Tool> {
    Arc::new(SystemdUser::new(Bus::Address(bus.address.clone())))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn systemd_list_shows_failed_then_active_and_status_reads_the_unit() {
    let bus = TestBus::start();
    let (_systemd, recorded) = fake_systemd(&bus).await;
    let h = Harness::with(
        vec![
            tools_reply(&[("c1", "systemd_user", json!({"action": "list"}))]),
            tools_reply(&[(
                "c2",
                "systemd_user",
                json!({"action": "status", "unit": "foo.service"}),
            )]),
            text_reply("foo is running"),
        ],
        "",
        "",
    )
    .await;
    let (out, _) = run(&h, systemd_tool(&bus), "how are my units?").await;
    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);

    let list = last_tool_result(&h, 1);
    let pos = |s: &str| list.find(s).unwrap_or_else(|| panic!("{s} in {list}"));
    assert!(pos("broken.service") < pos("a.service"), "{list}");
    assert!(pos("a.service") < pos("foo.service"), "{list}");
    assert!(list.contains("failed units: 1"), "{list}");
    assert!(list.contains("active units: 2"), "{list}");
    assert!(
        !list.contains("idle.service"),
        "inactive units are counted, not listed: {list}"
    );
    assert!(list.contains("1 inactive units not listed"), "{list}");

    let status = last_tool_result(&h, 2);
    assert!(status.contains("foo.service: active (running)"), "{status}");
    assert!(status.contains("description: Foo daemon"), "{status}");
    assert_eq!(
        calls(&recorded),
        [
            ("ListUnits".to_owned(), vec![]),
            ("LoadUnit".to_owned(), vec!["foo.service".to_owned()]),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn systemd_restart_under_an_open_policy_restarts_the_unit() {
    let bus = TestBus::start();
    let (_systemd, recorded) = fake_systemd(&bus).await;
    let h = Harness::with(
        vec![
            tools_reply(&[(
                "c1",
                "systemd_user",
                json!({"action": "restart", "unit": "foo.service"}),
            )]),
            text_reply("restarted"),
        ],
        "",
        OPEN_POLICY,
    )
    .await;
    let (out, _) = run(&h, systemd_tool(&bus), "restart foo").await;
    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);
    let result = last_tool_result(&h, 1);
    assert!(
        result.contains("restart foo.service: done; now active (running)"),
        "{result}"
    );
    assert_eq!(
        calls(&recorded)[0],
        (
            "RestartUnit".to_owned(),
            vec!["foo.service".to_owned(), "replace".to_owned()]
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn systemd_refuses_familiars_own_units_and_bad_names_before_any_call() {
    let bus = TestBus::start();
    let (_systemd, recorded) = fake_systemd(&bus).await;
    let h = Harness::new(vec![]).await;
    let tool = systemd_tool(&bus);
    let ctx = direct_ctx(&h);
    // The policy refuses these too; the tool is the second lock.
    for args in [
        json!({"action": "stop", "unit": "familiar.service"}),
        json!({"action": "restart", "unit": "familiar"}),
        json!({"action": "reload", "unit": "dev.familiar.Agent1.service"}),
        json!({"action": "stop", "unit": "familiar-maintenance.timer"}),
    ] {
        let err = tool.execute(args.clone(), ctx.clone()).await.unwrap_err();
        let ToolError::RespondToModel(msg) = err else {
            panic!("{args}: not for the model: {err:?}")
        };
        assert!(msg.contains("familiar's own unit"), "{args}: {msg}");
    }
    for unit in ["-H", "foo;rm -rf ~", "../x.service", ""] {
        let err = tool
            .execute(json!({"action": "status", "unit": unit}), ctx.clone())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, ToolError::RespondToModel(m) if m.contains("invalid unit name")),
            "{unit:?}: {err:?}"
        );
    }
    let err = tool
        .execute(json!({"action": "start"}), ctx.clone())
        .await
        .unwrap_err();
    assert!(matches!(&err, ToolError::RespondToModel(m) if m.contains("needs a `unit`")));
    assert_eq!(calls(&recorded), [], "no call may reach the manager");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn systemd_user_is_hidden_without_a_user_manager() {
    let bus = TestBus::start();
    let h = Harness::new(vec![]).await;
    let soul = h.soul("tools = [\"systemd_user\"]\n");
    let absent = Registry::with(vec![systemd_tool(&bus)]);
    let defs = tokio::task::block_in_place(|| absent.definitions(&soul.grant.tools));
    assert!(defs.is_empty(), "offered without a manager");

    let (_systemd, _) = fake_systemd(&bus).await;
    let present = Registry::with(vec![systemd_tool(&bus)]);
    let defs = tokio::task::block_in_place(|| present.definitions(&soul.grant.tools));
    assert_eq!(
        defs.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
        ["systemd_user"]
    );
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
    let h = Harness::with(
        vec![
            tools_reply(&[(
                "c1",
                "notify",
                json!({"summary": "Backup\u{1b}[31m done", "body": "3 files\nsee <a href=\"file:///etc\">log</a>"}),
            )]),
            text_reply("told you"),
        ],
        "",
        OPEN_POLICY,
    )
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
    let h = Harness::with(suspend_then("suspending"), "", OPEN_POLICY).await;
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
    let h = Harness::with(suspend_then("cannot"), "", OPEN_POLICY).await;
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
    let h = Harness::with(suspend_then("not allowed"), "", "").await;
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
    let f = super::daemon::Fixture::new(vec![]).await;
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
    let expected = familiar::sandbox::probe();
    assert_eq!(
        got["sandbox"],
        json!({"abi": expected.abi, "status": expected.status.as_str(), "missing": expected.missing})
    );

    let out = status(&["status"]).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("sandbox: "))
        .unwrap_or_else(|| panic!("no sandbox line in {text}"));
    assert!(line.contains(expected.status.as_str()), "{line}");
}
