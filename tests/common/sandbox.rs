//! A temporary home with a secret, a task workspace, and the sandbox built for them by
//! the real `SandboxPolicy::new` under the shipped default policy.

// Test helpers: a failed setup step should panic right where it failed.
#![allow(clippy::unwrap_used, clippy::print_stderr)]

use std::path::{Path, PathBuf};

use familiar::policy::{Policy, builtin_source};
use familiar::sandbox::{SandboxLauncher, SandboxOutput, SandboxPolicy};
use familiar::soul::{PromptSource, SoulOrigin, parse};
use familiar_sandbox::fileops::{FileOp, FileReply};
use familiar_sandbox::status::probe;
use tokio_util::sync::CancellationToken;

pub const SECRET: &str = "BEGIN-OPENSSH-PRIVATE-KEY-do-not-leak";

pub struct SandboxHome {
    _dir: tempfile::TempDir,
    pub home: PathBuf,
    pub workspace: PathBuf,
    /// `$HOME/.ssh/id_ed25519`, holding [`SECRET`].
    pub secret: PathBuf,
}

impl SandboxHome {
    pub fn new() -> SandboxHome {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let home = root.join("home");
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::create_dir_all(home.join(".config/nvim")).unwrap();
        std::fs::write(home.join("notes.txt"), "public notes\n").unwrap();
        let secret = home.join(".ssh/id_ed25519");
        std::fs::write(&secret, SECRET).unwrap();
        let workspace = root.join("workspace");
        SandboxHome {
            _dir: dir,
            home,
            workspace,
            secret,
        }
    }

    /// A soul reading all of `$HOME` under the shipped `default` policy.
    pub fn policy(&self, network: bool, require: bool) -> SandboxPolicy {
        self.policy_with(&format!(
            "read = [\"~\"]\nwrite = []\nnetwork = {network}\nrequire = {require}"
        ))
    }

    /// A soul's sandbox under the shipped `default` policy, from its `[sandbox]` lines.
    pub fn policy_with(&self, sandbox: &str) -> SandboxPolicy {
        let policy = Policy::from_toml(
            "default.toml",
            builtin_source("default").unwrap(),
            &self.home,
        )
        .unwrap();
        let src = format!("description = \"t\"\nprompt = \"t\"\n[sandbox]\n{sandbox}\n");
        let soul = parse(
            "t.toml",
            "t",
            &src,
            PromptSource::BuiltIn,
            &self.home,
            Some(&policy),
            SoulOrigin::BuiltIn,
        )
        .unwrap();
        SandboxPolicy::new(
            &soul.sandbox,
            &policy.protected_paths,
            &self.workspace,
            &self.home,
        )
        .unwrap()
    }

    pub fn ws(&self, name: &str) -> PathBuf {
        self.workspace.join(name)
    }
}

pub fn launcher() -> SandboxLauncher {
    SandboxLauncher::new(env!("CARGO_BIN_EXE_familiar-sandbox"))
}

/// False (and a loud message) when the kernel has no Landlock: the test must not
/// pretend it checked anything. With `FAMILIAR_TEST_REQUIRE_LANDLOCK=1` (what `.ci/run`
/// sets where the kernel has Landlock) a missing Landlock fails the test instead: a
/// sandbox test that skips there would hide a broken probe.
pub fn landlock_available() -> bool {
    if probe().abi.is_none() {
        assert!(
            std::env::var_os("FAMILIAR_TEST_REQUIRE_LANDLOCK").is_none_or(|v| v != "1"),
            "FAMILIAR_TEST_REQUIRE_LANDLOCK=1, but the sandbox found no Landlock"
        );
        eprintln!("\n!!! SKIPPED: this kernel has no Landlock; the sandbox is not tested !!!\n");
        return false;
    }
    true
}

pub async fn sh(policy: &SandboxPolicy, script: &str) -> SandboxOutput {
    run(policy, &["sh", "-c", script]).await
}

pub async fn run(policy: &SandboxPolicy, argv: &[&str]) -> SandboxOutput {
    let argv: Vec<String> = argv.iter().map(|s| (*s).to_owned()).collect();
    launcher()
        .run(policy, &argv, None, &CancellationToken::new())
        .await
        .unwrap()
}

/// Runs `op` in the sandbox and asserts the kernel refused it with EACCES (not that a
/// path check answered first: the helper reports the errno the kernel gave).
pub async fn assert_file_op_refused(policy: &SandboxPolicy, op: &FileOp) {
    let (reply, _) = launcher()
        .file_op(policy, op, &CancellationToken::new())
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
        "{op:?}: {reply:?}"
    );
}

/// Asserts a sandboxed command was refused by the kernel ("Permission denied").
#[track_caller]
pub fn assert_permission_denied(out: &SandboxOutput, what: &str) {
    assert!(out.stderr.contains("Permission denied"), "{what}: {out:?}");
}

/// Whether a process with this pid still exists (`kill(pid, 0)`).
pub fn alive(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

pub fn pids(text: &str) -> Vec<i32> {
    text.split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect()
}

pub fn exists(p: &Path) -> bool {
    p.symlink_metadata().is_ok()
}
