//! The agent loop against the scripted loopback model: real files, real store, real
//! tools, no timing assertions (tests wait for events).

mod cache_prefix;
mod desktop_sway;
mod desktop_tools;
mod hooks;
mod loop_behaviour;
mod overflow;
mod precheck;
mod run_cli;
mod run_habits;
mod screen_hosted;
mod screen_ipc;
mod screen_sway;
mod stops;
mod typed;
mod typing_ipc;
mod typing_sway;
mod ui_sway;
