//! One module per area.
mod llm;
