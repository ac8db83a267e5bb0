//! Integration tests, one binary (so the crate links once): `mod suite` holds one file
//! per area, `common` the shared helpers (loopback LLM server, temp homes).

mod common;
mod suite;
