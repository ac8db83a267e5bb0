//! `type_text` on a real headless sway, into a real GTK entry (`zenity --entry`):
//! through the loop under a policy that allows everything it is still asked, every time
//! (a timed grant is refused), a chord with a modifier reaches the window (`ctrl+a`,
//! `BackSpace` empty the entry), and the entry gets exactly the text, non-ASCII
//! included (zenity prints it once OK is pressed); the approval shows a newline as `\n`;
//! nothing is typed while logind (a fake on a private bus) says the session is locked,
//! while input keeps coming (`swaymsg seat - cursor move`, which types nothing), or when
//! the focus moved to another window after the approval.
//!
//! The entry is read over AT-SPI (`ui_read`), and OK pressed there: this zenity's entry
//! does not take Return as OK. That nothing was typed is read from the same entry.

use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use familiar::approval::{Answer, ApprovalBroker, ApprovalRequest, Frontend, RespondError};
use familiar::compositor::{Compositor, Sway};
use familiar::tools::bus::Bus;
use familiar::tools::desktop::Locate;
use familiar::tools::typing::TypeText;
use familiar::tools::ui::atspi::A11ySource;
use familiar::tools::ui::{Ui, UiAct};
use familiar::tools::{Registry, Tool, ToolContext, ToolError};
use familiar_protocol::ids::RequestId;
use familiar_protocol::task::TaskStatus;
use serde_json::{Value, json};

use crate::common::bus::TestBus;
use crate::common::fake_logind::FakeLogind;
use crate::common::harness::*;
use crate::common::skip;
use crate::common::sway::{Desktop, Keyboard, Options, PATIENCE};

/// A session with a zenity entry dialog that has the focus, logind on a private bus,
/// and the tool pointed at both.
struct Typing {
    /// The seat's own keyboard, made before the dialog: a headless seat has none, and
    /// a window that only learns of wtype's keyboard when wtype appears gets its keys
    /// before it has bound it (a desktop always has a keyboard).
    keyboard: Option<Keyboard>,
    ui: Ui,
    sway: Desktop,
    zenity: Option<Child>,
    _bus: TestBus,
    logind: FakeLogind,
    tool: TypeText,
}

async fn session() -> Option<Typing> {
    skip::program("zenity", "zenity")?;
    skip::program("swaymsg", "sway")?;
    let mut sway = Desktop::start(&Options::default())?;
    let address = sway.start_a11y()?;
    let keyboard = sway.keyboard(&[]);
    let zenity = sway.spawn_gtk("zenity", &["--entry", "--text=Your name?"]);
    sway.wait_for_window("zenity");
    let bus = TestBus::start();
    let logind = FakeLogind::start(&bus.address).await;
    let socket = sway.swaysock().to_owned();
    let locate: Locate = Arc::new(move || Some(Compositor::Sway(Sway::at(&socket))));
    let tool = TypeText {
        locate: Arc::clone(&locate),
        logind: Bus::Address(bus.address.clone()),
    };
    let ui = Ui {
        a11y: A11ySource::Address(address),
        locate,
    };
    Some(Typing {
        keyboard: Some(keyboard),
        ui,
        sway,
        zenity: Some(zenity),
        _bus: bus,
        logind,
        tool,
    })
}

impl Typing {
    /// What the approval shows and the context the dispatcher would run the call in.
    async fn ask(&self, args: &Value) -> (String, ToolContext) {
        let described = self.tool.describe(args).unwrap().await.unwrap();
        let mut ctx = crate::suite::desktop_tools::direct_ctx(&Harness::new(vec![]).await);
        ctx.asked_focus = described.focus;
        (described.summary, ctx)
    }

    /// Asks and runs one call, as an approved call runs.
    async fn call(&self, args: Value) -> Result<String, ToolError> {
        let (_, ctx) = self.ask(&args).await;
        self.tool.execute(args, ctx).await
    }

    /// The entry's text now, over AT-SPI, once the dialog has the focus again.
    async fn entry(&self) -> String {
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            let read = self.ui.read().await;
            if let Ok(read) = &read
                && let Some(line) = read.lines().find(|l| l.contains("] text \"\" = "))
            {
                let quoted = line.split_once(" = ").unwrap().1;
                let quoted = quoted.split_once(" (").map_or(quoted, |(q, _)| q);
                return serde_json::from_str(quoted).unwrap();
            }
            assert!(std::time::Instant::now() < deadline, "no entry: {read:?}");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Presses OK over AT-SPI: zenity's exit code and what it printed.
    async fn ok(&mut self) -> (i32, String) {
        let read = self.ui.read().await.unwrap();
        let line = read
            .lines()
            .find(|l| l.contains("push button \"OK\""))
            .unwrap();
        let act = UiAct {
            ui: self.ui.clone(),
        };
        let ctx = crate::suite::desktop_tools::direct_ctx(&Harness::new(vec![]).await);
        act.execute(json!({"id": &line[1..9], "action": "press"}), ctx)
            .await
            .unwrap();
        let out = self.zenity.take().unwrap().wait_with_output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }
}

impl Drop for Typing {
    fn drop(&mut self) {
        if let Some(k) = self.keyboard.take() {
            k.finish();
        }
    }
}

/// Tries to grant every request for the task (refused: it is always asked), then
/// approves it once; keeps what each request showed.
#[derive(Default)]
struct GrantThenApprove {
    shown: Mutex<Vec<(String, Option<String>)>>,
}

impl Frontend for GrantThenApprove {
    fn present(&self, request: &ApprovalRequest, broker: &ApprovalBroker) -> bool {
        let grant = broker.respond(
            &request.request_id,
            Answer::ApproveFor(std::time::Duration::from_secs(600)),
            "test",
        );
        assert!(
            matches!(grant, Err(RespondError::NotGrantable { .. })),
            "{grant:?}"
        );
        self.shown
            .lock()
            .unwrap()
            .push((request.summary.clone(), request.grant.label()));
        broker
            .respond(&request.request_id, Answer::Approve, "test")
            .unwrap();
        true
    }

    fn withdraw(&self, _request_id: &RequestId) {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_asks_every_call_and_the_entry_gets_exactly_the_text() {
    let Some(mut t) = session().await else {
        return;
    };
    let text = "Zoë Ångström ✓ 日本 \\ \"quoted\"";
    let h = Harness::builder(vec![
        tools_reply(&[("c1", "type_text", json!({"text": "wrong"}))]),
        tools_reply(&[("c2", "type_text", json!({"keys": ["ctrl+a", "BackSpace"]}))]),
        tools_reply(&[("c3", "type_text", json!({"text": text}))]),
        text_reply("typed"),
    ])
    .policy(OPEN_POLICY)
    .build()
    .await;
    let frontend = Arc::new(GrantThenApprove::default());
    h.approvals.add_frontend(frontend.clone());
    let tool = TypeText {
        locate: Arc::clone(&t.tool.locate),
        logind: t.tool.logind.clone(),
    };
    let rt = h.runtime(Registry::with(vec![Arc::new(tool)]));
    let soul = h.soul("tools = [\"type_text\"]\n");
    let (out, _) = h.run(rt, h.spec(soul, "type my name", None)).await;
    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);
    assert_eq!(t.entry().await, text);
    assert_eq!(t.ok().await, (0, format!("{text}\n")));

    // Every call was asked, though the policy allows system_critical tools and a
    // grant was tried: no grant is offered, and the approval names the window.
    let shown = frontend.shown.lock().unwrap().clone();
    assert_eq!(shown.len(), 3, "{shown:?}");
    assert!(shown.iter().all(|(_, grant)| grant.is_none()), "{shown:?}");
    assert!(
        shown[1].0.ends_with("\n  keys: ctrl+a, BackSpace"),
        "{}",
        shown[1].0
    );
    assert!(
        shown[2].0.starts_with("type_text into zenity \"")
            && shown[2]
                .0
                .ends_with(&format!("\n  text (28 characters): \"{text}\"")),
        "{}",
        shown[2].0
    );
    let done = tool_messages(&h.server, 3).last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(done.contains("\ntyped 28 characters into zenity"), "{done}");

    // The audit line says what was typed, where, and that it was approved.
    let audit = std::fs::read_to_string(h.config.paths.data_dir.join("audit.jsonl")).unwrap();
    let lines: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    let typed = &lines[2]["reason"].as_str().unwrap();
    assert_eq!(lines[2]["decision"], "approved");
    assert!(typed.contains("approval=approved"), "{typed}");
    assert!(
        typed.contains(&format!("text (28 characters): \"{text}\"")),
        "{typed}"
    );
    assert!(
        typed.contains("=> typed 28 characters into zenity"),
        "{typed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newline_is_shown_escaped_and_pressed_as_enter() {
    let Some(t) = session().await else {
        return;
    };
    let args = json!({"text": "line one\n"});
    let (summary, ctx) = t.ask(&args).await;
    assert!(
        summary.ends_with("\n  text (9 characters): \"line one\\n\""),
        "{summary}"
    );
    t.tool.execute(args, ctx).await.unwrap();
    // Enter is a key, not text: a one-line entry keeps the line.
    assert_eq!(t.entry().await, "line one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_typed_while_the_session_is_locked() {
    let Some(mut t) = session().await else {
        return;
    };
    t.logind.set_locked(true);
    let err = t.call(json!({"text": "secret"})).await;
    assert_eq!(
        err,
        Err(ToolError::RespondToModel(
            "refused: the screen is locked; nothing typed".to_owned()
        ))
    );
    assert_eq!(t.entry().await, "");
    t.logind.set_locked(false);
    t.call(json!({"text": "after"})).await.unwrap();
    assert_eq!(t.ok().await, (0, "after\n".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_typed_while_input_keeps_coming() {
    let Some(mut t) = session().await else {
        return;
    };
    let stop = Arc::new(AtomicBool::new(false));
    let moving = {
        let stop = Arc::clone(&stop);
        let env = t.sway.env();
        std::thread::spawn(move || {
            // The pointer moves, which is input on the seat but types nothing.
            while !stop.load(Ordering::SeqCst) {
                std::process::Command::new("swaymsg")
                    .args(["seat", "-", "cursor", "move", "1", "1"])
                    .env_clear()
                    .envs(env.iter().cloned())
                    .output()
                    .unwrap();
            }
        })
    };
    let err = t.call(json!({"text": "busy"})).await;
    stop.store(true, Ordering::SeqCst);
    moving.join().unwrap();
    let err = err.unwrap_err().to_string();
    assert!(
        err.starts_with("refused: the person at the desktop was typing or moving the pointer")
            && err.ends_with("; nothing typed"),
        "{err}"
    );
    assert_eq!(t.entry().await, "");
    t.call(json!({"text": "idle"})).await.unwrap();
    assert_eq!(t.ok().await, (0, "idle\n".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_typed_when_the_focus_moved_after_the_approval() {
    let Some(mut t) = session().await else {
        return;
    };
    let (first, _) = t.sway.wait_for_window("zenity");
    let args = json!({"text": "wrong window"});
    let (summary, ctx) = t.ask(&args).await;
    assert!(summary.starts_with("type_text into zenity"), "{summary}");
    // Another window takes the focus while the person reads the approval.
    let mut other = t
        .sway
        .spawn_gtk("zenity", &["--info", "--title=Other", "--text=other"]);
    t.sway
        .wait_until(|| {
            let tree = t.sway.tree().to_string();
            tree.contains("\"name\":\"Other\"").then_some(())
        })
        .expect("the second dialog");
    let err = t.tool.execute(args, ctx).await.unwrap_err().to_string();
    assert!(
        err.starts_with("refused: the focus moved from zenity \"")
            && err.contains("to zenity \"Other\"")
            && err.ends_with("; nothing typed"),
        "{err}"
    );
    other.kill().ok();
    other.wait().ok();
    t.sway.swaymsg(&[&format!("[con_id={first}]"), "focus"]);
    assert_eq!(t.entry().await, "");
    assert_eq!(t.ok().await, (0, "\n".to_owned()));
}
