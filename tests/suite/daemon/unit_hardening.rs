//! The shipped familiar.service under a real systemd user manager: it
//! starts with every hardening directive it ships, the daemon runs with them (umask,
//! no new privileges, a seccomp filter), and the kernel's Landlock still confines a
//! tool inside it. Plus the `systemd-analyze --user security` score of the unit.
//!
//! A user manager runs only where systemd booted the machine (`/run/systemd/system`);
//! CI creates that directory (.ci/run); under FAMILIAR_TEST_STRICT=1 (.ci/run) a
//! manager that cannot start is a failure instead of a skip (tests/common/skip.rs).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::user_manager::{UserManager, text};
use super::*;
use crate::common::TestHome;
use crate::common::llm_server::Reply;
use crate::common::llm_server::{LlmServer, oa_done, oa_finish, oa_text, oa_tool_call, sse};

/// The highest exposure `systemd-analyze --user security` may rate the unit (10 is
/// the worst; the unit before it was hardened rated 8.9).
const MAX_EXPOSURE: f64 = 7.0;

/// `Name: value` from /proc/PID/status.
fn proc_status(pid: &str, name: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
        .trim()
        .to_owned()
}

/// What the task's shell call left: one write in the workspace, none outside, the
/// command PID 1 of its own namespace and nothing running on, the bus refused, and the
/// kernel's EACCES in the daemon's transcript (`pid` the daemon's, `stderr` the ask's).
fn the_kernel_confined_the_tool(home: &TestHome, ws: &Path, pid: &str, stderr: &[u8]) {
    assert_eq!(
        std::fs::read_to_string(ws.join("inside.txt")).unwrap(),
        "in\n"
    );
    assert!(
        !home.path().join("outside.txt").exists(),
        "the tool wrote outside its workspace"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("pid.txt")).unwrap(),
        "1\n",
        "the command is not PID 1 of a namespace of its own under the unit"
    );
    // Nothing the tool started runs on: its processes are found by their working
    // directory, the workspace.
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read_link(e.path().join("cwd")).is_ok_and(|cwd| cwd == *ws))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, Vec::<String>::new(), "processes outlived the call");
    let bus_said = std::fs::read_to_string(ws.join("bus.txt")).unwrap();
    assert!(
        bus_said.contains("Permission denied") && !bus_said.contains("org.freedesktop.DBus'"),
        "the tool reached the session bus: {bus_said}"
    );
    // The shell said why: the kernel's EACCES, in the task's transcript.
    let pid_env = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let state = pid_env
        .split(|&b| b == 0)
        .find_map(|v| v.strip_prefix(b"STATE_DIRECTORY="))
        .map(|v| PathBuf::from(String::from_utf8_lossy(v).into_owned()))
        .unwrap_or_else(|| home.data_dir());
    let transcripts = state.join("transcripts");
    let said: String = std::fs::read_dir(&transcripts)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert!(
        said.contains("outside.txt: Permission denied"),
        "{}",
        text(stderr)
    );
    assert!(said.contains(r#""unix_sockets":"blocked""#), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hardened_unit_runs_the_daemon_and_landlock_still_confines_its_tools() {
    let home = TestHome::new();
    let bus = TestBus::start();
    let Some(manager) = UserManager::start(&home, &bus) else {
        return;
    };
    let ws = home.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    // The second line is the attack the sandbox must stop: the session bus from a tool. Under the
    // unit's own syscall filter the helper must still be able to install its own, and
    // enter a PID namespace (the command is PID 1 there): nothing outlives the call.
    let command = format!(
        "echo in > inside.txt; echo out > ../outside.txt\n\
         gdbus call --address '{}' --dest org.freedesktop.DBus --object-path /org/freedesktop/DBus \
         --method org.freedesktop.DBus.ListNames > bus.txt 2>&1\n\
         echo $$ > pid.txt; setsid sleep 1000 &",
        bus.address
    );
    let args = serde_json::json!({ "command": command }).to_string();
    let server = LlmServer::start(vec![
        Reply::sse(sse(vec![
            oa_tool_call(0, "c1", "shell", &args),
            oa_finish("tool_calls"),
            oa_done(),
        ])),
        Reply::sse(sse(vec![oa_text("done"), oa_finish("stop"), oa_done()])),
    ])
    .await;
    home.write_config(
        "config.toml",
        &format!(
            "default_soul = \"shell_only\"\npolicy = \"open\"\n[providers.local]\nbase_url = \"{}/v1\"\nmax_retries = 0\n",
            server.base
        ),
    );
    home.write_config(
        "policies/open.toml",
        "[tiers]\nread = \"allow\"\nwrite = \"allow\"\nexecute = \"allow\"\nsystem_critical = \"allow\"\n",
    );
    home.write_config(
        "souls/shell_only.toml",
        "id = \"shell_only\"\ndescription = \"a shell in its workspace\"\nprompt = \"Run what you are asked.\"\ntools = [\"shell\"]\n[permissions]\nexecute = \"allow\"\n",
    );

    // `familiar setup` against the real manager: units installed, daemon-reload and
    // the timer's enable succeed.
    let out = home
        .familiar()
        .env("XDG_RUNTIME_DIR", &manager.runtime_dir)
        .env("XDG_DATA_HOME", home.path().join(".local/share"))
        .arg("setup")
        .output()
        .unwrap();
    assert!(out.status.success(), "setup: {}", text(&out.stderr));
    // Units get the manager's own environment, whose bus is $XDG_RUNTIME_DIR/bus.
    let bus_env = format!("DBUS_SESSION_BUS_ADDRESS={}", bus.address);
    assert!(
        manager
            .systemctl(&["set-environment", &bus_env])
            .status
            .success()
    );
    let start = manager.systemctl(&["start", "familiar.service"]);
    assert!(
        start.status.success(),
        "the hardened unit does not start: {} (ExecMainStatus {})",
        text(&start.stderr),
        manager.show("familiar.service", "ExecMainStatus")
    );
    assert_eq!(manager.show("familiar.service", "ActiveState"), "active");

    // The daemon runs with the unit's restrictions.
    let pid = manager.show("familiar.service", "MainPID");
    assert_eq!(proc_status(&pid, "Umask"), "0077");
    assert_eq!(proc_status(&pid, "NoNewPrivs"), "1");
    assert_eq!(proc_status(&pid, "Seccomp"), "2", "no syscall filter");

    // A task whose tool writes in its workspace and outside it: the kernel refuses
    // the second write even though the unit leaves the home writable.
    let out = home
        .familiar()
        .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
        .arg("ask")
        .arg("--workspace")
        .arg(&ws)
        .arg("write the two files")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "ask: {}", text(&out.stderr));
    the_kernel_confined_the_tool(&home, &ws, &pid, &out.stderr);
}

#[test]
fn the_unit_is_rated_below_the_exposure_limit() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("run");
    std::fs::create_dir_all(&runtime).unwrap();
    let unit = dir.path().join("familiar.service");
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/familiar.service"),
    )
    .unwrap();
    // --offline reads the file alone; ExecStart= must name a program that exists.
    std::fs::write(
        &unit,
        shipped.replace("%h/.cargo/bin/familiar", "/bin/true"),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .args(["--user", "security", "--offline=true", "--no-pager"])
        .arg(&unit)
        .env("XDG_RUNTIME_DIR", &runtime)
        .output()
        .unwrap();
    let said = text(&out.stdout);
    let score: f64 = said
        .lines()
        .find_map(|l| l.split("familiar.service: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no overall exposure in:\n{said}\n{}", text(&out.stderr)));
    assert!(score <= MAX_EXPOSURE, "exposure {score}:\n{said}");
}
