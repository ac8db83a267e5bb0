//! What an event's fields say, beyond plain data: what the policy decided for a call,
//! how an approval ended, which compaction ran, what a rate limit counts.
//!
//! Invariant: each serialises to the string the bus and `--json` have always carried.

use serde::{Deserialize, Serialize};

use crate::tier::Mode;

/// What the policy decided for a call as it starts (`tool_call_started`'s `decision`):
/// the [`Mode`] the call got, `allow`, `ask` or `deny`.
pub type CallDecision = Mode;

/// How an approval request ended (`approval_resolved`'s `outcome`, an object whose own
/// `outcome` names the variant: `{"outcome": "denied", "by": "dbus:1.42"}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Resolution {
    /// A person approved; `by` says where (`dbus:…`, `tty`, `notification`; empty when
    /// a sender left it out).
    Approved {
        #[serde(default)]
        /// Where the answer came from.
        by: String,
    },
    /// An earlier "allow for N minutes" covered it.
    Granted,
    /// A person denied it; `by` says where.
    Denied {
        #[serde(default)]
        /// Where the answer came from.
        by: String,
    },
    /// Nobody answered in time.
    TimedOut,
    /// Nothing could show the question to a person.
    NobodyToAsk,
    /// The task ended while it waited.
    Cancelled,
}

impl Resolution {
    /// Whether the call runs.
    pub fn approved(&self) -> bool {
        match self {
            Resolution::Approved { .. } | Resolution::Granted => true,
            Resolution::Denied { .. }
            | Resolution::TimedOut
            | Resolution::NobodyToAsk
            | Resolution::Cancelled => false,
        }
    }
}

/// Which compaction ran (the `compaction` event's `mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CompactionMode {
    /// Old tool results cleared.
    Micro,
    /// Large tool results cut to make a request fit.
    Trim,
    /// The conversation summarised by the model.
    Full,
}

impl CompactionMode {
    /// The string the bus carries.
    pub fn as_str(self) -> &'static str {
        match self {
            CompactionMode::Micro => "micro",
            CompactionMode::Trim => "trim",
            CompactionMode::Full => "full",
        }
    }
}

impl std::fmt::Display for CompactionMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

crate::eq_str!(CompactionMode);

/// What a rate limit counts (the `rate_limited` event's `scope`), serialised as the
/// phrase a person reads after the limit (`30/min tool calls per session`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RateScope {
    /// All tool calls of one session.
    #[serde(rename = "tool calls per session")]
    SessionTools,
    /// Calls of one tool in one session.
    #[serde(rename = "calls of this tool per session")]
    SessionTool,
    /// LLM requests of one session.
    #[serde(rename = "model requests per session")]
    SessionLlm,
    /// All tool calls of the daemon.
    #[serde(rename = "tool calls across all sessions")]
    GlobalTools,
    /// `Submit` calls of one D-Bus caller.
    #[serde(rename = "task submissions per caller")]
    Submit,
}

impl RateScope {
    /// Every scope.
    pub const ALL: [RateScope; 5] = [
        RateScope::SessionTools,
        RateScope::SessionTool,
        RateScope::SessionLlm,
        RateScope::GlobalTools,
        RateScope::Submit,
    ];

    /// The phrase the bus carries.
    pub fn as_str(self) -> &'static str {
        match self {
            RateScope::SessionTools => "tool calls per session",
            RateScope::SessionTool => "calls of this tool per session",
            RateScope::SessionLlm => "model requests per session",
            RateScope::GlobalTools => "tool calls across all sessions",
            RateScope::Submit => "task submissions per caller",
        }
    }
}

impl std::fmt::Display for RateScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

crate::eq_str!(RateScope);
