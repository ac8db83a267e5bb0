//! The sandbox against the real kernel: every test asserts what the kernel answered
//! (EACCES, EPERM, no file, refused connection, dead pids), not that a check ran.

// Test helpers: a failed setup step should panic right where it failed.
#![allow(clippy::unwrap_used, clippy::print_stderr)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use familiar::sandbox::SandboxError;
use familiar_sandbox::fileops::{FileOp, FileReply};
use familiar_sandbox::status::EnforcementStatus;
use tokio_util::sync::CancellationToken;

use crate::common::sandbox::{
    SECRET, SandboxHome, alive, assert_file_op_refused, assert_permission_denied, exists,
    landlock_available, launcher, pids, run, sh,
};

/// Processes whose working directory is `dir` (everything a sandboxed command starts
/// runs in the workspace unless it moves).
fn processes_in(dir: &Path) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            (std::fs::read_link(e.path().join("cwd")).ok()? == dir).then_some(pid)
        })
        .collect()
}

/// Blocks until the sandboxed command writes a line to the fifo `path`.
async fn wait_for_fifo(path: &Path) -> String {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut s = String::new();
        std::fs::File::open(path)
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        s
    })
    .await
    .unwrap()
}

/// A helper run without the launcher leaves its pids cgroup for us to remove.
fn remove_reported_cgroup(stderr: &[u8]) {
    let stderr = String::from_utf8_lossy(stderr);
    let report = stderr.lines().next().unwrap();
    let json = report
        .strip_prefix(familiar_sandbox::exec::REPORT_PREFIX)
        .unwrap();
    let report: familiar_sandbox::exec::HelperReport = serde_json::from_str(json).unwrap();
    if let Some(cgroup) = report.cgroup {
        familiar_sandbox::limits::remove_cgroup(&cgroup);
    }
}

fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
}

#[tokio::test]
async fn writes_outside_the_workspace_are_refused_by_the_kernel() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let p = h.policy(false, false);
    let outside = std::env::temp_dir().join(format!("familiar-sbx-{}", std::process::id()));
    let o = outside.display().to_string();

    let out = sh(&p, &format!("echo x > {o}")).await;
    assert_permission_denied(&out, "");
    let py = format!("open('{o}', 'w')");
    let out = run(&p, &["/usr/bin/python3", "-c", &py]).await;
    assert!(out.stderr.contains("PermissionError"), "{out:?}");
    std::fs::write(h.ws("src"), "data").unwrap();
    let out = run(&p, &["cp", "src", &o]).await;
    assert_permission_denied(&out, "");
    let out = sh(&p, &format!("echo x > {}/new", h.home.display())).await;
    assert_permission_denied(&out, "");
    assert!(!exists(&outside));
    assert!(!exists(&h.home.join("new")));

    let out = sh(&p, "echo inside > made && cat made").await;
    assert_eq!((out.exit_code, out.stdout.as_str()), (Some(0), "inside\n"));
    assert_eq!(out.enforcement.status, EnforcementStatus::Full);
}

#[tokio::test]
async fn protected_paths_are_unreadable_even_when_home_is_readable() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let p = h.policy(false, false);
    std::os::unix::fs::symlink(&h.secret, h.ws("link")).unwrap();
    let s = h.secret.display();
    let dotdot = format!("{}/../home/.ssh/id_ed25519", h.workspace.display());

    // The rest of home is readable, and home itself listable.
    let out = sh(&p, "cat ~/notes.txt && ls -a ~").await;
    assert!(out.stdout.contains("public notes"), "{out:?}");
    assert!(out.stdout.contains(".ssh"), "{out:?}");

    for script in [
        format!("cat {s}"),
        "cat link".to_owned(),
        format!("cat {dotdot}"),
        "cat ~/.ssh/*".to_owned(),
    ] {
        let out = sh(&p, &script).await;
        assert!(!out.stdout.contains(SECRET), "{script}: {out:?}");
        assert_permission_denied(&out, &script);
    }

    let op = FileOp::Read {
        path: h.secret.clone(),
        offset: None,
        limit: None,
    };
    assert_file_op_refused(&p, &op).await;
}

#[tokio::test]
async fn workspace_files_cannot_be_linked_or_renamed_out() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let p = h.policy(false, false);
    std::fs::write(h.ws("f"), "data").unwrap();
    let home = h.home.display();
    for script in [
        format!("ln f {home}/hard"),
        format!("mv f {home}/moved"),
        format!("ln {} stolen", h.secret.display()),
    ] {
        let out = sh(&p, &script).await;
        assert_ne!(out.exit_code, Some(0), "{script}: {out:?}");
        assert!(
            out.stderr.contains("Permission denied")
                || out.stderr.contains("Invalid cross-device link"),
            "{script}: {out:?}"
        );
    }
    assert!(!exists(&h.home.join("hard")) && !exists(&h.home.join("moved")));
    assert!(!exists(&h.ws("stolen")));
    assert!(exists(&h.ws("f")));
}

#[tokio::test]
async fn a_symlink_flipped_during_reads_never_yields_the_secret() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let p = h.policy(false, false);
    std::fs::write(h.ws("harmless"), "harmless\n").unwrap();
    std::os::unix::fs::symlink(h.ws("harmless"), h.ws("link")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (stop, ws, secret) = (stop.clone(), h.workspace.clone(), h.secret.clone());
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let target = if flips.is_multiple_of(2) {
                    secret.clone()
                } else {
                    ws.join("harmless")
                };
                std::os::unix::fs::symlink(&target, ws.join("link.new")).unwrap();
                std::fs::rename(ws.join("link.new"), ws.join("link")).unwrap();
                flips += 1;
            }
            flips
        })
    };
    let script = "i=0; while [ $i -lt 500 ]; do cat link; i=$((i+1)); done";
    let out = sh(&p, script).await;
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    assert!(flips > 1);
    assert!(!out.stdout.contains(SECRET), "the secret leaked");
    assert!(out.stdout.contains("harmless"), "{out:?}");
}

#[tokio::test]
async fn tcp_connect_follows_the_network_switch() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");

    let out = run(&h.policy(false, false), &["bash", "-c", &script]).await;
    assert!(!out.stdout.contains("connected"), "{out:?}");
    assert_permission_denied(&out, "");

    let out = run(&h.policy(true, false), &["bash", "-c", &script]).await;
    assert_eq!(out.stdout, "connected\n", "{out:?}");
}

#[tokio::test]
async fn a_fork_bomb_is_contained_and_cleaned_up() {
    if !landlock_available() {
        return;
    }
    if nix::unistd::Uid::effective().is_root()
        && !Path::new("/sys/fs/cgroup/pids/cgroup.procs").exists()
    {
        eprintln!("\n!!! SKIPPED: root ignores RLIMIT_NPROC and there is no pids cgroup !!!\n");
        return;
    }
    let h = SandboxHome::new();
    let mut p = h.policy(false, false);
    p.limits.max_processes = 64;
    p.limits.timeout = std::time::Duration::from_secs(5);
    mkfifo(&h.ws("fifo"));
    let task =
        tokio::spawn(async move { sh(&p, "echo started > fifo; b(){ b | b & }; b; wait").await });
    assert_eq!(wait_for_fifo(&h.ws("fifo")).await, "started\n");
    // This process can still fork while the bomb runs.
    assert!(
        std::process::Command::new("true")
            .status()
            .unwrap()
            .success()
    );
    task.await.unwrap();
    assert_eq!(processes_in(&h.workspace), Vec::<i32>::new());
}

#[tokio::test]
async fn endless_output_is_capped_and_the_command_killed() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let mut p = h.policy(false, false);
    p.limits.output_cap_bytes = 4096;
    for argv in [&["yes"][..], &["cat", "/dev/urandom"]] {
        let out = run(&p, argv).await;
        assert!(out.truncated, "{argv:?}");
        assert!(out.stdout.contains("bytes omitted"), "{argv:?}");
        assert!(out.stdout.len() < 4 * 4096, "{argv:?}");
        assert!(out.signal.is_some(), "{argv:?}: {:?}", out.exit_code);
        assert!(!out.timed_out);
    }
}

#[tokio::test]
async fn nothing_the_command_started_survives_it() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let p = h.policy(false, false);
    let script =
        "sleep 1000 & echo $!; setsid sleep 1000 & echo $!; (sleep 1000 & echo $!); echo $$";
    let out = sh(&p, script).await;
    // The pids are the command's namespace's, not ours: what is left is found by its
    // working directory, the workspace.
    assert_eq!(pids(&out.stdout).len(), 4, "{out:?}");
    assert_eq!(processes_in(&h.workspace), Vec::<i32>::new());
}

/// Regression: `setsid survivor & kill -9 $PPID` killed the helper (the command shared
/// its Landlock domain, so it could signal it) before it reaped, and the survivor ran
/// on with the soul's rights after the call. The command is PID 1 of a PID namespace
/// now: it cannot name the helper, and its end takes everything it started along.
#[tokio::test]
async fn a_command_cannot_kill_its_helper_to_leave_a_survivor() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let p = h.policy(false, false);
    let script = "setsid sleep 1000 & echo started; kill -9 $PPID; kill -9 1; \
                  sh -c 'kill -9 $PPID'; echo after";
    let out = sh(&p, script).await;
    assert!(out.stdout.starts_with("started\n"), "{out:?}");
    assert!(out.enforcement.status != EnforcementStatus::None, "{out:?}");
    assert_eq!(processes_in(&h.workspace), Vec::<i32>::new(), "{out:?}");
}

/// The helper killed from outside (the OOM killer, a user's `kill -9`) while the
/// command runs: the launcher kills what the helper left in its session.
#[tokio::test]
async fn a_helper_killed_from_outside_takes_its_command_along() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let p = h.policy(false, false);
    mkfifo(&h.ws("fifo"));
    let task = tokio::spawn(async move {
        sh(
            &p,
            "setsid sleep 1000 & sleep 1000 & echo started > fifo; wait",
        )
        .await
    });
    assert_eq!(wait_for_fifo(&h.ws("fifo")).await, "started\n");
    signal_helper_in(&h.workspace, nix::sys::signal::Signal::SIGKILL);
    let out = task.await.unwrap();
    assert_eq!(out.signal, Some(9), "{out:?}");
    assert_eq!(processes_in(&h.workspace), Vec::<i32>::new());
}

/// Sends `signal` to the helper running in `workspace`.
fn signal_helper_in(workspace: &Path, signal: nix::sys::signal::Signal) {
    let helper = processes_in(workspace)
        .into_iter()
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "familiar-sandbo")
        })
        .expect("the helper runs in the workspace");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(helper), signal).unwrap();
}

/// PID 1 of a namespace ignores the signals it has no handler for: a command that
/// leaves SIGTERM at its default is killed by the helper as that default would (it ends
/// by SIGTERM, not by the SIGKILL of the grace a second later); one with a handler gets
/// the signal.
#[tokio::test]
async fn the_helpers_sigterm_stops_pid_1_as_its_default_action_would() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let p = h.policy(false, false);
    mkfifo(&h.ws("fifo"));
    for (script, ends) in [
        // `exec`: PID 1 is sleep itself, which has no handler.
        ("echo started > fifo; exec sleep 1000", (None, Some(15))),
        (
            "trap 'exit 7' TERM; sleep 1000 & echo started > fifo; wait",
            (Some(7), None),
        ),
    ] {
        let p = p.clone();
        let task = tokio::spawn(async move { sh(&p, script).await });
        assert_eq!(wait_for_fifo(&h.ws("fifo")).await, "started\n");
        signal_helper_in(&h.workspace, nix::sys::signal::Signal::SIGTERM);
        let out = task.await.unwrap();
        assert_eq!((out.exit_code, out.signal), ends, "{script}: {out:?}");
        assert_eq!(processes_in(&h.workspace), Vec::<i32>::new());
    }
}

#[tokio::test]
async fn cancelling_kills_the_whole_tree() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let p = h.policy(false, false);
    mkfifo(&h.ws("fifo"));
    let cancel = CancellationToken::new();
    let task = {
        let cancel = cancel.clone();
        let argv: Vec<String> = [
            "sh",
            "-c",
            "sleep 1000 & echo $! > pids; setsid sleep 1000 & echo $! >> pids; \
             echo started > fifo; wait",
        ]
        .map(String::from)
        .into();
        tokio::spawn(async move { launcher().run(&p, &argv, None, &cancel).await })
    };
    assert_eq!(wait_for_fifo(&h.ws("fifo")).await, "started\n");
    cancel.cancel();
    assert!(matches!(task.await.unwrap(), Err(SandboxError::Cancelled)));
    let started = pids(&std::fs::read_to_string(h.ws("pids")).unwrap());
    assert_eq!(started.len(), 2);
    assert_eq!(processes_in(&h.workspace), Vec::<i32>::new());
}

#[tokio::test]
async fn processes_outside_the_sandbox_cannot_be_signalled() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let mut victim = std::process::Command::new("sleep")
        .arg("1000")
        .spawn()
        .unwrap();
    let pid = victim.id().to_string();
    let out = run(&h.policy(false, false), &["kill", "-TERM", &pid]).await;
    let still_alive = alive(victim.id().cast_signed());
    victim.kill().unwrap();
    victim.wait().unwrap();
    // Landlock's signal scope refuses it (EPERM); in the command's own PID namespace
    // the pid names no process at all (ESRCH).
    assert!(
        out.stderr.contains("Operation not permitted") || out.stderr.contains("No such process"),
        "{out:?}"
    );
    assert!(still_alive);
}

#[tokio::test]
async fn the_daemons_environment_does_not_reach_the_command() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let p = h.policy(false, false);
    // The helper's own environment (here with a key in it) is never passed on, by
    // either entry to the helper.
    let input = familiar_sandbox::exec::frame(&p.helper_spec_json().unwrap(), b"");
    for helper in [
        &[env!("CARGO_BIN_EXE_familiar-sandbox"), "--", "env"][..],
        &[env!("CARGO_BIN_EXE_familiar"), "sandbox-exec", "--", "env"],
    ] {
        let mut child = std::process::Command::new(helper[0])
            .args(&helper[1..])
            .env("OPENAI_API_KEY", "secret")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(&input).unwrap();
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        remove_reported_cgroup(&out.stderr);
        assert!(
            out.status.success() && stdout.contains("HOME="),
            "{helper:?}: {out:?}"
        );
        assert!(!stdout.contains("OPENAI_API_KEY"), "{helper:?}: {stdout}");
    }
    // Through the launcher, only allowlisted names appear.
    let out = run(&p, &["env"]).await;
    for line in out.stdout.lines() {
        let name = line.split('=').next().unwrap();
        let allowed = familiar::sandbox::spec::ENV_ALLOWLIST.contains(&name)
            || name.starts_with("LC_")
            || name == "TMPDIR";
        assert!(allowed, "{line}");
    }
}

#[tokio::test]
async fn a_lower_abi_is_partial_and_refused_when_full_is_required() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let mut l = launcher();
    l.abi_override = Some(3);
    let cancel = CancellationToken::new();
    let out = l
        .run(&h.policy(false, false), &["true".to_owned()], None, &cancel)
        .await
        .unwrap();
    assert_eq!(out.enforcement.status, EnforcementStatus::Partial);
    assert_eq!(out.enforcement.abi, Some(3));

    let argv = ["touch".to_owned(), "ran".to_owned()];
    let err = l
        .run(&h.policy(false, true), &argv, None, &cancel)
        .await
        .unwrap_err();
    assert!(
        matches!(err, SandboxError::NotEnforced(ref e) if e.status == EnforcementStatus::Partial),
        "{err:?}"
    );
    assert!(!exists(&h.ws("ran")), "the command ran");
}

#[tokio::test]
async fn file_ops_write_inside_and_are_refused_outside() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let p = h.policy(false, false);
    let cancel = CancellationToken::new();
    let write = |path: std::path::PathBuf| FileOp::Write {
        path,
        content: "hello\n".into(),
        keep: None,
    };
    let (reply, _) = launcher()
        .file_op(&p, &write(h.ws("a.txt")), &cancel)
        .await
        .unwrap();
    assert_eq!(reply, FileReply::Written { bytes: 6 });
    assert_eq!(std::fs::read_to_string(h.ws("a.txt")).unwrap(), "hello\n");

    assert_file_op_refused(&p, &write(h.home.join("b.txt"))).await;
    assert!(!exists(&h.home.join("b.txt")));

    let list = FileOp::List {
        path: h.workspace.clone(),
    };
    let (reply, _) = launcher().file_op(&p, &list, &cancel).await.unwrap();
    let FileReply::List { entries, .. } = reply else {
        panic!("{reply:?}");
    };
    let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["a.txt"]);
}

/// A `PATH` entry outside the sandbox (a version manager's shims in the home) holds a
/// program of the same name: the kernel refuses that one and the next is run, as
/// execvp does. Regression: the helper's own lookup stopped at the first file found.
#[tokio::test]
async fn a_program_on_path_outside_the_sandbox_is_passed_over_for_the_next() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let outside = tempfile::tempdir().unwrap();
    let shim = outside.path().join("echo");
    std::fs::write(&shim, "#!/bin/sh\necho shim\n").unwrap();
    std::fs::set_permissions(&shim, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut policy = h.policy(false, false);
    for (k, v) in &mut policy.env {
        if k == "PATH" {
            *v = format!("{}:/usr/bin:/bin", outside.path().display());
        }
    }
    let out = run(&policy, &["echo", "real"]).await;
    assert_eq!(out.stdout, "real\n", "{out:?}");
}
