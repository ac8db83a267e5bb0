//! Dynamic completion: soul and session names read from this user's files when the
//! shell asks (clap_complete's `COMPLETE=$SHELL familiar` protocol), and the man page.
//!
//! Completers never fail loudly: a broken config or an empty data dir completes
//! nothing rather than printing an error into the shell's prompt line.

use clap::CommandFactory;
use clap_complete::CompletionCandidate;

use super::Cli;
use crate::config::{Config, ProcessEnv};

/// The config the completing command line would use (`FAMILIAR_CONFIG`, else the
/// default path); the `--config` flag itself is not visible to a completer.
fn config() -> Option<Config> {
    let path = std::env::var_os("FAMILIAR_CONFIG").map(std::path::PathBuf::from);
    Config::load(path.as_deref(), &ProcessEnv).ok()
}

/// Every soul id (built-in and the user's), with its description as help.
pub fn souls() -> Vec<CompletionCandidate> {
    let Some(config) = config() else {
        return Vec::new();
    };
    let Ok(policy) = crate::policy::load(&config.policy, &config.paths) else {
        return Vec::new();
    };
    let Ok(set) = crate::soul::SoulSet::load(&config.paths, &policy) else {
        return Vec::new();
    };
    set.souls
        .values()
        .map(|s| {
            CompletionCandidate::new(s.id.to_string()).help(Some(s.description.clone().into()))
        })
        .collect()
}

/// Every session id, newest first, with its title as help.
pub fn sessions() -> Vec<CompletionCandidate> {
    let Some(config) = config().filter(|c| c.paths.data_dir.is_dir()) else {
        return Vec::new();
    };
    let Ok(store) = crate::store::Store::open(&config.paths.data_dir) else {
        return Vec::new();
    };
    store
        .list_sessions()
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            CompletionCandidate::new(s.id.to_string())
                .help(Some(s.title.into()))
                .display_order(Some(i))
        })
        .collect()
}

/// Answers a completion request and exits when the shell made one (`COMPLETE` is
/// set); returns at once otherwise.
pub fn answer_shell() {
    clap_complete::CompleteEnv::with_factory(Cli::command).complete();
}
