//! Integration tests, one binary (so the crate links once): `mod suite` holds one file
//! per area, `common` the shared helpers (loopback LLM server, temp homes).

// Test code panics on purpose when a fixture cannot be set up.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod suite;
