//! What a client asks the daemon, typed: the rows of `ListTasks`, `ListSouls`,
//! `ListSessions` and `ListMemory`, the JSON of `GetTask`, and the `Sandbox`,
//! `Configuration` and `Metrics` properties (docs/dbus.md). The daemon builds these
//! types and [`crate::proxy::Agent1Proxy`] returns them, so a renamed field is a compile
//! error on both sides, not a silent `null` in a client.
//!
//! Invariant: the wire does not change. A row is a D-Bus struct of the signature the
//! method has always had (`ListTasks` is `a(ssss)`), and the JSON replies are the
//! objects they have always been, keys in the order they always came (sorted, as
//! `serde_json` writes a map, for `GetTask` and `Configuration`; the field order below
//! for `Sandbox`). The tests pin one of each.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use zbus::Type;

use crate::ids::{RequestId, SessionId, SoulId, TaskId};
use crate::task::{Plan, TaskStatus, Usage};
use crate::tier::Tier;

/// One row of `ListTasks` (`(ssss)`): every task the daemon knows, oldest first,
/// sub-tasks right after their parent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct TaskRow {
    /// The task id (`t-…`).
    pub id: String,
    /// The soul it runs under.
    pub soul: String,
    /// Its status as the bus spells it ([`TaskRow::status`] reads it).
    pub status: String,
    /// The prompt's first [`crate::LIST_PROMPT_CHARS`] characters.
    pub prompt: String,
}

impl TaskRow {
    /// The status, when this build knows it (a newer daemon may send another).
    pub fn status(&self) -> Option<TaskStatus> {
        self.status.parse().ok()
    }

    /// Whether the task has not ended (queued or running); a status this build does
    /// not know is taken as ended.
    pub fn unfinished(&self) -> bool {
        self.status().is_some_and(|s| !s.is_finished())
    }
}

/// One row of `ListSouls` (`(sssu)`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct SoulRow {
    /// The soul id.
    pub id: String,
    /// Its one-line description.
    pub description: String,
    /// The model it runs on (empty when its provider is not configured).
    pub model: String,
    /// Its `max_iterations`.
    pub max_iterations: u32,
}

/// One row of `ListSessions` (`(ssst)`), newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct SessionRow {
    /// The session id (`s-…`).
    pub id: String,
    /// The soul it runs under.
    pub soul: String,
    /// Its title (the first prompt's first words).
    pub title: String,
    /// Last change, unix seconds.
    pub updated: u64,
}

/// One long-term memory entry of `ListMemory` (`(ssss)`), oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct MemoryEntry {
    /// The entry id.
    pub id: String,
    /// The soul that sees it; `*`: every soul.
    pub soul: String,
    /// What was remembered.
    pub text: String,
    /// When, RFC 3339.
    pub created: String,
}

/// One approval a running task waits for, as `GetTask` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingApproval {
    /// What `Respond` and `Grant` take.
    pub request_id: RequestId,
    /// The tool the call is of.
    pub tool: String,
    /// The call's tier.
    pub tier: Tier,
    /// The whole call, as every approval surface shows it (untrusted: show it through
    /// [`crate::display`]).
    pub summary: String,
    /// Why it is asked.
    #[serde(default)]
    pub reason: String,
    /// The timed grant's label; `None`: the request is always asked (and from an older
    /// daemon, which did not say).
    #[serde(default)]
    pub grant: Option<String>,
}

/// `GetTask`'s reply: one task, its plan, its pending approvals and its family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskView {
    /// The task id.
    pub id: TaskId,
    /// The session it runs in.
    pub session_id: SessionId,
    /// The soul it runs under.
    pub soul: SoulId,
    /// Its status as the bus spells it ([`TaskView::status`] reads it).
    pub status: String,
    /// The whole prompt (untrusted: any client may have submitted it).
    pub prompt: String,
    /// Who submitted it (`cli`, `dmenu`, a script's label).
    pub origin: String,
    /// The plan, once the task made one.
    pub plan: Option<Plan>,
    /// The tokens it used so far.
    pub usage: Usage,
    /// Its answer, once it ended.
    pub result: Option<String>,
    /// The approvals it waits for (none once it ended).
    #[serde(default)]
    pub approvals: Vec<PendingApproval>,
    /// The task that delegated it, for a sub-task.
    #[serde(default)]
    pub parent_task: Option<TaskId>,
    /// The parent's session, for a sub-task.
    #[serde(default)]
    pub parent_session: Option<SessionId>,
    /// The sub-tasks it delegated.
    #[serde(default)]
    pub children: Vec<TaskId>,
    /// What it changed outside its workspace (`changed 1 file, trashed 2`).
    #[serde(default)]
    pub changes: Option<String>,
    /// Whether `Undo` can take those changes back.
    #[serde(default)]
    pub undoable: bool,
}

impl TaskView {
    /// The status, when this build knows it.
    pub fn status(&self) -> Option<TaskStatus> {
        self.status.parse().ok()
    }

    /// What `Undo` would take back, when it can.
    pub fn undo(&self) -> Option<&str> {
        self.changes.as_deref().filter(|_| self.undoable)
    }

    /// The reply as the bus carries it: keys sorted, as it always was.
    pub fn to_json(&self) -> String {
        sorted(self)
    }

    /// Reads a `GetTask` reply.
    pub fn from_json(json: &str) -> Result<TaskView, serde_json::Error> {
        serde_json::from_str(json)
    }
}

/// How much of the sandbox the kernel enforces (`Full`, `Partial`, `None`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnforcementStatus {
    /// Every restriction familiar asks for.
    Full,
    /// Some are missing (named in [`SandboxReport::missing`]).
    Partial,
    /// No Landlock.
    #[default]
    None,
}

impl EnforcementStatus {
    /// The string the bus carries.
    pub fn as_str(self) -> &'static str {
        match self {
            EnforcementStatus::Full => "full",
            EnforcementStatus::Partial => "partial",
            EnforcementStatus::None => "none",
        }
    }
}

/// Whether a tool can reach unix sockets (the session bus, the keyring, displays).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnixSockets {
    /// Refused by the helper's seccomp filter.
    #[default]
    Blocked,
    /// The soul grants the sockets in [`SandboxReport::sockets`].
    Granted,
    /// Open: no seccomp filter could be installed.
    Open,
}

impl UnixSockets {
    /// The string the bus carries.
    pub fn as_str(self) -> &'static str {
        match self {
            UnixSockets::Blocked => "blocked",
            UnixSockets::Granted => "granted",
            UnixSockets::Open => "open",
        }
    }
}

/// What the kernel enforces for tools: the `Sandbox` property and `task_started`'s
/// `sandbox` (docs/dbus.md). Fields an older daemon left out read as their default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SandboxReport {
    /// The Landlock ABI in use; `None` without Landlock.
    pub abi: Option<u8>,
    /// Full, partial or none.
    pub status: EnforcementStatus,
    /// Restrictions asked for but not enforced (`tcp connect/bind (ABI 4)`).
    pub missing: Vec<String>,
    /// How unix sockets stand.
    pub unix_sockets: UnixSockets,
    /// The sockets a soul grants, when it grants any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sockets: Vec<String>,
}

impl SandboxReport {
    /// The `Sandbox` property's JSON (fields in the order above, as it always was).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// `Landlock ABI 6, full, unix sockets blocked`, with what is missing after a
    /// partial or no enforcement.
    pub fn describe(&self) -> String {
        let status = self.status.as_str();
        let head = match self.abi {
            Some(abi) => format!("Landlock ABI {abi}, {status}"),
            None => status.to_owned(),
        };
        let head = format!("{head}, unix sockets {}", self.unix_sockets.as_str());
        match self.status {
            EnforcementStatus::Full => head,
            EnforcementStatus::Partial | EnforcementStatus::None => {
                format!("{head} (missing: {})", self.missing.join(", "))
            }
        }
    }
}

/// Where a soul's warmed prefix stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WarmState {
    /// Not sent since the daemon started, its config was reloaded or the server lost it.
    Cold,
    /// The warm request is under way.
    Warming,
    /// The server holds the prefix.
    Warm,
    /// Not sent: a hosted API, MCP tools, or the machine's conditions (the reason says).
    Skipped,
    /// The request failed or a real request cancelled it.
    Failed,
}

impl WarmState {
    /// The string the bus carries.
    pub fn as_str(self) -> &'static str {
        match self {
            WarmState::Cold => "cold",
            WarmState::Warming => "warming",
            WarmState::Warm => "warm",
            WarmState::Skipped => "skipped",
            WarmState::Failed => "failed",
        }
    }
}

/// One soul's prefix in `Configuration`'s `warm`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SoulWarmth {
    /// Where it stands.
    pub state: WarmState,
    /// The warm request's prompt tokens.
    pub prompt_tokens: u64,
    /// How many of them the server already held.
    pub cached_tokens: u64,
    /// How long the warm request took.
    pub ms: u64,
    /// RFC 3339 UTC of the last change.
    pub at: String,
    /// Why it was skipped or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The `Configuration` property: the config the daemon runs with (a client's own
/// config, or data dir, may not be the daemon's).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Configuration {
    /// The config.toml it read; `None`: built-in defaults.
    pub config: Option<String>,
    /// The default provider.
    pub provider: Option<String>,
    /// The default provider's model.
    pub model: Option<String>,
    /// The soul of a task that names none.
    pub default_soul: Option<String>,
    /// The policy in force.
    pub policy: Option<String>,
    /// Where sessions, transcripts and memory live.
    pub data_dir: Option<String>,
    /// What the last reload could not take (the previous files stay in force).
    pub reload_error: Option<String>,
    /// Each warmed soul's prefix.
    #[serde(default)]
    pub warm: BTreeMap<String, SoulWarmth>,
    /// How long a result notification stays, in milliseconds.
    #[serde(default)]
    pub result_timeout_ms: Option<u64>,
}

impl Configuration {
    /// The property's JSON: keys sorted, as it always was.
    pub fn to_json(&self) -> String {
        sorted(self)
    }
}

/// The counters of the `Metrics` property (`a{st}`), by name.
pub mod metrics {
    /// Requests sent to a model.
    pub const LLM_REQUESTS: &str = "llm_requests";
    /// Model requests that failed.
    pub const LLM_FAILURES: &str = "llm_failures";
    /// Tool calls run.
    pub const TOOL_EXECUTIONS: &str = "tool_executions";
    /// Tool calls that failed.
    pub const TOOL_FAILURES: &str = "tool_failures";
    /// Compactions of a context.
    pub const COMPACTIONS: &str = "compactions";
    /// Calls the policy or a person denied.
    pub const PERMISSION_DENIALS: &str = "permission_denials";
    /// Requests a rate limit held back.
    pub const RATE_LIMITED: &str = "rate_limited";
    /// Tasks that completed.
    pub const TASKS_COMPLETED: &str = "tasks_completed";
    /// Tasks that failed.
    pub const TASKS_FAILED: &str = "tasks_failed";
    /// Tasks cancelled.
    pub const TASKS_CANCELLED: &str = "tasks_cancelled";
    /// Tasks skipped (their `when` did not hold).
    pub const TASKS_SKIPPED: &str = "tasks_skipped";
    /// Every counter, in the order the daemon counts them.
    pub const ALL: [&str; 11] = [
        LLM_REQUESTS,
        LLM_FAILURES,
        TOOL_EXECUTIONS,
        TOOL_FAILURES,
        COMPACTIONS,
        PERMISSION_DENIALS,
        RATE_LIMITED,
        TASKS_COMPLETED,
        TASKS_FAILED,
        TASKS_CANCELLED,
        TASKS_SKIPPED,
    ];
}

/// `value` as JSON with every object's keys sorted (through `serde_json::Value`, whose
/// map is sorted): how the daemon has always written `GetTask` and `Configuration`.
fn sorted<T: Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .map(|v| v.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
#[path = "query_tests.rs"]
mod tests;
