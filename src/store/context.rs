//! The session context as persisted in `context/SESSION_ID.json`.
//!
//! These types are the file format: field names and enum spellings are a contract that
//! `jq` scripts and `familiar sessions show` rely on. A change that old files cannot be
//! read with bumps [`CONTEXT_VERSION`]; files of another version are never overwritten.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::SystemTime;

use familiar_protocol::ids::{SessionId, SoulId, TaskId};
use familiar_protocol::task::{Plan, TaskStatus, Usage};
use serde::{Deserialize, Serialize};

use crate::llm::Message;

/// The `version` this build reads and writes.
pub const CONTEXT_VERSION: u32 = 1;

/// Longest session title, in characters.
pub const TITLE_MAX_CHARS: usize = 80;

/// Now as an RFC 3339 UTC timestamp with millisecond precision
/// (`2026-11-02T10:15:00.123Z`), the format of every timestamp we persist.
pub fn now_rfc3339() -> String {
    rfc3339(SystemTime::now())
}

/// `t` as an RFC 3339 UTC timestamp with millisecond precision.
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// Seconds since the Unix epoch of an RFC 3339 timestamp, `None` when it does not parse.
pub fn unix_secs(rfc3339: &str) -> Option<u64> {
    let t = humantime::parse_rfc3339_weak(rfc3339).ok()?;
    t.duration_since(SystemTime::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs())
}

/// One session: its conversation, its tasks and what they cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Context {
    pub version: u32,
    /// How many times this file was written whole; the journal's lines name the revision
    /// they extend (see `store/journal.rs`). Bumped by `Store::save_context`.
    #[serde(default)]
    pub revision: u64,
    pub session_id: SessionId,
    pub soul: SoulId,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// RFC 3339 UTC; the caller bumps it (see [`Context::touch`]) before saving.
    pub updated_at: String,
    /// The first prompt's first line, at most [`TITLE_MAX_CHARS`] characters.
    pub title: String,
    /// The LLM summary of the compacted part of the history, if any.
    #[serde(default)]
    pub summary: Option<String>,
    /// Key facts kept across full compactions.
    #[serde(default)]
    pub facts: Vec<String>,
    #[serde(default)]
    pub history: Vec<Message>,
    #[serde(default)]
    pub tasks: Vec<TaskRecord>,
    #[serde(default)]
    pub tool_stats: BTreeMap<String, ToolStats>,
    #[serde(default)]
    pub usage: Usage,
    /// A delegated sub-task's session: the session of the task that delegated it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session: Option<SessionId>,
    /// A delegated sub-task's session: the task that delegated it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_task: Option<TaskId>,
    /// Steering messages a task ended before reading; they open the session's next
    /// task (the user's words are never lost).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_steering: Vec<String>,
}

impl Context {
    /// Whether this session, ending with a task of `status`, holds nothing worth
    /// continuing: its only task failed or was skipped before the model answered at all.
    /// Such a session is removed when the task ends (`agent::discard_if_unanswered`), so
    /// the task's finish does not name it.
    pub fn holds_nothing(&self, status: TaskStatus) -> bool {
        matches!(status, TaskStatus::Failed | TaskStatus::Skipped)
            && self.tasks.len() <= 1
            && !self
                .history
                .iter()
                .any(|m| m.role == crate::llm::Role::Assistant)
    }

    /// A fresh session whose title comes from its first prompt.
    pub fn new(session_id: SessionId, soul: SoulId, first_prompt: &str) -> Context {
        let now = now_rfc3339();
        Context {
            version: CONTEXT_VERSION,
            revision: 0,
            session_id,
            soul,
            created_at: now.clone(),
            updated_at: now,
            title: title_from_prompt(first_prompt),
            summary: None,
            facts: Vec::new(),
            history: Vec::new(),
            tasks: Vec::new(),
            tool_stats: BTreeMap::new(),
            usage: Usage::default(),
            parent_session: None,
            parent_task: None,
            pending_steering: Vec::new(),
        }
    }

    /// Sets `updated_at` to now.
    pub fn touch(&mut self) {
        self.updated_at = now_rfc3339();
    }

    /// Counts one tool call in `tool_stats`.
    pub fn record_tool_call(&mut self, tool: &str, failed: bool, elapsed_ms: u64) {
        let stats = self.tool_stats.entry(tool.to_owned()).or_default();
        stats.calls += 1;
        stats.failures += u64::from(failed);
        stats.total_ms += elapsed_ms;
    }

    /// Marks tasks a crash left `queued` or `running` as `interrupted` (they can no
    /// longer be finished: their process is gone). Returns how many were changed.
    /// Call it only while holding the session lock, or a live task would be marked.
    pub fn mark_interrupted(&mut self) -> usize {
        let now = now_rfc3339();
        let mut n = 0;
        for task in &mut self.tasks {
            if !task.status.is_finished() {
                task.status = TaskStatus::Interrupted;
                task.finished_at.get_or_insert_with(|| now.clone());
                n += 1;
            }
        }
        n
    }
}

/// A session title from a prompt: its first non-blank line, trimmed, cut to
/// [`TITLE_MAX_CHARS`] characters (with `…` when cut).
pub fn title_from_prompt(prompt: &str) -> String {
    let line = prompt
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    if line.chars().count() <= TITLE_MAX_CHARS {
        return line.to_owned();
    }
    let mut title: String = line.chars().take(TITLE_MAX_CHARS - 1).collect();
    title.push('…');
    title
}

/// Per-tool counters of a session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolStats {
    pub calls: u64,
    pub failures: u64,
    pub total_ms: u64,
}

/// One task of a session, as the loop records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    pub task_id: TaskId,
    pub prompt: String,
    pub status: TaskStatus,
    /// Who asked: `cli`, `hyprland`, `timer`, … (free text from the caller).
    pub origin: String,
    /// The sandbox's writable root for this task.
    pub workspace: Option<PathBuf>,
    /// RFC 3339 UTC.
    pub started_at: String,
    /// RFC 3339 UTC, once finished.
    pub finished_at: Option<String>,
    #[serde(default)]
    pub plan: Plan,
    #[serde(default)]
    pub usage: Usage,
    /// The final answer (or the reason it failed).
    pub result: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn title_is_the_first_line_cut_to_80_chars() {
        assert_eq!(
            title_from_prompt("\n  fix the wifi \nplease"),
            "fix the wifi"
        );
        let long = "é".repeat(200);
        let t = title_from_prompt(&long);
        assert_eq!(t.chars().count(), TITLE_MAX_CHARS);
        assert!(t.ends_with('…'));
        assert_eq!(title_from_prompt(""), "");
    }

    #[test]
    fn timestamps_are_rfc3339_utc_and_parse_back() {
        let t = now_rfc3339();
        assert!(t.ends_with('Z'), "{t}");
        assert!(unix_secs(&t).is_some_and(|s| s > 1_600_000_000));
        assert_eq!(unix_secs("yesterday"), None);
    }

    #[test]
    fn crashed_tasks_become_interrupted() {
        let mut ctx = Context::new(
            SessionId::new("s1").unwrap(),
            SoulId::new("safe_assistant").unwrap(),
            "hi",
        );
        for status in [TaskStatus::Running, TaskStatus::Completed] {
            ctx.tasks.push(TaskRecord {
                task_id: TaskId::generate(),
                prompt: "p".into(),
                status,
                origin: "cli".into(),
                workspace: None,
                started_at: now_rfc3339(),
                finished_at: None,
                plan: Plan::default(),
                usage: Usage::default(),
                result: None,
            });
        }
        assert_eq!(ctx.mark_interrupted(), 1);
        assert_eq!(ctx.tasks[0].status, TaskStatus::Interrupted);
        assert!(ctx.tasks[0].finished_at.is_some());
        assert_eq!(ctx.tasks[1].status, TaskStatus::Completed);
        assert!(ctx.tasks[1].finished_at.is_none());
    }
}
