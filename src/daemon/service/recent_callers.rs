//! Which Unix user each recent caller on the bus is, and whether it runs inside one of
//! familiar's sandboxes.
//!
//! Every method call and property read checks that its caller is the daemon's own user
//! and not a sandbox's process ([`crate::sandbox::ancestry`]): a tool runs as the user,
//! so the uid alone would let it submit an unconfined task or approve its own calls.
//! Asking the bus each time (`GetConnectionUnixUser`) is a round trip through the bus
//! daemon, which waits behind whatever else the bus is routing: up to 290 ms while a
//! hundred tasks emitted their events in the load tests. A unique name (`:1.42`) names
//! one connection for the bus's whole life and is never given to another, so the user
//! and the process behind it cannot change; the daemon exits when it loses its bus, so a name is never
//! looked up on a bus other than the one that answered.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use crate::sandbox::ancestry::Sandboxed;

/// Why a caller of our own user is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The connection's process runs inside a sandbox.
    Sandboxed(Sandboxed),
    /// Who is behind the connection could not be established (the bus gives no pid,
    /// the process is gone or was replaced): the check fails closed.
    Unverified(String),
}

/// Callers remembered; one seen less recently is asked about again.
const REMEMBERED: usize = 64;

/// What the daemon knows of one caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// What the bus says the connection's user is.
    pub uid: u32,
    /// Set when the connection's process runs inside a sandbox, or cannot be placed.
    pub refused: Option<Refusal>,
}

/// The most recent callers, by unique name.
#[derive(Debug, Default)]
pub struct Callers {
    /// Most recently added last.
    recent: Mutex<VecDeque<(String, Caller)>>,
}

impl Callers {
    /// What was found for `name`, if it is remembered.
    pub fn get(&self, name: &str) -> Option<Caller> {
        let recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        recent
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c.clone())
    }

    /// Remembers what was found for `name`.
    pub fn remember(&self, name: &str, caller: Caller) {
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        if recent.iter().any(|(n, _)| n == name) {
            return;
        }
        if recent.len() >= REMEMBERED {
            recent.pop_front();
        }
        recent.push_back((name.to_owned(), caller));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(uid: u32) -> Caller {
        Caller { uid, refused: None }
    }

    #[test]
    fn remembers_recent_callers_and_forgets_the_oldest() {
        let callers = Callers::default();
        assert_eq!(callers.get(":1.1"), None);
        callers.remember(":1.1", user(1000));
        callers.remember(":1.2", user(0));
        assert_eq!(callers.get(":1.1"), Some(user(1000)));
        assert_eq!(callers.get(":1.2"), Some(user(0)));
        for i in 0..REMEMBERED {
            callers.remember(&format!(":2.{i}"), user(1000));
        }
        assert_eq!(callers.get(":1.1"), None, "the oldest is asked about again");
        assert_eq!(
            callers.get(&format!(":2.{}", REMEMBERED - 1)),
            Some(user(1000))
        );
    }
}
