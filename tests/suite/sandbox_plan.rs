//! The sandbox plan is made once per task and reused: what changes between two calls of
//! one task must be seen by the second exactly as if the plan were made afresh.

use familiar::sandbox::SandboxPolicy;
use familiar_sandbox::fileops::{FileOp, FileReply};
use tokio_util::sync::CancellationToken;

use crate::common::sandbox::{SandboxHome, landlock_available, launcher, sh};

const EACCES: i32 = 13;

async fn read(p: &SandboxPolicy, path: &std::path::Path) -> FileReply {
    let op = FileOp::Read {
        path: path.to_owned(),
        offset: None,
        limit: None,
    };
    launcher()
        .file_op(p, &op, &CancellationToken::new())
        .await
        .unwrap()
        .0
}

fn refused(reply: &FileReply) -> bool {
    matches!(
        reply,
        FileReply::Error {
            errno: Some(EACCES),
            ..
        }
    )
}

#[tokio::test]
async fn a_protected_symlink_made_between_calls_carves_its_target_at_the_next() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let public = h.home.join("public");
    std::fs::create_dir(&public).unwrap();
    std::fs::write(public.join("creds"), "aws-secret").unwrap();
    let p = h.policy(false, false);
    // `~/public` holds nothing protected: granted whole by the first call's plan.
    assert!(matches!(
        read(&p, &public.join("creds")).await,
        FileReply::Read { .. }
    ));

    // `~/.aws` (protected, missing so far) now points at it: its target is protected.
    std::os::unix::fs::symlink(&public, h.home.join(".aws")).unwrap();
    let reply = read(&p, &public.join("creds")).await;
    assert!(refused(&reply), "{reply:?}");
}

#[tokio::test]
async fn entries_made_or_replaced_between_calls_are_seen_by_the_next() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let p = h.policy(false, false);
    let out = sh(&p, "cat ~/notes.txt").await;
    assert!(out.stdout.contains("public notes"), "{out:?}");

    // A new file beside the carved `.ssh`, and one replaced by rename (a new inode),
    // as editors save.
    std::fs::write(h.home.join("new.txt"), "fresh\n").unwrap();
    std::fs::write(h.home.join("notes.tmp"), "edited\n").unwrap();
    std::fs::rename(h.home.join("notes.tmp"), h.home.join("notes.txt")).unwrap();
    let out = sh(&p, "cat ~/new.txt ~/notes.txt").await;
    assert_eq!(out.stdout, "fresh\nedited\n", "{out:?}");

    // A readable file swapped for a link to the secret: still the secret's rules.
    std::fs::remove_file(h.home.join("new.txt")).unwrap();
    std::os::unix::fs::symlink(&h.secret, h.home.join("new.txt")).unwrap();
    let reply = read(&p, &h.home.join("new.txt")).await;
    assert!(refused(&reply), "{reply:?}");
}
