//! What `familiar run` prints for people, line for line: tool lines with their marks
//! and previews, the last lines of a task, an empty answer.

use serde_json::json;

use crate::common::TestHome;
use crate::common::harness::{text_reply, tools_reply};
use crate::common::llm_server::*;

fn config(home: &TestHome, server: &LlmServer) {
    home.write_config(
        "config.toml",
        &format!(
            "policy = \"open\"\n[providers.local]\nbase_url = \"{}/v1\"\nmodel = \"test-model\"\nmax_retries = 0\n",
            server.base
        ),
    );
    home.write_config(
        "policies/open.toml",
        "[tiers]\nread = \"allow\"\nwrite = \"allow\"\nexecute = \"allow\"\n",
    );
}

async fn output_of(home: &TestHome, args: &[&str]) -> (Option<i32>, String, String) {
    let mut cmd = home.familiar();
    cmd.args(args);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `text` with what differs between runs (a tool's time, a session id) made fixed.
fn normalised(text: &str) -> String {
    let ms = regex::Regex::new(r"\(\d+ ms").unwrap();
    let session = regex::Regex::new(r"s-[0-9a-f]{12}").unwrap();
    session
        .replace_all(&ms.replace_all(text, "(N ms"), "s-ID")
        .into_owned()
}

// Regression: a command that exited 127 showed `✓`, a JSON result showed as `{ …`, and
// an empty answer printed nothing at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_marks_a_failed_command_previews_a_result_and_says_when_there_is_no_answer() {
    let server = LlmServer::start(vec![
        tools_reply(&[("c1", "system_snapshot", json!({}))]),
        tools_reply(&[("c2", "shell", json!({"command": "nosuchcommand-xyz"}))]),
        text_reply(""),
    ])
    .await;
    let home = TestHome::new();
    config(&home, &server);
    home.write_config(
        "souls/one.toml",
        "prompt = \"p\"\nmax_iterations = 3\ntools = [\"system_snapshot\", \"shell\"]\n",
    );
    let (code, stdout, stderr) = output_of(&home, &["run", "--soul", "one", "look"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, "");
    let stderr = normalised(&stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 6, "{stderr}");
    assert_eq!(lines[0], "→ system_snapshot");
    assert!(
        lines[1].starts_with("  ✓ system_snapshot (N ms) { \"taken_at\": "),
        "the object's first keys, on one line: {stderr}"
    );
    assert_eq!(lines[2], "→ shell: nosuchcommand-xyz");
    assert!(
        lines[3].starts_with("  ✗ shell (N ms) exit 127: stderr: sh: ")
            && lines[3].contains("nosuchcommand-xyz"),
        "{stderr}"
    );
    assert_eq!(
        lines[4..],
        [
            "(no answer: the model ended without any text)",
            "— completed after 3 steps, 330 tokens (session s-ID)",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_stopped_by_max_iterations_shows_its_call_and_counts_in_the_singular() {
    let server = LlmServer::start(vec![tools_reply(&[(
        "c1",
        "shell",
        json!({"command": "true"}),
    )])])
    .await;
    let home = TestHome::new();
    config(&home, &server);
    home.write_config(
        "souls/one.toml",
        "prompt = \"p\"\nmax_iterations = 1\ntools = [\"shell\"]\n",
    );
    let (code, _, stderr) = output_of(&home, &["run", "--soul", "one", "look"]).await;
    assert_eq!(code, Some(4), "{stderr}");
    assert_eq!(
        normalised(&stderr),
        "→ shell: true\n  ✓ shell (N ms) exit 0\n\
         stopped after 1 model call without finishing (max_iterations = 1)\n\
         — max_iterations after 1 step, 110 tokens (session s-ID)\n"
    );
}

// Regression: `familiar man` listed familiar-run(1) and others that did not exist.
#[test]
fn man_install_writes_a_page_per_command_that_man_renders() {
    let home = TestHome::new();
    let dir = home.path().join("man/man1");
    let out = home
        .familiar()
        .args(["man", "--install"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let top = std::fs::read_to_string(dir.join("familiar.1")).unwrap();
    // Each page the top page names is there.
    for named in top
        .split("familiar\\-")
        .skip(1)
        .filter_map(|rest| rest.split_once("(1)").map(|(n, _)| n.replace("\\-", "-")))
    {
        assert!(
            dir.join(format!("familiar-{named}.1")).is_file(),
            "familiar-{named}(1) is named but not installed"
        );
    }
    let run = dir.join("familiar-run.1");
    assert!(run.is_file());
    if std::process::Command::new("man")
        .arg("--version")
        .output()
        .is_err()
    {
        return;
    }
    let shown = std::process::Command::new("man")
        .args(["--warnings", "-l"])
        .arg(&run)
        .env("MANWIDTH", "80")
        .output()
        .unwrap();
    // Bold and underline come as overstrikes (`X\x08X`): kept as the plain text.
    let mut text = String::new();
    for c in String::from_utf8_lossy(&shown.stdout).chars() {
        if c == '\u{8}' {
            text.pop();
        } else {
            text.push(c);
        }
    }
    assert_eq!(String::from_utf8_lossy(&shown.stderr), "", "groff warnings");
    for heading in [
        "SYNOPSIS",
        "OPTIONS",
        "EXIT STATUS",
        "ENVIRONMENT",
        "FILES",
        "EXAMPLES",
    ] {
        assert!(text.contains(heading), "{heading} missing from {text}");
    }
    let out = home.familiar().args(["man", "nosuch"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no manual page for `familiar nosuch`"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// Regression: the README's example was decided `not_in_soul` (the default soul has no
// `shell`), and `{"cmd": "ls"}` was judged as if it were a call.
#[test]
fn policy_check_judges_the_readme_example_and_rejects_a_key_the_tool_lacks() {
    let home = TestHome::new();
    let out = home
        .familiar()
        .args(["policy", "check", "--soul", "system_admin", "--", "shell"])
        .arg(r#"{"command": "rm -rf ~"}"#)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("deny (blocked_pattern): `rm -rf ~` (runs `rm -f -r ~`) is blocked"),
        "{stdout}"
    );
    let out = home
        .familiar()
        .args(["policy", "check", "--soul", "system_admin", "--", "shell"])
        .arg(r#"{"cmd": "ls"}"#)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "familiar: `shell` has no argument `cmd`; `shell` takes command, cwd?, timeout_secs?\n"
    );
}

// Regression: `man --install` wrote to ~/.local/share/man, where `man` does not look when
// only ~/.cargo/bin is on PATH (a `cargo install`), and always printed a MANPATH hint.
#[test]
fn man_install_goes_where_man_looks_from_the_binarys_bin() {
    let home = TestHome::new();
    let bin = home.path().join(".cargo/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let exe = bin.join("familiar");
    let built = std::path::Path::new(env!("CARGO_BIN_EXE_familiar"));
    if std::fs::hard_link(built, &exe).is_err() {
        std::fs::copy(built, &exe).unwrap();
    }
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());
    let out = home
        .familiar_at(&exe)
        .args(["man", "--install"])
        .env("PATH", &path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let dir = home.path().join(".cargo/share/man/man1");
    assert!(dir.join("familiar-run.1").is_file(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    if crate::common::skip::program("manpath", "man-db").is_none() {
        return;
    }
    assert!(!said.contains("MANPATH"), "{said}");
    let found = std::process::Command::new("man")
        .args(["-w", "familiar-run"])
        .env_clear()
        .env("HOME", home.path())
        .env("PATH", &path)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&found.stdout).trim(),
        dir.join("familiar-run.1").display().to_string(),
        "{found:?}"
    );
}

// Regression (issue 42 §5): with a small local model "reading the prompt: 0 / 1,945
// tokens" stayed frozen for 96 s, with no sign of life. The line comes again with the
// time the request has been out; the server holds its answer until the test saw it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_prefill_shows_the_time_ticking() {
    use std::io::BufRead as _;

    let gate = Gate::new();
    let server = LlmServer::start(vec![Reply::sse_steps(vec![
        Step::Send(oa_progress(0, 1945, 0).into_bytes()),
        Step::Wait(gate.clone()),
        Step::Send(
            sse(vec![
                oa_progress(1945, 1945, 0),
                oa_text("done"),
                oa_finish("stop"),
                oa_usage(1945, 1),
                oa_done(),
            ])
            .into_bytes(),
        ),
    ])])
    .await;
    let home = TestHome::new();
    config(&home, &server);
    home.write_config("souls/one.toml", "prompt = \"p\"\nmax_iterations = 2\n");
    let mut child = home
        .familiar_process()
        .args(["run", "--soul", "one", "look"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let ticking = regex::Regex::new(r"^  reading the prompt: 0 / 1,945 tokens, \d+ s").unwrap();
    let (seen, rest) = tokio::task::spawn_blocking(move || {
        let mut lines = std::io::BufReader::new(stderr).lines();
        let mut seen = Vec::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            let done = ticking.is_match(&line);
            seen.push(line);
            if done {
                break;
            }
        }
        (seen, lines)
    })
    .await
    .unwrap();
    assert_eq!(
        seen.first().map(String::as_str),
        Some("  reading the prompt: 0 / 1,945 tokens"),
        "{seen:#?}"
    );
    assert!(
        seen.last().is_some_and(|l| l.contains(" tokens, ")),
        "{seen:#?}"
    );
    gate.open();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let rest: Vec<String> = rest.map(Result::unwrap).collect();
    assert_eq!(out.status.code(), Some(0), "{rest:#?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "done");
}
