//! One module per area.

mod agent;
mod cli;
mod cli_habits;
mod daemon;
mod desktop_tools;
mod llm;
mod sandbox;
mod snapshot;
mod store;
mod tools;
