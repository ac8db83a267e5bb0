//! Which helper binary a sandboxed call starts: `familiar-sandbox` beside `familiar`
//! when it is there, else `familiar sandbox-exec`; both enforce the same sandbox.

// Test helpers: a failed setup step should panic right where it failed.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use familiar::sandbox::exec::{EXIT_SETUP_FAILED, HelperReport, REPORT_PREFIX, ReportOutcome};
use familiar::sandbox::{FileOp, SandboxLauncher};
use tokio_util::sync::CancellationToken;

use crate::common::familiar_alone;
use crate::common::sandbox::{SandboxHome, assert_permission_denied, landlock_available};

/// The program of the helper that ran `sh`: the command's parent is the helper.
async fn helper_exe(launcher: &SandboxLauncher, h: &SandboxHome) -> String {
    let argv = ["sh", "-c", "readlink /proc/$PPID/exe"].map(str::to_owned);
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
            familiar::sandbox::FileReply::Error {
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
