//! The audit log (`audit.jsonl`): one line per tool decision.
//!
//! Invariants: a line never holds a tool's raw arguments (they may carry secrets), only
//! the SHA-256 of their canonical JSON ([`args_digest`]), so two identical calls have
//! the same digest whatever the key order; and each entry is one `write` on an
//! `O_APPEND` descriptor, so concurrent writers (threads or processes) never interleave
//! within a line.

use std::io::Write;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::ids::{SessionId, SoulId, TaskId};
use crate::policy::Tier;

/// One tool decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// RFC 3339 UTC.
    pub time: String,
    pub task_id: Option<TaskId>,
    pub session_id: Option<SessionId>,
    pub soul: SoulId,
    pub tool: String,
    pub tier: Tier,
    /// [`args_digest`] of the call's arguments.
    pub args_digest: String,
    pub decision: AuditDecision,
    /// Why, for a person: the policy rule, the pattern, who approved.
    pub reason: Option<String>,
    pub outcome: AuditOutcome,
}

/// What the permission check decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditDecision {
    /// Allowed by the tier mode, no question asked.
    Allowed,
    /// Asked, and approved.
    Approved,
    /// Denied by the soul's allowlist, a protected path, a blocked pattern, the tier
    /// mode, or a person.
    Denied,
    /// Asked, and nobody answered in time (counts as a denial).
    ApprovalTimeout,
    /// The rate limit was exhausted.
    RateLimited,
}

/// What happened after the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditOutcome {
    /// Not executed (denied), or not yet known.
    NotRun,
    Succeeded,
    Failed,
}

/// SHA-256 (lowercase hex) of the canonical JSON of `args`: object keys sorted at every
/// level, no whitespace. Canonicalised here rather than trusting `Value`'s map order,
/// which a `preserve_order` feature anywhere in the build would change.
pub fn args_digest(args: &serde_json::Value) -> String {
    let mut canonical = String::new();
    write_canonical(args, &mut canonical);
    let digest = Sha256::digest(canonical.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn write_canonical(v: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                if let Some(child) = map.get(k) {
                    write_canonical(child, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {
            out.push_str(&v.to_string());
        }
    }
}

/// Appends `entry` as one line with a single `write_all` on an `O_APPEND` file. On
/// Linux a regular-file write takes the inode lock for its whole length, so lines from
/// concurrent writers never interleave.
pub(super) fn append_line(
    file: &std::fs::File,
    value: &impl Serialize,
) -> Result<(), std::io::Error> {
    let mut line = serde_json::to_vec(value)?;
    line.push(b'\n');
    let mut file = file;
    file.write_all(&line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn digest_ignores_key_order_and_whitespace() {
        let a = json!({"b": 1, "a": {"y": [1, 2], "x": "s"}});
        let b: serde_json::Value =
            serde_json::from_str(r#"{ "a": {"x":"s","y":[1,2]}, "b":1 }"#).unwrap();
        assert_eq!(args_digest(&a), args_digest(&b));
        assert_eq!(args_digest(&a).len(), 64);
        assert_ne!(args_digest(&a), args_digest(&json!({"b": 2})));
    }

    #[test]
    fn digest_of_known_input() {
        // sha256("{}"), so other tools can recompute digests.
        assert_eq!(
            args_digest(&json!({})),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }
}
