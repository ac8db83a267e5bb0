//! One module per area.

mod agent;
mod cli;
mod llm;
mod sandbox;
mod snapshot;
mod store;
mod tools;
