//! What a task reports to the outside: its events (to the bus's subscribers and, all but
//! text deltas, to the session's transcript), the transcript's other entries, and the
//! hooks (audit log, metrics), each told which task it is about.
//!
//! Every part of the task that reports goes through its one [`Emitter`], so an event
//! always carries the task's and session's ids and is always in the transcript too.

use std::sync::Arc;

use familiar_protocol::events::{Event, EventPayload};
use familiar_protocol::ids::{SessionId, SoulId, TaskId};

use crate::agent::events::EventBus;
use crate::agent::hooks::{Hooks, TaskRef};
use crate::store::Transcript;

/// A task's reporting: bus, transcript, hooks, and the ids they carry.
pub(in crate::agent) struct Emitter {
    bus: EventBus,
    transcript: Transcript,
    hooks: Arc<[Arc<dyn Hooks>]>,
    task_id: TaskId,
    session_id: SessionId,
    soul: SoulId,
}

impl Emitter {
    pub(in crate::agent) fn new(
        bus: EventBus,
        transcript: Transcript,
        hooks: &[Arc<dyn Hooks>],
        task_id: TaskId,
        session_id: SessionId,
        soul: SoulId,
    ) -> Emitter {
        Emitter {
            bus,
            transcript,
            hooks: hooks.iter().cloned().collect(),
            task_id,
            session_id,
            soul,
        }
    }

    /// Reports an event: published to the subscribers and, unless it is a text delta,
    /// appended to the transcript.
    pub(in crate::agent) async fn emit(&mut self, payload: EventPayload) {
        let event = Arc::new(Event {
            payload,
            task_id: self.task_id.clone(),
            session_id: self.session_id.clone(),
        });
        // Text deltas are many and small; the final assistant message has the text.
        if !matches!(event.payload, EventPayload::TextDelta { .. }) {
            let entry = serde_json::to_value(&*event).unwrap_or_default();
            self.append(&entry);
        }
        self.bus.publish(event).await;
    }

    /// Appends one entry to the transcript. A failure is logged, not returned: the
    /// task's work matters more than its record, and the session file keeps the history.
    pub(in crate::agent) fn append(&mut self, entry: &serde_json::Value) {
        if let Err(e) = self.transcript.append(entry) {
            tracing::error!(session_id = %self.session_id, "cannot append to the transcript: {e}");
        }
    }

    /// Makes the transcript durable; a failure is logged.
    pub(in crate::agent) fn sync(&mut self) {
        if let Err(e) = self.transcript.sync() {
            tracing::error!(session_id = %self.session_id, "cannot sync the transcript: {e}");
        }
    }

    /// The hooks, each to be called with [`Emitter::task_ref`].
    pub(in crate::agent) fn hooks(&self) -> &[Arc<dyn Hooks>] {
        &self.hooks
    }

    /// The hooks again, for what runs beside the loop (the calls' own tasks).
    pub(in crate::agent) fn shared_hooks(&self) -> Arc<[Arc<dyn Hooks>]> {
        Arc::clone(&self.hooks)
    }

    pub(in crate::agent) fn task_ref(&self) -> TaskRef<'_> {
        TaskRef {
            task_id: &self.task_id,
            session_id: &self.session_id,
            soul: &self.soul,
        }
    }

    pub(in crate::agent) fn task_id(&self) -> &TaskId {
        &self.task_id
    }

    /// A bus with the same subscribers, for a sub-task's events.
    pub(in crate::agent) fn fork_bus(&self) -> EventBus {
        self.bus.fork()
    }
}
