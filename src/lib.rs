//! familiar: an autonomous agent daemon for the Linux desktop.
//!
//! A systemd user daemon (`familiar daemon`) runs LLM agent tasks, each bounded by
//! iterations, tokens and wall clock, under a *soul* (persona, model, tool allowlist,
//! permission tiers, sandbox) and below a *policy* (the ceiling every soul obeys).
//! `familiar run` runs the same loop in-process. The external contract (CLI, D-Bus,
//! files) is documented in `docs/` and the README; this crate is its one implementation.
//!
//! Module map, from the top layer down (imports only point down; see
//! `docs/architecture.md`):
//! - [`cli`]: the command line (the only module that prints).
//! - [`daemon`]: `familiar daemon`, its supervisor and the D-Bus service object.
//! - [`agent`]: the loop, one task from prompt to finish status.
//! - [`tools`]: what the model can call, each through the [`sandbox`].
//! - [`mcp`], [`soul`], [`snapshot`]: MCP tool servers; validated souls; the machine
//!   right now.
//! - [`sandbox`], [`store`], [`ratelimit`]: the Landlock helper; sessions,
//!   transcripts, the audit log and memory on disk; quotas.
//! - [`llm`], [`policy`], [`dbus`], [`compositor`]: model providers and streaming; the
//!   decision for one call; the session-bus contract (names, errors, proxies); the
//!   desktop layer (Hyprland, sway, niri, each over its socket).
//! - [`config`], [`approval`]: `config.toml` and paths; approval requests.
//! - [`catalog`], [`error`], [`ids`], [`logging`], [`secrets`], [`programs`],
//!   [`launcher`]: the tool catalog and tiers, shared errors, newtype ids, tracing, the
//!   Secret Service client that reads and stores API keys, the system programs the
//!   daemon runs unconfined, the user's dmenu-style launcher.
//! - `fuzzing` (hidden, built only under `--cfg fuzzing`, which cargo-fuzz sets, and in
//!   the unit tests): entry points for the cargo-fuzz targets in `fuzz/`.

pub mod agent;
pub mod approval;
pub mod catalog;
pub mod cli;
pub mod compositor;
pub mod config;
pub mod daemon;
pub mod dbus;
pub mod error;
// Its fixtures panic on purpose (that is how libFuzzer reports a broken invariant), so
// no build of the program carries it; the unit tests do, so it keeps compiling.
#[cfg(any(fuzzing, test))]
#[doc(hidden)]
pub mod fuzzing;
/// The Hyprland client's path before the desktop layer, kept so code written against
/// `familiar::hyprland` still builds.
pub use compositor::hyprland;
pub mod launcher;
pub mod llm;
pub mod logging;
pub mod mcp;
pub mod policy;
pub mod programs;
pub mod ratelimit;
pub mod sandbox;
pub mod secrets;
pub mod snapshot;
pub mod soul;
pub mod store;
pub mod tools;
