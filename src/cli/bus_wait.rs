//! Waiting for the session bus to appear, for `familiar bar`: a bar module that exits
//! leaves its slot empty, and a bar often starts before the user's bus does.
//!
//! Invariant: never a busy loop. The bus's socket directory is watched with inotify
//! (a file created or moved there wakes it) and a bounded back-off (1 s doubling to
//! 30 s) stands in where nothing can be watched (no directory yet, an abstract or tcp
//! address) and catches a socket that was there but not yet listening.

use std::os::fd::AsFd as _;
use std::path::PathBuf;
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

const FIRST_RETRY: Duration = Duration::from_secs(1);
const LAST_RETRY: Duration = Duration::from_secs(30);

/// The session bus's address as zbus reads it: `DBUS_SESSION_BUS_ADDRESS`, else
/// `$XDG_RUNTIME_DIR/bus`.
pub(super) fn address() -> String {
    match std::env::var("DBUS_SESSION_BUS_ADDRESS") {
        Ok(a) if !a.is_empty() => a,
        Ok(_) | Err(_) => match std::env::var_os("XDG_RUNTIME_DIR") {
            Some(dir) => format!("unix:path={}/bus", PathBuf::from(dir).display()),
            None => format!("unix:path=/run/user/{}/bus", nix::unistd::getuid()),
        },
    }
}

/// The socket file of a `unix:path=…` address (the first such entry).
fn socket_path(address: &str) -> Option<PathBuf> {
    address.split(';').find_map(|entry| {
        let rest = entry.strip_prefix("unix:")?;
        rest.split(',')
            .find_map(|kv| kv.strip_prefix("path="))
            .map(PathBuf::from)
    })
}

/// Watches for the bus to (re)appear. Made before each attempt to connect, so that a
/// socket created between the attempt and the wait still wakes it.
pub(super) struct BusWait {
    watch: Option<Inotify>,
    retry: Duration,
}

impl BusWait {
    pub(super) fn new(address: &str) -> BusWait {
        BusWait {
            watch: socket_path(address).and_then(|p| watch(&p)),
            retry: FIRST_RETRY,
        }
    }

    /// Waits for a change in the socket's directory, or the next back-off step.
    pub(super) async fn changed(&mut self) {
        let retry = self.retry;
        self.retry = (self.retry * 2).min(LAST_RETRY);
        let Some(watch) = self.watch.take() else {
            tokio::time::sleep(retry).await;
            return;
        };
        // One poll(2) with the back-off as its timeout, off the runtime's thread.
        let waited = tokio::task::spawn_blocking(move || {
            let woke = wait(&watch, retry);
            (watch, woke)
        })
        .await;
        match waited {
            Ok((watch, Ok(()))) => self.watch = Some(watch),
            Ok((_, Err(e))) => tracing::debug!("watching the bus's directory: {e}"),
            Err(e) => tracing::debug!("watching the bus's directory: {e}"),
        }
    }
}

/// An inotify watch on the directory of `socket`, or `None` (then the back-off alone).
fn watch(socket: &std::path::Path) -> Option<Inotify> {
    let dir = socket.parent()?;
    let made = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).and_then(|i| {
        i.add_watch(dir, AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO)?;
        Ok(i)
    });
    match made {
        Ok(inotify) => Some(inotify),
        Err(e) => {
            tracing::debug!("watching {}: {e}", dir.display());
            None
        }
    }
}

/// Blocks until the directory changes or `timeout` passes, then reads the pending
/// events: any of them is a reason to try again.
fn wait(watch: &Inotify, timeout: Duration) -> nix::Result<()> {
    let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
    let mut fds = [PollFd::new(watch.as_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::from(ms)) {
        Ok(_) | Err(Errno::EINTR) => {}
        Err(e) => return Err(e),
    }
    loop {
        match watch.read_events() {
            Ok(events) if !events.is_empty() => {}
            Ok(_) | Err(Errno::EAGAIN) => return Ok(()),
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_is_the_first_unix_path_of_the_address() {
        assert_eq!(
            socket_path("unix:path=/run/user/1000/bus"),
            Some(PathBuf::from("/run/user/1000/bus"))
        );
        assert_eq!(
            socket_path("unix:abstract=/tmp/x,guid=1;unix:path=/tmp/b/bus,guid=2"),
            Some(PathBuf::from("/tmp/b/bus"))
        );
        assert_eq!(socket_path("tcp:host=localhost,port=1"), None);
    }
}
