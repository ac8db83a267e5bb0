//! familiar: an autonomous agent daemon for the Linux desktop.
//!
//! A systemd user daemon (`familiar daemon`) runs LLM agent tasks, each bounded by
//! iterations, tokens and wall clock, under a *soul* (persona, model, tool allowlist,
//! permission tiers, sandbox) and below a *policy* (the ceiling every soul obeys).
//! `familiar run` runs the same loop in-process. The external contract (CLI, D-Bus,
//! files) is documented in `docs/` and the README; this crate is its one implementation.
//!
//! Module map:
//! - [`config`], [`soul`], [`policy`]: what the user configured, validated.
//! - [`snapshot`], [`hyprland`]: what the machine looks like right now.
//! - [`store`]: sessions, transcripts and the audit log on disk.
//! - [`llm`]: model providers (OpenAI-compatible, Anthropic), streaming.
//! - [`agent`], [`tools`], [`sandbox`], [`ratelimit`], [`approval`]: the agent loop.
//! - [`dbus`], [`daemon`]: the session-bus service.
//! - [`cli`]: the command line (the only module that prints).
//! - `fuzzing` (hidden): entry points for the cargo-fuzz targets in `fuzz/`.

pub mod agent;
pub mod approval;
pub mod catalog;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod dbus;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod hyprland;
pub mod ids;
pub mod llm;
pub mod logging;
pub mod policy;
pub mod ratelimit;
pub mod sandbox;
pub mod snapshot;
pub mod soul;
pub mod store;
pub mod tools;
