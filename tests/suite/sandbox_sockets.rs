//! Unix sockets from inside the sandbox: a tool, what it starts, and an
//! MCP server can reach no unix socket outside the sandbox, abstract ones included (the
//! helper's seccomp filter refuses the socket: EACCES from the real kernel), so the
//! session bus, the Secret Service and the daemon are out of reach; a soul that grants a
//! socket path gets unix sockets back, and then the daemon itself refuses the calls of
//! the tool's process tree with `SandboxedCaller` and an audit line.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::{Path, PathBuf};

use familiar::policy::{Policy, builtin_source};
use familiar::soul::{PromptSource, SoulOrigin, parse};
use familiar_sandbox::seccomp::UnixSockets;
use std::sync::Arc;

use familiar::tools::Registry;
use serde_json::json;

use crate::common::bus::TestBus;
use crate::common::fake_secrets::FakeSecrets;
use crate::common::fixture::Fixture;
use crate::common::harness::{text_reply, tools_reply};
use crate::common::sandbox::{SandboxHome, landlock_available, run, sh};

/// Tries each way out and prints one line per attempt: `NAME ok` or `NAME errno N`.
const PROBE_PY: &str = r#"
import ctypes, errno, socket, sys

def attempt(name, f):
    try:
        f()
        print(name, "ok")
    except OSError as e:
        print(name, "errno", e.errno)

def connect(addr):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(addr)

attempt("path", lambda: connect(sys.argv[1]))
attempt("abstract", lambda: connect("\0" + sys.argv[2]))
attempt("dgram", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))
attempt("pair", lambda: socket.socketpair())
attempt("tcp_socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))

def uring():
    libc = ctypes.CDLL(None, use_errno=True)
    params = ctypes.create_string_buffer(120)
    # io_uring_setup(entries, params): 425 on x86_64 and aarch64 alike.
    if libc.syscall(425, 4, params) < 0:
        raise OSError(ctypes.get_errno(), "io_uring_setup")

attempt("io_uring", uring)
"#;

/// Listens on a path socket in `dir` and on an abstract one; both outside any sandbox.
fn listeners(dir: &Path) -> (UnixListener, UnixListener, PathBuf, String) {
    let path = dir.join("outside.sock");
    let by_path = UnixListener::bind(&path).unwrap();
    // Unique per call: tests run in parallel in one process.
    let name = format!(
        "familiar-test-{}",
        dir.file_name().unwrap().to_string_lossy()
    );
    let abstract_addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let by_name = UnixListener::bind_addr(&abstract_addr).unwrap();
    (by_path, by_name, path, name)
}

fn probe_lines(h: &SandboxHome) -> PathBuf {
    std::fs::create_dir_all(&h.workspace).unwrap();
    let script = h.ws("probe.py");
    std::fs::write(&script, PROBE_PY).unwrap();
    script
}

#[tokio::test]
async fn a_tool_cannot_open_a_unix_socket_of_any_kind() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let outside = tempfile::tempdir().unwrap();
    let (_l1, _l2, path, name) = listeners(outside.path());
    let script = probe_lines(&h);
    let policy = h.policy(false, false);
    let out = run(
        &policy,
        &[
            "python3",
            script.to_str().unwrap(),
            path.to_str().unwrap(),
            &name,
        ],
    )
    .await;
    // EACCES (13) from the kernel for every unix socket; socketpair's two ends reach
    // nothing outside and stay allowed; io_uring could open sockets behind the filter.
    assert_eq!(
        out.stdout,
        "path errno 13\nabstract errno 13\ndgram errno 13\npair ok\ntcp_socket errno 13\nio_uring errno 13\n",
        "{out:?}"
    );
    assert_eq!(out.enforcement.unix_sockets, UnixSockets::Blocked);

    // The same script outside the sandbox reaches both listeners: the refusal above is
    // the sandbox's, not the test's.
    let control = std::process::Command::new("python3")
        .args([script.to_str().unwrap(), path.to_str().unwrap(), &name])
        .output()
        .unwrap();
    let control = String::from_utf8_lossy(&control.stdout);
    assert!(control.starts_with("path ok\nabstract ok\n"), "{control}");
}

/// The Debian package that brings a bus client (README lists the others).
fn package(client: &str) -> &'static str {
    match client {
        "gdbus" => "libglib2.0-bin",
        "busctl" => "systemd",
        _ => "libsecret-tools",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bus_clients_inside_the_sandbox_cannot_reach_the_session_bus() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let bus = TestBus::start();
    let _secrets = FakeSecrets::start(&bus.address).await;
    let familiar_bin = PathBuf::from(env!("CARGO_BIN_EXE_familiar"));
    // The binary readable, so `familiar ask` fails at the bus, not at its exec.
    let policy = h.policy_with(&format!(
        "read = [\"~\", \"{}\"]",
        familiar_bin.parent().unwrap().display()
    ));
    let address = &bus.address;
    for (what, cmd) in [
        (
            "familiar ask",
            format!(
                "DBUS_SESSION_BUS_ADDRESS='{address}' {} ask --soul test hello",
                familiar_bin.display()
            ),
        ),
        (
            "gdbus",
            format!(
                "gdbus call --address '{address}' --dest org.freedesktop.DBus \
                 --object-path /org/freedesktop/DBus --method org.freedesktop.DBus.ListNames"
            ),
        ),
        ("busctl", format!("busctl --address='{address}' list")),
        (
            "secret-tool",
            format!(
                "DBUS_SESSION_BUS_ADDRESS='{address}' secret-tool lookup application familiar provider local"
            ),
        ),
    ] {
        // Each client is one more witness; a machine without it skips that one.
        if what != "familiar ask" && crate::common::skip::program(what, package(what)).is_none() {
            continue;
        }
        let inside = sh(&policy, &cmd).await;
        assert_ne!(inside.exit_code, Some(0), "{what} got through: {inside:?}");
        assert!(
            inside.stderr.contains("Permission denied"),
            "{what}: {inside:?}"
        );
    }
    // Outside the sandbox the same bus answers: the clients work.
    if crate::common::skip::program("gdbus", package("gdbus")).is_none() {
        return;
    }
    let control = std::process::Command::new("sh")
        .args([
            "-c",
            &format!(
                "gdbus call --address '{address}' --dest org.freedesktop.DBus \
                 --object-path /org/freedesktop/DBus --method org.freedesktop.DBus.ListNames"
            ),
        ])
        .output()
        .unwrap();
    assert!(control.status.success(), "{control:?}");
    assert!(String::from_utf8_lossy(&control.stdout).contains("org.freedesktop.secrets"));
}

#[tokio::test]
async fn a_soul_that_grants_a_socket_can_connect_and_the_report_says_so() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let outside = tempfile::tempdir().unwrap();
    let (_l1, _l2, path, name) = listeners(outside.path());
    let script = probe_lines(&h);
    let policy = h.policy_with(&format!(
        "read = [\"~\"]\nsockets = [\"{}\"]",
        path.display()
    ));
    let out = run(
        &policy,
        &[
            "python3",
            script.to_str().unwrap(),
            path.to_str().unwrap(),
            &name,
        ],
    )
    .await;
    assert!(out.stdout.starts_with("path ok\n"), "{out:?}");
    // Landlock's scoping still keeps abstract sockets of the outside away (ABI 6), and
    // io_uring stays refused.
    assert!(out.stdout.contains("io_uring errno 13"), "{out:?}");
    assert_eq!(out.enforcement.unix_sockets, UnixSockets::Granted);
    assert_eq!(out.enforcement.sockets, vec![path]);
}

#[test]
fn a_relative_socket_path_is_an_error_naming_the_line() {
    let h = SandboxHome::new();
    let policy =
        Policy::from_toml("default.toml", builtin_source("default").unwrap(), &h.home).unwrap();
    let err = parse(
        "t.toml",
        "t",
        "description = \"t\"\nprompt = \"t\"\n[sandbox]\nsockets = [\"run/bus\"]\n",
        PromptSource::BuiltIn,
        &h.home,
        Some(&policy),
        SoulOrigin::BuiltIn,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("t.toml:4"), "{err}");
    assert!(err.contains("must be absolute"), "{err}");
}

/// The open policy of these tests: nothing asks, so the model's calls run.
const OPEN_POLICY: &str = "[tiers]\nread = \"allow\"\nwrite = \"allow\"\nexecute = \"allow\"\nsystem_critical = \"allow\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_refuses_calls_from_a_tools_process_tree_even_through_a_granted_socket() {
    if !landlock_available() {
        return;
    }
    let bus = TestBus::start();
    let address = bus.address.clone();
    let familiar_bin = PathBuf::from(env!("CARGO_BIN_EXE_familiar"));
    // Each a way in that a tool reaching the bus would use: submit an unconfined task,
    // approve a pending call, forget memory, and `familiar ask` itself.
    let commands = [
        format!(
            "gdbus call --address '{address}' --dest dev.familiar.Agent1 \
             --object-path /dev/familiar/Agent1 --method dev.familiar.Agent1.Submit \
             '' 'write ~/.bashrc' '{{}}'"
        ),
        format!(
            "busctl --address='{address}' call dev.familiar.Agent1 /dev/familiar/Agent1 \
             dev.familiar.Agent1 Respond sb r-0123456789ab true"
        ),
        format!(
            "busctl --address='{address}' call dev.familiar.Agent1 /dev/familiar/Agent1 \
             dev.familiar.Agent1 Forget s m-0123456789ab"
        ),
        format!(
            "DBUS_SESSION_BUS_ADDRESS='{address}' {} ask --soul test hello",
            familiar_bin.display()
        ),
    ];
    let mut replies: Vec<_> = commands
        .iter()
        .enumerate()
        .map(|(i, c)| tools_reply(&[(&format!("c{i}"), "shell", json!({ "command": c }))]))
        .collect();
    replies.push(text_reply("done"));
    let (f, task) = granted_task(bus, replies, familiar_bin.parent().unwrap(), "try the bus").await;

    let requests = f.harness.server.requests();
    let last = &requests.last().unwrap().body["messages"];
    let results: Vec<String> = last
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].to_string())
        .collect();
    assert_eq!(results.len(), commands.len(), "{results:?}");
    for (cmd, result) in commands.iter().zip(&results) {
        assert!(
            result.contains("SandboxedCaller") || result.contains("inside familiar's sandbox"),
            "{cmd}\n=> {result}"
        );
    }
    // Nothing was submitted from inside: the task list holds only this task.
    let tasks = f.proxy.list_tasks().await.unwrap();
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    // Each refusal left an audit line naming the task and the method.
    let audit = std::fs::read_to_string(f.harness.store.audit_path()).unwrap_or_default();
    let refused: Vec<serde_json::Value> = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["tool"].as_str().is_some_and(|t| t.starts_with("dbus:")))
        .collect();
    assert!(
        refused.iter().any(|e| e["tool"] == "dbus:Submit"
            && e["decision"] == "denied"
            && e["task_id"] == task.as_str()
            && e["soul"] == "granted"),
        "{audit}"
    );
    // The daemon still serves its own user's clients.
    assert!(f.proxy.list_tasks().await.is_ok());
}

/// Connects to the bus, forks and exits; the child, once its parent is gone, calls
/// `Submit` on the inherited connection and prints `accepted …` or `refused NAME`.
const HANDED_ON_PY: &str = r#"
import os, sys
import dbus

bus = dbus.bus.BusConnection(sys.argv[1])
r, w = os.pipe()
if os.fork():
    os._exit(0)
os.close(w)
os.read(r, 1)  # EOF: the parent that connected has exited
try:
    reply = bus.call_blocking("dev.familiar.Agent1", "/dev/familiar/Agent1",
        "dev.familiar.Agent1", "Submit", "ssa{sv}", ("", "write ~/.bashrc", {}))
    print("accepted", reply)
except dbus.exceptions.DBusException as e:
    print("refused", e.get_dbus_name())
"#;

/// Regression: a tool connected to the bus through a granted socket, forked and exited;
/// the grandchild's `Submit` was accepted, since the connecting pid was gone and "not
/// found" counted as "not sandboxed". The caller check fails closed now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bus_connection_handed_on_by_an_exited_process_is_refused() {
    if !landlock_available() {
        return;
    }
    if crate::common::skip::program("/usr/bin/python3", "python3").is_none()
        || !std::process::Command::new("/usr/bin/python3")
            .args(["-c", "import dbus"])
            .status()
            .is_ok_and(|s| s.success())
    {
        crate::common::skip::skip("python3's dbus module not installed (package python3-dbus)");
        return;
    }
    let bus = TestBus::start();
    let address = bus.address.clone();
    let home = tempfile::tempdir().unwrap();
    let script = home.path().join("handed_on.py");
    std::fs::write(&script, HANDED_ON_PY).unwrap();
    // Piped through cat, so the shell call lasts until the forked child has answered.
    let command = format!("/usr/bin/python3 {} '{address}' | cat", script.display());
    let replies = vec![
        tools_reply(&[("c0", "shell", json!({ "command": command }))]),
        text_reply("done"),
    ];
    let (f, _task) = granted_task(bus, replies, home.path(), "hand the bus on").await;
    let requests = f.harness.server.requests();
    let result = requests.last().unwrap().body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .map(|m| m["content"].to_string())
        .unwrap();
    assert!(
        result.contains("refused dev.familiar.Agent1.Error.SandboxedCaller"),
        "{result}"
    );
    let tasks = f.proxy.list_tasks().await.unwrap();
    assert_eq!(
        tasks.len(),
        1,
        "nothing was submitted from inside: {tasks:?}"
    );
}

/// A daemon on `bus` whose soul `granted` runs `shell` (allowed), reads `~` and `read`,
/// and is granted the bus socket; one task of it submitted and finished `completed`.
async fn granted_task(
    bus: TestBus,
    replies: Vec<crate::common::llm_server::Reply>,
    read: &Path,
    prompt: &str,
) -> (Fixture, String) {
    let soul = format!(
        "id = \"granted\"\ndescription = \"d\"\nprompt = \"p\"\ntools = [\"shell\"]\n\
         [permissions]\nexecute = \"allow\"\n[sandbox]\nread = [\"~\", \"{}\"]\nsockets = [\"{}\"]\n",
        read.display(),
        bus.socket_path().display()
    );
    let f = Fixture::builder(replies)
        .on(bus)
        .policy(OPEN_POLICY)
        .options(familiar::daemon::DaemonOptions::default())
        .soul("granted", &soul)
        .tools(vec![Arc::clone(Registry::builtin().get("shell").unwrap())])
        .start()
        .await;
    let mut w = crate::common::fixture::Watch::new(&f.proxy).await;
    let (task, _) = f.submit("granted", prompt).await.unwrap();
    let (status, _) = w.finished(&task).await;
    assert_eq!(status, "completed");
    (f, task)
}
