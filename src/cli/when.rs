//! `--when` and `--wait` for `run` and `ask`: the conditions are waited for here, in the
//! command's own process, so a task waiting for an idle machine holds no daemon slot;
//! the task itself checks them once more right before its first model call and ends
//! `skipped` when they do not hold.

use std::io::Write;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::snapshot::conditions::{Checker, Conditions, InvalidConditions};

/// The `--when` value parser.
pub fn parse(s: &str) -> Result<Conditions, InvalidConditions> {
    s.parse()
}

/// Waits up to `wait` for `when` to hold (at once if it does), saying on stderr what it
/// waits for and how it ended. Whatever the outcome, the task decides for itself.
pub async fn wait_for(when: &Conditions, wait: Duration, cancel: &CancellationToken) {
    let checker = Checker::connect().await;
    let (unmet, _) = checker.check(when).await;
    let Some(unmet) = unmet else {
        return;
    };
    let wait_text = humantime::format_duration(wait);
    say(&format!(
        "waiting up to {wait_text} for --when {when}: {unmet}"
    ));
    match checker.wait_until(when, wait, cancel).await {
        None => say("the conditions hold; starting"),
        Some(_) if cancel.is_cancelled() => interrupted(when),
        Some(unmet) => say(&format!("still {unmet} after {wait_text}")),
    }
}

/// Ctrl-C while waiting: said as such, not as a skip.
pub fn interrupted(when: &Conditions) {
    say(&format!("interrupted while waiting for --when {when}"));
}

fn say(line: &str) {
    if let Err(e) = writeln!(std::io::stderr().lock(), "familiar: {line}") {
        tracing::debug!("stderr: {e}");
    }
}
