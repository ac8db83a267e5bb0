//! `familiar sessions rm ID…` and `familiar sessions prune --older-than DURATION`.
//!
//! A busy session (a task runs in it, here or in the daemon) is skipped with a
//! message, never removed; `rm` of an unknown id is a usage error (exit 2), like the
//! other commands that take an id.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use familiar_protocol::ids::SessionId;

use super::{Exit, Out};
use crate::store::{Store, StoreError};

pub fn rm(store: &Store, ids: &[String], out: &mut Out) -> anyhow::Result<Exit> {
    let mut exit = Exit::Completed;
    for raw in ids {
        let id = SessionId::new(raw)?;
        match store.remove_session(&id) {
            Ok(true) => writeln!(out, "removed {id}")?,
            Ok(false) => {
                writeln!(
                    std::io::stderr().lock(),
                    "familiar: no session `{id}` in {} (`familiar sessions` lists them)",
                    store.data_dir().display()
                )?;
                exit = Exit::Usage;
            }
            Err(StoreError::SessionBusy(_)) => {
                writeln!(
                    std::io::stderr().lock(),
                    "familiar: session {id} is busy (a task runs in it); cancel the task first"
                )?;
                exit = Exit::Failed;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(exit)
}

pub fn prune(
    store: &Store,
    older_than: Duration,
    dry_run: bool,
    out: &mut Out,
) -> anyhow::Result<Exit> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let cutoff = now.saturating_sub(older_than.as_secs());
    let mut removed = 0usize;
    for s in store.list_sessions()? {
        if s.updated_at >= cutoff {
            continue;
        }
        if dry_run {
            writeln!(out, "would remove {} ({})", s.id, s.title)?;
            removed += 1;
            continue;
        }
        match store.remove_session(&s.id) {
            Ok(_) => {
                writeln!(out, "removed {} ({})", s.id, s.title)?;
                removed += 1;
            }
            Err(StoreError::SessionBusy(_)) => {
                writeln!(out, "skipped {} (a task runs in it)", s.id)?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    // Lock files of sessions gone before lock files went with them.
    if !dry_run {
        store.remove_orphan_locks()?;
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    writeln!(
        out,
        "{verb} {removed} session{} not updated for {}",
        if removed == 1 { "" } else { "s" },
        humantime::format_duration(older_than)
    )?;
    Ok(Exit::Completed)
}

/// `--older-than`'s value: a duration with its unit (`30d`, `2weeks`, `12h`); a bare
/// number is refused with the reading it most likely meant.
pub(super) fn parse_age(s: &str) -> anyhow::Result<Duration> {
    let t = s.trim();
    if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit()) {
        anyhow::bail!("`{t}` has no unit: `{t}d` is {t} days (also `h`, `w`: `12h`, `2w`)");
    }
    Ok(humantime::parse_duration(t)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Regression: `--older-than 30` said only humantime's "time unit needed".
    #[test]
    fn a_bare_number_of_days_suggests_its_unit() {
        let e = parse_age("30").unwrap_err().to_string();
        assert!(e.contains("`30d` is 30 days"), "{e}");
        assert_eq!(parse_age("30d").unwrap(), Duration::from_secs(30 * 86_400));
        assert!(parse_age("soon").is_err());
    }
}
