//! One module per area.

mod sandbox;
