//! The data directory full or read-only: `familiar run` fails the task (exit 1) with
//! one message naming what failed and what to do; once there is room again the next
//! task works and the session is intact. The daemon survives the same and serves on.
//!
//! A tiny tmpfs is mounted over the data dir when this machine allows it (root); else
//! the test falls back to `RLIMIT_FSIZE` with SIGXFSZ ignored, which makes every write
//! past the limit fail with EFBIG the way a full disk fails with ENOSPC.

use std::os::unix::process::CommandExt;

use serde_json::json;

use super::*;
use crate::common::harness::{text_reply, tools_reply};
use crate::common::llm_server::*;

async fn output(mut cmd: std::process::Command) -> std::process::Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

/// `familiar run` in `home`, as a std Command (so a resource limit can be set).
fn run_cmd(home: &TestHome, args: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("familiar"));
    cmd.env_clear()
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join(".config"))
        .env("XDG_STATE_HOME", home.path().join(".local/state"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(home.path().join("work"))
        .arg("run")
        .args(args);
    cmd
}

/// Makes writes of `cmd` past `bytes` per file fail (EFBIG) instead of killing it.
fn limit_file_size(cmd: &mut std::process::Command, bytes: u64) {
    // pre_exec runs between fork and exec: only async-signal-safe calls (two syscalls).
    #[allow(unsafe_code)]
    // SAFETY: setrlimit and sigaction are async-signal-safe; nothing is allocated.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::signal::signal(
                nix::sys::signal::Signal::SIGXFSZ,
                nix::sys::signal::SigHandler::SigIgn,
            )
            .map_err(std::io::Error::from)?;
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_FSIZE, bytes, bytes)
                .map_err(std::io::Error::from)
        });
    }
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_the_task_with_exit_1_and_the_next_task_works() {
    // The failing task may or may not reach the model (a transcript's last page can
    // still take a line on a full tmpfs): past the script, every answer is the same.
    let server = LlmServer::start(vec![
        text_reply("first answer"),
        tools_reply(&[("c1", "list_dir", json!({"path": "."}))]),
    ])
    .await;
    server.set_default(text_reply("after freeing space"));
    let home = TestHome::new();
    write_config(&home, &server, "");
    let data = home.data_dir();
    let tmpfs = Tmpfs::mount(&data, "2m");

    // A first task, so there is a session to continue.
    let out = output(run_cmd(
        &home,
        &["--soul", "safe_assistant", "--json", "hi"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let first: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().unwrap()).unwrap();
    let session = first["session_id"].as_str().unwrap().to_owned();
    let before = std::fs::read(data.join(format!("context/{session}.json"))).unwrap();

    let mut cmd = run_cmd(
        &home,
        &[
            "--soul",
            "safe_assistant",
            "--session",
            &session,
            "look around",
        ],
    );
    let filler = match &tmpfs {
        Some(_) => Some(fill(&data)),
        None => {
            limit_file_size(&mut cmd, before.len() as u64 / 2);
            None
        }
    };
    let out = output(cmd).await;
    let err = stderr_of(&out);
    // This was exit 2 (a usage error) with the OS error printed twice.
    assert_eq!(out.status.code(), Some(1), "{err}");
    let os_error = if tmpfs.is_some() {
        "No space left on device"
    } else {
        "File too large"
    };
    assert_eq!(err.matches(os_error).count(), 1, "{err}");
    assert!(err.contains("free some space"), "says what to do: {err}");
    assert!(
        err.contains(data.to_str().unwrap()),
        "names the file: {err}"
    );

    // The saved context is intact, and with room again the session goes on.
    if let Some(filler) = filler {
        std::fs::remove_file(filler).unwrap();
    }
    let after = std::fs::read(data.join(format!("context/{session}.json"))).unwrap();
    serde_json::from_slice::<serde_json::Value>(&after).expect("the context still parses");
    let out = output(run_cmd(
        &home,
        &["--soul", "safe_assistant", "--session", &session, "again"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "after freeing space"
    );
    let store = familiar::store::Store::open(&data).unwrap();
    let c = store
        .read_transcript_contents(&familiar_protocol::ids::SessionId::new(&session).unwrap())
        .unwrap();
    assert!(c.entries.len() > 3, "{c:?}");
    assert!(!store.read_audit().unwrap().entries.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_data_dir_fails_the_task_with_exit_1_and_says_what_to_do() {
    let server = LlmServer::start(vec![text_reply("x")]).await;
    let home = TestHome::new();
    write_config(&home, &server, "");
    let data = home.data_dir();
    let Some(tmpfs) = Tmpfs::mount(&data, "2m") else {
        // Root ignores permission bits and only root can mount: nothing to test with.
        eprintln!("cannot mount a tmpfs here: the read-only data dir is not tested");
        return;
    };
    familiar::store::Store::open(&data).unwrap();
    tmpfs.remount(true);
    let out = output(run_cmd(&home, &["--soul", "safe_assistant", "hi"])).await;
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.matches("Read-only file system").count(), 1, "{err}");
    assert!(err.contains("remount it read-write"), "{err}");
    tmpfs.remount(false);
}

/// The daemon with a full data dir: the task fails with a status naming the disk, the
/// daemon keeps serving, and once there is room a task completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_fails_a_task_on_a_full_disk_and_serves_the_next() {
    // The failing task never reaches the model: its first transcript line fails.
    let f = crate::common::fixture::Fixture::new(vec![text_reply("after freeing space")]).await;
    let data = f.harness.store.data_dir().to_owned();
    // The store is already open on the plain directory: mount over a subdirectory the
    // task writes to (its workspace root and transcripts stay on the full tmpfs).
    let transcripts = data.join("transcripts");
    let Some(_tmpfs) = Tmpfs::mount(&transcripts, "1m") else {
        eprintln!("cannot mount a tmpfs here: the daemon's full disk is not tested");
        return;
    };
    let filler = fill(&transcripts);
    let mut w = crate::common::fixture::Watch::new(&f.proxy).await;
    let (task, _) = f.submit("test", "hi").await.unwrap();
    let (status, result) = w.finished(&task).await;
    assert_eq!(status, "failed", "{result}");
    assert!(
        result.contains("No space left on device") && result.contains("free some space"),
        "{result}"
    );
    f.proxy.list_tasks().await.unwrap();
    std::fs::remove_file(filler).unwrap();
    let (task, _) = f.submit("test", "again").await.unwrap();
    assert_eq!(
        w.finished(&task).await,
        ("completed".to_owned(), "after freeing space".to_owned())
    );
}
