//! The daemon on the session bus: its name taken without replacement, the watch that
//! notices when the bus or the name is lost, and approvals announced as signals.

use familiar_protocol::ids::RequestId;
use zbus::Connection;
use zbus::object_server::SignalEmitter;

use super::DaemonError;
use super::service::Service;
use crate::approval::{ApprovalBroker, ApprovalRequest, Frontend};

/// Takes [`familiar_protocol::NAME`] without allowing replacement and without queueing; a name
/// already owned is [`DaemonError::AlreadyRunning`] with the owner's pid. ([`bus_lost`]
/// notices if the name is ever taken away after this.)
pub(super) async fn take_name(conn: &Connection) -> Result<(), DaemonError> {
    use zbus::fdo::{DBusProxy, RequestNameFlags, RequestNameReply};
    let bus = |source| DaemonError::Bus { source };
    let proxy = DBusProxy::new(conn).await.map_err(bus)?;
    match conn
        .request_name_with_flags(familiar_protocol::NAME, RequestNameFlags::DO_NOT_QUEUE)
        .await
    {
        Ok(RequestNameReply::PrimaryOwner | RequestNameReply::AlreadyOwner) => {}
        Ok(RequestNameReply::Exists | RequestNameReply::InQueue) | Err(zbus::Error::NameTaken) => {
            let name: zbus::names::BusName<'_> = familiar_protocol::NAME.try_into().map_err(bus)?;
            let pid = proxy.get_connection_unix_process_id(name).await.ok();
            return Err(DaemonError::AlreadyRunning { pid });
        }
        Err(source) => return Err(DaemonError::Bus { source }),
    }
    Ok(())
}

/// The `NameLost` signals of the bus driver, subscribed at start (before the name is
/// taken), so a loss at any later moment is in the stream for [`bus_lost`].
pub(super) async fn watch_bus(conn: &Connection) -> Result<zbus::MessageStream, zbus::Error> {
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .sender("org.freedesktop.DBus")
        .interface("org.freedesktop.DBus")
        .member("NameLost")
        .build()?;
    zbus::MessageStream::for_match_rule(rule, conn, None).await
}

/// Returns once the daemon can no longer be reached: the connection to the bus closed
/// (the bus daemon exited or restarted) or the bus took our name away. Before this the
/// daemon lived on unreachable after a bus restart, and systemd never restarted it.
pub(super) async fn bus_lost(stream: Option<zbus::MessageStream>) -> String {
    use futures::StreamExt;
    let Some(mut stream) = stream else {
        return "cannot watch the bus connection".to_owned();
    };
    let mut last_error = None;
    while let Some(msg) = stream.next().await {
        match msg {
            Ok(msg) => {
                let name: Result<String, _> = msg.body().deserialize();
                if name.is_ok_and(|n| n == familiar_protocol::NAME) {
                    return format!("the bus took the name {}", familiar_protocol::NAME);
                }
            }
            // The socket reader sends its error to every stream, then closes them.
            Err(e) => last_error = Some(e.to_string()),
        }
    }
    match last_error {
        Some(e) => format!("connection closed: {e}"),
        None => "connection closed".to_owned(),
    }
}

/// Announces approval requests as the `ApprovalRequested` signal; `familiar ask` and
/// any desktop client answer with `Respond`.
pub(super) struct SignalFrontend {
    pub(super) emitter: SignalEmitter<'static>,
}

impl Frontend for SignalFrontend {
    fn present(&self, r: &ApprovalRequest, _broker: &ApprovalBroker) -> bool {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let emitter = self.emitter.clone();
        let (task, request, tool, summary, tier) = (
            r.task_id.to_string(),
            r.request_id.to_string(),
            r.tool.clone(),
            r.summary.clone(),
            r.tier.to_string(),
        );
        handle.spawn(async move {
            if let Err(e) =
                Service::approval_requested(&emitter, &task, &request, &tool, &summary, &tier).await
            {
                tracing::warn!(task_id = %task, "cannot emit ApprovalRequested: {e}");
            }
        });
        // Whoever listens answers with Respond; if nobody does, the timeout denies.
        true
    }

    fn withdraw(&self, _request_id: &RequestId) {}
}
