//! The command line: clap definitions and the commands that run in this process.

use clap::{Parser, Subcommand};

use crate::sandbox::FileOpKind;

#[derive(Debug, Parser)]
#[command(name = "familiar", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Internal: restrict this process with Landlock, then run a command or a file
    /// operation (the daemon's tool helper; the spec comes in FAMILIAR_SANDBOX_SPEC).
    #[command(hide = true)]
    SandboxExec {
        /// Perform this file operation (request as JSON on stdin) instead of a command.
        #[arg(long, value_enum)]
        op: Option<FileOpKind>,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        argv: Vec<String>,
    },
}
