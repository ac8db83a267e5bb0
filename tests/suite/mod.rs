//! One module per area.

mod agent;
mod cli;
mod daemon;
mod desktop_tools;
mod llm;
mod memory;
mod sandbox;
mod snapshot;
mod store;
mod subagents;
mod tools;
