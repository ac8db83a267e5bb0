//! One module per area.

mod snapshot;
mod store;
