//! The agent loop: one task from prompt to finish status.
//!
//! [`turn`] is the state machine; [`dispatch`] schedules tool calls as they stream in;
//! [`plan`], [`compaction`], [`loop_detect`] and [`prompt`] are its pure parts;
//! [`events`], [`hooks`] and [`metrics`] are what it reports to the outside.

pub mod compaction;
pub mod dispatch;
pub mod events;
pub mod hooks;
pub mod loop_detect;
pub mod metrics;
pub mod plan;
pub mod prompt;
pub mod reminder;
pub mod runtime;
pub mod turn;

pub use runtime::RuntimeError;
pub use turn::{ConfigLlmFactory, LlmFactory, Runtime, TaskError, TaskOutcome, TaskSpec, run_task};
