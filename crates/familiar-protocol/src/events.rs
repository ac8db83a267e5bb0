//! Typed fields of the events `TaskEvent` carries (docs/events.md), serialised to the
//! strings the bus and `--json` have always carried.

use serde::{Deserialize, Serialize};

/// What the policy decided for a call as it starts (`tool_call_started`'s `decision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallDecision {
    Allow,
    /// A person is asked first.
    Ask,
    Deny,
}

impl CallDecision {
    pub fn as_str(self) -> &'static str {
        match self {
            CallDecision::Allow => "allow",
            CallDecision::Ask => "ask",
            CallDecision::Deny => "deny",
        }
    }
}

impl std::fmt::Display for CallDecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Compared with the string it is serialised to, as clients that read the JSON do.
impl PartialEq<str> for CallDecision {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for CallDecision {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_keep_their_strings() {
        let all = [CallDecision::Allow, CallDecision::Ask, CallDecision::Deny];
        assert_eq!(
            serde_json::to_value(all).unwrap(),
            serde_json::json!(["allow", "ask", "deny"])
        );
        for d in all {
            assert_eq!(serde_json::to_value(d).unwrap(), d.as_str());
        }
    }
}
