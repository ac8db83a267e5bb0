//! Which Unix user each recent caller on the bus is.
//!
//! Every method call and property read checks that its caller is the daemon's own user.
//! Asking the bus each time (`GetConnectionUnixUser`) is a round trip through the bus
//! daemon, which waits behind whatever else the bus is routing: up to 290 ms while a
//! hundred tasks emitted their events in the load tests. A unique name (`:1.42`) names
//! one connection for the bus's whole life and is never given to another, so the user
//! behind it cannot change; the daemon exits when it loses its bus, so a name is never
//! looked up on a bus other than the one that answered.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

/// Callers remembered; one seen less recently is asked about again.
const REMEMBERED: usize = 64;

/// The uids of the most recent callers, by unique name.
#[derive(Debug, Default)]
pub struct Callers {
    /// Most recently added last.
    recent: Mutex<VecDeque<(String, u32)>>,
}

impl Callers {
    /// The uid the bus gave for `name`, if it is remembered.
    pub fn uid(&self, name: &str) -> Option<u32> {
        let recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        recent.iter().find(|(n, _)| n == name).map(|&(_, uid)| uid)
    }

    /// Remembers what the bus answered for `name`.
    pub fn remember(&self, name: &str, uid: u32) {
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        if recent.iter().any(|(n, _)| n == name) {
            return;
        }
        if recent.len() >= REMEMBERED {
            recent.pop_front();
        }
        recent.push_back((name.to_owned(), uid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_recent_callers_and_forgets_the_oldest() {
        let callers = Callers::default();
        assert_eq!(callers.uid(":1.1"), None);
        callers.remember(":1.1", 1000);
        callers.remember(":1.2", 0);
        assert_eq!(callers.uid(":1.1"), Some(1000));
        assert_eq!(callers.uid(":1.2"), Some(0));
        for i in 0..REMEMBERED {
            callers.remember(&format!(":2.{i}"), 1000);
        }
        assert_eq!(callers.uid(":1.1"), None, "the oldest is asked about again");
        assert_eq!(callers.uid(&format!(":2.{}", REMEMBERED - 1)), Some(1000));
    }
}
