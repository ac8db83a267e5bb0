//! The hooks fire where things happen, and they alone feed the metrics and the audit log
//! (`before_tool` used to fire after the tools had run).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use familiar::agent::hooks::{Hooks, TaskRef, ToolCallRef};
use familiar::catalog;
use familiar::llm::{LlmError, Request};
use familiar::store::AuditOutcome;
use familiar_protocol::task::{TaskStatus, Usage};
use futures::FutureExt;
use serde_json::json;

use crate::common::harness::*;

/// Writes down every hook call; `ran` counts the runs of the test's write tool.
struct Recorder {
    ran: Arc<AtomicUsize>,
    log: Mutex<Vec<String>>,
}

impl Recorder {
    fn push(&self, line: String) {
        self.log.lock().unwrap().push(line);
    }
}

impl Hooks for Recorder {
    fn before_llm(&self, _task: &TaskRef<'_>, _request: &Request) {
        self.push("before_llm".into());
    }
    fn after_llm(&self, _task: &TaskRef<'_>, result: Result<&Usage, &LlmError>) {
        self.push(format!("after_llm ok={}", result.is_ok()));
    }
    fn before_tool(&self, _task: &TaskRef<'_>, call: &ToolCallRef<'_>) {
        let ran = self.ran.load(Ordering::SeqCst);
        self.push(format!(
            "before_tool {} {:?} ran={ran}",
            call.tool, call.decision
        ));
    }
    fn after_tool(&self, _task: &TaskRef<'_>, call: &ToolCallRef<'_>, outcome: AuditOutcome) {
        let ran = self.ran.load(Ordering::SeqCst);
        self.push(format!(
            "after_tool {} {:?} {outcome:?} ran={ran}",
            call.tool, call.decision
        ));
    }
    fn task_finished(&self, _task: &TaskRef<'_>, status: TaskStatus) {
        self.push(format!("task_finished {status:?}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_tool_fires_before_the_tool_runs_and_never_for_a_refused_call() {
    let h = Harness::builder(vec![
        tools_reply(&[
            (
                "c1",
                "write_file",
                json!({"path": "out.txt", "content": "x"}),
            ),
            ("c2", "read_file", json!({"path": "~/.ssh/id_ed25519"})),
        ]),
        text_reply("done"),
    ])
    .policy(OPEN_POLICY)
    .build()
    .await;
    let ran = Arc::new(AtomicUsize::new(0));
    let r = Arc::clone(&ran);
    let writer = fn_tool(&catalog::WRITE_FILE, move |_, _| {
        r.fetch_add(1, Ordering::SeqCst);
        async { Ok("written".to_owned()) }.boxed()
    });
    let recorder = Arc::new(Recorder {
        ran,
        log: Mutex::new(Vec::new()),
    });
    let rt = h.runtime_with_hooks(builtin_plus(vec![writer]), vec![recorder.clone()]);
    let soul = h.soul("tools = [\"read_file\", \"write_file\"]\n");
    let (out, _) = h
        .run(rt, h.spec(soul, "write, then read my key", None))
        .await;
    assert_eq!(out.status, TaskStatus::Completed);
    assert_eq!(
        *recorder.log.lock().unwrap(),
        [
            "before_llm",
            "before_tool write_file Allowed ran=0",
            "after_llm ok=true",
            "after_tool write_file Allowed Succeeded ran=1",
            "after_tool read_file Denied NotRun ran=1",
            "before_llm",
            "after_llm ok=true",
            "task_finished Completed",
        ]
    );
    let m = h.metrics.snapshot();
    assert_eq!(
        (
            m["llm_requests"],
            m["tool_executions"],
            m["permission_denials"],
            m["tasks_completed"]
        ),
        (2, 1, 1, 1)
    );
}
