//! Desktop notifications (`org.freedesktop.Notifications`): approval requests with
//! Approve / Deny / Allow for 10 min actions, answered through the approval broker.
//!
//! Invariant: only an `ActionInvoked` for our notification's id answers a request; a
//! notification that is closed, expires or is dismissed is *not* an approval (the
//! broker's timeout denies). The daemon talks to the server over its own bus
//! connection with the small proxy below (testable on a private bus); `familiar ask
//! --notify`, a one-shot client, opens its own connection and uses the same proxy.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use zbus::{Connection, Variant, proxy};

use crate::approval::{Answer, ApprovalBroker, ApprovalRequest, Frontend};
use crate::ids::RequestId;

/// "Allow for 10 min".
pub const ALLOW_FOR: Duration = Duration::from_secs(600);
/// Action keys on approval notifications.
pub const ACTION_APPROVE: &str = "approve";
pub const ACTION_DENY: &str = "deny";
pub const ACTION_ALLOW_FOR: &str = "allow-10min";

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

/// The answer an action key stands for.
pub fn answer_for(action_key: &str) -> Option<Answer> {
    match action_key {
        ACTION_APPROVE => Some(Answer::Approve),
        ACTION_DENY => Some(Answer::Deny),
        ACTION_ALLOW_FOR => Some(Answer::ApproveFor(ALLOW_FOR)),
        _ => None,
    }
}

/// Shows approval requests as notifications with actions.
pub struct NotificationFrontend {
    conn: Connection,
    /// Requests on screen: withdrawing one stops its watcher, which closes it.
    shown: Arc<Mutex<HashMap<RequestId, CancellationToken>>>,
}

impl NotificationFrontend {
    pub fn new(conn: Connection) -> NotificationFrontend {
        NotificationFrontend {
            conn,
            shown: Arc::new(Mutex::new(HashMap::new())),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Frontend for NotificationFrontend {
    fn present(&self, request: &ApprovalRequest, broker: &ApprovalBroker) -> bool {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let stop = CancellationToken::new();
        lock(&self.shown).insert(request.request_id.clone(), stop.clone());
        let (conn, request, broker, shown) = (
            self.conn.clone(),
            request.clone(),
            broker.clone(),
            Arc::clone(&self.shown),
        );
        handle.spawn(async move {
            if let Err(e) = watch(&conn, &request, &broker, &stop).await {
                tracing::info!(request_id = %request.request_id, "no approval notification: {e}");
            }
            lock(&shown).remove(&request.request_id);
        });
        // Whether a notification server answers is known only later; when none does,
        // the other frontends or the timeout decide.
        true
    }

    fn withdraw(&self, request_id: &RequestId) {
        if let Some(stop) = lock(&self.shown).remove(request_id) {
            stop.cancel();
        }
    }
}

/// Shows one request and waits for an action, a close, or `stop`.
async fn watch(
    conn: &Connection,
    r: &ApprovalRequest,
    broker: &ApprovalBroker,
    stop: &CancellationToken,
) -> zbus::Result<()> {
    let proxy = NotificationsProxy::new(conn).await?;
    // Subscribe before showing, so a fast click is not missed.
    let mut actions = proxy.receive_action_invoked().await?;
    let mut closed = proxy.receive_notification_closed().await?;
    let tool = crate::approval::visible(&r.tool);
    let summary = format!("familiar asks to run {tool} ({} tier)", r.tier);
    // The summary's lines are ours (its arguments' newlines are escapes); the reason
    // is made visible like them.
    let body = format!(
        "{}\nwhy asking: {}",
        r.summary,
        crate::approval::visible(&r.reason)
    );
    // A server that renders markup would turn `<a href=…>` or `<img>` in an argument
    // into a link or a picture hiding the text; one that cannot say is assumed to.
    let markup = match proxy.get_capabilities().await {
        Ok(caps) => caps.iter().any(|c| c == "body-markup"),
        Err(e) => {
            tracing::debug!("notification server capabilities: {e}");
            true
        }
    };
    let body = if markup { escape_markup(&body) } else { body };
    let allow_label = format!("Allow {tool} for 10 min");
    let mut hints = HashMap::new();
    hints.insert("urgency", Variant::from(2u8));
    hints.insert("resident", Variant::from(true));
    let id = proxy
        .notify(
            "familiar",
            0,
            "dialog-question",
            &summary,
            &body,
            &[
                ACTION_APPROVE,
                "Approve",
                ACTION_DENY,
                "Deny",
                ACTION_ALLOW_FOR,
                &allow_label,
            ],
            hints,
            0,
        )
        .await?;
    loop {
        tokio::select! {
            // Both streams are fed in bus order by one reader: when a close and a later
            // click are both waiting, the close came first and must win.
            biased;
            () = stop.cancelled() => {
                // Answered elsewhere or timed out: take the question down.
                if let Err(e) = proxy.close_notification(id).await {
                    tracing::debug!("closing notification {id}: {e}");
                }
                return Ok(());
            }
            Some(sig) = closed.next() => {
                if sig.args()?.id == id {
                    // Dismissed is not approved: leave the decision to the others.
                    return Ok(());
                }
            }
            Some(sig) = actions.next() => {
                let args = sig.args()?;
                if args.id != id {
                    continue;
                }
                let Some(answer) = answer_for(&args.action_key) else {
                    continue;
                };
                if let Err(e) = broker.respond(&r.request_id, answer, "notification") {
                    tracing::debug!("notification answer came too late: {e}");
                }
                // It is `resident`: the server keeps it, buttons live, after an action;
                // answered, it goes.
                if let Err(e) = proxy.close_notification(id).await {
                    tracing::debug!("closing notification {id}: {e}");
                }
                return Ok(());
            }
            else => return Ok(()),
        }
    }
}

/// `&`, `<` and `>` as entities (the body-markup subset of the spec is XML-like).
pub fn escape_markup(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Shows a task's result (`familiar ask --notify`) on the session bus, with the server's
/// default timeout and no actions. Failures are the caller's to report. The result is
/// the model's text: its control characters are made visible and, where the server
/// renders markup (or cannot say whether it does), its `<` and `&` are entities, so a
/// result cannot put a link or an image (which may load a local file) in front of the
/// user.
pub async fn show_result(summary: &str, body: &str) -> zbus::Result<()> {
    let conn = Connection::session().await?;
    let proxy = NotificationsProxy::new(&conn).await?;
    let markup = proxy
        .get_capabilities()
        .await
        .map_or(true, |caps| caps.iter().any(|c| c == "body-markup"));
    let body = crate::approval::terminal_safe(body);
    let body = if markup { escape_markup(&body) } else { body };
    proxy
        .notify("familiar", 0, "", summary, &body, &[], HashMap::new(), -1)
        .await
        .map(|_| ())
}
