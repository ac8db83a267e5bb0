//! A task's life in the owner: accepted (`Submit`: the queue limit, the session taken),
//! started when the pool has room, its runner spawned with its event forwarder, and
//! ended once, with the counts published after each change.

use std::sync::atomic::Ordering;

use familiar_protocol::Error;
use familiar_protocol::ids::{SessionId, TaskId};
use familiar_protocol::task::{TaskStatus, Usage};
use tokio_util::sync::CancellationToken;

use super::{Effects, Entry, Finished, STOPPED_WITH_DAEMON, Supervisor, forward_events};
use crate::agent::TaskError;
use crate::agent::TaskSpec;
use crate::agent::events::{Delivery, EventBus};
use crate::agent::steering::Steering;
use crate::daemon::{MAX_FINISHED, Op, SubmitRequest, notify};
use crate::store::StoreError;

impl<E: Effects> Supervisor<E> {
    pub(super) fn submit(&mut self, req: SubmitRequest) -> Result<(TaskId, SessionId), Error> {
        if self.shutting_down {
            return Err(Error::shutting_down());
        }
        // config.toml's current [daemon] (it is reloaded like the souls).
        let limits = self.shared.runtime.get().settings.config.daemon.clone();
        if self.queue.len() >= limits.queue_limit as usize
            && self.running >= limits.max_concurrent_tasks as usize
        {
            return Err(Error::RateLimited(format!(
                "the queue is full ({} tasks waiting, {} running); wait for some to finish or cancel one (`familiar tasks`)",
                self.queue.len(),
                self.running
            )));
        }
        let (session_id, new_session) = match req.session {
            Some(id) => (id, false),
            None => (SessionId::generate(), true),
        };
        if self.busy_sessions.contains(&session_id) {
            return Err(Error::SessionBusy(format!(
                "session {session_id} already has a task queued or running; wait for its TaskFinished or cancel it"
            )));
        }
        // Checked after busy: a session whose first task has not started yet has no
        // file, and is busy, not unknown.
        if !new_session
            && !self
                .shared
                .runtime
                .services()
                .store
                .context_path(&session_id)
                .exists()
        {
            return Err(Error::UnknownSession(format!(
                "no session `{session_id}`; `familiar sessions` lists them, or leave `session` out to start a new one"
            )));
        }
        let task_id = TaskId::generate();
        tracing::info!(task_id = %task_id, session_id = %session_id, soul = %req.soul.id, origin = %req.origin, caller = %req.caller, "task submitted");
        self.busy_sessions.insert(session_id.clone());
        self.tasks.insert(
            task_id.clone(),
            Entry {
                session_id: session_id.clone(),
                new_session,
                spec: TaskSpec {
                    task_id: task_id.clone(),
                    soul: req.soul,
                    prompt: req.prompt,
                    session: Some(session_id.clone()),
                    workspace: req.workspace,
                    origin: req.origin,
                    max_iterations: req.max_iterations,
                    parent: None,
                    steering: Steering::new(),
                    when: req.when,
                },
                status: TaskStatus::Queued,
                result: None,
                usage: Usage::default(),
                cancel: CancellationToken::new(),
                parent: None,
                children: Vec::new(),
            },
        );
        self.order.push_back(task_id.clone());
        self.queue.push_back(task_id.clone());
        self.forget_old();
        Ok((task_id, session_id))
    }

    /// Starts queued tasks while the pool has room.
    pub(super) fn schedule(&mut self) {
        let max = self
            .shared
            .runtime
            .get()
            .settings
            .config
            .daemon
            .max_concurrent_tasks as usize;
        while self.running < max && !self.shutting_down {
            let Some(id) = self.queue.pop_front() else {
                break;
            };
            self.start(id);
        }
    }

    fn start(&mut self, task_id: TaskId) {
        let Some(e) = self.tasks.get_mut(&task_id) else {
            return;
        };
        crate::daemon::trim::set_idle(false);
        e.status = TaskStatus::Running;
        self.running += 1;
        let spec = e.spec.clone();
        let new_session = e.new_session;
        let cancel = e.cancel.clone();
        // The policy in force now (a reload since Submit applies to this task too).
        let rt = self.shared.runtime.get();
        let effects = self.effects.clone();
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let mut bus = EventBus::new();
            let rx = bus.subscribe(Delivery::DropWhenFull);
            let forwarder = tokio::spawn(forward_events(effects.clone(), rx, tx.clone()));
            let outcome = effects.run(rt, spec, new_session, bus, cancel).await;
            // The bus is gone with the task: the forwarder drains and ends, so every
            // TaskEvent is on the wire before the owner emits TaskFinished.
            if let Err(e) = forwarder.await {
                tracing::error!(task_id = %task_id, "the event forwarder failed: {e}");
            }
            if tx
                .send(Op::Finished(Finished {
                    task_id: task_id.clone(),
                    outcome,
                }))
                .await
                .is_err()
            {
                tracing::error!(task_id = %task_id, "the supervisor is gone; the task's end is not reported");
            }
        });
    }

    pub(super) async fn finished(&mut self, f: Finished) {
        self.running = self.running.saturating_sub(1);
        let (status, result, usage) = match f.outcome {
            Ok(o) => (o.status, o.result, o.usage),
            Err(TaskError::Store(StoreError::SessionBusy(id))) => (
                TaskStatus::Failed,
                format!(
                    "session {id} is busy in another process (a `familiar run`?); try again when it is done"
                ),
                Usage::default(),
            ),
            Err(e) => (
                TaskStatus::Failed,
                // Not only at the start: a store error (a full disk) can end it mid-way.
                format!("the task failed: {e}"),
                Usage::default(),
            ),
        };
        // Cancelled by the daemon's own stop, not by a person: say so.
        let result = match (self.shutting_down, status) {
            (true, TaskStatus::Cancelled) if result == "cancelled" => {
                STOPPED_WITH_DAEMON.to_owned()
            }
            (true, TaskStatus::Cancelled) => format!("{STOPPED_WITH_DAEMON} ({result})"),
            _ => result,
        };
        tracing::info!(task_id = %f.task_id, %status, result = %result, "task finished");
        self.record_end(&f.task_id, status, &result, usage).await;
    }

    pub(super) async fn finish_unstarted(&mut self, id: &TaskId, status: TaskStatus, result: &str) {
        self.record_end(id, status, result, Usage::default()).await;
    }

    async fn record_end(&mut self, id: &TaskId, status: TaskStatus, result: &str, usage: Usage) {
        if let Some(e) = self.tasks.get_mut(id) {
            e.status = status;
            e.result = Some(result.to_owned());
            e.usage = usage;
            self.busy_sessions.remove(&e.session_id);
        }
        self.effects.task_finished(id, status, result).await;
    }

    /// Forgets the oldest finished tasks past [`MAX_FINISHED`].
    fn forget_old(&mut self) {
        let mut finished = self
            .order
            .iter()
            .filter(|id| self.tasks.get(id).is_some_and(|e| e.status.is_finished()))
            .count();
        let tasks = &mut self.tasks;
        self.order.retain(|id| {
            if finished > MAX_FINISHED && tasks.get(id).is_some_and(|e| e.status.is_finished()) {
                tasks.remove(id);
                finished -= 1;
                false
            } else {
                true
            }
        });
    }

    /// Updates `ActiveTasks`, `Metrics` and the systemd status line.
    pub(super) async fn publish_counts(&self) {
        let active = (self.running + self.queue.len()) as u32;
        let before = self.shared.active.swap(active, Ordering::SeqCst);
        let status = format!("{} running, {} queued", self.running, self.queue.len());
        notify(self.sd_notify, &[sd_notify::NotifyState::Status(&status)]);
        self.effects.counts(before != active).await;
    }
}
