//! Whether the person at the desktop has stopped typing: a small Wayland client that
//! asks the compositor to say when the seat has had no input (keyboard, pointer, touch)
//! for a while, and waits for that, boundedly.
//!
//! Two protocols say it. `ext-idle-notify-v1` (staging; sway 1.8+, Hyprland, niri) is
//! preferred, at version 2 its `get_input_idle_notification`,
//! which idle inhibitors (a playing video) do not hold back; `org_kde_kwin_idle` is
//! what sway 1.7 and other older wlroots compositors offer (an idle inhibitor holds it
//! back: then the wait runs out, and the caller refuses, which errs on the side of
//! typing nothing). A compositor with neither is [`Quiet::Unknown`]: the caller
//! decides.
//!
//! Invariant: [`wait_quiet`] never blocks past its `patience`; it polls the socket
//! with the time left, and the compositor's answer (or its silence) ends it.

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use wayland_client::globals::{GlobalListContents, registry_queue_init};
use wayland_client::protocol::{wl_registry, wl_seat::WlSeat};
use wayland_client::{Connection, Dispatch, Proxy, QueueHandle, delegate_noop};
use wayland_protocols::ext::idle_notify::v1::client::ext_idle_notification_v1::{
    self, ExtIdleNotificationV1,
};
use wayland_protocols::ext::idle_notify::v1::client::ext_idle_notifier_v1::ExtIdleNotifierV1;
use wayland_protocols_plasma::idle::client::org_kde_kwin_idle::OrgKdeKwinIdle;
use wayland_protocols_plasma::idle::client::org_kde_kwin_idle_timeout::{
    self, OrgKdeKwinIdleTimeout,
};

/// What the wait found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quiet {
    /// No input for the whole quiet time, told by this protocol.
    Idle(Protocol),
    /// Input kept coming (or an inhibitor held the notification back) until the
    /// patience ran out.
    Busy(Protocol),
    /// The compositor offers no idle protocol: nobody can say.
    Unknown,
}

/// Which idle protocol answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    ExtIdleNotify,
    KdeIdle,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::ExtIdleNotify => "ext-idle-notify-v1",
            Protocol::KdeIdle => "org_kde_kwin_idle",
        }
    }
}

/// Why the compositor could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum IdleError {
    #[error("cannot connect to the Wayland display {display}: {source}")]
    Connect {
        display: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the Wayland display: {0}")]
    Protocol(String),
}

/// Waits until the seat has had no input for `quiet`, at most `patience` (which should
/// be longer: the quiet time is counted from the request). `display` is the socket's
/// absolute path ([`super::display`]).
pub fn wait_quiet(display: &Path, quiet: Duration, patience: Duration) -> Result<Quiet, IdleError> {
    let deadline = Instant::now() + patience;
    let failed = |e: &dyn std::fmt::Display| IdleError::Protocol(e.to_string());
    let stream = UnixStream::connect(display).map_err(|source| IdleError::Connect {
        display: display.display().to_string(),
        source,
    })?;
    let conn = Connection::from_socket(stream).map_err(|e| failed(&e))?;
    let (globals, mut queue) = registry_queue_init::<State>(&conn).map_err(|e| failed(&e))?;
    let qh = queue.handle();
    let Ok(seat) = globals.bind::<WlSeat, _, _>(&qh, 1..=1, ()) else {
        return Ok(Quiet::Unknown);
    };
    let ms = u32::try_from(quiet.as_millis()).unwrap_or(u32::MAX);
    let protocol = if let Ok(notifier) = globals.bind::<ExtIdleNotifierV1, _, _>(&qh, 1..=2, ()) {
        if notifier.version() >= 2 {
            notifier.get_input_idle_notification(ms, &seat, &qh, ());
        } else {
            notifier.get_idle_notification(ms, &seat, &qh, ());
        }
        Protocol::ExtIdleNotify
    } else if let Ok(kde) = globals.bind::<OrgKdeKwinIdle, _, _>(&qh, 1..=1, ()) {
        kde.get_idle_timeout(&seat, ms, &qh, ());
        Protocol::KdeIdle
    } else {
        return Ok(Quiet::Unknown);
    };
    let mut state = State::default();
    loop {
        queue.dispatch_pending(&mut state).map_err(|e| failed(&e))?;
        if state.idle {
            return Ok(Quiet::Idle(protocol));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Quiet::Busy(protocol));
        }
        queue.flush().map_err(|e| failed(&e))?;
        let Some(guard) = queue.prepare_read() else {
            continue;
        };
        let readable = {
            let mut fds = [PollFd::new(guard.connection_fd(), PollFlags::POLLIN)];
            let timeout = PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX);
            match poll(&mut fds, timeout) {
                Ok(n) => n > 0,
                Err(nix::errno::Errno::EINTR) => false,
                Err(e) => return Err(failed(&e)),
            }
        };
        if readable {
            guard.read().map_err(|e| failed(&e))?;
        }
    }
}

/// What the compositor has said so far.
#[derive(Default)]
struct State {
    /// The quiet time passed without input (since the notification was made).
    idle: bool,
}

impl Dispatch<wl_registry::WlRegistry, GlobalListContents> for State {
    fn event(
        _: &mut Self,
        _: &wl_registry::WlRegistry,
        _: wl_registry::Event,
        _: &GlobalListContents,
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        // Globals that come and go after the start do not matter for one short wait.
    }
}

impl Dispatch<ExtIdleNotificationV1, ()> for State {
    fn event(
        state: &mut Self,
        _: &ExtIdleNotificationV1,
        event: ext_idle_notification_v1::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        match event {
            ext_idle_notification_v1::Event::Idled => state.idle = true,
            ext_idle_notification_v1::Event::Resumed => state.idle = false,
            _ => {}
        }
    }
}

impl Dispatch<OrgKdeKwinIdleTimeout, ()> for State {
    fn event(
        state: &mut Self,
        _: &OrgKdeKwinIdleTimeout,
        event: org_kde_kwin_idle_timeout::Event,
        _: &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        match event {
            org_kde_kwin_idle_timeout::Event::Idle => state.idle = true,
            org_kde_kwin_idle_timeout::Event::Resumed => state.idle = false,
            _ => {}
        }
    }
}

delegate_noop!(State: ignore WlSeat);
delegate_noop!(State: ExtIdleNotifierV1);
delegate_noop!(State: OrgKdeKwinIdle);
