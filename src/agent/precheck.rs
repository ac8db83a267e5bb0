//! A soul's `[precheck]`: cheap local probes run before the first model call, so a
//! scheduled check-up calls the model only when something is worth reporting. A quiet
//! run ends `skipped` with "nothing to report: …" at zero tokens; findings go to the
//! model in the first reminder, so it starts from them instead of looking again.
//!
//! The probes are familiar's own fixed reads, not the model's tool calls: the user
//! manager's failed units (D-Bus), each disk's use (the snapshot), and the user journal's
//! errors since this soul's previous pre-check (`journalctl --user -p err`). The time of
//! the previous pre-check is kept in `data_dir/precheck/SOUL`; the first one looks back
//! a week.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use familiar_protocol::ids::SoulId;

use crate::snapshot::Snapshotter;
use crate::soul::Precheck;
use crate::tools::bus::Bus;

/// How far the first pre-check of a soul looks back in the journal.
const FIRST_LOOK_BACK: Duration = Duration::from_secs(7 * 24 * 3600);
/// Journal lines quoted to the model at most.
const JOURNAL_LINES: usize = 20;
/// How long `journalctl` may take.
const JOURNAL_TIMEOUT: Duration = Duration::from_secs(10);

/// What the probes saw.
#[derive(Debug, Default)]
pub(super) struct Report {
    /// Worth reporting, one entry per finding.
    pub(super) findings: Vec<String>,
    /// What was checked and found quiet, for the journal.
    pub(super) quiet: Vec<String>,
    /// What could not be checked (no user manager, no journal): not a finding, but
    /// the result says so rather than "nothing to report".
    pub(super) unchecked: Vec<String>,
}

/// The result of a run that found nothing: what was quiet, and apart from it what
/// could not be checked.
pub(super) fn quiet_result(report: &Report) -> String {
    let quiet = report.quiet.join(", ");
    match (report.unchecked.is_empty(), quiet.is_empty()) {
        (true, _) => format!("nothing to report: {quiet}"),
        (false, true) => format!(
            "nothing found, but not everything was checked: {}",
            report.unchecked.join(", ")
        ),
        (false, false) => format!(
            "nothing found ({quiet}), but not everything was checked: {}",
            report.unchecked.join(", ")
        ),
    }
}

/// Runs soul `soul`'s pre-check `p`; the time of its previous run is kept under
/// `data_dir`.
pub(super) async fn run(
    p: &Precheck,
    soul: &SoulId,
    data_dir: &Path,
    snapshotter: &Arc<Mutex<Snapshotter>>,
) -> Report {
    let stamp = data_dir.join("precheck").join(soul.as_str());
    let since = last_run(&stamp);
    let mut report = Report::default();
    if p.failed_units {
        failed_units(&mut report).await;
    }
    full_disks(p, snapshotter, &mut report).await;
    if p.journal_errors {
        journal_errors(since, &mut report).await;
    }
    record_run(&stamp);
    report
}

async fn full_disks(p: &Precheck, snapshotter: &Arc<Mutex<Snapshotter>>, report: &mut Report) {
    let snap = Arc::clone(snapshotter);
    let taken = tokio::task::spawn_blocking(move || {
        let mut s = snap.lock().unwrap_or_else(|e| e.into_inner());
        s.take(None).disks
    })
    .await;
    let disks = match taken {
        Ok(d) => d,
        Err(e) => {
            report.unchecked.push(format!("disks not checked ({e})"));
            return;
        }
    };
    let mut full = 0;
    for d in disks.iter().filter(|d| d.total > 0) {
        let used = 100.0 * (d.total - d.available.min(d.total)) as f64 / d.total as f64;
        if used > f64::from(p.disk_percent) {
            full += 1;
            report.findings.push(format!(
                "disk {} is {used:.0}% full ({} of {} free)",
                d.mount_point.display(),
                human_bytes(d.available),
                human_bytes(d.total)
            ));
        }
    }
    if full == 0 {
        report
            .quiet
            .push(format!("every disk below {}%", p.disk_percent));
    }
}

async fn failed_units(report: &mut Report) {
    let probe = crate::tools::systemd::failed_units(&Bus::Session);
    match tokio::time::timeout(Duration::from_secs(5), probe).await {
        Ok(Ok(units)) if units.is_empty() => report.quiet.push("no failed user units".to_owned()),
        Ok(Ok(units)) => report.findings.push(format!(
            "failed user units: {} (`systemctl --user status UNIT` says why)",
            units.join(", ")
        )),
        Ok(Err(e)) => report
            .unchecked
            .push(format!("user units not checked ({e})")),
        Err(_) => report
            .unchecked
            .push("user units not checked (the user manager did not answer)".to_owned()),
    }
}

async fn journal_errors(since: SystemTime, report: &mut Report) {
    let since_secs = since
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let when = humantime::format_rfc3339_seconds(since);
    let Some(journalctl) = crate::programs::find("journalctl") else {
        report
            .unchecked
            .push("the journal not checked (no journalctl on the system's PATH)".to_owned());
        return;
    };
    let run = tokio::process::Command::new(journalctl)
        .args(["--user", "-p", "err", "-q", "--no-pager", "-o", "short-iso"])
        .arg(format!("--since=@{since_secs}"))
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = match tokio::time::timeout(JOURNAL_TIMEOUT, run).await {
        Ok(Ok(out)) if out.status.success() => out,
        Ok(Ok(out)) => {
            let err = String::from_utf8_lossy(&out.stderr);
            report
                .unchecked
                .push(format!("journal not checked (journalctl: {})", err.trim()));
            return;
        }
        Ok(Err(e)) => {
            report
                .unchecked
                .push(format!("journal not checked (journalctl: {e})"));
            return;
        }
        Err(_) => {
            report
                .unchecked
                .push("journal not checked (journalctl took too long)".to_owned());
            return;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        report.quiet.push(format!("no journal errors since {when}"));
        return;
    }
    let shown = &lines[lines.len().saturating_sub(JOURNAL_LINES)..];
    report.findings.push(format!(
        "{} error line(s) in the user journal since {when}, the last {}:\n{}",
        lines.len(),
        shown.len(),
        shown.join("\n")
    ));
}

/// When this soul's previous pre-check ran; a week ago for the first.
fn last_run(stamp: &Path) -> SystemTime {
    std::fs::read_to_string(stamp)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map(|secs| UNIX_EPOCH + Duration::from_secs(secs))
        .unwrap_or_else(|| SystemTime::now() - FIRST_LOOK_BACK)
}

/// Notes this run as the previous one for the next. A torn file reads as "never", which
/// only makes the next run look back further.
fn record_run(stamp: &PathBuf) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    // 0700 like the rest of the data dir.
    let written = stamp
        .parent()
        .map_or(Ok(()), |dir| {
            std::os::unix::fs::DirBuilderExt::mode(
                std::fs::DirBuilder::new().recursive(true),
                0o700,
            )
            .create(dir)
        })
        .and_then(|()| std::fs::write(stamp, now.to_string()));
    if let Err(e) = written {
        tracing::warn!(
            "cannot record the pre-check time in {}: {e}",
            stamp.display()
        );
    }
}

fn human_bytes(b: u64) -> String {
    const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
    format!("{:.1} GiB", b as f64 / GIB)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Regression: a probe that could not run (no journal) made the result "nothing to
    // report", as if it had looked and found nothing.
    #[test]
    fn what_could_not_be_checked_is_not_called_nothing_to_report() {
        let mut report = Report {
            quiet: vec!["every disk below 90%".into()],
            ..Report::default()
        };
        assert_eq!(
            quiet_result(&report),
            "nothing to report: every disk below 90%"
        );
        report
            .unchecked
            .push("journal not checked (journalctl: No such file or directory)".into());
        assert_eq!(
            quiet_result(&report),
            "nothing found (every disk below 90%), but not everything was checked: journal \
             not checked (journalctl: No such file or directory)"
        );
        report.quiet.clear();
        assert_eq!(
            quiet_result(&report),
            "nothing found, but not everything was checked: journal not checked (journalctl: \
             No such file or directory)"
        );
    }
}
