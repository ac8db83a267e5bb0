//! `familiar`: parse the command line, set up logging, run, map the result to an exit
//! code (docs/cli.md: 0 completed, 1 failed/denied/cancelled, 2 usage or config error,
//! 3 daemon unreachable, 4 limit reached).

use std::process::ExitCode;

use clap::Parser;
use familiar::cli::{self, Cli, Command, Exit};

fn main() -> ExitCode {
    // The sandbox helper, for when `familiar-sandbox` is not installed beside us: the
    // same entry point and arguments, before anything else. It must stay
    // single-threaded and quiet until it has restricted itself and exec'd the command:
    // no logging, no runtime, no shell completion whatever its environment holds.
    let mut args = std::env::args_os();
    if args.nth(1).is_some_and(|a| a == "sandbox-exec") {
        return familiar_sandbox::exec::main(args);
    }
    // `COMPLETE=bash familiar …`: the shell asks for completions; answered and exited.
    cli::answer_shell();
    let cli = Cli::parse();
    // The daemon logs what it does; clients only what went wrong.
    let base = match cli.command {
        Command::Daemon => "info",
        _ => "warn",
    };
    familiar::logging::init(base, cli.verbose);
    familiar::llm::install_tls_provider();
    match cli::run(cli) {
        Ok(exit) => exit.into(),
        Err(err) => report(&err).into(),
    }
}

#[allow(clippy::print_stderr)]
fn report(err: &anyhow::Error) -> Exit {
    // `familiar souls | head -1`: the reader went away, which is not our failure.
    if let Some(io) = err.downcast_ref::<std::io::Error>()
        && io.kind() == std::io::ErrorKind::BrokenPipe
    {
        return Exit::Completed;
    }
    eprintln!("familiar: {}", chain_once(err));
    Exit::Usage
}

/// The error and its causes, `: `-joined, without a cause whose text the message
/// already holds (`cannot read x: No such file (os error 2)` says it once).
fn chain_once(err: &anyhow::Error) -> String {
    let mut text = err.to_string();
    for cause in err.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}
