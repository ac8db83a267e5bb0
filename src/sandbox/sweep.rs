//! What a helper that died leaves behind, killed. The helper is a session leader
//! (`setsid`), and the command it starts stays in that session: in a PID namespace
//! the command is PID 1 there and leads its own process group, so it cannot `setsid`
//! away. A helper that exits normally has reaped everything; one killed by a signal
//! (the launcher's own SIGKILL after the grace, the OOM killer, the user) may not
//! have, and then every process still in its session is sent SIGKILL — for the
//! command as PID 1 of its namespace, that takes the whole namespace along.

use std::path::Path;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Sends SIGKILL to every process whose session is `session` (a dead helper's pid).
/// Returns how many were signalled.
pub fn kill_session(session: i32) -> usize {
    let found = in_session(Path::new("/proc"), session);
    for pid in &found {
        if let Err(e) = kill(Pid::from_raw(*pid), Signal::SIGKILL) {
            // Gone meanwhile: nothing left to do.
            tracing::debug!("kill {pid}: {e}");
        }
    }
    found.len()
}

/// The processes under `proc` whose session id (the sixth field of `stat`) is
/// `session`, the session's leader itself left out.
fn in_session(proc: &Path, session: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir(proc) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // The command name may hold spaces and parentheses: fields resume after ')'.
            let sid: i32 = stat[stat.rfind(')')? + 1..]
                .split_whitespace()
                .nth(3)?
                .parse()
                .ok()?;
            (sid == session && pid != session).then_some(pid)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_members_of_a_session_but_not_its_leader() {
        let t = tempfile::tempdir().unwrap();
        for (pid, sid) in [(10, 10), (11, 10), (12, 7), (13, 10)] {
            let dir = t.path().join(pid.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            // pid (comm) state ppid pgrp session …
            std::fs::write(dir.join("stat"), format!("{pid} (a) b) S 1 {pid} {sid} 0")).unwrap();
        }
        let mut found = in_session(t.path(), 10);
        found.sort_unstable();
        assert_eq!(found, vec![11, 13]);
    }
}
