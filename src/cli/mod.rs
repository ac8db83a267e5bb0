//! The command line: clap definitions and dispatch.
//!
//! This is the only module that writes to stdout. Commands return an [`Exit`] (the
//! contract's exit codes) or an error, which `main` maps: configuration and usage
//! errors exit 2. Output goes through `writeln!` on a locked stdout so a closed pipe
//! (`familiar souls | head -1`) ends the command quietly instead of panicking.

mod ask;
mod client;
mod doctor;
mod local;
mod memory;
mod output;
mod run;
mod setup;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

pub use output::Out;

/// The exit codes of DESIGN §2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// The command or task completed.
    Completed = 0,
    /// The task failed, was denied or was cancelled.
    Failed = 1,
    /// Usage or configuration error.
    Usage = 2,
    /// The daemon cannot be reached.
    Unreachable = 3,
    /// A limit was reached (iterations, tokens, wall clock).
    Limit = 4,
}

impl From<Exit> for std::process::ExitCode {
    fn from(e: Exit) -> Self {
        std::process::ExitCode::from(e as u8)
    }
}

/// familiar: an agent daemon for your Linux desktop that cannot do damage it was not
/// allowed to do.
#[derive(Debug, Parser)]
#[command(name = "familiar", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// Config file [default: $XDG_CONFIG_HOME/familiar/config.toml]
    #[arg(long, global = true, value_name = "FILE", env = "FAMILIAR_CONFIG")]
    pub config: Option<PathBuf>,

    /// More logging (-v debug, -vv trace); RUST_LOG overrides
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon in the foreground (what the systemd unit runs)
    Daemon,
    /// Run one task in this process, without the daemon
    Run(TaskArgs),
    /// Submit a task to the daemon and stream its events
    Ask(AskArgs),
    /// Daemon version, uptime, Landlock status, active tasks, metrics
    Status(JsonFlag),
    /// List the daemon's tasks
    Tasks(JsonFlag),
    /// Cancel a task
    Cancel { task_id: String },
    /// Approve a pending approval request
    Approve { request_id: String },
    /// Deny a pending approval request
    Deny { request_id: String },
    /// List sessions, or show one
    Sessions {
        #[command(subcommand)]
        action: Option<SessionsAction>,
        #[arg(long)]
        json: bool,
    },
    /// Long-term memory: list entries, forget one, clear them
    Memory {
        #[command(subcommand)]
        action: Option<MemoryAction>,
        /// One JSON object per line
        #[arg(long, global = true)]
        json: bool,
    },
    /// List souls, show one, or validate a soul file
    Souls {
        #[command(subcommand)]
        action: Option<SoulsAction>,
        #[arg(long)]
        json: bool,
    },
    /// Ask the policy about a tool call
    Policy {
        #[command(subcommand)]
        action: PolicyAction,
    },
    /// Print the environment snapshot the agent sees
    Snapshot(JsonFlag),
    /// Install the systemd user units and the D-Bus activation file
    Setup {
        /// Print what would be installed, change nothing
        #[arg(long)]
        dry_run: bool,
    },
    /// Print shell completions
    Completions { shell: clap_complete::Shell },
    /// Check config, souls, provider and model, Landlock, the bus, the daemon, the
    /// units, notifications, Hyprland and the data dir; say the fix for each problem
    Doctor(JsonFlag),
    /// Internal: restrict this process with Landlock, then run a command or a file
    /// operation (the tools' helper; the spec comes in FAMILIAR_SANDBOX_SPEC).
    #[command(hide = true)]
    SandboxExec {
        /// Perform this file operation (request as JSON on stdin) instead of a command.
        #[arg(long, value_enum)]
        op: Option<crate::sandbox::FileOpKind>,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        argv: Vec<String>,
    },
}

#[derive(Debug, Args)]
pub struct JsonFlag {
    /// One JSON object per line
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TaskArgs {
    /// Soul to run under [default: default_soul from config.toml]
    #[arg(long)]
    pub soul: Option<String>,
    /// Continue this session
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Writable workspace for the task [default: data_dir/workspaces/SESSION_ID]
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// One JSON object per event, one per line
    #[arg(long)]
    pub json: bool,
    /// The prompt, or `-` to read it from stdin
    #[arg(value_name = "PROMPT|-")]
    pub prompt: Vec<String>,
}

#[derive(Debug, Args)]
pub struct AskArgs {
    #[command(flatten)]
    pub task: TaskArgs,
    /// Print the task and session ids and exit
    #[arg(long)]
    pub detach: bool,
    /// Show the result as a desktop notification
    #[arg(long)]
    pub notify: bool,
    /// Read the prompt with $FAMILIAR_DMENU (default: fuzzel, wofi, rofi or bemenu)
    #[arg(long)]
    pub dmenu: bool,
}

#[derive(Debug, Subcommand)]
pub enum SessionsAction {
    /// Show one session: history, plan, usage
    Show {
        id: String,
        /// Leave out the system reminders familiar added to the history
        #[arg(long)]
        no_reminders: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum MemoryAction {
    /// One entry per line: id, soul (`*`: every soul), text
    List,
    /// Remove one entry
    Forget { id: String },
    /// Remove every entry, or those of one soul (`--soul '*'`: those every soul sees)
    Clear {
        #[arg(long, value_name = "S")]
        soul: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum SoulsAction {
    /// Show one soul in full, with the modes in force under the policy
    Show { id: String },
    /// Check a soul file against the schema and the policy, without loading it
    Validate { file: PathBuf },
}

#[derive(Debug, Subcommand)]
pub enum PolicyAction {
    /// Say what the policy would decide for a call, and why
    Check {
        /// Judge the call as this soul would make it [default: default_soul]
        #[arg(long)]
        soul: Option<String>,
        /// Print the verdict as JSON
        #[arg(long)]
        json: bool,
        /// Tool name, e.g. shell
        tool: String,
        /// Arguments as a JSON object, e.g. '{"command": "rm -rf ~"}'
        args_json: String,
    },
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<Exit> {
    let mut out = Out::stdout();
    match cli.command {
        Command::Souls { action, json } => local::souls(&cli.config, action, json, &mut out),
        Command::Policy {
            action:
                PolicyAction::Check {
                    soul,
                    json,
                    tool,
                    args_json,
                },
        } => local::policy_check(&cli.config, soul, &tool, &args_json, json, &mut out),
        Command::Snapshot(JsonFlag { json }) => local::snapshot(&cli.config, json, &mut out),
        Command::Sessions { action, json } => local::sessions(&cli.config, action, json, &mut out),
        Command::Memory { action, json } => memory::memory(&cli.config, action, json, &mut out),
        Command::Completions { shell } => {
            local::completions(shell, &mut out)?;
            Ok(Exit::Completed)
        }
        Command::Daemon => daemon(&cli.config),
        Command::Run(args) => run::run(&cli.config, args, out),
        // The daemon reads its own config; clients only talk to it.
        Command::Ask(args) => ask::ask(args, out),
        Command::Status(JsonFlag { json }) => client::status(json, &mut out),
        Command::Tasks(JsonFlag { json }) => client::tasks(json, &mut out),
        Command::Cancel { task_id } => client::cancel(&task_id),
        Command::Approve { request_id } => client::respond(&request_id, true),
        Command::Deny { request_id } => client::respond(&request_id, false),
        Command::Setup { dry_run } => setup::setup(dry_run, &mut out),
        Command::Doctor(JsonFlag { json }) => doctor::doctor(&cli.config, json, &mut out),
        // main.rs runs the helper before logging is set up; reaching here is a bug.
        Command::SandboxExec { .. } => anyhow::bail!("sandbox-exec is handled before dispatch"),
    }
}

fn daemon(config: &Option<PathBuf>) -> anyhow::Result<Exit> {
    match crate::daemon::run(config.as_deref()) {
        Ok(()) => Ok(Exit::Completed),
        // Not a configuration problem: exit 1 (systemd restarts on any failure).
        Err(e @ crate::daemon::DaemonError::BusLost(_)) => client::Failure {
            exit: Exit::Failed,
            message: e.to_string(),
        }
        .report(),
        Err(e) => Err(e.into()),
    }
}
