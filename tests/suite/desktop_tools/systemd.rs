//! `systemd_user` against a fake systemd user manager on the private bus.

use familiar::dbus::systemd::UnitRow;

use super::*;

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
    let h = Harness::builder(vec![
        tools_reply(&[("c1", "systemd_user", json!({"action": "list"}))]),
        tools_reply(&[(
            "c2",
            "systemd_user",
            json!({"action": "status", "unit": "foo.service"}),
        )]),
        text_reply("foo is running"),
    ])
    .build()
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
    let h = Harness::builder(vec![
        tools_reply(&[(
            "c1",
            "systemd_user",
            json!({"action": "restart", "unit": "foo.service"}),
        )]),
        text_reply("restarted"),
    ])
    .policy(OPEN_POLICY)
    .build()
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_precheck_finds_failed_user_units_and_hands_them_to_the_model() {
    let bus = TestBus::start();
    let (_systemd, _) = fake_systemd(&bus).await;
    let server =
        crate::common::llm_server::LlmServer::start(vec![text_reply("broken.service failed")])
            .await;
    let home = crate::common::TestHome::new();
    home.write_config(
        "config.toml",
        &format!(
            "[providers.local]\nbase_url = \"{}/v1\"\nmodel = \"m\"\nmax_retries = 0\n",
            server.base
        ),
    );
    home.write_config(
        "souls/checkup.toml",
        "prompt = \"Check the machine.\"\ntools = [\"read_file\"]\n[precheck]\n\
         journal_errors = false\ndisk_percent = 100\n",
    );
    let mut cmd = home.familiar_process();
    cmd.env("DBUS_SESSION_BUS_ADDRESS", &bus.address).args([
        "run",
        "--soul",
        "checkup",
        "weekly check-up",
    ]);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sent = server.requests()[0].body["messages"].to_string();
    assert!(sent.contains("failed user units: broken.service"), "{sent}");
}
