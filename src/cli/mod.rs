//! The command line: clap definitions and dispatch.
//!
//! This is the only module that writes to stdout. Commands return an [`Exit`] (the
//! contract's exit codes) or an error, which `main` maps: configuration and usage
//! errors exit 2. Output goes through `writeln!` on a locked stdout so a closed pipe
//! (`familiar souls | head -1`) ends the command quietly instead of panicking.

mod ask;
mod bar;
mod bus_wait;
mod call_args;
mod chooser;
mod client;
mod complete;
mod doctor;
mod follow;
mod local;
mod man;
mod mcp;
mod memory;
mod output;
mod printer;
mod progress;
mod prompt;
mod prune;
mod run;
mod setup;
mod soul_copy;
mod status;
mod store_key;
mod submit;
mod typed;
mod waiting;
mod when;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use clap_complete::ArgValueCandidates;

pub use complete::answer_shell;

pub use output::Out;

/// The exit codes every command shares (docs/cli.md lists them).
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
    /// Interrupted by Ctrl-C (128 + SIGINT, as shells report it).
    Interrupted = 130,
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
    Run(RunArgs),
    /// Submit a task to the daemon and stream its events
    Ask(AskArgs),
    /// Daemon version, uptime, Landlock status, active tasks, metrics
    Status(JsonFlag),
    /// List the daemon's tasks
    Tasks(JsonFlag),
    /// A status-bar module: one line per change (waybar's JSON: idle, working, asking,
    /// failed, off), driven by the daemon's signals
    Bar {
        /// The text alone, one line per change (for bars other than waybar)
        #[arg(long)]
        plain: bool,
    },
    /// Add a message to a running task; it joins at the task's next step
    Steer {
        /// The task's id (t-…), as `familiar tasks` or `ask --detach` prints it
        task_id: String,
        /// What the task should know now; `-` reads it from stdin
        #[arg(required = true)]
        message: Vec<String>,
    },
    /// Re-read config.toml, souls and policies in the daemon (as SIGHUP does)
    Reload,
    /// Cancel a task
    Cancel {
        /// The task's id (t-…), as `familiar tasks` lists it
        task_id: String,
    },
    /// Put back the files a task changed outside its workspace (created ones go to
    /// the Trash, changed ones get their previous content, trashed ones come back);
    /// refused, naming them, if any changed since
    Undo {
        /// The task's id (t-…), as `familiar tasks` lists it
        task_id: String,
    },
    /// Approve a pending approval request, or choose the answer in the launcher
    Approve {
        /// The request's id (r-…), from the notification or the approval_requested event
        #[arg(required_unless_present = "dmenu")]
        request_id: Option<String>,
        /// Show the pending requests and their choices (Deny, Approve, the task's timed
        /// grant) in the menu ([desktop] menu in config.toml, else the system's fuzzel,
        /// wofi, rofi or bemenu); with one
        /// pending, or an ID given, straight to its choices
        #[arg(long)]
        dmenu: bool,
    },
    /// Deny a pending approval request
    Deny {
        /// The request's id (r-…), from the notification or the approval_requested event
        request_id: String,
    },
    /// List sessions, show one, remove or prune them
    Sessions {
        #[command(subcommand)]
        action: Option<SessionsAction>,
        /// JSON output (one object per line; `show`: one pretty object)
        #[arg(long, global = true)]
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
        /// JSON output (one object per line; `show`: one pretty object)
        #[arg(long, global = true)]
        json: bool,
    },
    /// MCP tool servers: `familiar mcp list` (starts them to list their tools)
    Mcp {
        #[command(subcommand)]
        action: McpAction,
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
        /// Print what would be done, change nothing
        #[arg(long)]
        dry_run: bool,
        /// Stop and disable the units, remove the files setup installed (sessions and
        /// config stay)
        #[arg(long)]
        uninstall: bool,
        /// Only store PROVIDER's API key in the Secret Service (typed without echo, or
        /// read from stdin when it is not a terminal) and say what config.toml needs
        #[arg(long, value_name = "PROVIDER", conflicts_with_all = ["dry_run", "uninstall"])]
        store_key: Option<String>,
    },
    /// Print a manual page (roff: `familiar man run | man -l -`), or install them all
    Man {
        /// The command whose page to print (`run`, `sessions show`, …) [default: the
        /// page of familiar itself]
        #[arg(conflicts_with = "install")]
        command: Vec<String>,
        /// Write familiar.1 and a familiar-COMMAND.1 per subcommand into DIR [default:
        /// $XDG_DATA_HOME/man/man1, i.e. ~/.local/share/man/man1], where man finds them
        #[arg(long, value_name = "DIR", num_args = 0..=1)]
        install: Option<Option<PathBuf>>,
    },
    /// Print static shell completions (for dynamic ones with soul and session names:
    /// `source <(COMPLETE=bash familiar)`, see docs/cli.md)
    Completions {
        /// The shell to complete for
        shell: clap_complete::Shell,
    },
    /// Check config, souls, provider and model, Landlock, the bus, the daemon, the
    /// units, notifications, the compositor and the data dir; say the fix for each problem
    Doctor(JsonFlag),
}

#[derive(Debug, Args)]
pub struct JsonFlag {
    /// One JSON object per line
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TaskArgs {
    /// Soul to run under [default: the session's soul, else default_soul from config.toml]
    #[arg(long, value_name = "SOUL", add = ArgValueCandidates::new(complete::souls))]
    pub soul: Option<String>,
    /// Continue this session (under its own soul)
    #[arg(long, value_name = "ID", add = ArgValueCandidates::new(complete::sessions))]
    pub session: Option<String>,
    /// Provider for this task: a [providers.NAME] table of config.toml [default: the
    /// soul's, else default_provider]
    #[arg(long, value_name = "NAME")]
    pub provider: Option<String>,
    /// Model for this task [default: the soul's, else the provider's]
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
    /// Writable workspace for the task [default: data_dir/workspaces/SESSION_ID]
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// One JSON object per event, one per line
    #[arg(long)]
    pub json: bool,
    /// Run only if these hold right before the first model call, else end `skipped`
    /// at no cost: ac, battery>N, load<N, idle>DURATION, unlocked, metered=no
    #[arg(long, value_name = "COND,...", value_parser = when::parse)]
    pub when: Option<crate::snapshot::conditions::Conditions>,
    /// With --when: wait up to DURATION (e.g. `2h`) for the conditions instead of
    /// skipping at once
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, requires = "when")]
    pub wait: Option<std::time::Duration>,
    /// The prompt, or `-` to read it from stdin
    #[arg(value_name = "PROMPT|-")]
    pub prompt: Vec<String>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub task: TaskArgs,
    /// Continue the most recently updated session
    #[arg(short = 'c', long = "continue", conflicts_with = "session")]
    pub continue_latest: bool,
    /// Keep nothing: the session (context, transcript, workspace) is removed when the
    /// task ends (the audit log still records its tool calls)
    #[arg(long, conflicts_with_all = ["session", "continue_latest"])]
    pub ephemeral: bool,
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
    /// Read the prompt with the menu ([desktop] menu in config.toml, else the system's
    /// fuzzel, wofi, rofi or bemenu)
    #[arg(long)]
    pub dmenu: bool,
    /// Send what you point at with the request, read once now: the primary
    /// `selection`, the `clipboard` text, the focused `window` (repeatable)
    #[arg(long, value_name = "SOURCE", value_parser = clap::value_parser!(familiar_protocol::ContextSource))]
    pub context: Vec<familiar_protocol::ContextSource>,
}

#[derive(Debug, Subcommand)]
pub enum SessionsAction {
    /// Show one session: history, plan, usage
    Show {
        /// The session's id (s-…), as `familiar sessions` lists it
        #[arg(add = ArgValueCandidates::new(complete::sessions))]
        id: String,
        /// Leave out the system reminders familiar added to the history
        #[arg(long)]
        no_reminders: bool,
    },
    /// Remove sessions: their context, transcript and workspace
    Rm {
        /// The sessions' ids (s-…)
        #[arg(required = true, value_name = "ID", add = ArgValueCandidates::new(complete::sessions))]
        ids: Vec<String>,
    },
    /// Remove every session not updated for longer than DURATION
    Prune {
        /// Age beyond which a session goes, e.g. `30d`, `2weeks`, `12h`
        #[arg(long, value_name = "DURATION", value_parser = prune::parse_age)]
        older_than: std::time::Duration,
        /// Say what would be removed, remove nothing
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum MemoryAction {
    /// One entry per line: id, soul (`*`: every soul), text
    List,
    /// Remove one entry
    Forget {
        /// The entry's id, as `familiar memory list` prints it
        id: String,
    },
    /// Remove every entry, or those of one soul (`--soul '*'`: those every soul sees)
    Clear {
        /// Only the entries of this soul (`*`: those every soul sees)
        #[arg(long, value_name = "S", add = ArgValueCandidates::new(complete::souls))]
        soul: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum SoulsAction {
    /// List the souls (what `familiar souls` alone prints)
    List,
    /// Show one soul in full, with the modes in force under the policy
    Show {
        /// The soul's id, as `familiar souls` lists it
        #[arg(add = ArgValueCandidates::new(complete::souls))]
        id: String,
    },
    /// Check a soul file against the schema and the policy, without loading it
    Validate {
        /// The soul file (TOML)
        file: PathBuf,
    },
    /// Copy a shipped soul, with its prompt, into your souls directory to edit it
    Copy {
        /// The shipped soul's id (safe_assistant, system_admin, …)
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum PolicyAction {
    /// Say what the policy would decide for a call, and why
    Check {
        /// Judge the call as this soul would make it [default: default_soul]
        #[arg(long, add = ArgValueCandidates::new(complete::souls))]
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

#[derive(Debug, Subcommand)]
pub enum McpAction {
    /// Servers, their state and tools (starts each server, in its sandbox, then stops it)
    List {
        /// Show the configuration only; start nothing
        #[arg(long)]
        no_start: bool,
        /// One JSON object per server and line
        #[arg(long)]
        json: bool,
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
        Command::Mcp {
            action: McpAction::List { no_start, json },
        } => mcp::list(&cli.config, no_start, json, &mut out),
        Command::Completions { shell } => {
            local::completions(shell, &mut out)?;
            Ok(Exit::Completed)
        }
        Command::Man { command, install } => man::man(&command, install, &mut out),
        Command::Daemon => daemon(&cli.config),
        Command::Run(args) => run::run(&cli.config, args, out),
        // The daemon reads its own config; clients only talk to it.
        Command::Ask(args) => ask::ask(cli.config.as_deref(), args, out),
        Command::Status(JsonFlag { json }) => status::status(cli.config.as_deref(), json, &mut out),
        Command::Tasks(JsonFlag { json }) => client::tasks(json, &mut out),
        Command::Bar { plain } => bar::bar(plain, &mut out),
        Command::Steer { task_id, message } => client::steer(&task_id, &message, &mut out),
        Command::Cancel { task_id } => client::cancel(&task_id, &mut out),
        Command::Undo { task_id } => client::undo(&task_id, &mut out),
        Command::Reload => client::reload(&mut out),
        Command::Approve {
            request_id,
            dmenu: true,
        } => chooser::approve_dmenu(request_id.as_deref(), &mut out),
        Command::Approve {
            request_id: Some(request_id),
            dmenu: false,
        } => client::respond(&request_id, true, &mut out),
        Command::Approve {
            request_id: None,
            dmenu: false,
        } => Err(anyhow::anyhow!(
            "name the request to approve (familiar approve ID), or choose with --dmenu"
        )),
        Command::Deny { request_id } => client::respond(&request_id, false, &mut out),
        Command::Setup {
            store_key: Some(provider),
            ..
        } => store_key::store_key(&cli.config, &provider, &mut out),
        Command::Setup {
            dry_run, uninstall, ..
        } => setup::setup(dry_run, uninstall, &mut out),
        Command::Doctor(JsonFlag { json }) => doctor::doctor(&cli.config, json, &mut out),
    }
}

fn daemon(config: &Option<PathBuf>) -> anyhow::Result<Exit> {
    // First, while this is the only thread: it may re-execute the daemon.
    crate::daemon::tune_allocator();
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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// Every flag and positional argument says what it is for in `--help`.
    #[test]
    fn every_argument_has_help_text() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "familiar", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:?}");
    }
}
