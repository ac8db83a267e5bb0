//! Loop events: what a running task reports, to whom, and what happens when a reader
//! is slow.
//!
//! Every event goes to the session transcript (by the loop, synchronously, never
//! dropped) and to each subscriber through a bounded channel of [`EVENT_BUFFER`]. A
//! subscriber is either *lossless* (the loop waits for it: `familiar run` printing to a
//! terminal) or *lossy* (on a full buffer it is dropped with a warning, so one stuck
//! D-Bus client can never stall a task).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

pub use familiar_protocol::events::CallDecision;

use crate::ids::{SessionId, TaskId};
use crate::llm::Usage;
use crate::store::{Plan, TaskStatus};

/// Per-subscriber buffer.
pub const EVENT_BUFFER: usize = 256;

/// Which compaction ran (the `compaction` event's `mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactionMode {
    Micro,
    /// Large tool results cut to make a request fit.
    Trim,
    Full,
}

impl CompactionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            CompactionMode::Micro => "micro",
            CompactionMode::Trim => "trim",
            CompactionMode::Full => "full",
        }
    }
}

/// One event of one task. Serialises as `{"kind": KIND, "task_id", "session_id", ...}`.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    #[serde(flatten)]
    pub payload: EventPayload,
    pub task_id: TaskId,
    pub session_id: SessionId,
}

impl Event {
    pub fn kind(&self) -> &'static str {
        self.payload.kind()
    }

    /// The payload alone as JSON (the D-Bus `TaskEvent` signal's third argument).
    pub fn payload_json(&self) -> String {
        let mut v = serde_json::to_value(&self.payload).unwrap_or_default();
        if let Some(obj) = v.as_object_mut() {
            obj.remove("kind");
        }
        v.to_string()
    }
}

impl EventPayload {
    /// The payload of a `TaskEvent(task_id, kind, payload_json)` signal.
    pub fn from_signal(kind: &str, payload_json: &str) -> Result<EventPayload, serde_json::Error> {
        let mut v: serde_json::Value = serde_json::from_str(payload_json)?;
        if let Some(obj) = v.as_object_mut() {
            obj.insert(
                "kind".to_owned(),
                serde_json::Value::String(kind.to_owned()),
            );
        }
        serde_json::from_value(v)
    }
}

/// The event kinds of docs/events.md with their payloads. Deserialisable so a D-Bus client
/// (`familiar ask`) rebuilds events from `TaskEvent(kind, payload_json)`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventPayload {
    TaskStarted {
        soul: String,
        prompt: String,
        origin: String,
        model: String,
        workspace: String,
        max_iterations: u32,
        /// What the kernel enforces for this task's tools: `abi`, `status`, `missing`.
        sandbox: serde_json::Value,
        /// The soul's `[resources]` and what enforces them (absent when it sets none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resources: Option<serde_json::Value>,
    },
    IterationStarted {
        iteration: u32,
        max_iterations: u32,
    },
    TextDelta {
        text: String,
    },
    ToolCallStarted {
        call_id: String,
        tool: String,
        args: serde_json::Value,
        tier: String,
        /// `allow`, `ask` or `deny`, with the reason for the last two.
        decision: CallDecision,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    ApprovalRequested {
        request_id: String,
        call_id: String,
        tool: String,
        summary: String,
        tier: String,
        reason: String,
    },
    ApprovalResolved {
        request_id: String,
        call_id: String,
        approved: bool,
        outcome: serde_json::Value,
    },
    ToolCallFinished {
        call_id: String,
        tool: String,
        ok: bool,
        /// The first lines of the output (the transcript has all of it).
        preview: String,
        /// The tool's own run time (after any approval).
        duration_ms: u64,
        /// How long the approval took to be answered, when one was asked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approval_wait_ms: Option<u64>,
    },
    PlanUpdated {
        plan: Plan,
        progress: f32,
    },
    Compaction {
        mode: String,
        tokens_before: u64,
        tokens_after: u64,
        messages_before: usize,
        messages_after: usize,
    },
    Retry {
        attempt: u32,
        delay_ms: u64,
        reason: String,
    },
    /// The model's answer repeated `unit` `repeats` times in a row: the stream was
    /// cancelled and the answer kept up to the first copy (`kept_chars`), with a marker.
    DegenerateOutput {
        unit: String,
        repeats: usize,
        kept_chars: usize,
    },
    /// The server is reading the prompt (llama.cpp's prefill progress): `processed` of
    /// `total` tokens so far, `cached` of them reused from its prompt cache.
    ModelProgress {
        processed: u64,
        total: u64,
        cached: u64,
    },
    ModelFallback {
        from: String,
        to: String,
        reason: String,
    },
    RateLimited {
        scope: String,
        limit: String,
        retry_after_ms: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
    },
    LoopWarning {
        note: String,
    },
    /// A `delegate` call started a sub-task; its own events follow under its task id.
    SubagentStarted {
        child_task_id: String,
        child_session_id: String,
        soul: String,
        prompt: String,
        max_iterations: u32,
    },
    /// The sub-task ended; its answer is the `delegate` call's result.
    SubagentFinished {
        child_task_id: String,
        child_session_id: String,
        soul: String,
        status: TaskStatus,
        usage: Usage,
        iterations: u32,
    },
    /// A message the user added while the task ran joined it before this model call.
    SteeringReceived {
        message: String,
    },
    TaskFinished {
        status: TaskStatus,
        result: String,
        usage: Usage,
        iterations: u32,
        /// Steering messages the task ended before reading: kept in the session, they
        /// open its next task.
        #[serde(default)]
        pending_steering: usize,
        /// False when the session is not kept after the task (a new session whose task
        /// failed or was skipped before the model answered, `run --ephemeral`): the
        /// session id then names nothing a later command can use.
        #[serde(default = "kept")]
        session_kept: bool,
    },
}

/// Events written before `session_kept` existed named kept sessions.
fn kept() -> bool {
    true
}

impl EventPayload {
    pub fn kind(&self) -> &'static str {
        match self {
            EventPayload::TaskStarted { .. } => "task_started",
            EventPayload::IterationStarted { .. } => "iteration_started",
            EventPayload::TextDelta { .. } => "text_delta",
            EventPayload::ToolCallStarted { .. } => "tool_call_started",
            EventPayload::ApprovalRequested { .. } => "approval_requested",
            EventPayload::ApprovalResolved { .. } => "approval_resolved",
            EventPayload::ToolCallFinished { .. } => "tool_call_finished",
            EventPayload::PlanUpdated { .. } => "plan_updated",
            EventPayload::Compaction { .. } => "compaction",
            EventPayload::Retry { .. } => "retry",
            EventPayload::ModelProgress { .. } => "model_progress",
            EventPayload::DegenerateOutput { .. } => "degenerate_output",
            EventPayload::ModelFallback { .. } => "model_fallback",
            EventPayload::RateLimited { .. } => "rate_limited",
            EventPayload::LoopWarning { .. } => "loop_warning",
            EventPayload::SubagentStarted { .. } => "subagent_started",
            EventPayload::SubagentFinished { .. } => "subagent_finished",
            EventPayload::SteeringReceived { .. } => "steering_received",
            EventPayload::TaskFinished { .. } => "task_finished",
        }
    }
}

/// Whether the loop waits for a slow subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The loop waits (backpressure). For the one local consumer of `familiar run`.
    Lossless,
    /// A full buffer drops the subscriber with a warning.
    DropWhenFull,
}

struct Subscriber {
    tx: mpsc::Sender<Arc<Event>>,
    delivery: Delivery,
}

/// Fans events out to subscribers.
#[derive(Default)]
pub struct EventBus {
    subscribers: Vec<Subscriber>,
}

impl EventBus {
    pub fn new() -> Self {
        Self::default()
    }

    /// A bus with the same subscribers (each keeps its delivery policy): a delegated
    /// sub-task reports to whoever follows its parent.
    pub fn fork(&self) -> EventBus {
        EventBus {
            subscribers: self
                .subscribers
                .iter()
                .map(|s| Subscriber {
                    tx: s.tx.clone(),
                    delivery: s.delivery,
                })
                .collect(),
        }
    }

    pub fn subscribe(&mut self, delivery: Delivery) -> mpsc::Receiver<Arc<Event>> {
        let (tx, rx) = mpsc::channel(EVENT_BUFFER);
        self.subscribers.push(Subscriber { tx, delivery });
        rx
    }

    /// Sends to every subscriber by its delivery policy; closed ones are removed.
    pub async fn publish(&mut self, event: Arc<Event>) {
        let mut keep = Vec::with_capacity(self.subscribers.len());
        for sub in self.subscribers.drain(..) {
            let alive = match sub.delivery {
                Delivery::Lossless => sub.tx.send(Arc::clone(&event)).await.is_ok(),
                Delivery::DropWhenFull => match sub.tx.try_send(Arc::clone(&event)) {
                    Ok(()) => true,
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        tracing::warn!(
                            task_id = %event.task_id,
                            "event subscriber is {EVENT_BUFFER} events behind; dropping it"
                        );
                        false
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => false,
                },
            };
            if alive {
                keep.push(sub);
            }
        }
        self.subscribers = keep;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(text: &str) -> Arc<Event> {
        Arc::new(Event {
            payload: EventPayload::TextDelta { text: text.into() },
            task_id: TaskId::new("t-1").unwrap(),
            session_id: SessionId::new("s-1").unwrap(),
        })
    }

    #[test]
    fn events_serialise_with_kind_and_ids() {
        let v = serde_json::to_value(&*event("hi")).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"kind": "text_delta", "text": "hi", "task_id": "t-1", "session_id": "s-1"})
        );
        assert_eq!(event("hi").payload_json(), r#"{"text":"hi"}"#);
    }

    #[test]
    fn a_signal_payload_rebuilds_the_event() {
        let e = event("hi");
        let back = EventPayload::from_signal(e.kind(), &e.payload_json()).unwrap();
        assert_eq!(back.kind(), "text_delta");
        assert!(matches!(back, EventPayload::TextDelta { text } if text == "hi"));
    }

    #[tokio::test]
    async fn a_full_lossy_subscriber_is_dropped_and_the_others_keep_receiving() {
        let mut bus = EventBus::new();
        let mut lossless = bus.subscribe(Delivery::Lossless);
        let _stuck = bus.subscribe(Delivery::DropWhenFull);
        let reader = tokio::spawn(async move {
            let mut n = 0;
            while lossless.recv().await.is_some() {
                n += 1;
            }
            n
        });
        for i in 0..EVENT_BUFFER + 10 {
            bus.publish(event(&i.to_string())).await;
        }
        assert_eq!(bus.subscribers.len(), 1, "the stuck subscriber was dropped");
        drop(bus);
        assert_eq!(reader.await.unwrap(), EVENT_BUFFER + 10);
    }
}
