//! What the owner does outside its own state ([`Effects`]): run a task, and tell the
//! world about tasks (their events, their end, the counts). The daemon's are the real
//! ones ([`BusEffects`]: `run_task`, the bus signals and properties); the owner's unit
//! tests record them, so its invariants are checked without a bus or a model.

use std::future::Future;
use std::sync::Arc;

use familiar_protocol::events::Event;
use familiar_protocol::ids::TaskId;
use familiar_protocol::task::TaskStatus;
use tokio_util::sync::CancellationToken;
use zbus::Connection;
use zbus::object_server::SignalEmitter;

use crate::agent::events::EventBus;
use crate::agent::{Runtime, TaskError, TaskOutcome, TaskSpec, run_task};
use crate::daemon::service::Service;
use crate::store::{Context, StoreError};

/// The owner's effects. Cloned into every task's runner and event forwarder.
pub trait Effects: Clone + Send + Sync + 'static {
    /// Runs one task to its end; `new_session`: its session has no context file yet.
    fn run(
        &self,
        rt: Arc<Runtime>,
        spec: TaskSpec,
        new_session: bool,
        bus: EventBus,
        cancel: CancellationToken,
    ) -> impl Future<Output = Result<TaskOutcome, TaskError>> + Send;

    /// One event of a task or of its sub-tasks (`TaskEvent`).
    fn task_event(&self, event: &Event) -> impl Future<Output = ()> + Send;

    /// A task's end (`TaskFinished`), once all of its events went out.
    fn task_finished(
        &self,
        id: &TaskId,
        status: TaskStatus,
        result: &str,
    ) -> impl Future<Output = ()> + Send;

    /// The counts changed: `ActiveTasks` when `active_changed`, `Metrics` always.
    fn counts(&self, active_changed: bool) -> impl Future<Output = ()> + Send;
}

/// The daemon's effects: real tasks, and the bus.
#[derive(Clone)]
pub struct BusEffects {
    pub conn: Connection,
    pub emitter: SignalEmitter<'static>,
}

impl Effects for BusEffects {
    async fn run(
        &self,
        rt: Arc<Runtime>,
        spec: TaskSpec,
        new_session: bool,
        bus: EventBus,
        cancel: CancellationToken,
    ) -> Result<TaskOutcome, TaskError> {
        create_session(&rt, &spec, new_session)?;
        let store = Arc::clone(&rt.services.store);
        let outcome = run_task(rt, spec, bus, cancel).await;
        // A new session whose task never ran, or failed before the model answered,
        // holds nothing to continue.
        if let Ok(o) = &outcome
            && new_session
        {
            crate::agent::discard_if_unanswered(&store, o);
        }
        outcome
    }

    async fn task_event(&self, ev: &Event) {
        if let Err(e) = Service::task_event(
            &self.emitter,
            ev.task_id.as_str(),
            ev.kind(),
            &ev.payload_json(),
        )
        .await
        {
            tracing::warn!(task_id = %ev.task_id, "cannot emit TaskEvent: {e}");
        }
    }

    async fn task_finished(&self, id: &TaskId, status: TaskStatus, result: &str) {
        if let Err(e) =
            Service::task_finished(&self.emitter, id.as_str(), status.as_str(), result).await
        {
            tracing::warn!(task_id = %id, "cannot emit TaskFinished: {e}");
        }
    }

    async fn counts(&self, active_changed: bool) {
        match self
            .conn
            .object_server()
            .interface::<_, Service>(familiar_protocol::PATH)
            .await
        {
            Ok(iface) => {
                let agent = iface.get().await;
                if active_changed
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
fn create_session(rt: &Runtime, spec: &TaskSpec, new_session: bool) -> Result<(), StoreError> {
    let Some(id) = spec.session.as_ref().filter(|_| new_session) else {
        return Ok(());
    };
    crate::store::off_runtime(|| {
        rt.services.store.save_context(&mut Context::new(
            id.clone(),
            spec.soul.id.clone(),
            &spec.prompt,
        ))
    })
}
