//! The model's side of a task: what it is sent each iteration, and keeping that within
//! the model's window.
//!
//! A [`ContextKeeper`] owns the session state (the history on disk, under its lock) and
//! the model; it builds each request ([`request`]: the stable system prompt of
//! [`system_prompt`], the history, this iteration's [`reminder`]), compacts the history
//! ([`compaction`]: the rules and the model's summary), keeps each request within its
//! token budget and recovers from one the server says is too long ([`oversize`], cutting
//! tool output with [`trim`]), and [`repair`] mends a history a crash left
//! invalid. It knows nothing of tool calls or the loop's rules: what it needs of them
//! comes in as plain data at each iteration ([`Boundary`]).

pub mod compaction;
pub mod learned;
mod oversize;
pub mod reminder;
pub mod repair;
mod request;
pub mod system_prompt;
pub mod trim;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use familiar_protocol::ids::SoulId;
use serde_json::json;

use crate::agent::emitter::Emitter;
use crate::agent::runtime::Runtime;
use crate::llm::{Estimator, LlmClient, LlmError, Message};
use crate::policy::Policy;
use crate::snapshot::{Snapshot, Snapshotter};
use crate::soul::Soul;
use crate::store::{Context, ContextJournal, MemoryEntry, SessionLock};

pub(in crate::agent) use request::Boundary;

/// The session on disk, held for the task's life.
pub(in crate::agent) struct SessionState {
    pub(in crate::agent) ctx: Context,
    /// Held, never read: no other task writes the session meanwhile.
    pub(in crate::agent) _lock: SessionLock,
    /// Where each iteration is made durable (see `store/journal.rs`).
    pub(in crate::agent) journal: ContextJournal,
    /// This task's record in `ctx.tasks`.
    pub(in crate::agent) task_index: usize,
}

/// The task's model client, or why it has none.
pub(in crate::agent) struct Model {
    pub(in crate::agent) client: Option<LlmClient>,
    pub(in crate::agent) client_error: Option<LlmError>,
    /// The model requests name (a client's override wins).
    pub(in crate::agent) name: String,
    /// Tokens; 0 when unknown (no full compaction then).
    pub(in crate::agent) context_window: u32,
    pub(in crate::agent) estimator: Estimator,
    /// Where what the server's counts teach is kept for the next task
    /// ([`learned::key`]).
    pub(in crate::agent) calibration_key: String,
}

impl Model {
    /// The soul's model, sized by what earlier tasks learned of it (`provider`'s).
    pub(in crate::agent) fn for_soul(rt: &Runtime, soul: &Soul, provider: &str) -> Model {
        let (client, client_error, name, mut context_window) = match rt.settings.llm.client(soul) {
            Ok((c, m, w)) => (Some(c), None, m, w),
            Err(e) => (None, Some(e), soul.model.clone().unwrap_or_default(), 0),
        };
        let base_url = rt
            .settings
            .config
            .provider(soul.provider.as_deref())
            .map_or("", |p| p.base_url.as_str());
        let calibration_key = learned::key(provider, base_url, &name);
        let mut estimator = Estimator::new();
        if let Some(l) = rt.settings.calibrations.get(&calibration_key) {
            estimator = Estimator::with_factor(l.factor);
            if l.context_window > 0 && (context_window == 0 || l.context_window < context_window) {
                context_window = l.context_window;
            }
        }
        Model {
            client,
            client_error,
            name,
            context_window,
            estimator,
            calibration_key,
        }
    }

    /// Hands what this task learned to the next ones.
    pub(in crate::agent) fn remember(&self, rt: &Runtime) {
        rt.settings.calibrations.remember(
            self.calibration_key.clone(),
            learned::Learned {
                factor: self.estimator.factor(),
                context_window: self.context_window,
            },
        );
    }
}

/// What the system prompt says besides the tools:
/// the same for the task's life, so the prompt stays byte-stable for the prompt cache.
pub(in crate::agent) struct Persona {
    pub(in crate::agent) soul: Arc<Soul>,
    pub(in crate::agent) policy: Arc<Policy>,
    /// Named in the task's first reminder, never in the system prompt: it names the
    /// session, and the system prompt is the same for every task of the soul.
    pub(in crate::agent) workspace: PathBuf,
    /// Long-term memory entries (souls with `memory = true`), read once when the task
    /// starts.
    pub(in crate::agent) memory: Vec<MemoryEntry>,
    /// The souls the task may hand sub-tasks to.
    pub(in crate::agent) delegates: Vec<SoulId>,
    /// The task's prompt, which a full compaction keeps.
    pub(in crate::agent) prompt: String,
}

/// Fixed when the task starts: where requests go and how large they may be.
pub(in crate::agent) struct Settings {
    /// The provider's name, for the failure message of a request too long for it.
    pub(in crate::agent) provider: String,
    pub(in crate::agent) max_output_tokens: u32,
    pub(in crate::agent) snapshotter: Arc<Mutex<Snapshotter>>,
}

/// The session's context and the model it is sent to.
pub(in crate::agent) struct ContextKeeper {
    pub(in crate::agent) session: SessionState,
    pub(in crate::agent) model: Model,
    persona: Persona,
    settings: Settings,
    /// The tools the last request offered, by name: an overflow's retry rebuilds its
    /// system prompt with the same.
    tool_names: Vec<String>,
    full_compactions: u32,
    /// What this iteration did to make its request fit, for the failure message of one
    /// that still does not.
    tried: Vec<String>,
    /// The snapshot the last reminder was built from: the next one says what changed.
    last_snapshot: Option<Snapshot>,
}

impl ContextKeeper {
    pub(in crate::agent) fn new(
        session: SessionState,
        model: Model,
        persona: Persona,
        settings: Settings,
    ) -> ContextKeeper {
        ContextKeeper {
            session,
            model,
            persona,
            settings,
            tool_names: Vec::new(),
            full_compactions: 0,
            tried: Vec::new(),
            last_snapshot: None,
        }
    }

    pub(in crate::agent) fn ctx(&self) -> &Context {
        &self.session.ctx
    }
}

/// Appends `message` to the history and records it in the transcript.
pub(in crate::agent) fn record(ctx: &mut Context, emitter: &mut Emitter, message: Message) {
    let entry = json!({"kind": "message", "task_id": emitter.task_id(), "message": message});
    emitter.append(&entry);
    ctx.history.push(message);
}

/// The soul's long-term memory for its system prompt: its own entries and those for
/// every soul, when it has `memory = true`. An unreadable memory file is reported (and
/// moved aside by the store) and the task goes on without notes.
pub(in crate::agent) fn memory_notes(rt: &Runtime, soul: &Soul) -> Vec<MemoryEntry> {
    if !soul.memory {
        return Vec::new();
    }
    rt.settings.memory.for_soul(&soul.id).unwrap_or_else(|e| {
        tracing::warn!(soul = %soul.id, "no long-term memory for this task: {e}");
        Vec::new()
    })
}
