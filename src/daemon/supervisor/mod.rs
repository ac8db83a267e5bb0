//! The owner of every task's state: the queue, the bounded pool, the session
//! exclusivity and cancellation.
//!
//! Invariants, kept by this one task and nobody else:
//! - at most `config.daemon.max_concurrent_tasks` tasks run; the rest wait in FIFO
//!   order, at most `queue_limit` of them;
//! - at most one queued-or-running task per session;
//! - every task that was accepted ends with exactly one `TaskFinished` signal, emitted
//!   after all of its `TaskEvent`s.
//!
//! Here: the owner's state and its loop, one [`Op`] at a time. A task's life (accepted,
//! queued, started, ended) is in `lifecycle.rs`; `Cancel` and `Steer` in `control.rs`;
//! sub-tasks a task delegates are recorded in `delegated.rs`; what `GetTask` and
//! `ListTasks` show is built in `view.rs`; running a task and telling the bus are its
//! [`Effects`] (`effects.rs`), recorded instead by the unit tests of the invariants
//! above (`tests.rs`).

mod control;
mod delegated;
mod effects;
mod lifecycle;
mod view;

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use familiar_protocol::ids::{SessionId, TaskId};
use familiar_protocol::task::{TaskStatus, Usage};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

pub use self::delegated::ChildNote;
use self::delegated::forward_events;
pub use self::effects::{BusEffects, Effects};
use super::{DaemonOptions, Op, Shared, notify};
use crate::agent::{TaskError, TaskOutcome, TaskSpec};

/// The result of a task the daemon's stop cancelled (SIGTERM: `systemctl --user
/// restart`, a logout): a follower learns why it ended, and how to go on.
const STOPPED_WITH_DAEMON: &str = "cancelled: the daemon stopped while the task ran; its session kept what was done (continue it with `familiar ask --session`)";

/// A runner's report: how its task ended.
pub struct Finished {
    task_id: TaskId,
    outcome: Result<TaskOutcome, TaskError>,
}

struct Entry {
    /// The key of `busy_sessions`; `spec.session` is the same id (a new session's is
    /// made at `Submit`, so it is known before the task starts).
    session_id: SessionId,
    /// No context file exists yet: the runner creates it.
    new_session: bool,
    /// What the runner runs; its `steering` is where `Steer` puts messages for it.
    spec: TaskSpec,
    status: TaskStatus,
    result: Option<String>,
    usage: Usage,
    cancel: CancellationToken,
    /// Set for a delegated sub-task: it runs inside its parent's tool call.
    parent: Option<TaskId>,
    children: Vec<TaskId>,
}

pub struct Supervisor<E: Effects> {
    shared: Arc<Shared>,
    effects: E,
    tx: mpsc::Sender<Op>,
    tasks: HashMap<TaskId, Entry>,
    /// Every known task, oldest first (for listing and for forgetting old ones).
    order: VecDeque<TaskId>,
    queue: VecDeque<TaskId>,
    running: usize,
    busy_sessions: HashSet<SessionId>,
    shutting_down: bool,
    sd_notify: bool,
}

/// Runs the owner until shutdown has drained every task.
pub async fn run<E: Effects>(
    mut sup: Supervisor<E>,
    mut rx: mpsc::Receiver<Op>,
    options: DaemonOptions,
) {
    sup.sd_notify = options.sd_notify;
    // Pinged from this loop, so systemd restarts a daemon whose owner is stuck.
    let mut watchdog = options.watchdog.map(tokio::time::interval);
    loop {
        let op = tokio::select! {
            op = rx.recv() => op,
            _ = async {
                match watchdog.as_mut() {
                    Some(w) => w.tick().await,
                    None => std::future::pending().await,
                }
            } => {
                notify(sup.sd_notify, &[sd_notify::NotifyState::Watchdog]);
                continue;
            }
        };
        let Some(op) = op else { break };
        sup.handle(op).await;
        if sup.shutting_down && sup.running == 0 {
            break;
        }
    }
}

impl<E: Effects> Supervisor<E> {
    pub fn new(shared: Arc<Shared>, effects: E, tx: mpsc::Sender<Op>) -> Supervisor<E> {
        Supervisor {
            shared,
            effects,
            tx,
            tasks: HashMap::new(),
            order: VecDeque::new(),
            queue: VecDeque::new(),
            running: 0,
            busy_sessions: HashSet::new(),
            shutting_down: false,
            sd_notify: false,
        }
    }

    async fn handle(&mut self, op: Op) {
        match op {
            Op::Submit { req, reply } => {
                let answer = self.submit(req);
                send_reply(reply, answer);
                self.schedule();
                self.publish_counts().await;
            }
            Op::Cancel { id, reply } => {
                let answer = self.cancel(&id).await;
                send_reply(reply, answer);
                self.publish_counts().await;
            }
            Op::Steer { id, message, reply } => send_reply(reply, self.steer(&id, message)),
            Op::GetTask { id, reply } => self.get_task(&id, reply),
            Op::ListTasks { reply } => send_reply(reply, self.list_tasks()),
            Op::Child(note) => self.child(note),
            Op::Finished(f) => {
                self.finished(f).await;
                self.schedule();
                self.publish_counts().await;
                if self.running == 0 && self.queue.is_empty() {
                    super::trim::set_idle(true);
                    self.shared.runtime.services().plans.clear();
                    super::trim::release_freed_memory();
                }
            }
            Op::Shutdown => {
                self.shutting_down = true;
                self.shared.shutting_down.store(true, Ordering::SeqCst);
                let queued: Vec<TaskId> = self.queue.drain(..).collect();
                for id in queued {
                    self.finish_unstarted(&id, TaskStatus::Cancelled, STOPPED_WITH_DAEMON)
                        .await;
                }
                for e in self.tasks.values() {
                    if e.status == TaskStatus::Running {
                        e.cancel.cancel();
                    }
                }
                self.publish_counts().await;
            }
        }
    }
}

/// A caller that hung up before the answer is not an error of ours.
fn send_reply<T>(reply: oneshot::Sender<T>, value: T) {
    if reply.send(value).is_err() {
        tracing::debug!("the caller went away before the answer");
    }
}
