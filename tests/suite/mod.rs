//! One module per area.

mod agent;
mod cli;
mod daemon;
mod llm;
mod sandbox;
mod snapshot;
mod store;
mod tools;
