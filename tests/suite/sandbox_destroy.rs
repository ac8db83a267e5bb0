//! Nothing permanent (issue 40): outside the task's workspace the kernel withholds
//! removing and truncating (Landlock's `REMOVE_FILE`, `REMOVE_DIR`, `TRUNCATE`), so
//! `rm`, `rm -rf`, `find -delete`, `unlink`, `> file`, `truncate` and a rename away fail
//! with EACCES whatever the command looks like; inside the workspace they work, and a
//! soul's `[sandbox] destroy` trees are its own to delete in. The brokered `write_file`
//! and `edit_file` still replace a file outside the workspace; a command never gets
//! their rights.

use std::path::{Path, PathBuf};

use familiar::sandbox::SandboxError;
use familiar_sandbox::fileops::{FileOp, FileReply};
use tokio_util::sync::CancellationToken;

use crate::common::sandbox::{
    SandboxHome, assert_permission_denied, landlock_available, launcher, sh,
};

/// Each destructive command, run on `dir` (which holds `f`, `g` and `sub/h`).
const DESTRUCTIVE: &[&str] = &[
    "rm -f '{d}/f'",
    "rm -rf '{d}/sub'",
    "find '{d}' -name h -delete",
    "unlink '{d}/g'",
    "echo gone > '{d}/f'",
    ": > '{d}/g'",
    "truncate -s 0 '{d}/f'",
    "mv '{d}/f' '{d}/moved'",
    "sed -i s/keep/gone/ '{d}/g'",
    "cp '{d}/sub/h' '{d}/f'",
];

fn fill(dir: &Path) {
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    for f in ["f", "g", "sub/h"] {
        std::fs::write(dir.join(f), "keep\n").unwrap();
    }
}

fn intact(dir: &Path) -> bool {
    ["f", "g", "sub/h"]
        .iter()
        .all(|f| std::fs::read_to_string(dir.join(f)).is_ok_and(|c| c == "keep\n"))
}

fn sandbox_of(id: &str) -> String {
    let (_, src) = familiar::soul::BUILTIN_SOULS
        .iter()
        .find(|(i, _)| *i == id)
        .unwrap();
    let table = src.split("\n[sandbox]\n").nth(1).unwrap();
    table.split("\n[").next().unwrap_or(table).to_owned()
}

#[tokio::test]
async fn destruction_outside_the_workspace_is_refused_by_the_kernel_under_every_shipped_soul() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let docs = h.home.join("Documents");
    for (id, _) in familiar::soul::BUILTIN_SOULS {
        // Each shipped soul's own trees, and the home's documents made writable too:
        // writing is not destroying.
        let sandbox = format!(
            "{}\nwrite = [\"~/Documents\"]",
            sandbox_of(id)
                .lines()
                .filter(|l| !l.starts_with("write"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        for cmd in DESTRUCTIVE {
            fill(&docs);
            let p = h.policy_with(&sandbox);
            let out = sh(&p, &cmd.replace("{d}", &docs.display().to_string())).await;
            assert_permission_denied(&out, &format!("{id}: {cmd}"));
            assert!(intact(&docs), "{id}: {cmd} destroyed something: {out:?}");

            let ws = h.workspace.join("scratch");
            fill(&ws);
            let out = sh(&p, &cmd.replace("{d}", &ws.display().to_string())).await;
            assert_eq!(
                out.exit_code,
                Some(0),
                "{id}: {cmd} in the workspace: {out:?}"
            );
        }
    }
    // Writing is still writing: a new file, an append.
    let p = h.policy_with("read = [\"~\"]\nwrite = [\"~/Documents\"]");
    let d = docs.display();
    let out = sh(&p, &format!("echo new > '{d}/new' && echo more >> '{d}/g'")).await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
}

#[tokio::test]
async fn a_soul_names_the_trees_it_may_delete_in() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let cache = h.home.join("Documents/cache");
    let kept = h.home.join("Documents/kept");
    fill(&cache);
    fill(&kept);
    let p = h.policy_with(
        "read = [\"~\"]\nwrite = [\"~/Documents\"]\ndestroy = [\"~/Documents/cache\"]",
    );
    let out = sh(&p, &format!("rm -rf '{}'/*", cache.display())).await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert!(std::fs::read_dir(&cache).unwrap().next().is_none());
    let out = sh(&p, &format!("rm -rf '{}'/*", kept.display())).await;
    assert_permission_denied(&out, "a tree not named in destroy");
    assert!(intact(&kept));
}

#[tokio::test]
async fn write_file_and_edit_file_replace_a_file_outside_the_workspace_a_command_cannot() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let docs = h.home.join("Documents");
    fill(&docs);
    let p = h.policy_with("read = [\"~\"]\nwrite = [\"~/Documents\"]");
    let cancel = CancellationToken::new();
    let f: PathBuf = docs.join("f");
    let (reply, _) = launcher()
        .file_op(
            &p,
            &FileOp::Write {
                path: f.clone(),
                content: "new\n".into(),
                keep: None,
            },
            &cancel,
        )
        .await
        .unwrap();
    assert_eq!(reply, FileReply::Written { bytes: 4 });
    let (reply, _) = launcher()
        .file_op(
            &p,
            &FileOp::Edit {
                path: f.clone(),
                old: "new".into(),
                new: "edited".into(),
                keep: None,
            },
            &cancel,
        )
        .await
        .unwrap();
    assert!(!matches!(reply, FileReply::Error { .. }), "{reply:?}");
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "edited\n");

    // The rights of a brokered operation are never a command's.
    let argv = ["rm", "-f", &f.display().to_string()].map(str::to_owned);
    let err = launcher()
        .run(&p.brokered(), &argv, None, &cancel)
        .await
        .unwrap_err();
    assert!(matches!(err, SandboxError::Setup(_)), "{err:?}");
    assert!(f.exists());
}

#[test]
fn destroy_outside_the_writable_trees_is_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let policy = familiar::policy::Policy::from_toml(
        "default.toml",
        familiar::policy::builtin_source("default").unwrap(),
        home,
    )
    .unwrap();
    let src = "description = \"t\"\nprompt = \"t\"\n[sandbox]\nwrite = [\"~/Documents\"]\ndestroy = [\"~/Music\"]\n";
    let err = familiar::soul::parse(
        "t.toml",
        "t",
        src,
        familiar::soul::PromptSource::BuiltIn,
        home,
        Some(&policy),
        familiar::soul::SoulOrigin::BuiltIn,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        err.contains("t.toml:5") && err.contains("not writable"),
        "{err}"
    );
}

/// Regression: the replaced content of a file larger than the output cap (128 KiB) came
/// back cut, which is no reply at all: every `write_file` over such a file outside the
/// workspace failed.
#[tokio::test]
async fn a_large_replaced_file_comes_back_whole() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let docs = h.home.join("Documents");
    std::fs::create_dir_all(&docs).unwrap();
    let f = docs.join("big");
    let old = "o".repeat(1 << 20);
    std::fs::write(&f, &old).unwrap();
    let p = h.policy_with("read = [\"~\"]\nwrite = [\"~/Documents\"]");
    let op = FileOp::Write {
        path: f.clone(),
        content: "new\n".into(),
        keep: Some(32 << 20),
    };
    let (reply, _) = launcher()
        .file_op(&p, &op, &CancellationToken::new())
        .await
        .unwrap();
    let FileReply::Replaced { previous, .. } = reply else {
        panic!("no Replaced reply");
    };
    assert_eq!(previous.bytes().map(|b| b.len()), Some(old.len()));
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "new\n");
}
