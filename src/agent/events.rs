//! Loop events: what a running task reports, to whom, and what happens when a reader
//! is slow.
//!
//! Every event goes to the session transcript (by the loop, synchronously, never
//! dropped) and to each subscriber through a bounded channel of [`EVENT_BUFFER`]. A
//! subscriber is either *lossless* (the loop waits for it: `familiar run` printing to a
//! terminal) or *lossy* (on a full buffer it is dropped with a warning, so one stuck
//! D-Bus client can never stall a task).

use std::sync::Arc;

use tokio::sync::mpsc;

use familiar_protocol::events::Event;

/// Per-subscriber buffer.
pub const EVENT_BUFFER: usize = 256;

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
    use familiar_protocol::events::EventPayload;
    use familiar_protocol::ids::{SessionId, TaskId};

    use super::*;

    fn event(text: &str) -> Arc<Event> {
        Arc::new(Event {
            payload: EventPayload::TextDelta { text: text.into() },
            task_id: TaskId::new("t-1").unwrap(),
            session_id: SessionId::new("s-1").unwrap(),
        })
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
