//! One module per area.

mod agent;
mod cli;
mod daemon;
mod llm;
mod snapshot;
mod store;
