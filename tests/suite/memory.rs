//! Long-term memory end to end: the file under the real kernel's Landlock, the
//! `remember`/`forget` tools through `familiar run` against the loopback model, the
//! `familiar memory` command, and the daemon's `ListMemory`/`Forget`.

// Test helpers: a failed setup step should panic right where it failed.
#![allow(clippy::unwrap_used)]

use familiar::config::Paths;
use familiar::ids::{SessionId, SoulId};
use familiar::sandbox::{FileOp, FileReply, SandboxPolicy};
use familiar::soul::{PromptSource, SoulOrigin, parse};
use familiar::store::{Memory, MemoryScope, Store};
use tokio_util::sync::CancellationToken;

use crate::common::sandbox::{SandboxHome, landlock_available, launcher, sh};

const EACCES: i32 = 13;
const FACT: &str = "the backup disk is /mnt/backup";

/// A soul that reads all of `$HOME` and writes the data dir, under the
/// shipped default policy with familiar's own paths protected (as `policy::load` does
/// for every task).
fn sandbox_for(h: &SandboxHome, data_dir: &std::path::Path) -> SandboxPolicy {
    let paths = Paths {
        config_dir: h.home.join(".config/familiar"),
        data_dir: data_dir.to_owned(),
        home: h.home.clone(),
    };
    let policy = familiar::policy::load("default", &paths).unwrap();
    let src = format!(
        "prompt = \"t\"\n[sandbox]\nread = [\"~\"]\nwrite = [\"{}\"]\n",
        data_dir.display()
    );
    let soul = parse(
        "t.toml",
        "t",
        &src,
        PromptSource::BuiltIn,
        &h.home,
        Some(&policy),
        SoulOrigin::BuiltIn,
    )
    .unwrap();
    SandboxPolicy::for_task(&soul, &policy, &h.workspace, &h.home).unwrap()
}

#[tokio::test]
async fn memory_is_out_of_reach_of_tools_even_where_the_data_dir_is_writable() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let data_dir = h.home.join(".local/state/familiar");
    let store = Store::open(&data_dir).unwrap();
    let memory = Memory::new(store.data_dir(), 10);
    memory
        .remember(FACT, MemoryScope::All, &SessionId::new("s-1").unwrap())
        .unwrap();
    // A corrupt copy, moved aside, is just as private.
    std::fs::write(memory.path(), b"{broken").unwrap();
    assert!(memory.list().is_err());
    memory
        .remember(FACT, MemoryScope::All, &SessionId::new("s-1").unwrap())
        .unwrap();
    let p = sandbox_for(&h, &data_dir);
    let cancel = CancellationToken::new();

    let read = FileOp::Read {
        path: memory.path().to_owned(),
        offset: None,
        limit: None,
    };
    let write = FileOp::Write {
        path: memory.path().to_owned(),
        content: "{\"version\":1,\"entries\":[]}".into(),
    };
    for op in [read, write] {
        let (reply, _) = launcher().file_op(&p, &op, &cancel).await.unwrap();
        assert!(
            matches!(
                reply,
                FileReply::Error {
                    errno: Some(EACCES),
                    ..
                }
            ),
            "{op:?}: {reply:?}"
        );
    }
    let ctx = data_dir.join("context");
    for script in [
        format!("cat {}", memory.path().display()),
        format!("cat {}/*", ctx.display()),
        format!("echo planted > {}", memory.path().display()),
        format!("mv {0} {0}.x", memory.path().display()),
    ] {
        let out = sh(&p, &script).await;
        assert!(!out.stdout.contains(FACT), "{script}: {out:?}");
        assert!(
            out.stderr.contains("Permission denied"),
            "{script}: {out:?}"
        );
    }
    // The rest of the data dir stays writable: the rule is about memory.
    let out = sh(
        &p,
        &format!("echo ok > {}/workspaces/x", data_dir.display()),
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let entries = memory.for_soul(&SoulId::new("desktop").unwrap()).unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].text, FACT);
}
