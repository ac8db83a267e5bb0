//! A tool's permission tier, as events and approvals carry it (`tier` in
//! `tool_call_started`, `approval_requested` and the `ApprovalRequested` signal), and
//! the [`Mode`] a policy gives a tier: allow, ask or deny, which is also what a call
//! got (`tool_call_started`'s `decision`).
//!
//! Invariant: each tier and mode serialises to the one string the bus, the policy files
//! and the audit log have always carried (`read`, `write`, `execute`,
//! `system_critical`; `allow`, `ask`, `deny`), and `as_str` is that string. Allow, ask
//! and deny are spelled here alone.

use std::fmt;

use serde::{Deserialize, Serialize};

/// How dangerous a tool is, lowest to highest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// Reads, changes nothing.
    Read,
    /// Writes files.
    Write,
    /// Runs programs.
    Execute,
    /// Touches the system (services, packages, power).
    SystemCritical,
}

impl Tier {
    /// Every tier, lowest first.
    pub const ALL: [Tier; 4] = [Tier::Read, Tier::Write, Tier::Execute, Tier::SystemCritical];

    /// The string the bus carries.
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

/// What happens to a call of a tier. Ordered by strictness: `Allow < Ask < Deny`, so the
/// effective mode of a soul under a policy is the `max` of the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Runs without asking.
    Allow,
    /// A person is asked first.
    Ask,
    /// Never runs.
    Deny,
}

impl Mode {
    /// Every mode, loosest first.
    pub const ALL: [Mode; 3] = [Mode::Allow, Mode::Ask, Mode::Deny];

    /// The string the bus carries.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Allow => "allow",
            Mode::Ask => "ask",
            Mode::Deny => "deny",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

crate::eq_str!(Mode);

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

    #[test]
    fn modes_serialise_to_their_strings_and_order_by_strictness() {
        assert_eq!(
            serde_json::to_value(Mode::ALL).unwrap(),
            serde_json::json!(["allow", "ask", "deny"])
        );
        for m in Mode::ALL {
            assert_eq!(serde_json::to_value(m).unwrap(), m.as_str());
            assert_eq!(
                serde_json::from_value::<Mode>(m.as_str().into()).unwrap(),
                m
            );
        }
        assert!(Mode::Allow < Mode::Ask && Mode::Ask < Mode::Deny);
    }
}
