//! Who is calling: the bus's word on a caller's uid and pid, remembered per unique
//! name, and the refusal (logged and audited) of another user's process or one of a
//! sandbox's.

use zbus::Connection;
use zbus::message::Header;

use super::Service;
use crate::catalog::Tier;
use crate::daemon::callers::Caller;
use crate::dbus::Error;
use crate::ids::{SoulId, TaskId};
use crate::sandbox::ancestry::Sandboxed;
use crate::store::{AuditDecision, AuditEntry, AuditOutcome};

impl Service {
    /// The caller's unique name, after checking it runs as our user and outside every
    /// sandbox.
    pub(super) async fn caller(
        &self,
        hdr: &Header<'_>,
        conn: &Connection,
    ) -> Result<String, Error> {
        // A peer-to-peer connection has no bus to ask; its peer was authenticated by
        // the socket it came through (only tests build those).
        let Some(sender) = hdr.sender() else {
            return Ok("p2p".to_owned());
        };
        let caller = match self.callers.get(sender.as_str()) {
            Some(caller) => caller,
            None => {
                let caller = self.look_up(sender, conn).await?;
                self.callers.remember(sender.as_str(), caller.clone());
                caller
            }
        };
        if caller.uid != self.shared.uid {
            tracing::warn!(caller = %sender, uid = caller.uid, "refusing a call from another user");
            return Err(Error::access_denied(caller.uid, self.shared.uid));
        }
        if let Some(sandboxed) = &caller.sandboxed {
            let method = hdr.member().map_or("?", |m| m.as_str());
            self.refuse_sandboxed(sender.as_str(), method, sandboxed);
            return Err(Error::SandboxedCaller(format!(
                "refused: the caller, {sandboxed}, is inside familiar's sandbox; tools may not drive the daemon"
            )));
        }
        Ok(sender.to_string())
    }

    /// Asks the bus who `sender` is (its uid and pid) and looks at the pid's process
    /// tree. A bus that cannot say the pid (a TCP bus) leaves only the uid check.
    pub(super) async fn look_up(
        &self,
        sender: &zbus::names::UniqueName<'_>,
        conn: &Connection,
    ) -> Result<Caller, Error> {
        let dbus = self
            .bus_driver
            .get_or_try_init(|| async {
                zbus::fdo::DBusProxy::builder(conn)
                    .cache_properties(zbus::proxy::CacheProperties::No)
                    .build()
                    .await
            })
            .await?;
        let uid = dbus
            .get_connection_unix_user(sender.clone().into())
            .await
            .map_err(zbus::Error::from)?;
        let pid = match dbus
            .get_connection_unix_process_id(sender.clone().into())
            .await
        {
            Ok(pid) => Some(pid),
            Err(e) => {
                tracing::warn!(caller = %sender, "the bus does not say the caller's pid: {e}");
                None
            }
        };
        // A few small /proc reads per new caller, not per call.
        let sandboxed = pid.and_then(crate::sandbox::ancestry::sandboxed);
        Ok(Caller { uid, sandboxed })
    }

    /// Logs and audits a refused call from a sandbox's process.
    pub(super) fn refuse_sandboxed(&self, sender: &str, method: &str, sandboxed: &Sandboxed) {
        tracing::warn!(caller = %sender, method, "refusing a call from a sandboxed process: {sandboxed}");
        let soul = sandboxed
            .owner
            .as_deref()
            .and_then(|o| o.rsplit_once(" of soul "))
            .and_then(|(_, soul)| SoulId::new(soul).ok())
            .or_else(|| SoulId::new("unknown").ok());
        let task_id = sandboxed
            .owner
            .as_deref()
            .and_then(|o| o.strip_prefix("task "))
            .and_then(|o| o.split_whitespace().next())
            .and_then(|t| TaskId::new(t).ok());
        let Some(soul) = soul else { return };
        let entry = AuditEntry {
            time: crate::store::now_rfc3339(),
            task_id,
            session_id: None,
            soul,
            tool: format!("dbus:{method}"),
            tier: Tier::SystemCritical,
            args_digest: String::new(),
            decision: AuditDecision::Denied,
            reason: Some(format!(
                "bus caller {sender}: {sandboxed}; sandboxed processes may not call the daemon"
            )),
            outcome: AuditOutcome::NotRun,
        };
        if let Err(e) = self.shared.rt.store.audit(&entry) {
            tracing::error!("cannot write the audit log: {e}");
        }
    }

    /// [`Service::caller`] for property reads. No header means the daemon itself is
    /// reading the value for `PropertiesChanged`.
    pub(super) async fn property_caller(
        &self,
        hdr: Option<Header<'_>>,
        conn: &Connection,
    ) -> zbus::fdo::Result<()> {
        let Some(hdr) = hdr else {
            return Ok(());
        };
        match self.caller(&hdr, conn).await {
            Ok(_) => Ok(()),
            Err(Error::ZBus(zbus::Error::FDO(e))) => Err(*e),
            Err(e) => Err(zbus::fdo::Error::AccessDenied(e.to_string())),
        }
    }
}
