//! The agent loop: one task from prompt to finish status.
//!
//! [`turn`] is the state machine and runs each iteration, by the [`rules`] (plain
//! functions of what the loop counted and the task's limits); [`task`] starts a task
//! (opens its session, places it, assembles its parts) and finishes it. A running task
//! is made of parts that each own one concern:
//!
//! - the [`Emitter`](emitter::Emitter) reports: events to the bus and the transcript,
//!   the [`hooks`] (audit log, [`metrics`]);
//! - [`calls`]: the task's call gate (policy, quotas, the sandbox rule, its tools and
//!   [`calls::mcp`] tools), the collector that turns a model's stream into a turn, and
//!   the dispatcher that runs the calls;
//! - [`context`]: the context keeper, which owns the session and the model: each
//!   request (system prompt, history, reminder), compaction, overflow recovery, and the
//!   repair of a history a crash left invalid;
//! - [`family`]: delegated sub-tasks, the budget they share with their parent, and the
//!   runner that starts them.
//!
//! Beside them: [`events`] (what a task reports), [`plan`] (the steps a task took),
//! [`loop_detect`] (repeated turns), [`steering`] (messages added while it runs),
//! [`precheck`] (a soul's probes before the first call), [`choice`] (which soul and
//! session a request runs in), [`trail`] (how a call was decided, for its audit
//! line), [`runtime`] (what the tasks of one process share),
//! [`warm`] (a soul's prefix sent ahead to its local model server).
//!
//! Imports inside point down: `turn` → `task` → `rules` → `calls` → `context` and
//! `family` → `emitter` → the rest. The family runs sub-tasks through a function the loop
//! hands it (`family::subagent::RunChild`), so it never reaches up into the loop.

pub mod calls;
pub mod choice;
pub mod context;
mod emitter;
pub mod events;
pub mod family;
pub mod hooks;
pub mod loop_detect;
pub mod metrics;
pub mod plan;
mod precheck;
mod rules;
pub mod runtime;
pub mod steering;
pub mod task;
pub mod trail;
pub mod turn;
pub mod warm;

pub use context::repair::repair_dangling;
pub use runtime::{
    ConfigLlmFactory, LlmFactory, Reloaded, Runtime, RuntimeError, Services, Settings,
};
pub use task::{TaskError, TaskOutcome, TaskSpec};
pub use turn::{discard_if_unanswered, run_task};
