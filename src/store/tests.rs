use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::catalog::Tier;
use crate::ids::{CallId, TaskId};
use crate::llm::{ContentBlock, Message, Role, Usage};

fn sid(s: &str) -> SessionId {
    SessionId::new(s).unwrap()
}

fn sample(id: &str) -> Context {
    let mut ctx = Context::new(
        sid(id),
        SoulId::new("system_admin").unwrap(),
        "why is the disk full?\nthanks",
    );
    ctx.summary = Some("earlier: looked at /var".into());
    ctx.facts = vec!["/home is on nvme0n1p2".into()];
    ctx.history = vec![
        Message::user_text("why is the disk full?"),
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "check df".into(),
                    signature: Some("sig".into()),
                },
                ContentBlock::ToolUse {
                    id: CallId::from_provider("c1"),
                    name: "disk_usage".into(),
                    input: json!({"path": "/"}),
                },
            ],
        },
        Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: CallId::from_provider("c1"),
                content: "/ 93% used".into(),
                is_error: false,
            }],
        },
    ];
    ctx.tasks.push(TaskRecord {
        task_id: TaskId::new("t-1").unwrap(),
        prompt: "why is the disk full?".into(),
        status: TaskStatus::Completed,
        origin: "cli".into(),
        workspace: Some("/tmp/w".into()),
        started_at: now_rfc3339(),
        finished_at: Some(now_rfc3339()),
        plan: Plan {
            goal: "find the big files".into(),
            steps: vec![PlanStep {
                description: "run df".into(),
                status: StepStatus::Completed,
                output: Some("93%".into()),
            }],
        },
        usage: Usage {
            input_tokens: 10,
            output_tokens: 5,
            ..Usage::default()
        },
        result: Some("journal logs".into()),
    });
    ctx.record_tool_call("disk_usage", false, 12);
    ctx.usage = Usage {
        input_tokens: 10,
        output_tokens: 5,
        ..Usage::default()
    };
    ctx
}

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("data")).unwrap();
    (dir, store)
}

#[test]
fn open_creates_the_layout_private() {
    let (_dir, store) = store();
    for sub in ["context", "transcripts", "workspaces"] {
        assert!(store.data_dir().join(sub).is_dir(), "{sub}");
    }
    let mode = fs::metadata(store.data_dir()).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
}

#[test]
fn context_round_trips() {
    let (_dir, store) = store();
    let mut ctx = sample("s1");
    store.save_context(&mut ctx).unwrap();
    assert_eq!(store.load_context(&sid("s1")).unwrap(), Some(ctx.clone()));
    // Saving again replaces, and leaves no temp file behind.
    let mut ctx2 = ctx;
    ctx2.facts.push("second".into());
    store.save_context(&mut ctx2).unwrap();
    assert_eq!(store.load_context(&sid("s1")).unwrap(), Some(ctx2));
    let names: Vec<_> = fs::read_dir(store.data_dir().join("context"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["s1.json"]);
}

#[test]
fn context_has_the_documented_keys() {
    let v = serde_json::to_value(sample("s1")).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    let mut want = [
        "version",
        "revision",
        "session_id",
        "soul",
        "created_at",
        "updated_at",
        "title",
        "summary",
        "facts",
        "history",
        "tasks",
        "tool_stats",
        "usage",
    ];
    want.sort_unstable();
    let mut keys = keys;
    keys.sort_unstable();
    assert_eq!(keys, want);
    assert_eq!(v["title"], "why is the disk full?");
    assert_eq!(v["tasks"][0]["status"], "completed");
    assert_eq!(v["tasks"][0]["plan"]["steps"][0]["status"], "completed");
    assert_eq!(
        v["tool_stats"]["disk_usage"],
        json!({"calls": 1, "failures": 0, "total_ms": 12})
    );
}

#[test]
fn missing_context_is_none() {
    let (_dir, store) = store();
    assert_eq!(store.load_context(&sid("nope")).unwrap(), None);
}

#[test]
fn crash_between_write_and_rename_keeps_the_old_file() {
    let (_dir, store) = store();
    let mut old = sample("s1");
    store.save_context(&mut old).unwrap();
    let mut new = old.clone();
    new.facts.push("never committed".into());
    // The process "dies" after the temp file is written and synced, before the rename.
    let temp = store.write_temp(&new).unwrap();
    assert!(temp.exists());
    assert_eq!(store.load_context(&sid("s1")).unwrap(), Some(old.clone()));
    // Also a half-written temp file (crash mid-write) changes nothing.
    fs::write(
        store.data_dir().join("context/.s1.json.tmp-999999999-0"),
        b"{\"version\":1,\"sess",
    )
    .unwrap();
    assert_eq!(store.load_context(&sid("s1")).unwrap(), Some(old.clone()));
    assert_eq!(store.list_sessions().unwrap().len(), 1);
}

#[test]
fn a_failed_or_uncommitted_write_leaves_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let failed =
        super::atomic::write_temp(dir.path(), "s1", |_| Err(StoreError::UnsupportedVersion(0)));
    assert!(failed.is_err());
    let uncommitted = super::atomic::write_temp(dir.path(), "s1", |_| Ok(())).unwrap();
    let name = uncommitted
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        super::temp_file_pid(&name),
        Some(std::process::id()),
        "{name}"
    );
    drop(uncommitted);
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn open_removes_temp_files_of_dead_writers_only() {
    let (_dir, store) = store();
    let ctx_dir = store.data_dir().join("context");
    // pid_max is at most 2^22, so this writer is certainly dead.
    let dead = ctx_dir.join(".s1.json.tmp-99999999-0");
    let live = ctx_dir.join(format!(".s1.json.tmp-{}-7", std::process::id()));
    fs::write(&dead, b"{").unwrap();
    fs::write(&live, b"{").unwrap();
    let _reopened = Store::open(store.data_dir()).unwrap();
    assert!(!dead.exists());
    assert!(live.exists());
}

fn assert_moved_aside(store: &Store, id: &str, contents: &[u8], reason_has: &str) {
    let path = store.context_path(&sid(id));
    fs::write(&path, contents).unwrap();
    let err = store.load_context(&sid(id)).unwrap_err();
    let StoreError::Corrupt {
        path: p,
        moved_to,
        reason,
    } = err
    else {
        panic!("not Corrupt: {err}");
    };
    assert_eq!(p, path);
    assert!(reason.contains(reason_has), "{reason}");
    assert!(!path.exists());
    assert_eq!(fs::read(&moved_to).unwrap(), contents);
    let name = moved_to.file_name().unwrap().to_str().unwrap();
    assert!(name.starts_with(&format!("{id}.json.corrupt-")), "{name}");
    // Now absent: a new session can start, and saving it does not touch the copy.
    assert_eq!(store.load_context(&sid(id)).unwrap(), None);
    store.save_context(&mut sample(id)).unwrap();
    assert_eq!(fs::read(&moved_to).unwrap(), contents);
}

#[test]
fn corrupt_context_is_moved_aside_not_overwritten() {
    let (_dir, store) = store();
    assert_moved_aside(
        &store,
        "s1",
        b"{\"version\":1,\"session_id\":",
        "invalid JSON",
    );
}

#[test]
fn unknown_version_is_moved_aside_not_overwritten() {
    let (_dir, store) = store();
    let mut v = serde_json::to_value(sample("s2")).unwrap();
    v["version"] = json!(2);
    assert_moved_aside(&store, "s2", v.to_string().as_bytes(), "version 2");
    // A future schema that does not even parse as ours still names its version.
    assert_moved_aside(
        &store,
        "s3",
        br#"{"version":3,"history":"elsewhere"}"#,
        "version 3",
    );
}

#[test]
fn a_second_corrupt_copy_does_not_replace_the_first() {
    let (_dir, store) = store();
    let path = store.context_path(&sid("s1"));
    fs::write(&path, b"first").unwrap();
    let Err(StoreError::Corrupt { moved_to: a, .. }) = store.load_context(&sid("s1")) else {
        panic!()
    };
    fs::write(&path, b"second").unwrap();
    let Err(StoreError::Corrupt { moved_to: b, .. }) = store.load_context(&sid("s1")) else {
        panic!()
    };
    assert_ne!(a, b);
    assert_eq!(fs::read(a).unwrap(), b"first");
    assert_eq!(fs::read(b).unwrap(), b"second");
}

#[test]
fn saving_another_version_is_refused() {
    let (_dir, store) = store();
    let mut ctx = sample("s1");
    ctx.version = 2;
    assert!(matches!(
        store.save_context(&mut ctx),
        Err(StoreError::UnsupportedVersion(2))
    ));
}

#[test]
fn sessions_are_listed_newest_first_skipping_corrupt_ones() {
    let (_dir, store) = store();
    let mut a = sample("a");
    a.updated_at = "2026-01-01T00:00:00Z".into();
    let mut b = sample("b");
    b.updated_at = "2026-06-01T00:00:00.500Z".into();
    store.save_context(&mut a).unwrap();
    store.save_context(&mut b).unwrap();
    fs::write(store.context_path(&sid("c")), b"garbage").unwrap();
    let list = store.list_sessions().unwrap();
    assert_eq!(
        list,
        [
            SessionSummary {
                id: sid("b"),
                soul: b.soul.clone(),
                title: b.title.clone(),
                updated_at: 1_780_272_000,
                created_at: b.created_at.clone(),
                tasks: 1,
            },
            SessionSummary {
                id: sid("a"),
                soul: a.soul.clone(),
                title: a.title.clone(),
                updated_at: 1_767_225_600,
                created_at: a.created_at.clone(),
                tasks: 1,
            },
        ]
    );
    // Listing never moves a file.
    assert!(store.context_path(&sid("c")).exists());
}

/// Regression (issue 26): sessions that ended in the same second were ordered by id,
/// so `run -c` could continue an older one.
#[test]
fn sessions_ending_in_the_same_second_are_ordered_by_their_milliseconds() {
    let (_dir, store) = store();
    let mut later = sample("b-later");
    later.updated_at = "2026-06-01T00:00:00.900Z".into();
    let mut earlier = sample("a-earlier");
    earlier.updated_at = "2026-06-01T00:00:00.100Z".into();
    store.save_context(&mut later).unwrap();
    store.save_context(&mut earlier).unwrap();
    let ids: Vec<String> = store
        .list_sessions()
        .unwrap()
        .into_iter()
        .map(|s| s.id.to_string())
        .collect();
    assert_eq!(ids, ["b-later", "a-earlier"]);
}

#[test]
fn lock_is_exclusive_and_released_on_drop() {
    let (_dir, store) = store();
    let lock = store.lock_session(&sid("s1")).unwrap();
    assert_eq!(lock.session_id(), &sid("s1"));
    assert!(matches!(
        store.lock_session(&sid("s1")),
        Err(StoreError::SessionBusy(id)) if id == sid("s1")
    ));
    let _other = store.lock_session(&sid("s2")).unwrap();
    drop(lock);
    let _again = store.lock_session(&sid("s1")).unwrap();
}

// Issue 26: lock files were never removed (82 left after `sessions prune`).
#[test]
fn removing_a_session_removes_its_lock_file_and_a_stale_opener_relocks() {
    let (dir, store) = store();
    let lock_path = dir.path().join("data/context/s1.lock");
    drop(store.lock_session(&sid("s1")).unwrap());
    // A taker that opened the lock file before the removal unlinked it.
    let stale = std::fs::File::open(&lock_path).unwrap();
    assert!(store.remove_session(&sid("s1")).is_ok());
    assert!(!lock_path.exists(), "the lock file outlived its session");
    stale.try_lock().unwrap();
    // The unlinked file's lock is not the session's: the name is locked afresh.
    let lock = store.lock_session(&sid("s1")).unwrap();
    assert!(matches!(
        store.lock_session(&sid("s1")),
        Err(StoreError::SessionBusy(_))
    ));
    drop(lock);
}

#[test]
fn orphan_lock_files_go_and_held_ones_stay() {
    let (dir, store) = store();
    std::fs::write(dir.path().join("data/context/s-orphan.lock"), "").unwrap();
    let _held = store.lock_session(&sid("s-running")).unwrap();
    assert_eq!(store.remove_orphan_locks().unwrap(), 1);
    assert!(!dir.path().join("data/context/s-orphan.lock").exists());
    assert!(dir.path().join("data/context/s-running.lock").exists());
}

#[test]
fn workspace_is_created_on_demand() {
    let (_dir, store) = store();
    let path = store.workspace_dir(&sid("s1"));
    assert!(!path.exists());
    assert_eq!(store.ensure_workspace(&sid("s1")).unwrap(), path);
    assert!(path.is_dir());
}

#[test]
fn transcript_appends_with_timestamps() {
    let (_dir, store) = store();
    let mut t = store.transcript(&sid("s1")).unwrap();
    t.append(&json!({"kind": "message", "role": "user", "text": "hi"}))
        .unwrap();
    t.append(&json!({})).unwrap();
    t.append(&json!({"ts": "2026-01-01T00:00:00Z", "kind": "task_finished"}))
        .unwrap();
    t.sync().unwrap();
    assert!(matches!(
        t.append(&json!("not an object")),
        Err(StoreError::NotAnObject)
    ));
    drop(t);
    // Reopening appends; nothing is rewritten.
    let mut t = store.transcript(&sid("s1")).unwrap();
    t.append(&json!({"kind": "x"})).unwrap();
    let entries = store.read_transcript(&sid("s1")).unwrap();
    assert_eq!(entries.len(), 4);
    assert_eq!(entries[0]["kind"], "message");
    assert!(entries[0]["ts"].as_str().unwrap().ends_with('Z'));
    assert!(entries[1]["ts"].is_string());
    assert_eq!(entries[2]["ts"], "2026-01-01T00:00:00Z");
    assert_eq!(
        store.read_transcript(&sid("none")).unwrap(),
        Vec::<serde_json::Value>::new()
    );
}

#[test]
fn torn_transcript_last_line_is_tolerated_and_reported() {
    let (_dir, store) = store();
    let mut t = store.transcript(&sid("s1")).unwrap();
    t.append(&json!({"kind": "a"})).unwrap();
    drop(t);
    // A crash mid-append: half a line, no newline.
    let path = store.transcript_path(&sid("s1"));
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    std::io::Write::write_all(&mut f, b"{\"ts\":\"2026").unwrap();
    let c = store.read_transcript_contents(&sid("s1")).unwrap();
    assert_eq!(c.entries.len(), 1);
    assert_eq!(c.torn_lines, [2]);
    // The next writer starts a new line, so its entry survives.
    let mut t = store.transcript(&sid("s1")).unwrap();
    t.append(&json!({"kind": "b"})).unwrap();
    let c = store.read_transcript_contents(&sid("s1")).unwrap();
    let kinds: Vec<_> = c.entries.iter().map(|e| e["kind"].clone()).collect();
    assert_eq!(kinds, [json!("a"), json!("b")]);
    assert_eq!(c.torn_lines, [2]);
}

/// See: issue 13 — after a crash (or a full disk) mid-append, the next audit line was
/// glued onto the torn one and both were lost to a reader.
#[test]
fn a_torn_audit_line_is_skipped_and_the_next_entry_survives() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path()).unwrap();
        store.audit(&audit_entry(1, 0)).unwrap();
    }
    let path = dir.path().join("audit.jsonl");
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    std::io::Write::write_all(&mut f, b"{\"time\":\"2026").unwrap();
    let store = Store::open(dir.path()).unwrap();
    store.audit(&audit_entry(2, 0)).unwrap();
    let c = store.read_audit().unwrap();
    let reasons: Vec<_> = c
        .entries
        .iter()
        .map(|e| e.reason.clone().unwrap())
        .collect();
    assert_eq!(reasons, ["1:", "2:"]);
    assert_eq!(c.torn_lines, [2]);
}

fn audit_entry(n: usize, padding: usize) -> AuditEntry {
    AuditEntry {
        time: now_rfc3339(),
        task_id: Some(TaskId::generate()),
        session_id: Some(sid("s1")),
        soul: SoulId::new("system_admin").unwrap(),
        tool: "shell".into(),
        tier: Tier::Execute,
        args_digest: args_digest(&json!({"command": "ls"})),
        decision: AuditDecision::Denied,
        reason: Some(format!("{n}:{}", "x".repeat(padding))),
        outcome: AuditOutcome::NotRun,
    }
}

#[test]
fn audit_entries_are_one_json_line_without_raw_args() {
    let (_dir, store) = store();
    let e = audit_entry(1, 0);
    store.audit(&e).unwrap();
    let text = fs::read_to_string(store.audit_path()).unwrap();
    assert!(!text.contains("ls\""), "raw args leaked: {text}");
    let back: AuditEntry = serde_json::from_str(text.trim_end()).unwrap();
    assert_eq!(back, e);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["decision"], "denied");
    assert_eq!(v["tier"], "execute");
}

#[test]
fn concurrent_audit_appends_never_interleave() {
    let (_dir, store) = store();
    let store = Arc::new(store);
    const THREADS: usize = 8;
    const PER_THREAD: usize = 200;
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                for i in 0..PER_THREAD {
                    // Lines bigger than a page, so a split write would show.
                    store.audit(&audit_entry(t * PER_THREAD + i, 6000)).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let text = fs::read_to_string(store.audit_path()).unwrap();
    let mut seen = BTreeMap::new();
    for line in text.lines() {
        let e: AuditEntry = serde_json::from_str(line).unwrap();
        let n: usize = e
            .reason
            .unwrap()
            .split(':')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        *seen.entry(n).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), THREADS * PER_THREAD);
    assert!(seen.values().all(|&c| c == 1));
}
