//! Things that never answer: a tool that hangs, a command past its timeout, a
//! notification server that takes an approval and never replies; and files edited to
//! garbage under a running daemon. Each ends in a status, and the daemon serves on.

use std::collections::HashMap;
use std::sync::Arc;

use familiar::catalog::ToolInfo;
use familiar::tools::{Tool, ToolContext, ToolError};
use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::json;

use super::*;
use crate::common::fixture::{Fixture, Watch};
use crate::common::harness::{OPEN_POLICY, text_reply, tools_reply};

/// `notify` that never returns, as a call to a hung desktop service would.
struct Hangs;

impl Tool for Hangs {
    fn info(&self) -> &'static ToolInfo {
        familiar::catalog::info("notify").unwrap()
    }
    fn description(&self) -> &'static str {
        "never returns"
    }
    fn schema(&self) -> serde_json::Value {
        json!({"type": "object"})
    }
    fn execute(
        &self,
        _args: serde_json::Value,
        _ctx: ToolContext,
    ) -> BoxFuture<'static, Result<String, ToolError>> {
        std::future::pending().boxed()
    }
}

const HANGING_SOUL: &str = "id = \"hangs\"\ndescription = \"a tool that hangs\"\nprompt = \"p\"\nmax_wall_clock = \"2s\"\ntools = [\"notify\"]\n";
const SLOW_SOUL: &str =
    "id = \"slow\"\ndescription = \"a slow command\"\nprompt = \"p\"\ntools = [\"shell\"]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_tool_ends_at_the_wall_clock_and_a_slow_command_at_its_timeout() {
    let shell = Arc::clone(familiar::tools::Registry::builtin().get("shell").unwrap());
    let f = Fixture::builder(vec![
        tools_reply(&[("c1", "notify", json!({"summary": "hi"}))]),
        tools_reply(&[(
            "c2",
            "shell",
            json!({"command": "sleep 300", "timeout_secs": 1}),
        )]),
        text_reply("the command was slow"),
    ])
    .policy(OPEN_POLICY)
    .soul("hangs", HANGING_SOUL)
    .soul("slow", SLOW_SOUL)
    .tools(vec![Arc::new(Hangs), shell])
    .start()
    .await;
    let mut w = Watch::new(&f.proxy).await;
    let (hung, _) = f.submit("hangs", "notify me").await.unwrap();
    w.event(&hung, "tool_call_started").await;
    // While that tool hangs, another session's task runs its command to the timeout.
    let (slow, _) = f.submit("slow", "run it").await.unwrap();
    let events = w.events(&slow).await;
    let (_, done) = events.last().unwrap();
    assert_eq!(done["status"], "completed", "{done}");
    let finished = events
        .iter()
        .find(|(k, _)| k == "tool_call_finished")
        .unwrap();
    assert!(
        finished.1["preview"]
            .as_str()
            .unwrap()
            .contains("timed out after 1s"),
        "{}",
        finished.1
    );
    let (status, result) = w.finished(&hung).await;
    assert_eq!(status, "timeout", "{result}");
    assert!(result.contains("wall-clock"), "{result}");
    assert!(f.proxy.list_tasks().await.unwrap().len() >= 2);
}

/// A notification server that accepts `Notify` and never replies.
struct Silent;

#[zbus::interface(name = "org.freedesktop.Notifications")]
impl Silent {
    #[allow(clippy::too_many_arguments)]
    async fn notify(
        &self,
        _app_name: String,
        _replaces_id: u32,
        _app_icon: String,
        _summary: String,
        _body: String,
        _actions: Vec<String>,
        _hints: HashMap<String, zbus::OwnedVariant>,
        _expire_timeout: i32,
    ) -> u32 {
        std::future::pending::<()>().await;
        0
    }

    fn get_capabilities(&self) -> Vec<String> {
        vec!["actions".into()]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_nobody_answers_times_out_as_a_denial() {
    let write = tools_reply(&[("c1", "write_file", json!({"path": "n.txt", "content": "x"}))]);
    let f = Fixture::builder(vec![
        write,
        text_reply("not allowed, fine"),
        text_reply("next"),
    ])
    .policy("approval_timeout = \"1s\"\n[tiers]\nread = \"allow\"\nwrite = \"ask\"\n")
    .start()
    .await;
    let _server = zbus::connection::Builder::address(f.bus.address.as_str())
        .serve_at("/org/freedesktop/Notifications", Silent)
        .name("org.freedesktop.Notifications")
        .build()
        .await
        .unwrap();
    let mut w = Watch::new(&f.proxy).await;
    let ws = f.workspace();
    let opts = HashMap::from([("workspace", zbus::Variant::from(ws.to_str().unwrap()))]);
    let (task, _) = f.proxy.submit("test", "write", opts).await.unwrap();
    let resolved = w.event(&task, "approval_resolved").await;
    assert_eq!(resolved["approved"], false, "{resolved}");
    assert_eq!(w.finished(&task).await.0, "completed");
    assert!(!ws.join("n.txt").exists());
    let (next, _) = f.submit("test", "next").await.unwrap();
    assert_eq!(w.finished(&next).await.0, "completed");
}

/// The daemon reads config, policy and souls once at start: garbage written over them
/// while it runs changes nothing until a restart, which then refuses to start and names
/// the file, line and key (so systemd shows why).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_edited_to_garbage_under_the_daemon_are_named_at_the_next_start() {
    let server = LlmServer::start(vec![text_reply("first"), text_reply("second")]).await;
    let home = TestHome::new();
    write_config(&home, &server, "");
    home.write_config(
        "souls/mine.toml",
        "id = \"mine\"\ndescription = \"mine\"\nprompt = \"p\"\ntools = [\"read_file\"]\n",
    );
    let bus = TestBus::start();
    let daemon = RealDaemon::start(&bus, &home).await;
    let proxy = familiar_protocol::proxy::Agent1Proxy::new(&bus.connect().await)
        .await
        .unwrap();
    let mut finished = proxy.receive_task_finished().await.unwrap();
    let config = home.write_config("config.toml", "[providers.local\nbase_url = ");
    home.write_config("souls/mine.toml", "id = 42\x00\u{feff}garbage");
    let (task, _) = proxy
        .submit("mine", "still there?", HashMap::new())
        .await
        .unwrap();
    let result = tokio::time::timeout(PATIENCE, async {
        use futures::StreamExt;
        while let Some(sig) = finished.next().await {
            let a = sig.args().unwrap();
            if a.task_id == task {
                return (a.status.clone(), a.result.clone());
            }
        }
        panic!("signal stream ended")
    })
    .await
    .unwrap();
    assert_eq!(result, ("completed".to_owned(), "first".to_owned()));
    drop(daemon);

    let out = tokio::task::spawn_blocking({
        let mut cmd = home.familiar();
        cmd.env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
            .arg("daemon");
        move || cmd.output().unwrap()
    })
    .await
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(config.to_str().unwrap()), "{err}");
}
