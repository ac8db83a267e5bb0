//! The agent loop: one task from prompt to finish status.
//!
//! Pieces land one at a time; see the issue tracker for what is still to come.

pub mod loop_detect;
