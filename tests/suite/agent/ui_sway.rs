//! `ui_read` and `ui_act` against real GTK dialogs (`zenity`) on a real headless sway
//! with the session's accessibility bus: the read names the dialog's buttons and
//! entry under stable ids, `ui_act` sets the entry's text and presses OK (zenity
//! prints the text and exits 0), a model's `ui_read` then `ui_act press` answers a
//! question dialog (its exit code says which button), a password field is redacted,
//! and an id that no longer resolves is an error for the model.

use std::process::Child;
use std::sync::Arc;
use std::time::{Duration, Instant};

use familiar::compositor::{Compositor, Sway};
use familiar::tools::ui::atspi::A11ySource;
use familiar::tools::ui::{Ui, UiAct, UiRead};
use familiar::tools::{Registry, Tool, ToolError};
use familiar_protocol::task::TaskStatus;
use serde_json::json;

use super::screen_hosted::{Person, host_of};
use crate::common::harness::*;
use crate::common::skip;
use crate::common::sway::{Desktop, Options, PATIENCE};

/// A session with its accessibility bus, and the UI tools pointed at both.
fn session() -> Option<(Desktop, Ui)> {
    skip::program("zenity", "zenity")?;
    let mut sway = Desktop::start(&Options::default())?;
    let address = sway.start_a11y()?;
    let socket = sway.swaysock().to_owned();
    let ui = Ui {
        a11y: A11ySource::Address(address),
        locate: Arc::new(move || Some(Compositor::Sway(Sway::at(&socket)))),
    };
    Some((sway, ui))
}

/// Reads the focused window until it shows `what` (the dialog registered and took the
/// focus), at most [`PATIENCE`].
async fn read_until(ui: &Ui, what: &str) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let read = ui.read().await;
        if let Ok(text) = &read
            && text.contains(what)
        {
            return text.clone();
        }
        assert!(
            Instant::now() < deadline,
            "ui_read never showed {what}: {read:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The id on the line of `role "name"`.
fn id_of(read: &str, role_name: &str) -> String {
    let line = read
        .lines()
        .find(|l| l.contains(role_name))
        .unwrap_or_else(|| panic!("no {role_name} in {read}"));
    line[1..9].to_owned()
}

fn finish(child: Child) -> (i32, String) {
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_dialog_is_read_filled_and_confirmed() {
    let Some((sway, ui)) = session() else {
        return;
    };
    let zenity = sway.spawn_gtk("zenity", &["--entry", "--text=Your name?"]);
    let read = read_until(&ui, "push button \"OK\"").await;
    assert!(read.contains("push button \"Cancel\""), "{read}");
    assert!(read.contains("label \"Your name?\""), "{read}");
    let entry = id_of(&read, "text \"\"");
    let ok = id_of(&read, "push button \"OK\"");
    // The same window read again gives the same ids.
    assert_eq!(ui.read().await.unwrap(), read);

    let act = UiAct { ui: ui.clone() };
    let set = json!({"id": entry, "action": "set_text", "text": "Ada Lovelace"});
    let summary = act.describe(&set).unwrap().await.unwrap().summary;
    assert_eq!(
        summary,
        "set the text of text \"\" in zenity to \"Ada Lovelace\""
    );
    let ctx = crate::suite::desktop_tools::direct_ctx(&Harness::new(vec![]).await);
    act.execute(set, ctx.clone()).await.unwrap();
    let read = ui.read().await.unwrap();
    assert!(read.contains("= \"Ada Lovelace\""), "{read}");
    let pressed = act
        .execute(json!({"id": ok, "action": "press"}), ctx.clone())
        .await
        .unwrap();
    assert!(pressed.contains("push button \"OK\""), "{pressed}");
    assert_eq!(finish(zenity), (0, "Ada Lovelace\n".to_owned()));

    // The dialog is gone: its id resolves to nothing, and the model is told.
    let err = act
        .execute(json!({"id": ok, "action": "press"}), ctx)
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::RespondToModel(_)), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_reads_a_question_and_presses_yes() {
    let Some((sway, ui)) = session() else {
        return;
    };
    let zenity = sway.spawn_gtk("zenity", &["--question", "--text=Save changes?"]);
    let read = read_until(&ui, "push button \"Yes\"").await;
    // Ids are stable: the model's script can name the one the read will show.
    let yes = id_of(&read, "push button \"Yes\"");
    let h = Harness::builder(vec![
        tools_reply(&[("c1", "ui_read", json!({}))]),
        tools_reply(&[("c2", "ui_act", json!({"id": yes, "action": "press"}))]),
        text_reply("saved"),
    ])
    .policy(OPEN_POLICY)
    .build()
    .await;
    let rt = h.runtime(Registry::with(vec![
        Arc::new(UiRead { ui: ui.clone() }),
        Arc::new(UiAct { ui: ui.clone() }),
    ]));
    let soul = h.soul("tools = [\"ui_read\", \"ui_act\"]\n");
    let (out, _) = h
        .run(rt, h.spec(soul, "press Yes in that dialog", None))
        .await;
    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);
    let seen = tool_messages(&h.server, 1)[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        seen.contains("push button \"No\"") && seen.contains(&yes),
        "{seen}"
    );
    let acted = tool_messages(&h.server, 2)[1]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(acted.contains("push button \"Yes\" in zenity"), "{acted}");
    assert_eq!(finish(zenity).0, 0, "Yes exits 0");
}

/// A hosted model's `ui_read` (the soul's `screen = "hosted"`) is asked as one sentence
/// naming the app's window and the host, and the controls reach the model once approved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosted_models_read_is_asked_naming_the_window_and_the_host() {
    let Some((sway, ui)) = session() else {
        return;
    };
    let Some(h) = Harness::builder(vec![
        tools_reply(&[("c1", "ui_read", json!({}))]),
        text_reply("read"),
    ])
    .provider("api_key_env = \"HOME\"\n")
    .policy(OPEN_POLICY)
    .hosted()
    .await
    else {
        return;
    };
    let mut zenity = sway.spawn_gtk("zenity", &["--question", "--text=Send it?"]);
    read_until(&ui, "push button \"Yes\"").await;
    let person = Person::new(familiar::approval::Answer::Approve);
    h.approvals
        .add_frontend(Arc::clone(&person) as Arc<dyn familiar::approval::Frontend>);
    let rt = h.runtime(Registry::with(vec![Arc::new(UiRead { ui: ui.clone() })]));
    let soul = h.soul("tools = [\"ui_read\"]\nscreen = \"hosted\"\n");
    let (out, _) = h.run(rt, h.spec(soul, "what does it ask?", None)).await;
    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);
    let asked = person.asked();
    assert_eq!(asked.len(), 1, "{asked:?}");
    let host = host_of(&h);
    assert!(
        asked[0].starts_with("send the accessibility text of zenity's ")
            && asked[0].ends_with(&format!(" to {host}?")),
        "{}",
        asked[0]
    );
    let seen = tool_messages(&h.server, 1)[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(seen.contains("push button \"No\""), "{seen}");
    zenity.kill().ok();
    zenity.wait().ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_field_is_redacted() {
    let Some((sway, ui)) = session() else {
        return;
    };
    let mut zenity = sway.spawn_gtk("zenity", &["--password"]);
    let read = read_until(&ui, "password text").await;
    assert!(
        read.contains("= \"[redacted: a password field]\""),
        "{read}"
    );
    let field = id_of(&read, "password text");
    let err = UiAct { ui: ui.clone() }
        .execute(
            json!({"id": field, "action": "set_text", "text": "hunter2"}),
            crate::suite::desktop_tools::direct_ctx(&Harness::new(vec![]).await),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("takes no text"), "{err}");
    zenity.kill().ok();
    zenity.wait().ok();
}
