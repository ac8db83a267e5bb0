//! The daemon as a process: what a crash or an older systemd left behind (tasks still
//! marked running, data in the config dir), its stop signals, its word to systemd
//! (`sd_notify`, never blocking), the reload at SIGHUP and its uid.

use std::sync::Arc;

use super::Shared;
use crate::agent::Runtime;
use crate::store::Store;

/// Moves into the data dir what a daemon on systemd before 254 wrote to the config dir
/// (its `StateDirectory=` mapped there; see `config::paths::default_data_dir`). Done
/// once the name is owned: no other daemon can be writing there then, and a second
/// daemon, refused, never touches the files of the one running. A failure is logged and
/// the move retried at the next start; nothing is lost either way.
pub(super) fn take_in_misplaced_data(rt: &Runtime) {
    let paths = &rt.settings.config.paths;
    let (from, to) = (&paths.config_dir, &paths.data_dir);
    if from == to {
        return;
    }
    let max = rt.settings.config.memory.max_entries_per_scope;
    match crate::store::off_runtime(|| rt.services.store.take_in(from, max)) {
        Ok(done) if done.is_empty() => {}
        Ok(done) => tracing::warn!(
            "moved the data an earlier daemon kept in {} (systemd before 254 put it there) to {}: {done}",
            from.display(),
            to.display()
        ),
        Err(e) => tracing::error!(
            "cannot move the data in {} to {}: {e}; what was not moved stays there and is tried again at the next start",
            from.display(),
            to.display()
        ),
    }
}

pub(super) type StopSignals = (tokio::signal::unix::Signal, tokio::signal::unix::Signal);

pub(super) fn stop_signals() -> std::io::Result<StopSignals> {
    use tokio::signal::unix::{SignalKind, signal};
    Ok((
        signal(SignalKind::terminate())?,
        signal(SignalKind::interrupt())?,
    ))
}

pub(super) async fn wait_for_stop((mut term, mut int): StopSignals) {
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Reloads at every SIGHUP (`systemctl --user reload familiar`: the unit's
/// `ExecReload=`), telling systemd it is reloading and ready again.
pub(super) async fn reload_on_hangup(
    shared: Arc<Shared>,
    mut hangup: tokio::signal::unix::Signal,
    sd: bool,
) {
    while hangup.recv().await.is_some() {
        notify(sd, &[sd_notify::NotifyState::Reloading]);
        if let Err(e) = crate::store::off_runtime(|| shared.runtime.reload()) {
            tracing::error!("{e}");
        }
        notify(sd, &[sd_notify::NotifyState::Ready]);
    }
}

/// Sends to systemd when it listens; a failure is logged, never fatal.
pub(crate) fn notify(enabled: bool, state: &[sd_notify::NotifyState<'_>]) {
    if enabled && let Err(e) = notify_nonblocking(state) {
        tracing::warn!("cannot notify systemd: {e}");
    }
}

/// `sd_notify::notify`, except that it never blocks. The crate's send is blocking, and
/// a unix datagram socket queues only `net.unix.max_dgram_qlen` (10 by default)
/// messages: a manager slow to read, or a test harness that stopped reading, would
/// stall the supervisor's own task on a STATUS update. A full queue drops that one
/// message instead (WouldBlock, logged); the next state change says it again.
fn notify_nonblocking(state: &[sd_notify::NotifyState<'_>]) -> std::io::Result<()> {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(());
    };
    let msg: String = state.iter().map(|s| format!("{s}\n")).collect();
    let sock = std::os::unix::net::UnixDatagram::unbound()?;
    sock.set_nonblocking(true)?;
    sock.connect(path)?;
    sock.send(msg.as_bytes())?;
    Ok(())
}

/// Marks tasks of every session not locked by a live process as interrupted.
pub fn mark_interrupted(store: &Store) -> usize {
    let sessions = match store.list_sessions() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("cannot list sessions to repair them: {e}");
            return 0;
        }
    };
    let mut total = 0;
    for s in sessions {
        // Locked means a live `familiar run` owns it: its tasks are really running.
        let Ok(_lock) = store.lock_session(&s.id) else {
            continue;
        };
        match store.load_context(&s.id) {
            Ok(Some(mut ctx)) => {
                let n = ctx.mark_interrupted();
                if n > 0 {
                    match store.save_context(&mut ctx) {
                        Ok(()) => total += n,
                        Err(e) => {
                            tracing::warn!(session_id = %s.id, "cannot save the repaired session: {e}")
                        }
                    }
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(session_id = %s.id, "cannot load the session to repair it: {e}")
            }
        }
    }
    total
}

pub(super) fn current_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    // Our own /proc entry belongs to our uid; avoids unsafe libc::getuid.
    std::fs::metadata("/proc/self").map_or(u32::MAX, |m| m.uid())
}
