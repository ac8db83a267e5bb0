//! tracing setup: journald when stderr is the journal, human-readable stderr otherwise.
//!
//! Under systemd, `JOURNAL_STREAM` holds the `DEVICE:INODE` of the journal stream that
//! stderr was connected to; when stderr still is that stream we log natively to journald
//! with structured fields (TASK_ID, SESSION_ID, SOUL, TOOL come from span fields), which
//! keeps `journalctl --user -u familiar TASK_ID=…` working. Otherwise, and when the
//! journal socket cannot be opened, logs go to stderr as text. `RUST_LOG` overrides
//! the level chosen by `-v`.

use std::os::unix::fs::MetadataExt;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Whether stderr is the journal stream systemd gave us.
pub fn stderr_is_journal() -> bool {
    let Some(var) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = var.to_str().and_then(|v| v.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    // stat() follows the /proc magic link to the socket itself.
    match std::fs::metadata("/proc/self/fd/2") {
        Ok(meta) => meta.dev() == dev && meta.ino() == ino,
        Err(_) => false,
    }
}

/// The default level for `verbosity` (`-v` count); `base` is the level with no `-v`.
fn level(base: &str, verbosity: u8) -> String {
    match verbosity {
        0 => format!("familiar={base},warn"),
        1 => "familiar=debug,info".to_owned(),
        _ => "trace".to_owned(),
    }
}

/// Installs the global subscriber. Safe to call once; a second call is ignored.
pub fn init(base_level: &str, verbosity: u8) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(level(base_level, verbosity)));
    if stderr_is_journal() {
        match tracing_journald::layer() {
            Ok(journald) => {
                // No field prefix: span fields arrive as TASK_ID, SESSION_ID, SOUL, TOOL,
                // which is what `journalctl --user TASK_ID=…` filters on.
                let journald = journald
                    .with_syslog_identifier("familiar".to_owned())
                    .with_field_prefix(None);
                // A second init (tests) fails harmlessly: the first subscriber stays.
                tracing_subscriber::registry()
                    .with(filter)
                    .with(journald)
                    .try_init()
                    .ok();
                return;
            }
            Err(e) => {
                init_stderr(EnvFilter::new(level(base_level, verbosity)));
                tracing::warn!("journald socket unavailable ({e}); logging to stderr");
                return;
            }
        }
    }
    init_stderr(filter);
}

/// Colour only for a person at a terminal that can show it: not into a pipe or a file,
/// not on `TERM=dumb`, not with `NO_COLOR` set (no-color.org).
fn stderr_wants_colour() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal()
        && std::env::var_os("TERM").is_some_and(|t| t != "dumb")
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

fn init_stderr(filter: EnvFilter) {
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(stderr_wants_colour())
        .with_target(false)
        .compact();
    // A second init (tests) fails harmlessly: the first subscriber stays.
    tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .try_init()
        .ok();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbosity_raises_the_level() {
        assert_eq!(level("warn", 0), "familiar=warn,warn");
        assert_eq!(level("info", 1), "familiar=debug,info");
        assert_eq!(level("info", 3), "trace");
    }
}
