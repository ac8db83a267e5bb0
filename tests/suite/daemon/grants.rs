//! Timed grants ("Allow … for this task") through the real daemon: a grant covers
//! the task's later calls of the same scope only (tool, action, what the call is
//! about), and a request that is always asked offers none (`GetTask`'s `grant` is
//! null) and `Grant` refuses it with `NotGrantable`. Regressions of issue 39.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use familiar::catalog::{self, ToolInfo};
use familiar::daemon::DaemonOptions;
use familiar::tools::Tool;
use futures::FutureExt;
use serde_json::{Value, json};

use super::*;
use crate::common::harness::{fn_tool, text_reply, tools_reply};
use crate::common::llm_server::Reply;

/// A soul of one tool, `tool`.
fn soul(id: &str, tool: &str) -> String {
    format!("id = \"{id}\"\ndescription = \"d\"\nprompt = \"p\"\ntools = [\"{tool}\"]\n")
}

/// A stand-in for `info`'s tool that records the arguments it ran with.
fn recording(info: &'static ToolInfo) -> (Arc<dyn Tool>, Arc<Mutex<Vec<Value>>>) {
    let ran = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&ran);
    let tool = fn_tool(info, move |args, _| {
        seen.lock().unwrap().push(args);
        async { Ok("done".to_owned()) }.boxed()
    });
    (tool, ran)
}

/// One call per turn, then a closing answer.
fn one_by_one(tool: &str, calls: &[Value]) -> Vec<Reply> {
    let mut script: Vec<Reply> = calls
        .iter()
        .enumerate()
        .map(|(i, args)| tools_reply(&[(&format!("c{i}"), tool, args.clone())]))
        .collect();
    script.push(text_reply("done"));
    script
}

async fn fixture(
    script: Vec<Reply>,
    policy: &str,
    soul_id: &str,
    tool: &str,
    extra: Vec<Arc<dyn Tool>>,
) -> Fixture {
    let options = DaemonOptions {
        notifications: false,
        ..Default::default()
    };
    let toml = soul(soul_id, tool);
    Fixture::builder(script)
        .policy(policy)
        .options(options)
        .soul(soul_id, &toml)
        .tools(extra)
        .start()
        .await
}

async fn submit(f: &Fixture, soul: &str) -> String {
    let ws = f.workspace();
    let opts = HashMap::from([("workspace", zbus::Variant::from(ws.to_str().unwrap()))]);
    f.proxy.submit(soul, "go", opts).await.unwrap().0
}

/// What `GetTask` offers as the timed grant of the task's waiting request.
async fn offered_grant(f: &Fixture, task: &str) -> Value {
    let json = f.proxy.get_task_json(task).await.unwrap();
    let v: Value = serde_json::from_str(&json).unwrap();
    let approvals = v["approvals"].as_array().unwrap();
    assert_eq!(approvals.len(), 1, "{v}");
    approvals[0]["grant"].clone()
}

/// How each approval of the task ended, in order (`approved`, `denied`, `granted`).
async fn outcomes(w: &mut Watch, task: &str) -> Vec<String> {
    w.events(task)
        .await
        .iter()
        .filter(|(k, _)| k == "approval_resolved")
        .map(|(_, p)| p["outcome"]["outcome"].as_str().unwrap().to_owned())
        .collect()
}

// Issue 39: a grant for `write_file` on `notes.txt` let `.git/hooks/post-checkout` be
// written unasked.
#[tokio::test]
async fn a_grant_on_a_file_covers_its_directory_not_a_git_hook() {
    let calls = [
        json!({"path": "notes.txt", "content": "a"}),
        json!({"path": ".git/hooks/post-checkout", "content": "#!/bin/sh\ntouch x"}),
        json!({"path": "todo.txt", "content": "b"}),
    ];
    let f = fixture(
        one_by_one("write_file", &calls),
        "[tiers]\nread = \"allow\"\nwrite = \"ask\"\n",
        "writer",
        "write_file",
        Vec::new(),
    )
    .await;
    std::fs::create_dir_all(f.workspace().join(".git/hooks")).unwrap();
    let mut w = Watch::new(&f.proxy).await;
    let task = submit(&f, "writer").await;

    let (notes, ..) = w.approval(&task).await;
    assert_eq!(
        offered_grant(&f, &task).await,
        "Allow write_file in ~/work/ for this task (10 min)"
    );
    f.proxy.grant(&notes, 600).await.unwrap();

    let (hook, tool, summary, _) = w.approval(&task).await;
    assert_eq!(
        (tool.as_str(), summary.lines().next()),
        ("write_file", Some("write_file: .git/hooks/post-checkout"))
    );
    assert_eq!(offered_grant(&f, &task).await, Value::Null);
    assert!(error_name(f.proxy.grant(&hook, 600).await).ends_with(".NotGrantable"));
    // Refused, it still waits: the answer it can take is the one.
    f.proxy.respond(&hook, false).await.unwrap();

    assert_eq!(
        outcomes(&mut w, &task).await,
        ["approved", "denied", "granted"]
    );
    assert!(f.workspace().join("todo.txt").exists());
    assert!(!f.workspace().join(".git/hooks/post-checkout").exists());
}

// Issue 39: after "Allow … for this task" on one `open`, a second `open` of another
// URL ran unasked. What runs outside the sandbox offers no grant, and is asked again.
#[tokio::test]
async fn a_second_open_is_asked_again() {
    let (open, ran) = recording(&catalog::OPEN);
    let calls = [
        json!({"target": "https://example.org/harmless"}),
        json!({"target": "https://example.org/other"}),
    ];
    let f = fixture(
        one_by_one("open", &calls),
        "[tiers]\nexecute = \"allow\"\n",
        "opener",
        "open",
        vec![open],
    )
    .await;
    let mut w = Watch::new(&f.proxy).await;
    let task = submit(&f, "opener").await;

    let (first, ..) = w.approval(&task).await;
    assert_eq!(offered_grant(&f, &task).await, Value::Null);
    assert!(error_name(f.proxy.grant(&first, 600).await).ends_with(".NotGrantable"));
    f.proxy.respond(&first, true).await.unwrap();

    let (second, _, summary, _) = w.approval(&task).await;
    assert_eq!(summary, "open: https://example.org/other");
    f.proxy.respond(&second, false).await.unwrap();

    assert_eq!(outcomes(&mut w, &task).await, ["approved", "denied"]);
    assert_eq!(*ran.lock().unwrap(), [calls[0].clone()]);
}

// Issue 39: a grant for `desktop_dispatch focus_window` would have let `launch` of any
// command through, unconfined.
#[tokio::test]
async fn a_grant_for_focus_window_does_not_cover_launch() {
    let (dispatch, ran) = recording(&catalog::DESKTOP_DISPATCH);
    let calls = [
        json!({"action": "focus_window", "window": "0x1"}),
        json!({"action": "launch", "command": "foot"}),
        json!({"action": "focus_window", "window": "0x2"}),
    ];
    let f = fixture(
        one_by_one("desktop_dispatch", &calls),
        "[tiers]\nexecute = \"ask\"\n",
        "desk",
        "desktop_dispatch",
        vec![dispatch],
    )
    .await;
    let mut w = Watch::new(&f.proxy).await;
    let task = submit(&f, "desk").await;

    let (focus, ..) = w.approval(&task).await;
    assert_eq!(
        offered_grant(&f, &task).await,
        "Allow desktop_dispatch focus_window for this task (10 min)"
    );
    f.proxy.grant(&focus, 600).await.unwrap();

    let (launch, _, summary, _) = w.approval(&task).await;
    assert!(summary.starts_with("desktop_dispatch: foot"), "{summary}");
    assert_eq!(offered_grant(&f, &task).await, Value::Null);
    f.proxy.respond(&launch, false).await.unwrap();

    assert_eq!(
        outcomes(&mut w, &task).await,
        ["approved", "denied", "granted"]
    );
    assert_eq!(*ran.lock().unwrap(), [calls[0].clone(), calls[2].clone()]);
}

/// A `system_critical` request offers no grant, and `Grant` refuses it.
#[tokio::test]
async fn a_system_critical_request_offers_no_grant() {
    let (power, ran) = recording(&catalog::POWER);
    let f = fixture(
        one_by_one("power", &[json!({"action": "suspend"})]),
        "[tiers]\nsystem_critical = \"ask\"\n",
        "admin",
        "power",
        vec![power],
    )
    .await;
    let mut w = Watch::new(&f.proxy).await;
    let task = submit(&f, "admin").await;
    let (request, ..) = w.approval(&task).await;
    assert_eq!(offered_grant(&f, &task).await, Value::Null);
    let refused = f.proxy.grant(&request, 60).await;
    let familiar_protocol::Error::NotGrantable(why) = refused.unwrap_err() else {
        panic!("not NotGrantable");
    };
    assert!(why.contains("system_critical"), "{why}");
    f.proxy.respond(&request, false).await.unwrap();
    assert_eq!(outcomes(&mut w, &task).await, ["denied"]);
    assert!(ran.lock().unwrap().is_empty());
}
