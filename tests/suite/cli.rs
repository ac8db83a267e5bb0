//! The command line through the real binary: exit codes, human and `--json` output.

use predicates::prelude::*;
use serde_json::Value;

use crate::common::TestHome;

fn stdout_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn souls_lists_the_six_shipped_souls() {
    let home = TestHome::new();
    let out = home.familiar().arg("souls").assert().success();
    let text = stdout_of(out.get_output());
    for id in [
        "safe_assistant",
        "system_admin",
        "automation_agent",
        "research_agent",
        "maintenance",
        "desktop",
    ] {
        assert!(text.contains(id), "{id} missing from:\n{text}");
    }
}

#[test]
fn souls_json_is_one_object_per_line_with_stable_keys() {
    let home = TestHome::new();
    let out = home.familiar().args(["souls", "--json"]).assert().success();
    let lines: Vec<Value> = stdout_of(out.get_output())
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 6);
    for v in &lines {
        for key in ["id", "description", "model", "max_iterations", "origin"] {
            assert!(v.get(key).is_some(), "{key} missing in {v}");
        }
    }
    let safe = lines.iter().find(|v| v["id"] == "safe_assistant").unwrap();
    assert_eq!(safe["max_iterations"], 10);
}

#[test]
fn souls_show_prints_tools_with_modes_in_force() {
    let home = TestHome::new();
    home.familiar()
        .args(["souls", "show", "system_admin"])
        .assert()
        .success()
        .stdout(predicate::str::contains("shell"))
        .stdout(predicate::str::contains("execute"))
        .stdout(predicate::str::contains("policy `default`"));
}

#[test]
fn souls_show_says_what_is_closed() {
    let home = TestHome::new();
    home.familiar()
        .args(["souls", "show", "system_admin"])
        .assert()
        .success()
        .stdout(predicate::str::contains("closed:"))
        .stdout(predicate::str::contains("~/.* (every hidden entry)"))
        .stdout(predicate::str::contains("~/.local/bin"));
}

/// The policy may allow a write the sandbox refuses: `policy check` says so.
#[test]
fn policy_check_says_the_sandbox_refuses_a_closed_write() {
    let home = TestHome::new();
    home.familiar()
        .args([
            "policy",
            "check",
            "--soul",
            "system_admin",
            "--",
            "write_file",
        ])
        .arg(r#"{"path": "~/.vimrc", "content": "x"}"#)
        .assert()
        .code(1)
        .stdout(predicate::str::contains("the sandbox refuses this write"))
        .stdout(predicate::str::contains("[sandbox] startup"));
}

#[test]
fn unknown_soul_is_a_usage_error_naming_the_known_ones() {
    let home = TestHome::new();
    home.familiar()
        .args(["souls", "show", "nope"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("unknown soul `nope`"))
        .stderr(predicate::str::contains("safe_assistant"));
}

#[test]
fn souls_validate_accepts_a_good_file_and_locates_errors_in_a_bad_one() {
    let home = TestHome::new();
    let good = home.path().join("work/good.toml");
    std::fs::write(&good, "prompt = \"Be brief.\"\nmax_iterations = 4\n").unwrap();
    home.familiar()
        .args(["souls", "validate"])
        .arg(&good)
        .assert()
        .success()
        .stdout(predicate::str::contains("ok: soul `good`"));

    let bad = home.path().join("work/bad.toml");
    std::fs::write(&bad, "prompt = \"p\"\n[permissions]\nexecute = \"maybe\"\n").unwrap();
    home.familiar()
        .args(["souls", "validate"])
        .arg(&bad)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "bad.toml:3: key `permissions.execute`",
        ))
        .stderr(predicate::str::contains("`allow`, `ask`, `deny`"));
}

/// Regression: a soul naming a provider or an MCP server that config.toml
/// does not define passed `souls validate`; its `mcp:` tools then never appeared.
#[test]
fn souls_validate_locates_a_provider_or_mcp_server_config_toml_lacks() {
    let home = TestHome::new();
    home.write_config("config.toml", "[providers.local]\nmodel = \"m\"\n");
    let soul = home.path().join("work/probe.toml");
    std::fs::write(
        &soul,
        "prompt = \"p\"\nprovider = \"claude\"\ntools = [\"read_file\", \"mcp:probe\"]\n",
    )
    .unwrap();
    let file = soul.display().to_string();
    home.familiar()
        .args(["souls", "validate"])
        .arg(&soul)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(format!(
            "{file}:2: key `provider`: unknown provider `claude`: config.toml has no [providers.claude] (configured: local)"
        )))
        .stderr(predicate::str::contains(format!(
            "{file}:3: key `tools`: `mcp:probe`: config.toml has no [mcp.probe] (configured: none)"
        )));
    // The same soul installed: doctor fails `souls` with both.
    home.write_config("souls/probe.toml", &std::fs::read_to_string(&soul).unwrap());
    let out = home.familiar().args(["doctor", "--json"]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    let fails: Vec<serde_json::Value> = said
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &serde_json::Value| v["check"] == "souls" && v["status"] == "fail")
        .collect();
    assert_eq!(fails.len(), 2, "{said}");
    assert!(
        fails[0]["detail"]
            .as_str()
            .unwrap()
            .contains("probe.toml:2: key `provider`"),
        "{said}"
    );
}

#[test]
fn a_user_soul_file_replaces_the_builtin() {
    let home = TestHome::new();
    home.write_config(
        "souls/safe_assistant.toml",
        "prompt = \"Mine.\"\ndescription = \"my own\"\nmax_iterations = 3\n",
    );
    home.familiar()
        .arg("souls")
        .assert()
        .success()
        .stdout(predicate::str::contains("souls/safe_assistant.toml"))
        .stdout(predicate::str::contains("my own"));
}

#[test]
fn a_broken_config_file_names_file_line_and_key() {
    let home = TestHome::new();
    home.write_config(
        "config.toml",
        "default_soul = \"safe_assistant\"\npolcy = \"strict\"\n",
    );
    home.familiar()
        .arg("souls")
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "config.toml:2: key `polcy`: unknown field `polcy`",
        ));
}

#[test]
fn familiar_config_env_and_flag_pick_the_file() {
    let home = TestHome::new();
    let cfg = home.path().join("work/alt.toml");
    std::fs::write(&cfg, "policy = \"nonexistent\"\n").unwrap();
    home.familiar()
        .arg("souls")
        .env("FAMILIAR_CONFIG", &cfg)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("unknown policy `nonexistent`"));
    home.familiar()
        .args(["souls", "--config"])
        .arg(home.path().join("work/missing.toml"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("missing.toml"))
        // The OS error once, not again as the cause of the message that holds it.
        .stderr(predicate::function(|err: &str| {
            err.matches("No such file or directory").count() == 1
        }));
}

#[test]
fn policy_check_denies_blocked_commands_with_exit_1() {
    let home = TestHome::new();
    home.familiar()
        .args(["policy", "check", "--soul", "system_admin", "--", "shell"])
        .arg(r#"{"command": "bash -c 'rm -rf ~'"}"#)
        .assert()
        .code(1)
        .stdout(predicate::str::contains("deny"));
}

#[test]
fn policy_check_json_allows_a_plain_read() {
    let home = TestHome::new();
    let out = home
        .familiar()
        .args(["policy", "check", "--json", "--", "read_file"])
        .arg(r#"{"path": "notes.txt"}"#)
        .assert()
        .success();
    let v: Value = serde_json::from_str(&stdout_of(out.get_output())).unwrap();
    assert_eq!(v["decision"], "allow", "{v}");
    assert!(v["steps"].as_array().is_some_and(|s| !s.is_empty()), "{v}");
}

#[test]
fn policy_check_denies_tools_outside_the_soul() {
    let home = TestHome::new();
    home.familiar()
        .args(["policy", "check", "--", "shell", r#"{"command": "ls"}"#])
        .assert()
        .code(1)
        .stdout(predicate::str::contains("safe_assistant"));
}

#[test]
fn policy_check_rejects_bad_arguments_with_exit_2() {
    let home = TestHome::new();
    home.familiar()
        .args(["policy", "check", "--", "no_such_tool", "{}"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("unknown tool `no_such_tool`"));
    home.familiar()
        .args(["policy", "check", "--", "read_file", "not json"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("not valid JSON"));
    home.familiar()
        .args(["policy", "check", "--", "read_file", "[1]"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("must be a JSON object"));
}

#[test]
fn snapshot_json_has_the_documented_keys() {
    let home = TestHome::new();
    let out = home
        .familiar()
        .args(["snapshot", "--json"])
        .assert()
        .success();
    let v: Value = serde_json::from_str(stdout_of(out.get_output()).trim()).unwrap();
    for key in [
        "taken_at",
        "hostname",
        "kernel",
        "uptime_secs",
        "load_average",
        "memory",
        "processes",
        "disks",
        "battery",
        "workspace",
        "desktop",
        "hyprland",
    ] {
        assert!(v.get(key).is_some(), "{key} missing in {v}");
    }
}

#[test]
fn snapshot_text_is_compact() {
    let home = TestHome::new();
    let out = home.familiar().arg("snapshot").assert().success();
    let text = stdout_of(out.get_output());
    assert!(!text.is_empty());
    assert!(text.len() < 6000, "{} chars", text.len());
}

#[test]
fn sessions_is_empty_on_a_new_machine() {
    let home = TestHome::new();
    home.familiar()
        .arg("sessions")
        .assert()
        .success()
        .stdout(predicate::str::contains("no sessions yet"));
    home.familiar()
        .args(["sessions", "show", "s-000000000000"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no session `s-000000000000`"));
    home.familiar()
        .args(["sessions", "show", "../../etc/passwd"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("session id"));
}

#[test]
fn completions_are_generated() {
    let home = TestHome::new();
    home.familiar()
        .args(["completions", "bash"])
        .assert()
        .success()
        .stdout(predicate::str::contains("familiar"));
}

#[test]
fn usage_errors_exit_2() {
    let home = TestHome::new();
    home.familiar().arg("frobnicate").assert().code(2);
}

// Regression: `cargo install --path .` ignored Cargo.lock and resolved a sysinfo that
// needs a newer Rust than README names: every install shown builds the tested set.
#[test]
fn every_install_shown_uses_the_lock_file() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    for dir in ["docs", "src/cli", "src/cli/doctor"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            files.push(entry.unwrap().path());
        }
    }
    for file in files.iter().filter(|f| f.is_file()) {
        let text = std::fs::read_to_string(file).unwrap();
        assert!(
            !text.contains("cargo install --path"),
            "{}: `cargo install --path` without --locked",
            file.display()
        );
    }
}
