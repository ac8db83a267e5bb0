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
//! Sub-tasks a task delegates are recorded in `delegated.rs`; what `GetTask` and
//! `ListTasks` show is built in `view.rs`.

mod delegated;
mod view;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use zbus::Connection;
use zbus::object_server::SignalEmitter;

pub use self::delegated::ChildNote;
use self::delegated::forward_events;
use super::service::Service;
use super::{DaemonOptions, MAX_FINISHED, Op, Shared, SubmitRequest, notify};
use crate::agent::events::{Delivery, EventBus};
use crate::agent::steering::{MAX_UNREAD, SteerError, Steering};
use crate::agent::{TaskError, TaskOutcome, TaskSpec, run_task};
use crate::dbus::{self, Error};
use crate::ids::{SessionId, TaskId};
use crate::llm::Usage;
use crate::store::{Context, StoreError, TaskStatus};

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

pub struct Supervisor {
    shared: Arc<Shared>,
    conn: Connection,
    emitter: SignalEmitter<'static>,
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
pub async fn run(mut sup: Supervisor, mut rx: mpsc::Receiver<Op>, options: DaemonOptions) {
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

impl Supervisor {
    pub fn new(
        shared: Arc<Shared>,
        conn: Connection,
        emitter: SignalEmitter<'static>,
        tx: mpsc::Sender<Op>,
    ) -> Supervisor {
        Supervisor {
            shared,
            conn,
            emitter,
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
                    self.shared.rt.plans.clear();
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

    fn submit(&mut self, req: SubmitRequest) -> Result<(TaskId, SessionId), Error> {
        if self.shutting_down {
            return Err(Error::shutting_down());
        }
        // config.toml's current [daemon] (it is reloaded like the souls).
        let limits = self.shared.loaded.get().rt.config.daemon.clone();
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
        if !new_session && !self.shared.rt.store.context_path(&session_id).exists() {
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
    fn schedule(&mut self) {
        let max = self
            .shared
            .loaded
            .get()
            .rt
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
        super::trim::set_idle(false);
        e.status = TaskStatus::Running;
        self.running += 1;
        let spec = e.spec.clone();
        let new_session = e.new_session;
        let cancel = e.cancel.clone();
        // The policy in force now (a reload since Submit applies to this task too).
        let rt = self.shared.loaded.get().rt;
        let emitter = self.emitter.clone();
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let mut bus = EventBus::new();
            let rx = bus.subscribe(Delivery::DropWhenFull);
            let forwarder = tokio::spawn(forward_events(emitter, rx, tx.clone()));
            let outcome = match create_session(&rt, &spec, new_session) {
                Ok(()) => {
                    let store = Arc::clone(&rt.store);
                    let outcome = run_task(rt, spec, bus, cancel).await;
                    // A new session whose task never ran, or failed before the model
                    // answered, holds nothing to continue.
                    if let Ok(o) = &outcome
                        && new_session
                    {
                        crate::agent::discard_if_unanswered(&store, o);
                    }
                    outcome
                }
                Err(e) => Err(e.into()),
            };
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

    async fn finished(&mut self, f: Finished) {
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

    async fn cancel(&mut self, id: &TaskId) -> Result<(), Error> {
        let Some(e) = self.tasks.get(id) else {
            return Err(unknown_task(id));
        };
        if let Some(parent) = &e.parent {
            return Err(Error::InvalidArgument(format!(
                "task {id} is a sub-task of {parent}: cancel {parent}, which cancels its sub-tasks"
            )));
        }
        match e.status {
            TaskStatus::Queued => {
                self.queue.retain(|q| q != id);
                self.finish_unstarted(id, TaskStatus::Cancelled, "cancelled before it started")
                    .await;
                Ok(())
            }
            TaskStatus::Running => {
                e.cancel.cancel();
                Ok(())
            }
            // Cancelling a finished task changes nothing; saying so is not an error.
            // (`TaskStatus::is_finished` is the one list of finished statuses.)
            finished => {
                debug_assert!(finished.is_finished(), "{finished} is not finished");
                Ok(())
            }
        }
    }

    /// Hands `message` to a queued or running task's inbox.
    fn steer(&self, id: &TaskId, message: String) -> Result<(), Error> {
        let Some(e) = self.tasks.get(id) else {
            return Err(unknown_task(id));
        };
        if let Some(parent) = &e.parent {
            return Err(Error::InvalidArgument(format!(
                "task {id} is a sub-task of {parent}: steer {parent}, which can hand it on"
            )));
        }
        let not_running = || {
            Error::TaskNotRunning(format!(
                "task {id} has ended ({}); continue its session with `familiar ask --session {}`",
                e.status, e.session_id
            ))
        };
        if e.status.is_finished() {
            return Err(not_running());
        }
        match e.spec.steering.push(message) {
            Ok(()) => {
                tracing::info!(task_id = %id, "steering message accepted");
                Ok(())
            }
            Err(SteerError::Closed) => Err(not_running()),
            Err(SteerError::Full) => Err(Error::RateLimited(format!(
                "task {id} already holds {MAX_UNREAD} unread messages; wait for its next step"
            ))),
        }
    }

    async fn finish_unstarted(&mut self, id: &TaskId, status: TaskStatus, result: &str) {
        self.record_end(id, status, result, Usage::default()).await;
    }

    async fn record_end(&mut self, id: &TaskId, status: TaskStatus, result: &str, usage: Usage) {
        if let Some(e) = self.tasks.get_mut(id) {
            e.status = status;
            e.result = Some(result.to_owned());
            e.usage = usage;
            self.busy_sessions.remove(&e.session_id);
        }
        if let Err(e) =
            Service::task_finished(&self.emitter, id.as_str(), status.as_str(), result).await
        {
            tracing::warn!(task_id = %id, "cannot emit TaskFinished: {e}");
        }
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
    async fn publish_counts(&self) {
        let active = (self.running + self.queue.len()) as u32;
        let before = self.shared.active.swap(active, Ordering::SeqCst);
        let status = format!("{} running, {} queued", self.running, self.queue.len());
        notify(self.sd_notify, &[sd_notify::NotifyState::Status(&status)]);
        match self
            .conn
            .object_server()
            .interface::<_, Service>(dbus::PATH)
            .await
        {
            Ok(iface) => {
                let agent = iface.get().await;
                if before != active
                    && let Err(e) = agent.active_tasks_changed(iface.signal_emitter()).await
                {
                    tracing::warn!("cannot emit PropertiesChanged(ActiveTasks): {e}");
                }
                if let Err(e) = agent.metrics_changed(iface.signal_emitter()).await {
                    tracing::warn!("cannot emit PropertiesChanged(Metrics): {e}");
                }
            }
            Err(e) => tracing::warn!("the served object is gone: {e}"),
        }
    }
}

/// Creates the context of a new session, so `run_task` continues it.
///
/// Without the session lock, on purpose: the id is fresh and only `run_task` will lock
/// it. Taking the lock here and releasing it would open a window in which a process
/// spawned meanwhile (between its fork and exec) still shares the lock's open file, so
/// `run_task`'s own `try_lock` fails with a spurious SessionBusy. (It did, in the
/// parallel daemon tests; in the daemon, tool processes of other tasks do the same.)
fn create_session(
    rt: &crate::agent::Runtime,
    spec: &TaskSpec,
    new_session: bool,
) -> Result<(), StoreError> {
    let Some(id) = spec.session.as_ref().filter(|_| new_session) else {
        return Ok(());
    };
    crate::store::off_runtime(|| {
        rt.store.save_context(&mut Context::new(
            id.clone(),
            spec.soul.id.clone(),
            &spec.prompt,
        ))
    })
}

fn unknown_task(id: &TaskId) -> Error {
    Error::UnknownTask(format!(
        "no task `{id}` (finished long ago, or never submitted); `familiar tasks` lists the daemon's tasks"
    ))
}

/// A caller that hung up before the answer is not an error of ours.
fn send_reply<T>(reply: oneshot::Sender<T>, value: T) {
    if reply.send(value).is_err() {
        tracing::debug!("the caller went away before the answer");
    }
}
