//! `familiar setup --store-key PROVIDER`: read an API key (from the terminal without
//! echo, or from stdin when it is not a terminal, so `printf %s "$KEY" | familiar setup
//! --store-key openai` scripts it) and store it in the Secret Service as the item
//! `[providers.PROVIDER]`'s `api_key_secret` finds; then say where it went and what
//! config.toml needs.
//!
//! Invariant: the key is never printed, logged or put in an error, and the terminal's
//! echo is restored before this returns, whatever happened.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;

use anyhow::Context as _;

use super::client::{Failure, block_on};
use super::{Exit, Out};
use crate::config::{ApiKeySource, Config, ProcessEnv};
use crate::secrets::{self, Bus, SecretError};

/// Longest key read from stdin; keys are short, this only stops `cat bigfile |`.
const MAX_KEY_BYTES: u64 = 16 * 1024;

pub fn store_key(config: &Option<PathBuf>, provider: &str, out: &mut Out) -> anyhow::Result<Exit> {
    let config = Config::load(config.as_deref(), &ProcessEnv)?;
    let table = config.providers.get(provider);
    // A table that already names its item stores there; otherwise the item is named
    // after the table.
    let item = match table.map(|t| &t.api_key) {
        Some(ApiKeySource::Secret(item)) => item.clone(),
        Some(ApiKeySource::None | ApiKeySource::Env(_) | ApiKeySource::CredentialFile(_))
        | None => provider.to_owned(),
    };
    let Some(key) = read_key(provider)? else {
        return Ok(Exit::Interrupted);
    };
    if key.is_empty() {
        return Failure {
            exit: Exit::Usage,
            message: format!("no key read for provider `{provider}`: the input was empty"),
        }
        .report();
    }
    let stored = block_on(secrets::store(&Bus::default(), &item, &key))?;
    drop(key);
    if let Err(e) = stored {
        return Failure {
            exit: Exit::Failed,
            message: format!(
                "cannot store the key for provider `{provider}` in the Secret Service: {e}; {}",
                remedy(&e)
            ),
        }
        .report();
    }
    writeln!(
        out,
        "stored the key for provider `{provider}` in the keyring's default collection:\n  \
         label: {}\n  attributes: application={} provider={item}",
        secrets::label(&item),
        secrets::APPLICATION
    )?;
    let file = config
        .source
        .as_ref()
        .map_or_else(|| "config.toml".to_owned(), |p| p.display().to_string());
    match table.map(|t| &t.api_key) {
        Some(ApiKeySource::Secret(_)) => writeln!(
            out,
            "[providers.{provider}] in {file} already reads it (api_key_secret = \"{item}\")."
        )?,
        Some(ApiKeySource::Env(_)) | Some(ApiKeySource::CredentialFile(_)) => writeln!(
            out,
            "In {file}, replace the api_key_env or api_key_file line of [providers.{provider}] \
             with:\n  api_key_secret = \"{item}\""
        )?,
        Some(ApiKeySource::None) | None => writeln!(
            out,
            "Add to [providers.{provider}] in {file}:\n  api_key_secret = \"{item}\""
        )?,
    }
    writeln!(out, "Check it with `familiar doctor`.")?;
    Ok(Exit::Completed)
}

/// What to do about a failed store.
fn remedy(e: &SecretError) -> String {
    match e {
        SecretError::NoService(_) | SecretError::Timeout(_) => "start a keyring (GNOME Keyring, \
             KeePassXC with Secret Service integration, KWallet) in the desktop session, or put \
             the key in an environment variable (api_key_env) or a systemd credential \
             (api_key_file) instead"
            .to_owned(),
        SecretError::Locked | SecretError::Dismissed => {
            "unlock the keyring (log in to the desktop, or answer its prompt) and retry".to_owned()
        }
        SecretError::NoDefaultCollection => {
            "create a default keyring (Seahorse: File > New > Password Keyring, then Set as \
             default; KeePassXC: expose a group under Secret Service Integration) and retry"
                .to_owned()
        }
        SecretError::NotFound(_) | SecretError::Unusable(_) | SecretError::Bus(_) => {
            "check the keyring (`secret-tool search application familiar`) and retry".to_owned()
        }
    }
}

/// The key: typed at the terminal without echo, or all of stdin when it is not one;
/// surrounding whitespace (the newline) removed. `None`: Ctrl-C at the prompt.
fn read_key(provider: &str) -> anyhow::Result<Option<String>> {
    let stdin = std::io::stdin();
    let mut text = String::new();
    if stdin.is_terminal() {
        write!(
            std::io::stderr().lock(),
            "API key for provider `{provider}` (not shown): "
        )?;
        std::io::stderr().lock().flush()?;
        let hidden = NoEcho::new(&stdin)?;
        // Ctrl-C must not end the process with echo off: the line is read on a thread
        // of its own (left behind on Ctrl-C) while the signal is awaited here.
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let read = std::io::stdin().read_line(&mut line).map(|_| line);
            // The receiver is gone only after Ctrl-C, when nobody wants the line.
            tx.send(read).ok();
        });
        let read = block_on(async {
            tokio::select! {
                read = rx => read.ok(),
                _ = tokio::signal::ctrl_c() => None,
            }
        })?;
        drop(hidden);
        match read {
            // The terminal echoed the newline (ECHONL).
            Some(line) => text = line.context("cannot read the key from the terminal")?,
            None => {
                writeln!(std::io::stderr().lock())?;
                return Ok(None);
            }
        }
    } else {
        stdin
            .lock()
            .take(MAX_KEY_BYTES)
            .read_to_string(&mut text)
            .context("cannot read the key from stdin (it must be UTF-8 text)")?;
    }
    Ok(Some(text.trim().to_owned()))
}

/// Terminal echo turned off until dropped. termios through `nix` (already a
/// dependency) rather than a crate like `rpassword` for these few lines; like
/// `getpass`, the newline is still echoed (`ECHONL`).
struct NoEcho<'a> {
    stdin: &'a std::io::Stdin,
    saved: nix::sys::termios::Termios,
}

impl<'a> NoEcho<'a> {
    fn new(stdin: &'a std::io::Stdin) -> anyhow::Result<NoEcho<'a>> {
        use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
        let saved = tcgetattr(stdin).context("cannot read the terminal's settings")?;
        let mut quiet = saved.clone();
        quiet.local_flags.remove(LocalFlags::ECHO);
        quiet.local_flags.insert(LocalFlags::ECHONL);
        tcsetattr(stdin, SetArg::TCSAFLUSH, &quiet).context("cannot turn off echo")?;
        Ok(NoEcho { stdin, saved })
    }
}

impl Drop for NoEcho<'_> {
    fn drop(&mut self) {
        use nix::sys::termios::{SetArg, tcsetattr};
        // Nothing better to do if restoring fails: the terminal is going away.
        tcsetattr(self.stdin, SetArg::TCSAFLUSH, &self.saved).ok();
    }
}
