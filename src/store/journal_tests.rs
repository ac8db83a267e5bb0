use std::fs;

use super::*;
use crate::ids::{SessionId, SoulId, TaskId};
use crate::llm::{ContentBlock, Message};
use crate::store::context::TaskStatus;

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    (dir, store)
}

fn session() -> Context {
    let mut ctx = Context::new(
        SessionId::new("s-journal").unwrap(),
        SoulId::new("safe_assistant").unwrap(),
        "first",
    );
    ctx.history.push(Message::user_text("first"));
    ctx
}

fn task(id: &str) -> TaskRecord {
    TaskRecord {
        task_id: TaskId::new(id).unwrap(),
        prompt: "p".into(),
        status: TaskStatus::Running,
        origin: "cli".into(),
        workspace: None,
        started_at: crate::store::now_rfc3339(),
        finished_at: None,
        plan: Default::default(),
        usage: Default::default(),
        result: None,
    }
}

/// A turn: an assistant message and a result, and the task's record changed.
fn turn(ctx: &mut Context, n: usize) {
    ctx.history
        .push(Message::assistant_text(format!("answer {n}")));
    ctx.history.push(Message::user_text(format!("result {n}")));
    if let Some(t) = ctx.tasks.last_mut() {
        t.usage.output_tokens += 10;
    }
    ctx.touch();
}

fn loaded(store: &Store, ctx: &Context) -> Context {
    store.load_context(&ctx.session_id).unwrap().unwrap()
}

fn journal_lines(store: &Store, ctx: &Context) -> usize {
    fs::read_to_string(store.journal_path(&ctx.session_id)).map_or(0, |s| s.lines().count())
}

#[test]
fn each_persist_is_one_line_and_a_load_sees_all_of_them() {
    let (_dir, store) = store();
    let mut ctx = session();
    ctx.tasks.push(task("t-1"));
    let mut journal = store.start_journal(&mut ctx).unwrap();
    let base = fs::read(store.context_path(&ctx.session_id)).unwrap();
    for n in 0..5 {
        turn(&mut ctx, n);
        journal.persist(&store, &mut ctx).unwrap();
        assert_eq!(loaded(&store, &ctx), ctx, "after turn {n}");
    }
    assert_eq!(journal_lines(&store, &ctx), 5);
    // The base was not rewritten: the turns are in the journal only.
    assert_eq!(fs::read(store.context_path(&ctx.session_id)).unwrap(), base);
}

#[test]
fn a_line_holds_only_what_changed() {
    let (_dir, store) = store();
    let mut ctx = session();
    for n in 0..50 {
        turn(&mut ctx, n);
    }
    let mut journal = store.start_journal(&mut ctx).unwrap();
    turn(&mut ctx, 50);
    journal.persist(&store, &mut ctx).unwrap();
    let text = fs::read_to_string(store.journal_path(&ctx.session_id)).unwrap();
    let line: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
    assert_eq!(line["history_keep"], 101);
    assert_eq!(line["history"].as_array().unwrap().len(), 2);
    assert_eq!(line["ctx"]["history"], serde_json::json!([]));
    assert!(!text.contains("answer 49"), "old messages are not repeated");
}

#[test]
fn messages_changed_in_place_and_a_shorter_history_are_replayed() {
    let (_dir, store) = store();
    let mut ctx = session();
    for n in 0..6 {
        turn(&mut ctx, n);
    }
    let mut journal = store.start_journal(&mut ctx).unwrap();
    // Micro-compaction clears an old result in place.
    ctx.history[2].content = vec![ContentBlock::Text {
        text: "[cleared]".into(),
    }];
    turn(&mut ctx, 6);
    journal.persist(&store, &mut ctx).unwrap();
    assert_eq!(loaded(&store, &ctx), ctx);
    // Full compaction: a summary and a short history.
    ctx.history.drain(..10);
    ctx.summary = Some("the gist".into());
    ctx.facts.push("a fact".into());
    journal.persist(&store, &mut ctx).unwrap();
    assert_eq!(loaded(&store, &ctx), ctx);
}

#[test]
fn a_journal_past_its_base_size_becomes_a_new_base() {
    let (_dir, store) = store();
    let mut ctx = session();
    let mut journal = store.start_journal(&mut ctx).unwrap();
    let revision = ctx.revision;
    let big = "x".repeat(8 * 1024);
    for n in 0..20 {
        ctx.history
            .push(Message::assistant_text(format!("{n} {big}")));
        journal.persist(&store, &mut ctx).unwrap();
        assert!(
            fs::metadata(store.journal_path(&ctx.session_id)).map_or(0, |m| m.len())
                <= MIN_JOURNAL_BYTES.max(
                    fs::metadata(store.context_path(&ctx.session_id))
                        .unwrap()
                        .len()
                )
        );
    }
    assert!(ctx.revision > revision, "a new base was written");
    assert_eq!(loaded(&store, &ctx), ctx);
}

#[test]
fn a_journal_left_by_a_crash_after_a_new_base_is_ignored() {
    let (_dir, store) = store();
    let mut ctx = session();
    let mut journal = store.start_journal(&mut ctx).unwrap();
    turn(&mut ctx, 0);
    journal.persist(&store, &mut ctx).unwrap();
    let path = store.journal_path(&ctx.session_id);
    let stale = fs::read(&path).unwrap();
    // The new base holds everything; the crash came before the journal was deleted.
    turn(&mut ctx, 1);
    store.save_context(&mut ctx).unwrap();
    fs::write(&path, stale).unwrap();
    assert_eq!(
        loaded(&store, &ctx),
        ctx,
        "the old lines are not applied twice"
    );
}

#[test]
fn a_torn_last_line_is_dropped_and_a_bad_line_stops_the_replay() {
    let (_dir, store) = store();
    let mut ctx = session();
    let mut journal = store.start_journal(&mut ctx).unwrap();
    turn(&mut ctx, 0);
    journal.persist(&store, &mut ctx).unwrap();
    let saved = ctx.clone();
    let path = store.journal_path(&ctx.session_id);
    let whole = fs::read(&path).unwrap();

    let mut torn = whole.clone();
    torn.extend_from_slice(br#"{"revision":1,"history_keep":0,"hist"#);
    fs::write(&path, &torn).unwrap();
    assert_eq!(loaded(&store, &saved), saved);

    let mut bad = whole.clone();
    bad.extend_from_slice(b"not json\n");
    bad.extend_from_slice(&whole);
    fs::write(&path, &bad).unwrap();
    assert_eq!(loaded(&store, &saved), saved, "nothing after the bad line");

    // A line whose `keep` is past the history it extends does not fit.
    let mut misfit = whole.clone();
    let text = String::from_utf8(whole).unwrap();
    let wrong = text.replacen("\"history_keep\":1", "\"history_keep\":99", 1);
    misfit.extend_from_slice(wrong.as_bytes());
    fs::write(&path, &misfit).unwrap();
    assert_eq!(loaded(&store, &saved), saved);
}

#[test]
fn removing_a_session_removes_its_journal() {
    let (_dir, store) = store();
    let mut ctx = session();
    let mut journal = store.start_journal(&mut ctx).unwrap();
    turn(&mut ctx, 0);
    journal.persist(&store, &mut ctx).unwrap();
    drop(journal);
    assert!(store.remove_session(&ctx.session_id).unwrap());
    assert!(!store.journal_path(&ctx.session_id).exists());
}

#[test]
fn a_whole_save_deletes_the_journal() {
    let (_dir, store) = store();
    let mut ctx = session();
    let mut journal = store.start_journal(&mut ctx).unwrap();
    turn(&mut ctx, 0);
    journal.persist(&store, &mut ctx).unwrap();
    turn(&mut ctx, 1);
    journal.persist(&store, &mut ctx).unwrap();
    store.save_context(&mut ctx).unwrap();
    assert!(!store.journal_path(&ctx.session_id).exists());
    assert_eq!(loaded(&store, &ctx), ctx);
    // A later line after a whole save starts a fresh journal on the new base.
    let mut journal = store.start_journal(&mut ctx).unwrap();
    turn(&mut ctx, 2);
    journal.persist(&store, &mut ctx).unwrap();
    assert_eq!(journal_lines(&store, &ctx), 1);
    assert_eq!(loaded(&store, &ctx), ctx);
}
