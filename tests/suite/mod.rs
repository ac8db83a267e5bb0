//! One module per area.

mod agent;
mod cli;
mod llm;
mod snapshot;
mod store;
