//! The message buses the desktop tools talk to (`systemd_user`, `notify`, `power`),
//! and whether the service a tool needs is there.
//!
//! Invariant: a tool never shares the daemon's own bus connection; it opens one per
//! call on the bus it was given ([`Bus`]), so tests point it at a private bus and a
//! dead connection never outlives a call. [`Presence`] answers `Tool::available`
//! (a synchronous question asked from the async loop) on a thread of its own, bounded
//! by [`PROBE_TIMEOUT`], and remembers the answer for [`PRESENCE_TTL`].

use std::sync::Mutex;
use std::time::{Duration, Instant};

use zbus::Connection;
use zbus::names::BusName;

/// How long a presence answer is reused: services come and go while the daemon runs,
/// but the loop asks before every model request.
pub const PRESENCE_TTL: Duration = Duration::from_secs(10);
/// Longest a presence probe may block the caller.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Which bus a tool connects to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bus {
    /// `$DBUS_SESSION_BUS_ADDRESS` (the user's session bus).
    Session,
    /// The system bus (logind).
    System,
    /// A bus at this address (tests run a private `dbus-daemon`).
    Address(String),
}

impl Bus {
    pub async fn connect(&self) -> zbus::Result<Connection> {
        match self {
            Bus::Session => Connection::session().await,
            Bus::System => Connection::system().await,
            Bus::Address(a) => zbus::connection::Builder::address(a.as_str()).build().await,
        }
    }

    /// Whether `name` is owned now or can be started by D-Bus activation (a
    /// notification server such as dunst or mako is often started on first use).
    pub async fn has_service(&self, name: &str) -> zbus::Result<bool> {
        let conn = self.connect().await?;
        let dbus = zbus::fdo::DBusProxy::new(&conn).await?;
        let bus_name = BusName::try_from(name)?;
        if dbus.name_has_owner(bus_name).await? {
            return Ok(true);
        }
        let activatable = dbus.list_activatable_names().await?;
        Ok(activatable.iter().any(|n| n.as_str() == name))
    }
}

/// Whether a well-known name is served on a bus, cached for [`PRESENCE_TTL`].
pub struct Presence {
    bus: Bus,
    name: &'static str,
    cached: Mutex<Option<(Instant, bool)>>,
}

impl Presence {
    pub fn new(bus: Bus, name: &'static str) -> Presence {
        Presence {
            bus,
            name,
            cached: Mutex::new(None),
        }
    }

    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    /// Whether the service is there; may block for up to [`PROBE_TIMEOUT`].
    pub fn check(&self) -> bool {
        let mut cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, answer)) = *cached
            && at.elapsed() < PRESENCE_TTL
        {
            return answer;
        }
        let answer = probe(self.bus.clone(), self.name);
        *cached = Some((Instant::now(), answer));
        answer
    }
}

/// Asks the bus on a thread with its own runtime: `available()` is synchronous and may
/// be called from any runtime flavour, where blocking on a future is not allowed.
fn probe(bus: Bus, name: &'static str) -> bool {
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("familiar-bus-probe".to_owned())
        .spawn(move || {
            let answer = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
                .and_then(|rt| {
                    rt.block_on(async {
                        tokio::time::timeout(PROBE_TIMEOUT, bus.has_service(name))
                            .await
                            .map_err(|_| format!("no answer within {PROBE_TIMEOUT:?}"))?
                            .map_err(|e| e.to_string())
                    })
                });
            // The caller may have given up waiting: then nobody needs the answer.
            tx.send(answer).ok();
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot probe the bus for {name}: {e}");
        return false;
    }
    match rx.recv_timeout(PROBE_TIMEOUT + Duration::from_millis(500)) {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => {
            tracing::debug!("{name} is not reachable: {e}");
            false
        }
        Err(e) => {
            tracing::debug!("probing for {name}: {e}");
            false
        }
    }
}

/// `s` without control characters (newlines kept when `keep_newlines`), cut to at
/// most `max` characters with an ellipsis.
pub fn clean_text(s: &str, max: usize, keep_newlines: bool) -> String {
    let cleaned: String = s
        .chars()
        .filter(|c| !c.is_control() || (keep_newlines && *c == '\n'))
        .collect();
    let cleaned = cleaned.trim();
    if cleaned.chars().count() <= max {
        return cleaned.to_owned();
    }
    let mut cut: String = cleaned.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_text_strips_controls_and_caps() {
        assert_eq!(clean_text("a\x1b[31mb\tc\nd", 100, false), "a[31mbcd");
        assert_eq!(clean_text("a\nb\r", 100, true), "a\nb");
        assert_eq!(clean_text("abcdef", 4, false), "abc…");
    }

    #[test]
    fn an_unreachable_bus_is_absent() {
        let p = Presence::new(
            Bus::Address("unix:path=/nonexistent/familiar-test-bus".to_owned()),
            "org.freedesktop.systemd1",
        );
        assert!(!p.check());
    }
}
