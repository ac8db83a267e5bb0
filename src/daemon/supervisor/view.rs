//! What the owner shows of its tasks: the `ListTasks` rows and the `GetTask` JSON.

use std::sync::Arc;

use serde_json::json;
use tokio::sync::oneshot;

use super::control::unknown_task;
use super::{Supervisor, send_reply};
use crate::dbus::{Error, LIST_PROMPT_CHARS};
use crate::ids::TaskId;
use crate::llm::Usage;

impl<E: super::Effects> Supervisor<E> {
    /// One row per known task, oldest first, sub-tasks after their parent.
    pub(super) fn list_tasks(&self) -> Vec<(String, String, String, String)> {
        self.order
            .iter()
            .filter_map(|id| self.tasks.get(id).map(|e| (id, e)))
            .map(|(id, e)| {
                (
                    id.to_string(),
                    e.spec.soul.id.to_string(),
                    e.status.as_str().to_owned(),
                    e.spec.prompt.chars().take(LIST_PROMPT_CHARS).collect(),
                )
            })
            .collect()
    }

    pub(super) fn get_task(&self, id: &TaskId, reply: oneshot::Sender<Result<String, Error>>) {
        let Some(e) = self.tasks.get(id) else {
            send_reply(reply, Err(unknown_task(id)));
            return;
        };
        let parent_session = e
            .parent
            .as_ref()
            .and_then(|p| self.tasks.get(p))
            .map(|p| p.session_id.clone());
        let mut v = json!({
            "id": id,
            "session_id": e.session_id,
            "soul": e.spec.soul.id,
            "status": e.status,
            "prompt": e.spec.prompt,
            "origin": e.spec.origin,
            "plan": null,
            "usage": e.usage,
            "result": e.result,
            // Without a notification server nothing else shows these.
            "approvals": self
                .shared
                .runtime
                .services().approvals
                .pending_for(id)
                .iter()
                .map(|r| json!({
                    "request_id": r.request_id,
                    "tool": r.tool,
                    "tier": r.tier,
                    "summary": r.summary,
                    "reason": r.reason,
                    // The timed grant's label; null: the request is always asked.
                    "grant": r.grant.label(),
                }))
                .collect::<Vec<_>>(),
            "parent_task": e.parent,
            "parent_session": parent_session,
            "children": e.children,
            // From the change record (below): what it changed outside its workspace.
            "changes": null,
            "undoable": false,
        });
        let store = Arc::clone(&self.shared.runtime.services().store);
        let (session, task) = (e.session_id.clone(), id.clone());
        // The plan lives in the session context, which the loop persists each step;
        // read it off the owner's thread.
        tokio::task::spawn_blocking(move || {
            if let Ok(Some(ctx)) = store.load_context(&session)
                && let Some(t) = ctx.tasks.iter().find(|t| t.task_id == task)
            {
                v["plan"] = serde_json::to_value(&t.plan).unwrap_or_default();
                if v["usage"] == json!(Usage::default()) {
                    v["usage"] = serde_json::to_value(t.usage).unwrap_or_default();
                }
            }
            match store.changes(&task) {
                Ok(Some(record)) => {
                    v["changes"] = json!(record.summary());
                    v["undoable"] = json!(record.undoable());
                }
                Ok(None) => {}
                // The rest of the task is still worth showing.
                Err(e) => tracing::warn!(task_id = %task, "{e}"),
            }
            send_reply(reply, Ok(v.to_string()));
        });
    }
}
