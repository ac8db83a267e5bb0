//! Who is calling: the bus's word on a caller's uid and process, remembered per unique
//! name, and the refusal (logged and audited) of another user's process, one of a
//! sandbox's, or one the daemon cannot place.
//!
//! The check fails closed: a bus that names no process, a connecting process that is
//! gone (a tool connected, forked and exited: its grandchild holds the connection), a
//! pid that no longer names the connection's process (the bus's `ProcessFD`, a pidfd,
//! says so where the bus gives one: dbus-broker, dbus-daemon ≥ 1.15.2), or an ancestor
//! that cannot be read: each is refused, never taken for "not sandboxed".

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use familiar_protocol::Error;
use familiar_protocol::ids::{SoulId, TaskId};
use familiar_protocol::tier::Tier;
use zbus::Connection;
use zbus::message::Header;

use super::Service;
use super::recent_callers::{Caller, Refusal};
use crate::sandbox::ancestry::{self, Sandboxed, Verdict};
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
        let method = hdr.member().map_or("?", |m| m.as_str());
        match &caller.refused {
            None => Ok(sender.to_string()),
            Some(Refusal::Sandboxed(sandboxed)) => {
                self.refuse_sandboxed(sender.as_str(), method, sandboxed);
                Err(Error::SandboxedCaller(format!(
                    "refused: the caller, {sandboxed}, is inside familiar's sandbox; tools may not drive the daemon"
                )))
            }
            Some(Refusal::Unverified(why)) => {
                tracing::warn!(caller = %sender, method, "refusing a caller that cannot be placed: {why}");
                self.audit_refusal(sender.as_str(), method, None, why);
                Err(Error::SandboxedCaller(format!(
                    "refused: {why}; familiar serves only callers it can tell are outside its sandbox"
                )))
            }
        }
    }

    /// Asks the bus who `sender` is (its uid, pid and, where the bus has it, a pidfd) and
    /// looks at the process tree (see the module doc).
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
        let creds = dbus
            .get_connection_credentials(sender.clone().into())
            .await
            .map_err(zbus::Error::from)?;
        let uid = match creds.unix_user_id() {
            Some(uid) => uid,
            None => dbus
                .get_connection_unix_user(sender.clone().into())
                .await
                .map_err(zbus::Error::from)?,
        };
        // A few small /proc reads per new caller, not per call.
        let refused = match creds.process_id() {
            Some(pid) => place(pid, creds.process_fd().map(|fd| fd.as_fd())),
            None => Some(Refusal::Unverified(
                "the bus does not say which process is calling".to_owned(),
            )),
        };
        Ok(Caller { uid, refused })
    }

    /// Logs and audits a refused call from a sandbox's process.
    pub(super) fn refuse_sandboxed(&self, sender: &str, method: &str, sandboxed: &Sandboxed) {
        tracing::warn!(caller = %sender, method, "refusing a call from a sandboxed process: {sandboxed}");
        let why = format!("{sandboxed}; sandboxed processes may not call the daemon");
        self.audit_refusal(sender, method, Some(sandboxed), &why);
    }

    /// The audit line of a refused caller: the task and soul when the helper above it
    /// names them.
    fn audit_refusal(&self, sender: &str, method: &str, sandboxed: Option<&Sandboxed>, why: &str) {
        let owner = sandboxed.and_then(|s| s.owner.as_deref());
        let soul = owner
            .and_then(|o| o.rsplit_once(" of soul "))
            .and_then(|(_, soul)| SoulId::new(soul).ok())
            .or_else(|| SoulId::new("unknown").ok());
        let task_id = owner
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
            reason: Some(format!("bus caller {sender}: {why}")),
            outcome: AuditOutcome::NotRun,
        };
        if let Err(e) = self.shared.runtime.services().store.audit(&entry) {
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

/// Where the connection's process `pid` runs, or why that cannot be told. With the
/// bus's pidfd, the pid is checked to still name that process before and after the
/// walk, so a pid reused by another process cannot pass for it.
fn place(pid: u32, pidfd: Option<BorrowedFd<'_>>) -> Option<Refusal> {
    let same = |fd: BorrowedFd<'_>| pidfd_pid(fd) == Some(i64::from(pid));
    let replaced = || {
        Some(Refusal::Unverified(format!(
            "the process that connected (pid {pid}) is gone or no longer behind its connection"
        )))
    };
    if pidfd.is_some_and(|fd| !same(fd)) {
        return replaced();
    }
    let verdict = ancestry::examine(pid);
    if pidfd.is_some_and(|fd| !same(fd)) {
        return replaced();
    }
    match verdict {
        Verdict::Outside => None,
        Verdict::Sandboxed(s) => Some(Refusal::Sandboxed(s)),
        Verdict::Unknown(why) => Some(Refusal::Unverified(why)),
    }
}

/// The pid a pidfd refers to, from `/proc/self/fdinfo` (`-1` once it has exited).
fn pidfd_pid(fd: BorrowedFd<'_>) -> Option<i64> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|v| v.trim().parse().ok())
}
