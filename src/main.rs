use std::process::ExitCode;

use clap::Parser;
use familiar::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::SandboxExec { op, argv } => familiar::sandbox::exec::main(op, &argv),
    }
}
