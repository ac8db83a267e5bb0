//! Undo (issue 40): the brokered `trash` file operation puts a file where the
//! freedesktop Trash spec says, and only one the soul may write (the kernel refuses the
//! rest); through a real daemon on a private bus, with a scripted model, a task's
//! `write_file` over a file, `write_file` of a new one and `trash` are recorded, and
//! `familiar undo` (D-Bus `Undo`) gives the old bytes back, moves the new file to the
//! Trash and brings the trashed one back, audited; it refuses, naming the file, once
//! the file changed after the task.

use std::path::Path;

use familiar_sandbox::fileops::{FileOp, FileReply};
use tokio_util::sync::CancellationToken;

use crate::common::harness::{text_reply, tools_reply};

use super::daemon::error_name;
use crate::common::fixture::{Fixture, Watch};
use crate::common::llm_server::Reply;
use crate::common::sandbox::{SandboxHome, landlock_available, launcher};

#[tokio::test]
async fn trash_moves_a_writable_file_to_the_trash_spec_place_and_refuses_a_read_only_one() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let docs = h.home.join("Documents");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(docs.join("old report.txt"), "report\n").unwrap();
    let p = h.policy_with("read = [\"~\"]\nwrite = [\"~/Documents\"]");
    let trash = h.home.join(".local/share/Trash");
    let cancel = CancellationToken::new();
    let op = FileOp::Trash {
        path: docs.join("old report.txt"),
    };
    let (reply, _) = launcher()
        .file_op(&p.trashing(&trash).unwrap(), &op, &cancel)
        .await
        .unwrap();
    assert_eq!(
        reply,
        FileReply::Trashed {
            original: docs.join("old report.txt"),
            files: trash.join("files/old report.txt"),
            info: trash.join("info/old report.txt.trashinfo"),
        }
    );
    assert!(!docs.join("old report.txt").exists());
    assert_eq!(
        std::fs::read_to_string(trash.join("files/old report.txt")).unwrap(),
        "report\n"
    );
    let info = std::fs::read_to_string(trash.join("info/old report.txt.trashinfo")).unwrap();
    let mut lines = info.lines();
    assert_eq!(lines.next(), Some("[Trash Info]"));
    let encoded = format!("Path={}/old%20report.txt", docs.display());
    assert_eq!(lines.next(), Some(encoded.as_str()), "{info}");
    assert!(lines.next().unwrap().starts_with("DeletionDate="), "{info}");

    // Not writable for the soul: not trashable either, the kernel says so.
    let op = FileOp::Trash {
        path: h.home.join("notes.txt"),
    };
    let (reply, _) = launcher()
        .file_op(&p.trashing(&trash).unwrap(), &op, &cancel)
        .await
        .unwrap();
    assert!(
        matches!(
            reply,
            FileReply::Error {
                errno: Some(libc::EACCES),
                ..
            }
        ),
        "{reply:?}"
    );
    assert_eq!(
        std::fs::read_to_string(h.home.join("notes.txt")).unwrap(),
        "public notes\n"
    );
}

const UNDOER: &str = "id = \"undoer\"\ndescription = \"d\"\nprompt = \"p\"\nmax_iterations = 8\ntools = [\"write_file\", \"edit_file\", \"trash\", \"read_file\"]\n[sandbox]\nread = [\"~\"]\nwrite = [\"~/docs\"]\n";
const ALLOW_WRITES: &str = "[tiers]\nread = \"allow\"\nwrite = \"allow\"\n";

async fn undoer(script: Vec<Reply>) -> Fixture {
    Fixture::builder(script)
        .policy(ALLOW_WRITES)
        .soul("undoer", UNDOER)
        // The real one, not the daemon fixture's stand-in.
        .tools(vec![
            familiar::tools::Registry::builtin()
                .get("write_file")
                .cloned()
                .unwrap(),
        ])
        .start()
        .await
}

fn docs(f: &Fixture) -> std::path::PathBuf {
    let docs = f.harness.home.path().canonicalize().unwrap().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    docs
}

async fn run_task(f: &Fixture) -> String {
    let mut w = Watch::new(&f.proxy).await;
    let (task, _) = f.submit("undoer", "tidy my docs").await.unwrap();
    let (status, result) = w.finished(&task).await;
    assert_eq!(status, "completed", "{result}");
    task
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undo_gives_back_the_old_bytes_removes_what_was_made_and_brings_back_the_trashed() {
    if !landlock_available() {
        return;
    }
    let f = undoer(vec![
        tools_reply(&[(
            "c1",
            "write_file",
            serde_json::json!({"path": "~/docs/a.txt", "content": "new\n"}),
        )]),
        tools_reply(&[(
            "c2",
            "write_file",
            serde_json::json!({"path": "~/docs/made.txt", "content": "made\n"}),
        )]),
        tools_reply(&[("c3", "trash", serde_json::json!({"path": "~/docs/b.txt"}))]),
        text_reply("done"),
    ])
    .await;
    let docs = docs(&f);
    std::fs::write(docs.join("a.txt"), "old\n").unwrap();
    std::fs::write(docs.join("b.txt"), "bee\n").unwrap();
    let trash = familiar::store::home_trash(&f.harness.home.path().canonicalize().unwrap());
    let task = run_task(&f).await;
    assert_eq!(read(&docs.join("a.txt")), "new\n");
    assert_eq!(read(&docs.join("made.txt")), "made\n");
    assert!(!docs.join("b.txt").exists());
    assert_eq!(read(&trash.join("files/b.txt")), "bee\n");
    // What the answer notification, `tasks` and `bar` read.
    let shown = |json: String| {
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        (v["changes"].clone(), v["undoable"].clone())
    };
    assert_eq!(
        shown(f.proxy.get_task_json(&task).await.unwrap()),
        (
            serde_json::json!("created 1 file, changed 1, trashed 1"),
            serde_json::json!(true)
        )
    );

    let out = f
        .harness
        .home
        .familiar()
        .env("DBUS_SESSION_BUS_ADDRESS", &f.bus.address)
        .args(["undo", &task])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout,
        format!("task {task} undone: created 1 file, changed 1, trashed 1\n")
    );
    assert_eq!(read(&docs.join("a.txt")), "old\n");
    assert!(!docs.join("made.txt").exists());
    assert_eq!(read(&trash.join("files/made.txt")), "made\n");
    assert!(read(&trash.join("info/made.txt.trashinfo")).contains("Path="));
    assert_eq!(read(&docs.join("b.txt")), "bee\n");
    assert!(!trash.join("info/b.txt.trashinfo").exists());

    // Once only; and the restore is in the audit log as the person's action.
    assert_eq!(
        error_name(f.proxy.undo(&task).await),
        "dev.familiar.Agent1.Error.NothingToUndo"
    );
    assert_eq!(
        shown(f.proxy.get_task_json(&task).await.unwrap()).1,
        serde_json::json!(false)
    );
    let audit = read(&f.harness.store.audit_path());
    let line = audit
        .lines()
        .find(|l| l.contains("\"tool\":\"undo\""))
        .unwrap();
    assert!(line.contains("\"outcome\":\"succeeded\""), "{line}");
    assert!(line.contains(&task), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undo_refuses_a_file_changed_since_the_task_and_names_it() {
    if !landlock_available() {
        return;
    }
    let f = undoer(vec![
        tools_reply(&[(
            "c1",
            "edit_file",
            serde_json::json!({"path": "~/docs/a.txt", "old": "old", "new": "new"}),
        )]),
        text_reply("done"),
    ])
    .await;
    let docs = docs(&f);
    std::fs::write(docs.join("a.txt"), "old\n").unwrap();
    let task = run_task(&f).await;
    assert_eq!(read(&docs.join("a.txt")), "new\n");
    std::fs::write(docs.join("a.txt"), "mine now\n").unwrap();
    let refused = f.proxy.undo(&task).await;
    let message = format!("{refused:?}");
    assert_eq!(error_name(refused), "dev.familiar.Agent1.Error.UndoRefused");
    assert!(
        message.contains(&docs.join("a.txt").display().to_string())
            && message.contains("changed since the task touched it"),
        "{message}"
    );
    assert_eq!(read(&docs.join("a.txt")), "mine now\n");
    assert_eq!(
        error_name(f.proxy.undo("t-nosuchtask").await),
        "dev.familiar.Agent1.Error.UnknownTask"
    );
}
