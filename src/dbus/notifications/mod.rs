//! Desktop notifications (`org.freedesktop.Notifications`): the proxy, what a server
//! says it can do ([`Capabilities`]), its signals in bus order ([`signals`]), and
//! showing one ([`show`]). Two kinds use it: approval requests (the daemon's
//! approval frontend, `approval::notify`) and a task's progress and result
//! (`familiar ask --notify`, shown by the CLI with the same proxy).
//!
//! Invariant: text that is not ours (arguments, a model's answer) reaches a server
//! with its control characters made visible and, where the server renders markup or
//! cannot say whether it does, with `&`, `<` and `>` as entities ([`Capabilities::body`]).

use std::collections::HashMap;

use familiar_protocol::display::escape_markup;
use futures::StreamExt;
use tokio::sync::mpsc;
use zbus::{Connection, Variant, proxy};

/// `NotificationClosed`'s reason when the user dismissed the notification.
pub const CLOSED_DISMISSED: u32 = 2;
/// The action a click on the notification's body invokes (mako, dunst, fnott, swaync
/// and the desktops' servers alike).
pub const ACTION_DEFAULT: &str = "default";

#[proxy(
    interface = "org.freedesktop.Notifications",
    default_service = "org.freedesktop.Notifications",
    default_path = "/org/freedesktop/Notifications"
)]
pub trait Notifications {
    #[allow(clippy::too_many_arguments)]
    fn notify(
        &self,
        app_name: &str,
        replaces_id: u32,
        app_icon: &str,
        summary: &str,
        body: &str,
        actions: &[&str],
        hints: HashMap<&str, Variant<'_>>,
        expire_timeout: i32,
    ) -> zbus::Result<u32>;

    fn close_notification(&self, id: u32) -> zbus::Result<()>;

    /// What the server supports (`body-markup`, `actions`, …).
    fn get_capabilities(&self) -> zbus::Result<Vec<String>>;

    #[zbus(signal)]
    fn action_invoked(&self, id: u32, action_key: String) -> zbus::Result<()>;

    #[zbus(signal)]
    fn notification_closed(&self, id: u32, reason: u32) -> zbus::Result<()>;
}

/// What a server says it can do (`GetCapabilities`); a server that cannot say is
/// assumed to render markup (the safe guess) and to have actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// `body-markup`: `<a>`, `<img>` in a body are rendered.
    pub markup: bool,
    /// `actions`: actions can be invoked (buttons, a click, a menu).
    pub actions: bool,
}

impl Capabilities {
    pub async fn read(proxy: &NotificationsProxy<'_>) -> Capabilities {
        match proxy.get_capabilities().await {
            Ok(caps) => Capabilities {
                markup: caps.iter().any(|c| c == "body-markup"),
                actions: caps.iter().any(|c| c == "actions"),
            },
            Err(e) => {
                tracing::debug!("notification server capabilities: {e}");
                Capabilities {
                    markup: true,
                    actions: true,
                }
            }
        }
    }

    /// `text` (ours, with arguments or a model's words made visible already) as this
    /// server must be sent it.
    pub fn body(&self, text: &str) -> String {
        if self.markup {
            escape_markup(text)
        } else {
            text.to_owned()
        }
    }
}

/// A signal of the notification server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    Action { id: u32, key: String },
    Closed { id: u32, reason: u32 },
}

/// The server's `ActionInvoked` and `NotificationClosed` signals in the order the bus
/// delivered them (two zbus streams would lose that order: a click then the close a
/// server sends after it must stay a click), drained from now on into an unbounded
/// channel so that a watcher busy elsewhere (a chooser open) never stops the
/// connection's reader. Dropped, it stops reading and removes its match rule.
pub struct Signals {
    rx: mpsc::UnboundedReceiver<Signal>,
    reader: tokio::task::JoinHandle<()>,
}

impl Signals {
    /// The next signal; `None` once the connection is gone.
    pub async fn recv(&mut self) -> Option<Signal> {
        self.rx.recv().await
    }

    /// Drops what arrived so far.
    pub fn clear(&mut self) {
        while self.rx.try_recv().is_ok() {}
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Subscribes to the server's signals: see [`Signals`].
pub async fn signals(conn: &Connection) -> zbus::Result<Signals> {
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .interface("org.freedesktop.Notifications")
        .path("/org/freedesktop/Notifications")
        .build()?;
    let mut stream = zbus::MessageStream::for_match_rule(rule, conn, None).await?;
    let (tx, rx) = mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        while let Some(msg) = stream.next().await {
            let Ok(msg) = msg else { continue };
            let member = msg.header().member().map(|m| m.to_string());
            let signal = match member.as_deref() {
                Some("ActionInvoked") => msg
                    .body()
                    .deserialize::<(u32, String)>()
                    .ok()
                    .map(|(id, key)| Signal::Action { id, key }),
                Some("NotificationClosed") => msg
                    .body()
                    .deserialize::<(u32, u32)>()
                    .ok()
                    .map(|(id, reason)| Signal::Closed { id, reason }),
                _ => None,
            };
            if let Some(signal) = signal
                && tx.send(signal).is_err()
            {
                break;
            }
        }
    });
    Ok(Signals { rx, reader })
}

/// A notification's look and life: its hints and how long it stays.
#[derive(Debug, Clone)]
pub struct Shown<'a> {
    pub replaces: u32,
    pub icon: &'a str,
    pub summary: &'a str,
    /// Already made safe for this server ([`Capabilities::body`]).
    pub body: &'a str,
    /// Keys and labels, alternating.
    pub actions: &'a [&'a str],
    pub urgency: u8,
    /// Stays after an action (the server must not take it down by itself).
    pub resident: bool,
    /// Milliseconds; 0 never expires; -1 the server's default.
    pub expire_ms: i32,
}

/// Shows (or replaces) a notification; returns its id.
pub async fn show(proxy: &NotificationsProxy<'_>, n: &Shown<'_>) -> zbus::Result<u32> {
    let mut hints = HashMap::new();
    hints.insert("urgency", Variant::from(n.urgency));
    if n.resident {
        hints.insert("resident", Variant::from(true));
    }
    proxy
        .notify(
            "familiar",
            n.replaces,
            n.icon,
            n.summary,
            n.body,
            n.actions,
            hints,
            n.expire_ms,
        )
        .await
}
