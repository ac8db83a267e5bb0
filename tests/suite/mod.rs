//! One module per area.

mod agent;
mod approvals;
mod cli;
mod cli_habits;
mod cli_output;
mod cli_souls;
mod daemon;
mod desktop;
mod desktop_tools;
mod limits;
mod llm;
mod mcp;
mod memory;
mod real_model;
mod reliability;
mod sandbox;
mod sandbox_helper;
mod sandbox_network;
mod sandbox_plan;
mod sandbox_sockets;
mod sandbox_startup;
mod secrets;
mod snapshot;
mod store;
mod subagents;
mod tools;
