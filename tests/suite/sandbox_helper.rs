//! Which helper binary a sandboxed call starts: `familiar-sandbox` beside `familiar`
//! when it is there, else `familiar sandbox-exec`; both enforce the same sandbox.

// Test helpers: a failed setup step should panic right where it failed.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use familiar::sandbox::SandboxLauncher;
use familiar_sandbox::exec::{EXIT_SETUP_FAILED, HelperReport, REPORT_PREFIX, ReportOutcome};
use familiar_sandbox::fileops::FileOp;
use tokio_util::sync::CancellationToken;

use crate::common::familiar_alone;
use crate::common::sandbox::{SandboxHome, assert_permission_denied, landlock_available};

/// The program of the helper that ran `sh`: the command's parent is the helper. In its
/// PID namespace the command is PID 1 with no parent to name (`$PPID` is 0), so `sh`
/// reads its parent from `/proc` (the host's view) with a builtin.
async fn helper_exe(launcher: &SandboxLauncher, h: &SandboxHome) -> String {
    let argv = [
        "sh",
        "-c",
        "read -r _ _ _ ppid _ < /proc/self/stat; readlink /proc/$ppid/exe",
    ]
    .map(str::to_owned);
    let out = launcher
        .run(
            &h.policy(false, false),
            &argv,
            None,
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    out.stdout.trim().to_owned()
}

#[tokio::test]
async fn the_helper_binary_beside_familiar_is_the_one_started() {
    if !landlock_available() {
        return;
    }
    let familiar = Path::new(env!("CARGO_BIN_EXE_familiar"));
    let launcher = SandboxLauncher::beside(familiar);
    let helper = familiar.with_file_name("familiar-sandbox");
    assert_eq!(launcher, SandboxLauncher::new(&helper));
    let h = SandboxHome::new();
    assert_eq!(
        helper_exe(&launcher, &h).await,
        helper.canonicalize().unwrap().to_str().unwrap()
    );
}

#[tokio::test]
async fn familiar_alone_is_its_own_helper_and_enforces_the_same_sandbox() {
    if !landlock_available() {
        return;
    }
    let (_dir, alone) = familiar_alone();
    let launcher = SandboxLauncher::beside(&alone);
    assert_eq!(launcher, SandboxLauncher::subcommand(&alone));
    let h = SandboxHome::new();
    assert_eq!(
        helper_exe(&launcher, &h).await,
        alone.canonicalize().unwrap().to_str().unwrap()
    );
    // The protected key stays out of reach, for a command and for a file operation.
    let p = h.policy(false, false);
    let cat = ["cat".to_owned(), h.secret.display().to_string()];
    let out = launcher
        .run(&p, &cat, None, &CancellationToken::new())
        .await
        .unwrap();
    assert_permission_denied(&out, "cat of the key through sandbox-exec");
    let op = FileOp::Read {
        path: h.secret.clone(),
        offset: None,
        limit: None,
    };
    let (reply, _) = launcher
        .file_op(&p, &op, &CancellationToken::new())
        .await
        .unwrap();
    assert!(
        matches!(
            reply,
            familiar_sandbox::fileops::FileReply::Error {
                errno: Some(libc::EACCES),
                ..
            }
        ),
        "{reply:?}"
    );
}

#[test]
fn a_malformed_helper_command_line_is_a_reported_setup_failure() {
    for helper in [
        &[env!("CARGO_BIN_EXE_familiar-sandbox"), "--bogus"][..],
        &[env!("CARGO_BIN_EXE_familiar"), "sandbox-exec", "--bogus"],
    ] {
        let out = std::process::Command::new(helper[0])
            .args(&helper[1..])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(i32::from(EXIT_SETUP_FAILED)));
        let stderr = String::from_utf8_lossy(&out.stderr);
        let report: HelperReport = stderr
            .lines()
            .next()
            .and_then(|l| l.strip_prefix(REPORT_PREFIX))
            .and_then(|json| serde_json::from_str(json).ok())
            .unwrap_or_else(|| panic!("{helper:?}: {stderr}"));
        let ReportOutcome::SetupFailed(message) = report.outcome else {
            panic!("{report:?}");
        };
        assert!(message.contains("\"--bogus\""), "{message}");
    }
}

/// With the binaries in `~/.local/bin` (the README's hand install) and a
/// soul that may write `~`, a tool overwrote `familiar-sandbox` and the next call ran
/// unconfined. Now the helper is never writable from inside, and the launcher executes
/// the file it opened and checked when it was made, whatever is at the path later.
#[tokio::test]
async fn a_tool_that_may_write_home_cannot_replace_the_helper_in_local_bin() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let bin = h.home.join(".local/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let helper = bin.join("familiar-sandbox");
    std::fs::copy(env!("CARGO_BIN_EXE_familiar-sandbox"), &helper).unwrap();
    let original = std::fs::read(&helper).unwrap();
    let launcher = SandboxLauncher::new(&helper);
    let policy = familiar::sandbox::SandboxPolicy::new(
        &familiar::sandbox::SandboxSpec {
            read: vec![h.home.clone()],
            write: vec![h.home.clone()],
            network: false,
            udp: false,
            require: false,
            // `~/.local/bin` is closed by default; named, it is writable but for the
            // helper, which the launcher guards whatever the soul says.
            startup: vec![bin.clone()],
            destroy: Vec::new(),
            sockets: vec![],
            bus_talk: vec![],
        },
        &[h.home.join(".ssh")],
        &h.workspace,
        &h.home,
    )
    .unwrap();
    let run = |script: &str| {
        let argv = ["sh", "-c", script].map(str::to_owned);
        let launcher = launcher.clone();
        let policy = policy.clone();
        async move {
            launcher
                .run(&policy, &argv, None, &CancellationToken::new())
                .await
                .unwrap()
        }
    };
    for attack in [
        "cp /bin/true ~/.local/bin/familiar-sandbox",
        "echo '#!/bin/sh' > ~/.local/bin/familiar-sandbox",
        "rm -f ~/.local/bin/familiar-sandbox",
        "mv ~/.local/bin/familiar-sandbox ~/old",
        "cp /bin/true ~/.local/bin/new && mv ~/.local/bin/new ~/.local/bin/familiar-sandbox",
        "mv ~/.local/bin ~/.local/bin.old",
        "mv ~/.local ~/.local.old",
    ] {
        let out = run(attack).await;
        assert_ne!(out.exit_code, Some(0), "{attack}: {out:?}");
        // Writing the running helper in place is also "Text file busy"; creating,
        // renaming or removing entries is Landlock's EACCES.
        assert!(
            out.stderr.contains("Permission denied")
                || out.stderr.contains("Operation not permitted")
                || out.stderr.contains("Text file busy"),
            "{attack}: {out:?}"
        );
        assert_eq!(std::fs::read(&helper).unwrap(), original, "{attack}");
    }
    // The rest of the home stays writable (a carved directory like `~` itself takes no
    // new entries: docs/sandbox.md), and the helper readable and runnable.
    let out = run("echo ok >> ~/notes.txt && tail -n1 ~/notes.txt && test -x ~/.local/bin/familiar-sandbox && echo x").await;
    assert_eq!(out.stdout, "ok\nx\n", "{out:?}");

    // Replaced from outside (say by a process of the user outside any sandbox): this
    // launcher still runs the file it checked, so the next call is still confined.
    let fake = bin.join("fake");
    std::fs::write(&fake, "#!/bin/sh\nexec \"$@\"\n").unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::rename(&fake, &helper).unwrap();
    let out = run("echo pwned > ~/.local/bin/x; cat ~/.ssh/id_ed25519").await;
    assert_permission_denied(&out, "still confined");
    assert!(!out.stdout.contains("PRIVATE"), "{out:?}");
    assert!(out.enforcement.abi.is_some(), "{out:?}");
}

/// A helper that others may write is refused before anything runs, with the fix.
#[tokio::test]
async fn a_helper_writable_by_others_is_not_started() {
    let h = SandboxHome::new();
    let dir = tempfile::tempdir().unwrap();
    let helper = dir.path().join("familiar-sandbox");
    std::fs::copy(env!("CARGO_BIN_EXE_familiar-sandbox"), &helper).unwrap();
    std::fs::set_permissions(&helper, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let err = SandboxLauncher::new(&helper)
        .run(
            &h.policy(false, false),
            &["true".to_owned()],
            None,
            &CancellationToken::new(),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("chmod go-w"), "{err}");
}
