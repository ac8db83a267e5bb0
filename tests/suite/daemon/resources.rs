//! A soul's `[resources]` through `familiar run`: under a real systemd
//! user manager the task's tool processes live in a transient slice whose cgroup
//! limits the kernel enforces (an allocation past `MemoryMax` is killed, a fork past
//! `TasksMax` fails) and the slice is gone after the task; without a manager, rlimits
//! stand in (`RLIMIT_DATA`: the allocation fails) and the CPU quota is reported as not
//! enforced. `task_started` says which, every time.

use serde_json::{Value, json};

use super::user_manager::{UserManager, text};
use super::*;
use crate::common::TestHome;
use crate::common::harness::{text_reply, tools_reply};
use crate::common::llm_server::LlmServer;

/// Allocates 300 MiB and touches it, well past the soul's 64M.
const HOG_PY: &str = "b = bytearray(300 << 20)\nprint(\"allocated\", len(b))\n";
/// Forty background sleepers: past the soul's 16 tasks.
const FORKS_SH: &str =
    "for i in $(seq 40); do sleep 30 & done\necho started\nkill $(jobs -p) 2>/dev/null\n";

/// The soul, its scripts (readable in its sandbox: the policy asks before inline code
/// and command substitutions, and nobody is there to answer) and its policy.
fn setup(home: &TestHome, server: &LlmServer) {
    let scripts = home.path().join("scripts");
    std::fs::create_dir_all(&scripts).unwrap();
    std::fs::write(scripts.join("hog.py"), HOG_PY).unwrap();
    std::fs::write(scripts.join("forks.sh"), FORKS_SH).unwrap();
    home.write_config(
        "config.toml",
        &format!(
            "default_soul = \"limited\"\npolicy = \"open\"\n[providers.local]\nbase_url = \"{}/v1\"\nmax_retries = 0\n",
            server.base
        ),
    );
    home.write_config(
        "policies/open.toml",
        "[tiers]\nread = \"allow\"\nwrite = \"allow\"\nexecute = \"allow\"\nsystem_critical = \"allow\"\n",
    );
    home.write_config(
        "souls/limited.toml",
        &format!(
            "id = \"limited\"\ndescription = \"bounded\"\nprompt = \"Run what you are asked.\"\ntools = [\"shell\"]\n[permissions]\nexecute = \"allow\"\n[sandbox]\nread = [\"{}\"]\n[resources]\nmemory_max = \"64M\"\ncpu_quota = \"50%\"\ntasks_max = 16\n",
            scripts.display()
        ),
    );
}

fn hog(home: &TestHome) -> String {
    format!("python3 {}/scripts/hog.py", home.path().display())
}

fn forks(home: &TestHome) -> String {
    format!("sh {}/scripts/forks.sh", home.path().display())
}

/// The model runs `commands` one per turn through `shell`, then answers.
async fn model(commands: &[String]) -> LlmServer {
    let mut replies: Vec<_> = commands
        .iter()
        .enumerate()
        .map(|(i, c)| tools_reply(&[(&format!("c{i}"), "shell", json!({ "command": c }))]))
        .collect();
    replies.push(text_reply("done"));
    LlmServer::start(replies).await
}

/// What the shell tool told the model, call by call.
fn tool_results(server: &LlmServer) -> Vec<String> {
    let last = server.requests().last().unwrap().body["messages"].clone();
    last.as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].to_string())
        .collect()
}

fn events(stdout: &[u8]) -> Vec<Value> {
    text(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

async fn run(mut cmd: assert_cmd::Command) -> std::process::Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slice_of_the_user_manager_bounds_the_tasks_processes() {
    let home = TestHome::new();
    let bus = TestBus::start();
    let Some(manager) = UserManager::start(&home, &bus) else {
        return;
    };
    manager.on_bus(&bus).await;
    let server = model(&[hog(&home), forks(&home), "cat /proc/self/cgroup".into()]).await;
    setup(&home, &server);
    let mut cmd = home.familiar();
    cmd.env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
        .args(["run", "--json", "use the machine"]);
    let out = run(cmd).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        text(&out.stderr),
        text(&out.stdout)
    );
    let events = events(&out.stdout);
    let started = &events[0];
    assert_eq!(started["kind"], "task_started");
    let resources = &started["resources"];
    assert_eq!(resources["enforced_by"], "systemd", "{resources}");
    assert_eq!(resources["memory_max"], 64 << 20);
    assert_eq!(resources["cpu_quota"], 50);
    assert_eq!(resources["tasks_max"], 16);
    assert!(resources.get("not_enforced").is_none(), "{resources}");
    let unit = resources["unit"].as_str().unwrap().to_owned();
    let task_id = started["task_id"].as_str().unwrap();
    assert_eq!(
        unit,
        format!("familiar-{}.slice", task_id.replace('-', "_"))
    );

    let results = tool_results(&server);
    // The allocation was killed by the kernel (the cgroup's OOM killer), not refused by
    // an rlimit: it never printed.
    assert!(
        !results[0].contains("allocated") && results[0].contains("SIGKILL")
            || results[0].contains("137"),
        "{}",
        results[0]
    );
    // Forks past TasksMax failed.
    assert!(
        results[1].contains("fork") || results[1].contains("Resource temporarily unavailable"),
        "{}",
        results[1]
    );
    // Each call ran in a scope of the task's slice.
    assert!(
        results[2].contains(&format!("/familiar.slice/{unit}/")),
        "{}",
        results[2]
    );
    // The slice went with the task.
    let listed = manager.systemctl(&[
        "list-units",
        "--all",
        "--plain",
        "--no-legend",
        "familiar-*",
    ]);
    assert!(
        !text(&listed.stdout).contains(&unit),
        "{}",
        text(&listed.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_user_manager_rlimits_stand_in_and_the_report_says_so() {
    let home = TestHome::new();
    let server = model(&[hog(&home)]).await;
    setup(&home, &server);
    // No session bus at all: no manager to ask.
    let mut cmd = home.familiar();
    cmd.args(["run", "--json", "use the machine"]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let events = events(&out.stdout);
    let resources = &events[0]["resources"];
    assert_eq!(resources["enforced_by"], "rlimits", "{resources}");
    assert_eq!(resources["not_enforced"], json!(["cpu_quota"]));
    assert!(resources.get("unit").is_none());
    assert!(
        resources["note"]
            .as_str()
            .unwrap()
            .contains("no systemd user manager"),
        "{resources}"
    );
    // RLIMIT_DATA: the allocation itself fails, the program says so.
    let results = tool_results(&server);
    assert!(
        results[0].contains("MemoryError") && !results[0].contains("allocated"),
        "{}",
        results[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_terminal_is_told_when_limits_do_not_all_hold() {
    let home = TestHome::new();
    let server = model(&["true".into()]).await;
    setup(&home, &server);
    let mut cmd = home.familiar();
    cmd.args(["run", "use the machine"]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("resource limits: no systemd user manager"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn bad_resources_name_the_file_line_and_key() {
    let home = TestHome::new();
    for (body, want) in [
        (
            "memory_max = \"lots\"",
            "limited.toml:6: key `resources.memory_max`: not a size",
        ),
        (
            "memory_max = \"512K\"",
            "limited.toml:6: key `resources.memory_max`: below 1M",
        ),
        (
            "cpu_quota = \"fast\"",
            "limited.toml:6: key `resources.cpu_quota`: not a CPU quota",
        ),
        (
            "tasks_max = 0",
            "limited.toml:6: key `resources.tasks_max`: 0 is not a number of processes",
        ),
    ] {
        let soul = format!(
            "id = \"limited\"\ndescription = \"bounded\"\nprompt = \"p\"\ntools = [\"shell\"]\n[resources]\n{body}\n"
        );
        let path = home.path().join("limited.toml");
        std::fs::write(&path, soul).unwrap();
        let out = home
            .familiar()
            .args(["souls", "validate"])
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{body}: {}", text(&out.stdout));
        assert!(
            text(&out.stderr).contains(want),
            "{body}: {}",
            text(&out.stderr)
        );
    }
}
