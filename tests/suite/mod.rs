//! One module per area.

mod cli;
mod llm;
mod snapshot;
mod store;
