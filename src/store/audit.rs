//! The audit log (`audit.jsonl`): one line per tool decision.
//!
//! Invariants: a line never holds a tool's raw arguments (they may carry secrets), only
//! the SHA-256 of their canonical JSON ([`args_digest`]), so two identical calls have
//! the same digest whatever the key order, except that a tool audited in full
//! (`type_text`: every keystroke is to be traceable) has its call as its approval
//! showed it, escaped, and its result at the end of `reason`; and each entry is one `write` on an
//! `O_APPEND` descriptor, so concurrent writers (threads or processes) never interleave
//! within a line.

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::atomic::Ordering;

use familiar_protocol::ids::{SessionId, SoulId, TaskId};
use familiar_protocol::tier::Tier;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Store, StoreError};

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
/// concurrent writers never interleave. `fresh_line` puts a newline first, ending a
/// torn line an earlier failed append left.
pub(super) fn append_line(
    file: &std::fs::File,
    value: &impl Serialize,
    fresh_line: bool,
) -> Result<(), std::io::Error> {
    let mut line = Vec::with_capacity(256);
    if fresh_line {
        line.push(b'\n');
    }
    serde_json::to_writer(&mut line, value)?;
    line.push(b'\n');
    let mut file = file;
    file.write_all(&line)
}

/// Whether the file at `path` ends in the middle of a line (a crash mid-append).
pub(super) fn ends_torn(path: &Path) -> bool {
    let Ok(mut file) = std::fs::File::open(path) else {
        return false;
    };
    let Ok(len) = file.seek(SeekFrom::End(0)) else {
        return false;
    };
    let mut last = [0u8; 1];
    len > 0
        && file.seek(SeekFrom::Start(len - 1)).is_ok()
        && file.read_exact(&mut last).is_ok()
        && last[0] != b'\n'
}

/// The audit log as read back.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditContents {
    pub entries: Vec<AuditEntry>,
    /// 1-based numbers of lines that did not parse: torn by a crash or a full disk.
    pub torn_lines: Vec<usize>,
}

/// Reads every line of the audit log, skipping (and numbering) the ones that do not
/// parse instead of failing on them.
pub(super) fn read(path: &Path) -> Result<AuditContents, std::io::Error> {
    let mut contents = AuditContents {
        entries: Vec::new(),
        torn_lines: Vec::new(),
    };
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(contents),
        Err(e) => return Err(e),
    };
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    let mut number = 0;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        number += 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<AuditEntry>(&line) {
            Ok(e) => contents.entries.push(e),
            Err(e) => {
                tracing::warn!(path = %path.display(), line = number, error = %e, "skipping a torn audit line");
                contents.torn_lines.push(number);
            }
        }
    }
    Ok(contents)
}

impl Store {
    /// Appends one line to `audit.jsonl`.
    pub fn audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        let fresh_line = self.audit_torn.load(Ordering::Acquire);
        match append_line(&self.audit, entry, fresh_line) {
            Ok(()) => {
                self.audit_torn.store(false, Ordering::Release);
                Ok(())
            }
            Err(e) => {
                self.audit_torn.store(true, Ordering::Release);
                Err(StoreError::io("cannot append to", &self.audit_path(), e))
            }
        }
    }

    /// Every parseable line of `audit.jsonl`; torn lines (a crash or a full disk
    /// mid-append) are skipped and numbered in the result.
    pub fn read_audit(&self) -> Result<AuditContents, StoreError> {
        let path = self.audit_path();
        read(&path).map_err(|e| StoreError::io("cannot read", &path, e))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::fs::{self, OpenOptions};
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::store::now_rfc3339;
    use crate::store::tests::{sid, store};

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

    /// Regression: after a crash (or a full disk) mid-append, the next audit line was
    /// glued onto the torn one and both were lost to a reader.
    #[test]
    fn a_torn_audit_line_is_skipped_and_the_next_entry_survives() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path()).unwrap();
            store.audit(&audit_entry(1, 0)).unwrap();
        }
        let path = dir.path().join("audit.jsonl");
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        std::io::Write::write_all(&mut f, b"{\"time\":\"2026").unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.audit(&audit_entry(2, 0)).unwrap();
        let c = store.read_audit().unwrap();
        let reasons: Vec<_> = c
            .entries
            .iter()
            .map(|e| e.reason.clone().unwrap())
            .collect();
        assert_eq!(reasons, ["1:", "2:"]);
        assert_eq!(c.torn_lines, [2]);
    }

    fn audit_entry(n: usize, padding: usize) -> AuditEntry {
        AuditEntry {
            time: now_rfc3339(),
            task_id: Some(TaskId::generate()),
            session_id: Some(sid("s1")),
            soul: SoulId::new("system_admin").unwrap(),
            tool: "shell".into(),
            tier: Tier::Execute,
            args_digest: args_digest(&json!({"command": "ls"})),
            decision: AuditDecision::Denied,
            reason: Some(format!("{n}:{}", "x".repeat(padding))),
            outcome: AuditOutcome::NotRun,
        }
    }

    #[test]
    fn audit_entries_are_one_json_line_without_raw_args() {
        let (_dir, store) = store();
        let e = audit_entry(1, 0);
        store.audit(&e).unwrap();
        let text = fs::read_to_string(store.audit_path()).unwrap();
        assert!(!text.contains("ls\""), "raw args leaked: {text}");
        let back: AuditEntry = serde_json::from_str(text.trim_end()).unwrap();
        assert_eq!(back, e);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["decision"], "denied");
        assert_eq!(v["tier"], "execute");
    }

    #[test]
    fn concurrent_audit_appends_never_interleave() {
        let (_dir, store) = store();
        let store = Arc::new(store);
        const THREADS: usize = 8;
        const PER_THREAD: usize = 200;
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let store = Arc::clone(&store);
                std::thread::spawn(move || {
                    for i in 0..PER_THREAD {
                        // Lines bigger than a page, so a split write would show.
                        store.audit(&audit_entry(t * PER_THREAD + i, 6000)).unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let text = fs::read_to_string(store.audit_path()).unwrap();
        let mut seen = BTreeMap::new();
        for line in text.lines() {
            let e: AuditEntry = serde_json::from_str(line).unwrap();
            let n: usize = e
                .reason
                .unwrap()
                .split(':')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            *seen.entry(n).or_insert(0) += 1;
        }
        assert_eq!(seen.len(), THREADS * PER_THREAD);
        assert!(seen.values().all(|&c| c == 1));
    }
}
