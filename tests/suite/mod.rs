//! One module per area.

mod agent;
mod cli;
mod daemon;
mod desktop_tools;
mod llm;
mod reliability;
mod sandbox;
mod snapshot;
mod store;
mod tools;
