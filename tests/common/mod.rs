//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod fake_hyprland;
pub mod llm_server;
