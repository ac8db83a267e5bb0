//! Steering: messages the user adds to a running task (D-Bus `Steer`, `familiar
//! steer`, lines typed under `familiar run`).
//!
//! Invariant: a message [`Steering::push`] accepted is never lost. The loop takes the
//! unread ones at each iteration boundary (before the next model call, never inside a
//! tool batch) and appends them to the newest user message, so earlier messages, and
//! with them the prompt cache's prefix, stay byte for byte. When the task ends,
//! [`Steering::close`] takes what is still unread in the same step that refuses any
//! later push, and the task keeps those in the session (`pending_steering`) to open
//! the session's next task.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

/// Unread messages a task holds at most; past that a push is refused.
pub const MAX_UNREAD: usize = 32;

/// Why a message was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SteerError {
    #[error("the task already holds {MAX_UNREAD} unread messages")]
    Full,
    #[error("the task has ended")]
    Closed,
}

/// The inbox of one task; clones share it.
#[derive(Debug, Clone, Default)]
pub struct Steering(Arc<Mutex<Inbox>>);

#[derive(Debug, Default)]
struct Inbox {
    unread: VecDeque<String>,
    closed: bool,
}

impl Steering {
    pub fn new() -> Steering {
        Steering::default()
    }

    fn inbox(&self) -> std::sync::MutexGuard<'_, Inbox> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a message for the task's next iteration boundary.
    pub fn push(&self, message: String) -> Result<(), SteerError> {
        let mut inbox = self.inbox();
        if inbox.closed {
            return Err(SteerError::Closed);
        }
        if inbox.unread.len() >= MAX_UNREAD {
            return Err(SteerError::Full);
        }
        inbox.unread.push_back(message);
        Ok(())
    }

    /// Every unread message, oldest first.
    pub(crate) fn take(&self) -> Vec<String> {
        self.inbox().unread.drain(..).collect()
    }

    /// Refuses any later push and returns what is still unread.
    pub(crate) fn close(&self) -> Vec<String> {
        let mut inbox = self.inbox();
        inbox.closed = true;
        inbox.unread.drain(..).collect()
    }
}

/// How a steering message reads to the model: the user's words, marked as added while
/// it worked.
pub(crate) fn as_text(message: &str) -> String {
    format!("{STEERING_HEAD}\n{message}")
}

/// The first line of a steering message as the model reads it.
const STEERING_HEAD: &str = "[The user adds, while you work:]";

/// The user's words of a history text block that [`as_text`] made; `None` for any
/// other text.
pub fn message_of(text: &str) -> Option<&str> {
    text.strip_prefix(STEERING_HEAD)?.strip_prefix('\n')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_taken_in_order_and_refused_once_closed() {
        let s = Steering::new();
        s.push("one".into()).unwrap();
        s.push("two".into()).unwrap();
        assert_eq!(s.take(), ["one", "two"]);
        assert!(s.take().is_empty());
        s.push("three".into()).unwrap();
        assert_eq!(s.close(), ["three"]);
        assert_eq!(s.push("four".into()), Err(SteerError::Closed));
    }

    #[test]
    fn an_inbox_holds_at_most_max_unread() {
        let s = Steering::new();
        for i in 0..MAX_UNREAD {
            s.push(i.to_string()).unwrap();
        }
        assert_eq!(s.push("more".into()), Err(SteerError::Full));
        s.take();
        s.push("more".into()).unwrap();
    }
}
