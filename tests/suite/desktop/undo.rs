//! The answer notification's Undo (issue 40) on mako: a task that overwrites a file
//! outside its workspace says so in its answer, with an Undo action; invoked, the
//! daemon puts the old bytes back and the bubble says so, in place of the answer.

use std::path::PathBuf;

use serde_json::json;

use super::{ask_notify, desktop, is_familiar, setup, text};
use crate::common::harness::{text_reply, tools_reply};
use crate::common::llm_server::LlmServer;
use crate::common::sway::{Desktop, Notification};

/// Writes in `~/docs` only, and is never asked.
const UNDOER: &str = "id = \"undoer\"\ndescription = \"d\"\nprompt = \"p\"\nmax_iterations = 5\ntools = [\"read_file\", \"write_file\"]\n[sandbox]\nread = [\"~\"]\nwrite = [\"~/docs\"]\n";
const ALLOW_WRITES: &str = "[tiers]\nread = \"allow\"\nwrite = \"allow\"\n";

/// A session whose task overwrites `~/docs/note.txt` ("old" → "new"), under a soul that
/// writes in `~/docs` only, never asked; the note's path.
async fn overwriting() -> Option<(LlmServer, Desktop, PathBuf)> {
    let server = LlmServer::start(vec![
        tools_reply(&[(
            "c1",
            "write_file",
            json!({"path": "~/docs/note.txt", "content": "new\n"}),
        )]),
        text_reply("rewrote your note"),
    ])
    .await;
    let desk = desktop(&server)?;
    assert_eq!(setup(&desk).status.code(), Some(0));
    desk.write(
        ".config/familiar/config.toml",
        &format!(
            "default_soul = \"undoer\"\npolicy = \"allowwrites\"\n[providers.local]\nbase_url = \"{}/v1\"\nmodel = \"m\"\nmax_retries = 0\n[notifications]\nresult_timeout = \"2m\"\n",
            server.base
        ),
    );
    desk.write(".config/familiar/souls/undoer.toml", UNDOER);
    desk.write(".config/familiar/policies/allowwrites.toml", ALLOW_WRITES);
    let note = desk.write("docs/note.txt", "old\n");
    Some((server, desk, note))
}

/// The answer of the task [`overwriting`] set up, with its line and its Undo.
fn answer(desk: &Desktop) -> Notification {
    let answer = desk.wait_notification(|n| is_familiar(n) && n.body.contains("rewrote"));
    assert_eq!(
        answer.body, "rewrote your note\nchanged 1 file",
        "{answer:?}"
    );
    assert_eq!(
        answer.actions.get("undo").map(String::as_str),
        Some("Undo"),
        "{answer:?}"
    );
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answers_undo_action_gives_the_old_bytes_back() {
    let Some((_server, desk, note)) = overwriting().await else {
        return;
    };
    let task = ask_notify(&desk, "rewrite my note");
    let answer = answer(&desk);
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "new\n");
    let tasks = text(&desk.run("familiar", &["tasks"]).stdout);
    assert!(
        tasks.contains("↶ changed 1 file outside its workspace — `familiar undo t-"),
        "{tasks}"
    );

    desk.invoke(answer.id, "undo");
    let undone = desk.wait_notification(|n| is_familiar(n) && n.body.starts_with("undone"));
    // The outcome replaced the answer: same bubble, no action left.
    assert_eq!(undone.id, answer.id, "{undone:?}");
    assert_eq!(undone.body, "undone: changed 1 file", "{undone:?}");
    assert!(undone.actions.is_empty(), "{undone:?}");
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "old\n");
    let out = task.wait_with_output().expect("familiar ask");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Undone once: nothing is left to undo.
    let tasks = text(&desk.run("familiar", &["tasks"]).stdout);
    assert!(!tasks.contains('↶'), "{tasks}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_undo_of_a_file_changed_since_is_refused_in_the_bubble_naming_it() {
    let Some((_server, desk, note)) = overwriting().await else {
        return;
    };
    let task = ask_notify(&desk, "rewrite my note");
    let answer = answer(&desk);
    std::fs::write(&note, "mine now\n").unwrap();
    desk.invoke(answer.id, "undo");
    let refused = desk.wait_notification(|n| is_familiar(n) && n.body.starts_with("not undone"));
    assert_eq!(refused.id, answer.id, "{refused:?}");
    assert!(
        refused.body.contains("note.txt") && refused.body.contains("changed since"),
        "{refused:?}"
    );
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "mine now\n");
    let out = task.wait_with_output().expect("familiar ask");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}
