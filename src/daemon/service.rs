//! The `dev.familiar.Agent1` service object (the server half of the contract in
//! [`crate::dbus`]).
//!
//! Invariant: this struct owns no task state. It checks the caller (same Unix user),
//! validates arguments into typed values, and forwards to the supervisor's single owner
//! task through a bounded channel ([`Op`]); every method answers at once, and long
//! work is reported through the signals declared here.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::{mpsc, oneshot};
use zbus::message::Header;
use zbus::object_server::SignalEmitter;
use zbus::{Connection, OwnedVariant, interface};

use super::callers::{Caller, Callers};
use super::{Op, Shared, SubmitRequest};
use crate::agent::choice::{Choice, ChoiceError, choose};
use crate::approval::Answer;
use crate::catalog::Tier;
use crate::dbus::{Error, MAX_PROMPT_BYTES, MAX_STEER_BYTES};
use crate::ids::{RequestId, SoulId, TaskId};
use crate::ratelimit::Scope;
use crate::sandbox::ancestry::Sandboxed;
use crate::store::{AuditDecision, AuditEntry, AuditOutcome};
use crate::store::{Memory, MemoryError, StoreError};

/// The served object.
pub struct Service {
    pub(crate) tx: mpsc::Sender<Op>,
    pub(crate) shared: Arc<Shared>,
    /// The bus driver, made once: a proxy per call would add a match rule and a
    /// property-cache task per call.
    bus_driver: tokio::sync::OnceCell<zbus::fdo::DBusProxy<'static>>,
    /// What the bus said of recent callers (a lookup per call waited behind the bus).
    callers: Callers,
}

impl Service {
    pub fn new(tx: mpsc::Sender<Op>, shared: Arc<Shared>) -> Service {
        Service {
            tx,
            shared,
            bus_driver: tokio::sync::OnceCell::new(),
            callers: Callers::default(),
        }
    }

    /// The daemon's long-term memory (a handle on the file: cheap to clone).
    fn memory(&self) -> Memory {
        self.shared.loaded.get().rt.memory.clone()
    }

    /// The caller's unique name, after checking it runs as our user and outside every
    /// sandbox.
    async fn caller(&self, hdr: &Header<'_>, conn: &Connection) -> Result<String, Error> {
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
    async fn look_up(
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
    fn refuse_sandboxed(&self, sender: &str, method: &str, sandboxed: &Sandboxed) {
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
    async fn property_caller(
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

    /// Sends an op and waits for the owner's answer.
    async fn ask<T>(&self, op: impl FnOnce(oneshot::Sender<T>) -> Op) -> Result<T, Error> {
        let (reply, rx) = oneshot::channel();
        if self.tx.send(op(reply)).await.is_err() {
            return Err(Error::shutting_down());
        }
        rx.await.map_err(|_| Error::shutting_down())
    }

    fn parse_submit(
        &self,
        soul: &str,
        prompt: String,
        options: HashMap<String, OwnedVariant>,
        caller: String,
    ) -> Result<SubmitRequest, Error> {
        let loaded = self.shared.loaded.refresh();
        if prompt.len() > MAX_PROMPT_BYTES {
            return Err(Error::InvalidArgument(format!(
                "the prompt is {} bytes; the limit is {MAX_PROMPT_BYTES}: put large inputs in a file and name it in the prompt",
                prompt.len()
            )));
        }
        let prompt = prompt.trim().to_owned();
        if prompt.is_empty() {
            return Err(Error::InvalidArgument(
                "the prompt is empty: say what the task is".to_owned(),
            ));
        }
        let o = super::options::parse(options)?;
        let choice = Choice {
            soul: Some(soul),
            session: o.session.as_ref(),
            provider: o.provider.as_deref(),
            model: o.model.as_deref(),
        };
        let rt = &loaded.rt;
        let chosen = match choose(&loaded.souls, &rt.config, &rt.store, &choice) {
            // A session whose first task is still queued has no file yet: the
            // supervisor answers SessionBusy (or UnknownSession) for it.
            Err(ChoiceError::UnknownSession(_)) => choose(
                &loaded.souls,
                &rt.config,
                &rt.store,
                &Choice {
                    session: None,
                    ..choice
                },
            ),
            other => other,
        };
        let soul = chosen.map_err(|e| match e {
            ChoiceError::UnknownSoul(e) => {
                Error::UnknownSoul(format!("{e} (see `familiar souls`)"))
            }
            ChoiceError::UnknownSession(_) | ChoiceError::Store(_) => {
                Error::UnknownSession(e.to_string())
            }
            ChoiceError::SoulMismatch { .. }
            | ChoiceError::UnknownProvider(_)
            | ChoiceError::EmptyModel => Error::InvalidArgument(e.to_string()),
        })?;
        Ok(SubmitRequest {
            soul,
            prompt,
            session: o.session,
            workspace: o.workspace,
            origin: o.origin.unwrap_or_else(|| "dbus".to_owned()),
            max_iterations: o.max_iterations,
            when: o.when,
            caller,
        })
    }
}

/// A failure of the daemon's own, as the caller sees it
/// (`org.freedesktop.DBus.Error.Failed` with the message).
fn failed(e: impl std::fmt::Display) -> Error {
    Error::ZBus(zbus::Error::Failure(e.to_string()))
}

/// Runs `f` on the blocking pool (it reads files); `what` names it in the reply when the
/// pool fails it. What `f` returns is the caller's to map, through the `From` impls below.
async fn blocking<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| failed(format!("{what}: {e}")))
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Error {
        failed(e)
    }
}

impl From<MemoryError> for Error {
    fn from(e: MemoryError) -> Error {
        failed(e)
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Error {
        failed(e)
    }
}

fn task_id(s: &str) -> Result<TaskId, Error> {
    TaskId::new(s).map_err(|_| {
        Error::UnknownTask(format!(
            "no task `{s}`; `familiar tasks` lists the daemon's tasks"
        ))
    })
}

#[interface(name = "dev.familiar.Agent1")]
impl Service {
    /// Queues a task; returns its id and its session's id at once.
    #[zbus(out_args("task_id", "session_id"))]
    async fn submit(
        &self,
        soul: String,
        prompt: String,
        options: HashMap<String, OwnedVariant>,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<(String, String), Error> {
        let caller = self.caller(&hdr, conn).await?;
        if self.shared.shutting_down.load(Ordering::SeqCst) {
            return Err(Error::shutting_down());
        }
        let req = self.parse_submit(&soul, prompt, options, caller)?;
        // Counted per user, not per connection: a client that reconnects (a new unique
        // name each time) must not get a fresh allowance.
        let key = format!("uid:{}", self.shared.uid);
        if let Err(limited) =
            self.shared
                .rt
                .limiters
                .check(Scope::Submit, &key, self.shared.submit_rate)
        {
            for h in &self.shared.rt.hooks {
                h.submit_limited(&req.caller, &limited);
            }
            return Err(Error::RateLimited(format!(
                "{limited}; wait before submitting again"
            )));
        }
        let (task, session) = self.ask(|reply| Op::Submit { req, reply }).await??;
        Ok((task.to_string(), session.to_string()))
    }

    /// Cancels a queued or running task.
    async fn cancel(
        &self,
        task_id: String,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<(), Error> {
        self.caller(&hdr, conn).await?;
        let id = self::task_id(&task_id)?;
        self.ask(|reply| Op::Cancel { id, reply }).await?
    }

    /// Adds a user message to a running task at its next iteration boundary; a message
    /// the task ends before reading opens the session's next task.
    async fn steer(
        &self,
        task_id: String,
        message: String,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<(), Error> {
        self.caller(&hdr, conn).await?;
        let id = self::task_id(&task_id)?;
        if message.trim().is_empty() {
            return Err(Error::InvalidArgument(
                "the message is empty: say what the task should know".to_owned(),
            ));
        }
        if message.len() > MAX_STEER_BYTES {
            return Err(Error::InvalidArgument(format!(
                "the message is {} bytes, more than {MAX_STEER_BYTES}: send a shorter one",
                message.len()
            )));
        }
        self.ask(|reply| Op::Steer { id, message, reply }).await?
    }

    /// Answers an approval request (the first answer wins).
    async fn respond(
        &self,
        request_id: String,
        approve: bool,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<(), Error> {
        let caller = self.caller(&hdr, conn).await?;
        let no_such = || {
            Error::InvalidArgument(format!(
                "no pending approval request `{request_id}` (already answered, timed out, or never asked)"
            ))
        };
        let id = RequestId::new(request_id.clone()).map_err(|_| no_such())?;
        let answer = if approve {
            Answer::Approve
        } else {
            Answer::Deny
        };
        self.shared
            .rt
            .approvals
            .respond(&id, answer, &format!("dbus:{caller}"))
            .map_err(|_| no_such())
    }

    /// One task as JSON: id, session_id, soul, status, prompt, plan, usage, result.
    #[zbus(out_args("task_json"))]
    async fn get_task(
        &self,
        task_id: String,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<String, Error> {
        self.caller(&hdr, conn).await?;
        let id = self::task_id(&task_id)?;
        self.ask(|reply| Op::GetTask { id, reply }).await?
    }

    /// Every task the daemon knows: id, soul, status, prompt (first 80 characters).
    #[zbus(out_args("tasks"))]
    async fn list_tasks(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<Vec<(String, String, String, String)>, Error> {
        self.caller(&hdr, conn).await?;
        self.ask(|reply| Op::ListTasks { reply }).await
    }

    /// Souls: id, description, model, max_iterations.
    #[zbus(out_args("souls"))]
    async fn list_souls(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<Vec<(String, String, String, u32)>, Error> {
        self.caller(&hdr, conn).await?;
        let loaded = self.shared.loaded.refresh();
        let config = &loaded.rt.config;
        Ok(loaded
            .souls
            .souls
            .values()
            .map(|s| {
                let model = config
                    .model_for(s.provider.as_deref(), s.model.as_deref())
                    .unwrap_or_default()
                    .to_owned();
                (
                    s.id.to_string(),
                    s.description.clone(),
                    model,
                    s.max_iterations,
                )
            })
            .collect())
    }

    /// Sessions: id, soul, title, updated (unix seconds), newest first.
    #[zbus(out_args("sessions"))]
    async fn list_sessions(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<Vec<(String, String, String, u64)>, Error> {
        self.caller(&hdr, conn).await?;
        let store = Arc::clone(&self.shared.rt.store);
        let sessions = blocking("listing sessions", move || store.list_sessions()).await??;
        Ok(sessions
            .into_iter()
            .map(|s| (s.id.to_string(), s.soul.to_string(), s.title, s.updated_at))
            .collect())
    }

    /// Long-term memory entries, oldest first: id, soul (`*`: every soul), text,
    /// created (RFC 3339).
    async fn list_memory(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<Vec<(String, String, String, String)>, Error> {
        self.caller(&hdr, conn).await?;
        let memory = self.memory();
        let entries = blocking("listing memory", move || memory.list()).await??;
        Ok(entries
            .into_iter()
            .map(|e| (e.id.to_string(), e.soul.to_string(), e.text, e.created))
            .collect())
    }

    /// Removes one long-term memory entry.
    async fn forget(
        &self,
        id: String,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<(), Error> {
        let caller = self.caller(&hdr, conn).await?;
        let memory = self.memory();
        let forgotten = blocking("forgetting", move || memory.forget(&id)).await?;
        match forgotten {
            Ok(e) => {
                tracing::info!(memory_id = %e.id, %caller, "memory entry forgotten");
                Ok(())
            }
            Err(e @ MemoryError::NotFound(_)) => Err(Error::InvalidArgument(format!(
                "{e}; ListMemory lists the entries"
            ))),
            Err(
                e @ (MemoryError::Store(_)
                | MemoryError::Corrupt { .. }
                | MemoryError::Full { .. }
                | MemoryError::Empty
                | MemoryError::TooLong(_)),
            ) => Err(failed(e)),
        }
    }

    /// The environment snapshot as JSON.
    #[zbus(out_args("snapshot_json"))]
    async fn snapshot(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<String, Error> {
        self.caller(&hdr, conn).await?;
        let snapshotter = Arc::clone(&self.shared.rt.snapshotter);
        let snap = blocking("taking the snapshot", move || {
            let mut s = snapshotter.lock().unwrap_or_else(|e| e.into_inner());
            serde_json::to_string(&s.take(None))
        })
        .await??;
        Ok(snap)
    }

    #[zbus(property(emits_changed_signal = "const"))]
    async fn version(
        &self,
        #[zbus(header)] hdr: Option<Header<'_>>,
        #[zbus(connection)] conn: &Connection,
    ) -> zbus::fdo::Result<String> {
        self.property_caller(hdr, conn).await?;
        Ok(env!("CARGO_PKG_VERSION").to_owned())
    }

    #[zbus(property)]
    async fn active_tasks(
        &self,
        #[zbus(header)] hdr: Option<Header<'_>>,
        #[zbus(connection)] conn: &Connection,
    ) -> zbus::fdo::Result<u32> {
        self.property_caller(hdr, conn).await?;
        Ok(self.shared.active.load(Ordering::SeqCst))
    }

    #[zbus(property)]
    async fn metrics(
        &self,
        #[zbus(header)] hdr: Option<Header<'_>>,
        #[zbus(connection)] conn: &Connection,
    ) -> zbus::fdo::Result<HashMap<String, u64>> {
        self.property_caller(hdr, conn).await?;
        Ok(self.shared.rt.metrics.snapshot().into_iter().collect())
    }

    /// What the kernel enforces of the sandbox, as JSON `{"abi", "status", "missing"}`
    /// (an addition to DESIGN §3's properties; probed once at start).
    #[zbus(property(emits_changed_signal = "const"))]
    async fn sandbox(
        &self,
        #[zbus(header)] hdr: Option<Header<'_>>,
        #[zbus(connection)] conn: &Connection,
    ) -> zbus::fdo::Result<String> {
        self.property_caller(hdr, conn).await?;
        serde_json::to_string(&self.shared.rt.enforcement)
            .map_err(|e| zbus::fdo::Error::Failed(format!("encoding the sandbox status: {e}")))
    }

    /// The config the daemon runs with, as JSON `{"config", "provider", "model",
    /// "default_soul", "policy", "data_dir", "reload_error"}` (an addition to DESIGN
    /// §3's properties, for `familiar status`, `ask` and `doctor`: a client's own
    /// config, or data dir, may not be the daemon's; `reload_error` says what a reload
    /// could not take). Not constant: config.toml is reloaded.
    #[zbus(property(emits_changed_signal = "false"))]
    async fn configuration(
        &self,
        #[zbus(header)] hdr: Option<Header<'_>>,
        #[zbus(connection)] conn: &Connection,
    ) -> zbus::fdo::Result<String> {
        self.property_caller(hdr, conn).await?;
        let loaded = self.shared.loaded.refresh();
        let c = &loaded.rt.config;
        let facts = serde_json::json!({
            "config": c.source.as_ref().map(|p| p.display().to_string()),
            "provider": c.default_provider,
            "model": c.provider(None).ok().map(|p| p.model.clone()),
            "default_soul": c.default_soul.to_string(),
            "policy": c.policy,
            "data_dir": c.paths.data_dir,
            "reload_error": self.shared.loaded.error(),
        });
        Ok(facts.to_string())
    }

    /// Every loop event of every task (DESIGN §5).
    #[zbus(signal)]
    pub async fn task_event(
        emitter: &SignalEmitter<'_>,
        task_id: &str,
        kind: &str,
        payload_json: &str,
    ) -> zbus::Result<()>;

    /// A tool call waits for a person's answer (`Respond`).
    #[zbus(signal)]
    pub async fn approval_requested(
        emitter: &SignalEmitter<'_>,
        task_id: &str,
        request_id: &str,
        tool: &str,
        summary: &str,
        tier: &str,
    ) -> zbus::Result<()>;

    /// A task ended (status per DESIGN §3).
    #[zbus(signal)]
    pub async fn task_finished(
        emitter: &SignalEmitter<'_>,
        task_id: &str,
        status: &str,
        result: &str,
    ) -> zbus::Result<()>;
}
