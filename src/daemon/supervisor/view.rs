//! What the owner shows of its tasks: the `ListTasks` rows and the `GetTask` view, the
//! protocol crate's types ([`familiar_protocol::query`]).

use std::sync::Arc;

use familiar_protocol::ids::TaskId;
use familiar_protocol::query::{PendingApproval, TaskRow, TaskView};
use familiar_protocol::task::Usage;
use familiar_protocol::{Error, LIST_PROMPT_CHARS};
use tokio::sync::oneshot;

use super::control::unknown_task;
use super::{Supervisor, send_reply};

impl<E: super::Effects> Supervisor<E> {
    /// One row per known task, oldest first, sub-tasks after their parent.
    pub(super) fn list_tasks(&self) -> Vec<TaskRow> {
        self.order
            .iter()
            .filter_map(|id| self.tasks.get(id).map(|e| (id, e)))
            .map(|(id, e)| TaskRow {
                id: id.to_string(),
                soul: e.spec.soul.id.to_string(),
                status: e.status.as_str().to_owned(),
                prompt: e.spec.prompt.chars().take(LIST_PROMPT_CHARS).collect(),
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
        let approvals = self.shared.runtime.services().approvals.pending_for(id);
        let mut view = TaskView {
            id: id.clone(),
            session_id: e.session_id.clone(),
            soul: e.spec.soul.id.clone(),
            status: e.status.as_str().to_owned(),
            prompt: e.spec.prompt.clone(),
            origin: e.spec.origin.clone(),
            plan: None,
            usage: e.usage,
            result: e.result.clone(),
            // Without a notification server nothing else shows these.
            approvals: approvals
                .iter()
                .map(|r| PendingApproval {
                    request_id: r.request_id.clone(),
                    tool: r.tool.clone(),
                    tier: r.tier,
                    summary: r.summary.clone(),
                    reason: r.reason.clone(),
                    // The timed grant's label; None: the request is always asked.
                    grant: r.grant.label(),
                })
                .collect(),
            parent_task: e.parent.clone(),
            parent_session,
            children: e.children.clone(),
            // From the change record (below): what it changed outside its workspace.
            changes: None,
            undoable: false,
        };
        let store = Arc::clone(&self.shared.runtime.services().store);
        let (session, task) = (e.session_id.clone(), id.clone());
        // The plan lives in the session context, which the loop persists each step;
        // read it off the owner's thread.
        tokio::task::spawn_blocking(move || {
            if let Ok(Some(ctx)) = store.load_context(&session)
                && let Some(t) = ctx.tasks.iter().find(|t| t.task_id == task)
            {
                view.plan = Some(t.plan.clone());
                if view.usage == Usage::default() {
                    view.usage = t.usage;
                }
            }
            match store.changes(&task) {
                Ok(Some(record)) => {
                    view.changes = record.summary();
                    view.undoable = record.undoable();
                }
                Ok(None) => {}
                // The rest of the task is still worth showing.
                Err(e) => tracing::warn!(task_id = %task, "{e}"),
            }
            send_reply(reply, Ok(view.to_json()));
        });
    }
}
