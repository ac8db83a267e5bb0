//! One module per area.

mod store;
