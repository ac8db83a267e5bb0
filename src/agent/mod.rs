//! The agent loop: one task from prompt to finish status.
//!
//! [`turn`] is the state machine and its rules; [`task`] starts, reports and finishes a
//! task; each model call is built by [`request`], its calls pass the [`gate`] (policy
//! and quotas), and the [`collector`] turns its stream into a turn while [`dispatch`]
//! schedules the calls as they stream in. [`plan`], [`compaction`], [`loop_detect`] and
//! [`prompt`] are its pure parts ([`compactor`] runs compaction's rules on a live task,
//! [`repair`] mends a history a crash left invalid);
//! [`events`], [`hooks`] and [`metrics`] are what it reports to the outside; [`runtime`]
//! is what the tasks of one process share, model clients included. [`subagent`] runs
//! `delegate`'s sub-tasks, sharing the parent's [`budget`]; [`family`] is what a task
//! knows of its parent and children (plain data the loop and the runner both read).

pub mod budget;
pub mod choice;
mod collector;
pub mod compaction;
mod compactor;
pub mod dispatch;
pub mod events;
pub mod family;
mod gate;
pub mod hooks;
pub mod loop_detect;
mod mcp;
pub mod metrics;
mod overflow;
pub mod plan;
mod precheck;
pub mod prompt;
pub mod reminder;
pub mod repair;
mod request;
pub mod runtime;
pub mod steering;
pub mod subagent;
pub mod task;
pub mod turn;

pub use repair::repair_dangling;
pub use runtime::{ConfigLlmFactory, LlmFactory, Runtime, RuntimeError};
pub use task::{TaskError, TaskOutcome, TaskSpec};
pub use turn::{discard_if_unanswered, run_task};
