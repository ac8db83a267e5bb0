//! Delegated sub-tasks as the owner sees them: the event forwarder notices a
//! sub-task starting and ending inside its parent's tool call, and the owner lists it
//! next to its parent (it never queues or runs it: the parent's `delegate` call does).

use std::collections::HashMap;
use std::sync::Arc;

use familiar_protocol::events::{Event, EventPayload};
use familiar_protocol::ids::{SessionId, SoulId, TaskId};
use familiar_protocol::task::{TaskStatus, Usage};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Effects, Entry, Supervisor};
use crate::agent::TaskSpec;
use crate::agent::steering::Steering;
use crate::daemon::Op;

/// What the event forwarder saw of a delegated sub-task.
pub enum ChildNote {
    Started {
        child: TaskId,
        parent: TaskId,
        session_id: SessionId,
        soul: SoulId,
        prompt: String,
    },
    Finished {
        child: TaskId,
        status: TaskStatus,
        result: String,
        usage: Usage,
    },
}

impl<E: Effects> Supervisor<E> {
    /// Records a sub-task next to its parent, so `ListTasks` and `GetTask` show it.
    pub(super) fn child(&mut self, note: ChildNote) {
        match note {
            ChildNote::Started {
                child,
                parent,
                session_id,
                soul,
                prompt,
            } => {
                let Some(p) = self.tasks.get_mut(&parent) else {
                    return;
                };
                p.children.push(child.clone());
                let rt = self.shared.runtime.get();
                let Ok(soul) = rt.settings.souls.get(soul.as_str()) else {
                    return;
                };
                // Listed, never run by the owner: its parent's tool call runs it.
                let entry = Entry {
                    session_id: session_id.clone(),
                    new_session: false,
                    spec: TaskSpec {
                        task_id: child.clone(),
                        soul: Arc::clone(soul),
                        prompt,
                        session: Some(session_id),
                        workspace: None,
                        origin: format!("delegate:{parent}"),
                        max_iterations: None,
                        parent: None,
                        steering: Steering::new(),
                        when: None,
                    },
                    status: TaskStatus::Running,
                    result: None,
                    usage: Usage::default(),
                    cancel: CancellationToken::new(),
                    parent: Some(parent.clone()),
                    children: Vec::new(),
                };
                self.tasks.insert(child.clone(), entry);
                // Listed right after its parent and its earlier siblings.
                let at = self
                    .order
                    .iter()
                    .rposition(|id| {
                        *id == parent
                            || self.tasks.get(id).and_then(|e| e.parent.as_ref()) == Some(&parent)
                    })
                    .map_or(self.order.len(), |i| i + 1);
                self.order.insert(at, child);
            }
            ChildNote::Finished {
                child,
                status,
                result,
                usage,
            } => {
                if let Some(e) = self.tasks.get_mut(&child) {
                    e.status = status;
                    e.result = Some(result);
                    e.usage = usage;
                }
            }
        }
    }
}

/// Emits every event of a task (and of its sub-tasks) as a `TaskEvent`, and tells the
/// owner about sub-tasks starting and ending.
pub(super) async fn forward_events<E: Effects>(
    effects: E,
    mut rx: mpsc::Receiver<Arc<Event>>,
    tx: mpsc::Sender<Op>,
) {
    // Sub-task id → its parent's, from `subagent_started`.
    let mut parents: HashMap<TaskId, TaskId> = HashMap::new();
    while let Some(ev) = rx.recv().await {
        effects.task_event(&ev).await;
        let note = if let EventPayload::SubagentStarted { child_task_id, .. } = &ev.payload {
            parents.insert(child_task_id.clone(), ev.task_id.clone());
            None
        } else if let EventPayload::TaskStarted { soul, prompt, .. } = &ev.payload {
            parents.get(&ev.task_id).map(|parent| ChildNote::Started {
                child: ev.task_id.clone(),
                parent: parent.clone(),
                session_id: ev.session_id.clone(),
                soul: soul.clone(),
                prompt: prompt.clone(),
            })
        } else if let EventPayload::TaskFinished {
            status,
            result,
            usage,
            ..
        } = &ev.payload
        {
            parents.get(&ev.task_id).map(|_| ChildNote::Finished {
                child: ev.task_id.clone(),
                status: *status,
                result: result.clone(),
                usage: *usage,
            })
        } else {
            None
        };
        if let Some(note) = note
            && tx.send(Op::Child(note)).await.is_err()
        {
            tracing::debug!("the supervisor is gone; a sub-task is not listed");
        }
    }
}
