//! MCP tool servers against a real server process (this binary in server mode, see
//! [`server`]) under the real kernel's Landlock.

#![allow(clippy::unwrap_used)]

mod agent;
mod server;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use familiar::config::mcp::{McpServerConfig, McpTransport};
use familiar::mcp::{McpError, McpHub, ServerState};
use familiar_protocol::tier::Tier;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common::sandbox::{landlock_available, launcher};

fn config(name: &str, mode: &str, write: Vec<PathBuf>) -> McpServerConfig {
    let (command, args) = server::argv();
    let exe = std::env::current_exe().unwrap();
    McpServerConfig {
        name: name.to_owned(),
        transport: McpTransport::Stdio { command, args },
        env: BTreeMap::from([(server::MODE_ENV.to_owned(), mode.to_owned())]),
        tier: Tier::Execute,
        tools: BTreeMap::new(),
        read: vec![exe.parent().unwrap().to_owned()],
        write,
        network: false,
        udp: false,
    }
}

fn hub(dir: &Path, servers: Vec<McpServerConfig>) -> McpHub {
    let servers = servers.into_iter().map(|c| (c.name.clone(), c)).collect();
    McpHub::new(
        &servers,
        launcher(),
        Vec::new(),
        dir.join("state"),
        dir.join("home"),
    )
}

#[tokio::test]
async fn stdio_server_runs_under_landlock_and_the_kernel_refuses_other_writes() {
    if !landlock_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let allowed = tmp.path().join("allowed");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&allowed).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let hub = hub(
        tmp.path(),
        vec![config("files", "ok", vec![allowed.clone()])],
    );
    let cancel = CancellationToken::new();

    let views = hub.views().await;
    assert_eq!(views[0].state, ServerState::NotStarted);

    let tools = hub.tools("files", &cancel).await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["echo", "picture", "write_file"], "sorted");
    assert_eq!(
        tools[2].input_schema["properties"]["path"]["type"],
        "string"
    );

    let ok = hub
        .call(
            "files",
            "write_file",
            json!({"path": allowed.join("a.txt"), "text": "hi"}),
            &cancel,
        )
        .await
        .unwrap();
    assert_eq!(ok, "written");
    assert_eq!(
        std::fs::read_to_string(allowed.join("a.txt")).unwrap(),
        "hi"
    );

    let refused = hub
        .call(
            "files",
            "write_file",
            json!({"path": outside.join("b.txt"), "text": "no"}),
            &cancel,
        )
        .await;
    match refused {
        Err(McpError::ToolFailed { message, .. }) => {
            assert!(
                message.contains("errno 13"),
                "EACCES from the kernel: {message}"
            );
        }
        other => panic!("expected the kernel's EACCES, got {other:?}"),
    }
    assert!(!outside.join("b.txt").exists());

    let picture = hub
        .call("files", "picture", json!({}), &cancel)
        .await
        .unwrap();
    assert_eq!(
        picture,
        "here:\n[image: image/png, 8 bytes of base64 not shown]"
    );

    // Kept, not started per call: the same connection answers.
    let first = hub.connection("files", &cancel).await.unwrap();
    let again = hub.connection("files", &cancel).await.unwrap();
    assert!(std::sync::Arc::ptr_eq(&first, &again));
    drop((first, again));
    assert!(matches!(hub.views().await[0].state, ServerState::Running));

    let unknown = hub.call("files", "nope", json!({}), &cancel).await;
    assert!(
        matches!(unknown, Err(McpError::UnknownTool { .. })),
        "{unknown:?}"
    );
    hub.shutdown().await;
}

// Regression: a server whose script the sandbox hides failed with "Permission denied"
// and no word on which setting to change.
#[tokio::test]
async fn a_script_outside_the_read_paths_says_to_add_it_to_the_sandbox_read_list() {
    if !landlock_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("server.sh");
    std::fs::write(&script, "echo never\n").unwrap();
    let mut hidden = config("hidden", "ok", Vec::new());
    hidden.transport = McpTransport::Stdio {
        command: "sh".to_owned(),
        args: vec![script.display().to_string()],
    };
    let hub = hub(tmp.path(), vec![hidden]);
    let e = hub
        .tools("hidden", &CancellationToken::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("Permission denied"), "{e}");
    assert!(
        e.ends_with(
            "add the file it could not open (its script, its interpreter, or their directory) \
             to `read` in [mcp.hidden.sandbox]"
        ),
        "{e}"
    );
}

#[tokio::test]
async fn a_server_that_sends_garbage_fails_clearly_and_is_restarted_at_most_three_times() {
    if !landlock_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let hub = hub(tmp.path(), vec![config("bad", "garbage", Vec::new())]);
    let cancel = CancellationToken::new();
    for _ in 0..4 {
        let e = hub.tools("bad", &cancel).await.unwrap_err();
        assert!(
            matches!(e, McpError::Protocol { .. }),
            "a clear protocol error: {e}"
        );
    }
    let e = hub.tools("bad", &cancel).await.unwrap_err();
    assert!(matches!(e, McpError::GaveUp { restarts: 3, .. }), "{e}");
    assert!(matches!(hub.views().await[0].state, ServerState::GaveUp(_)));
}

#[tokio::test]
async fn cancelling_a_task_stops_waiting_for_a_hanging_server() {
    if !landlock_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let hub = hub(tmp.path(), vec![config("slow", "hang", Vec::new())]);
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let (started, ()) = tokio::join!(hub.tools("slow", &cancel), async move {
        tokio::task::yield_now().await;
        trigger.cancel();
    });
    assert!(matches!(started, Err(McpError::Cancelled)), "{started:?}");
    // A cancelled start is not the server's fault: it may start again.
    assert!(matches!(
        hub.views().await[0].state,
        ServerState::NotStarted
    ));
}

/// `config.toml` text declaring the test server as `NAME` in `mode`.
fn config_toml(name: &str, mode: &str) -> String {
    let (command, args) = server::argv();
    let exe = std::env::current_exe().unwrap();
    format!(
        "[mcp.{name}]\ncommand = {command:?}\nargs = {args:?}\nenv = {{ {} = {mode:?} }}\n\
         tier = \"write\"\n[mcp.{name}.tools]\necho = \"read\"\n[mcp.{name}.sandbox]\nread = [{:?}]\n",
        server::MODE_ENV,
        exe.parent().unwrap().display().to_string(),
    )
}

#[test]
fn mcp_list_starts_the_servers_says_so_and_shows_their_tools_and_tiers() {
    if !landlock_available() {
        return;
    }
    let home = crate::common::TestHome::new();
    home.write_config("config.toml", &config_toml("files", "ok"));
    let out = home.familiar().args(["mcp", "list"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("starting 1 MCP server(s)"), "{stderr}");
    assert!(stdout.contains("files\tstdio: sh -c"), "{stdout}");
    assert!(stdout.contains("ok, 3 tools"), "{stdout}");
    assert!(stdout.contains("  files__echo\tread\tEchoes"), "{stdout}");
    assert!(stdout.contains("  files__write_file\twrite\t"), "{stdout}");

    let out = home
        .familiar()
        .args(["mcp", "list", "--no-start", "--json"])
        .output()
        .unwrap();
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(line["state"]["state"], "not_started");
}

#[test]
fn bad_mcp_tables_name_file_line_and_key() {
    let home = crate::common::TestHome::new();
    let cfg = home.write_config("config.toml", "[mcp.x]\ncommand = \"a\"\nbogus = 1\n");
    let out = home.familiar().args(["mcp", "list"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("{}:3: key `mcp.x.bogus`", cfg.display())),
        "{stderr}"
    );
    home.write_config("config.toml", "[mcp.x]\nargs = [\"a\"]\n");
    let out = home.familiar().args(["mcp", "list"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("key `mcp.x.command`: a `command` or a `url` is needed"),
        "{stderr}"
    );
}

/// A loopback streamable-HTTP MCP server (rmcp's server side behind hyper); its address.
async fn http_server() -> std::net::SocketAddr {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = StreamableHttpService::new(
        || Ok(server::TestServer),
        std::sync::Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let svc = hyper_util::service::TowerToHyperService::new(service.clone());
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc),
            );
        }
    });
    addr
}

#[tokio::test]
async fn a_url_server_is_reached_over_streamable_http() {
    let addr = http_server().await;
    let tmp = tempfile::tempdir().unwrap();
    let config = McpServerConfig {
        name: "web".to_owned(),
        transport: McpTransport::Http {
            url: format!("http://{addr}/mcp"),
        },
        env: BTreeMap::new(),
        tier: Tier::Read,
        tools: BTreeMap::new(),
        read: Vec::new(),
        write: Vec::new(),
        network: false,
        udp: false,
    };
    let hub = hub(tmp.path(), vec![config]);
    let cancel = CancellationToken::new();
    let tools = hub.tools("web", &cancel).await.unwrap();
    assert_eq!(tools.len(), 3);
    let echoed = hub
        .call("web", "echo", json!({"text": "over http"}), &cancel)
        .await
        .unwrap();
    assert_eq!(echoed, "over http");
    hub.shutdown().await;
}

// Regression: garbage on a server's stdout was skipped and the call waited out its
// timeout (300 s in a task).
#[tokio::test]
async fn garbage_on_stdout_fails_the_call_at_once_with_a_clear_error() {
    if !landlock_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let hub = hub(tmp.path(), vec![config("noisy", "garble", Vec::new())]);
    let cancel = CancellationToken::new();
    // A safety net only: without the fix the call never ends.
    let failed = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        hub.call("noisy", "garble", json!({}), &cancel),
    )
    .await
    .expect("the call waited instead of failing");
    match failed {
        Err(McpError::Protocol { message, .. }) => assert!(
            message.contains("not a JSON-RPC message on stdout")
                && message.contains(r"`Server ready! \x1b[1mwelcome\x1b[0m`"),
            "{message}"
        ),
        other => panic!("expected a protocol error, got {other:?}"),
    }
    hub.shutdown().await;
}

// Regression: a 10 MB description went into every request; duplicate names and any
// number of tools were offered.
#[tokio::test]
async fn a_bloated_tool_list_is_bounded() {
    if !landlock_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let hub = hub(tmp.path(), vec![config("big", "bloated", Vec::new())]);
    let tools = hub.tools("big", &CancellationToken::new()).await.unwrap();
    assert_eq!(tools.len(), familiar::mcp::client::MAX_TOOLS);
    assert_eq!(tools[0].name, "echo");
    assert_eq!(tools[1].name, "t0000");
    assert!(
        tools[0].description.len() <= familiar::mcp::client::MAX_DESCRIPTION_CHARS + 8,
        "{}",
        tools[0].description.len()
    );
    assert!(tools.iter().all(|t| t.name.len() <= 64));
    hub.shutdown().await;
}

/// Set in the probe's environment: the run whose peak memory the flood test reads.
const FLOOD_PROBE_ENV: &str = "FAMILIAR_TEST_FLOOD_PROBE";
/// What the flooding server writes to stderr, without a newline.
const FLOOD_BYTES: u64 = 256 << 20;

/// Does nothing in a normal run. In the probe (see the test below): starts a server that
/// writes [`FLOOD_BYTES`] to stderr with no newline and exits, waits for the start to
/// fail, and prints this process's peak RSS.
#[tokio::test]
async fn flood_probe() {
    if std::env::var_os(FLOOD_PROBE_ENV).is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut flood = config("flood", "ok", Vec::new());
    flood.transport = McpTransport::Stdio {
        command: "sh".to_owned(),
        args: vec![
            "-c".to_owned(),
            format!(
                "/usr/bin/yes aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa | /usr/bin/tr -d '\\n' | /usr/bin/head -c {FLOOD_BYTES} >&2"
            ),
        ],
    };
    let hub = hub(tmp.path(), vec![flood]);
    let e = hub
        .tools("flood", &CancellationToken::new())
        .await
        .unwrap_err();
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .unwrap()
        .trim()
        .to_owned();
    println!("FLOOD_PROBE VmHWM={hwm} error={e}");
}

// Regression: an MCP server writing 2.6 GB to stderr with no newline took the daemon
// to 2.5 GiB. The probe runs in a process of its own, so no other test's memory counts.
#[tokio::test]
async fn a_server_flooding_stderr_without_newlines_costs_bounded_memory() {
    if !landlock_available() {
        return;
    }
    let out = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "suite::mcp::flood_probe",
            "--nocapture",
            "-q",
            "--test-threads=1",
        ])
        .env(FLOOD_PROBE_ENV, "1")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("FLOOD_PROBE"))
        .unwrap_or_else(|| panic!("no probe line in {stdout}"));
    let kib: u64 = line
        .split("VmHWM=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    eprintln!("{line}");
    // Generous: the test binary itself is a few tens of MiB; the flood is 256 MiB.
    assert!(
        kib < 128 * 1024,
        "peak RSS {kib} KiB under a {FLOOD_BYTES}-byte flood"
    );
}

/// Regression: an MCP server starts before any approval and lives as long as the
/// daemon; the first thing a hostile one did was connect to the session bus. From the
/// server's own start-up, every unix socket is refused by the kernel (EACCES).
#[tokio::test]
async fn a_stdio_server_cannot_reach_the_session_bus_or_any_unix_socket() {
    if !landlock_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("server");
    std::fs::create_dir_all(&dir).unwrap();
    let bus_path = tmp.path().join("bus");
    let _bus = std::os::unix::net::UnixListener::bind(&bus_path).unwrap();
    let probe = dir.join("probe.py");
    std::fs::write(
        &probe,
        "import socket, sys\ntry:\n    socket.socket(socket.AF_UNIX).connect(sys.argv[1])\n    print('connected')\nexcept OSError as e:\n    print('errno', e.errno)\n",
    )
    .unwrap();
    let result = dir.join("result");
    let mut server = config("hostile", "ok", vec![dir.clone()]);
    let McpTransport::Stdio { command, args } = server.transport.clone() else {
        unreachable!()
    };
    // The probe runs first, as the server's own start-up would, then the real server.
    let [flag, script, rest @ ..] = args.as_slice() else {
        unreachable!("sh -c SCRIPT ARGS")
    };
    let wrapped = format!(
        "python3 {} {} > {} 2>&1; {}",
        probe.display(),
        bus_path.display(),
        result.display(),
        script
    );
    assert_eq!(command, "sh");
    server.transport = McpTransport::Stdio {
        command,
        args: [flag.clone(), wrapped]
            .into_iter()
            .chain(rest.iter().cloned())
            .collect(),
    };
    let hub = hub(tmp.path(), vec![server]);
    hub.tools("hostile", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(&result).unwrap(), "errno 13\n");
    hub.shutdown().await;
}

/// Regression: stdio servers started with SIGTERM, SIGINT, SIGHUP, SIGCHLD
/// and SIGALRM blocked (the sandbox helper's mask), so every stop waited the helper's
/// grace second and SIGKILLed them (`mcp list` took over a second). The server starts
/// with no signal blocked, and a stop ends it by its SIGTERM: the helper, which ends the
/// way the server did, ends by SIGTERM, not by the SIGKILL of the grace period.
#[tokio::test]
async fn a_stdio_server_starts_with_no_signal_blocked_and_stops_on_sigterm() {
    use std::os::unix::process::ExitStatusExt;
    if !landlock_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let workspace = tmp.path().join("state");
    let exe = std::env::current_exe().unwrap();
    let spec = familiar::sandbox::SandboxSpec {
        read: vec![exe.parent().unwrap().to_owned()],
        write: Vec::new(),
        network: false,
        udp: false,
        require: false,
        startup: Vec::new(),
        destroy: Vec::new(),
        sockets: Vec::new(),
        bus_talk: Vec::new(),
    };
    let mut policy =
        familiar::sandbox::SandboxPolicy::new(&spec, &[], &workspace, tmp.path()).unwrap();
    policy
        .env
        .push((server::MODE_ENV.to_owned(), "ok".to_owned()));
    let (command, args) = server::argv();
    let argv: Vec<String> = std::iter::once(command).chain(args).collect();
    let started = familiar::mcp::stdio::spawn("files", &launcher(), &policy, &argv)
        .await
        .unwrap();
    let cancel = CancellationToken::new();
    // Connected: the server has answered, so it has written its pid.
    let conn = familiar::mcp::McpConnection::over_stdio(
        "files",
        started,
        std::time::Duration::from_secs(60),
        &cancel,
    )
    .await
    .unwrap();
    // What the server read from /proc/thread-self/status as it started.
    let blocked = std::fs::read_to_string(workspace.join("server.sigblk")).unwrap();
    // Its state folder is the user's alone, like the rest of the data dir.
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&workspace).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o700);
    assert_eq!(blocked, "0000000000000000");
    let status = conn.shutdown().await.expect("the helper's exit");
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
}
