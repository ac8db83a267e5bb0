//! A tool's permission tier, as events and approvals carry it (`tier` in
//! `tool_call_started`, `approval_requested` and the `ApprovalRequested` signal).
//!
//! Invariant: each tier serialises to the one string the bus has always carried
//! (`read`, `write`, `execute`, `system_critical`), and [`Tier::as_str`] is that string.

use std::fmt;

use serde::{Deserialize, Serialize};

/// How dangerous a tool is, lowest to highest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    Read,
    Write,
    Execute,
    SystemCritical,
}

impl Tier {
    pub const ALL: [Tier; 4] = [Tier::Read, Tier::Write, Tier::Execute, Tier::SystemCritical];

    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Read => "read",
            Tier::Write => "write",
            Tier::Execute => "execute",
            Tier::SystemCritical => "system_critical",
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

crate::eq_str!(Tier);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_serialise_to_their_strings() {
        for t in Tier::ALL {
            assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
        }
        assert_eq!(
            serde_json::to_value(Tier::ALL).unwrap(),
            serde_json::json!(["read", "write", "execute", "system_critical"])
        );
    }
}
