//! One module per area.

mod llm;
mod snapshot;
mod store;
