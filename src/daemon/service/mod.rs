//! The `dev.familiar.Agent1` service object (the server half of the contract in
//! [`crate::dbus`]).
//!
//! Invariant: this struct owns no task state. It checks the caller (same Unix user),
//! validates arguments into typed values, and forwards to the supervisor's single owner
//! task through a bounded channel ([`Op`]); every method answers at once, and long
//! work is reported through the signals declared here. Who may call is checked in
//! [`caller`].

mod caller;
mod options;
mod recent_callers;
mod undo;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use familiar_protocol::events::RateScope;
use familiar_protocol::ids::{RequestId, TaskId};
use familiar_protocol::query::{Configuration, MemoryEntry, SessionRow, SoulRow, TaskRow};
use familiar_protocol::{Error, MAX_GRANT_SECS, MAX_PROMPT_BYTES, MAX_STEER_BYTES};
use tokio::sync::{mpsc, oneshot};
use zbus::message::Header;
use zbus::object_server::SignalEmitter;
use zbus::{Connection, OwnedVariant, interface};

use super::{Op, Shared, SubmitRequest};
use crate::agent::choice::{Choice, ChoiceError, choose};
use crate::approval::{Answer, RespondError};
use crate::store::{Memory, MemoryError, StoreError};
use recent_callers::Callers;

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
        self.shared.runtime.get().settings.memory.clone()
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
        let rt = self.shared.runtime.refresh();
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
        let o = options::parse(options)?;
        let choice = Choice {
            soul: Some(soul),
            session: o.session.as_ref(),
            provider: o.provider.as_deref(),
            model: o.model.as_deref(),
        };
        let chosen = match choose(
            &rt.settings.souls,
            &rt.settings.config,
            &rt.services.store,
            &choice,
        ) {
            // A session whose first task is still queued has no file yet: the
            // supervisor answers SessionBusy (or UnknownSession) for it.
            Err(ChoiceError::UnknownSession(_)) => choose(
                &rt.settings.souls,
                &rt.settings.config,
                &rt.services.store,
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
            | ChoiceError::Config(_)
            | ChoiceError::EmptyModel => Error::InvalidArgument(e.to_string()),
        })?;
        // The context joins the task's first message: the session's history, the
        // audit and `familiar sessions show` hold what the model was sent.
        let prompt = familiar_protocol::context::with_context(&prompt, &o.context);
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
        if let Err(limited) = self.shared.runtime.services().limiters.check(
            RateScope::Submit,
            &key,
            self.shared.submit_rate,
        ) {
            for h in &self.shared.runtime.services().hooks {
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
            .runtime
            .services()
            .approvals
            .respond(&id, answer, &format!("dbus:{caller}"))
            .map_err(|_| no_such())
    }

    /// Approves a request and lets the same task make further calls of the request's
    /// scope without asking for `seconds` (1 to 3600): the chooser's timed grant.
    /// `NotGrantable` for a request that is always asked (it still waits).
    async fn grant(
        &self,
        request_id: String,
        seconds: u32,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<(), Error> {
        let caller = self.caller(&hdr, conn).await?;
        if !(1..=MAX_GRANT_SECS).contains(&seconds) {
            return Err(Error::InvalidArgument(format!(
                "a grant lasts 1 to {MAX_GRANT_SECS} seconds, not {seconds}"
            )));
        }
        let no_such = || {
            Error::InvalidArgument(format!(
                "no pending approval request `{request_id}` (already answered, timed out, or never asked)"
            ))
        };
        let id = RequestId::new(request_id.clone()).map_err(|_| no_such())?;
        let answer = Answer::ApproveFor(std::time::Duration::from_secs(u64::from(seconds)));
        self.shared
            .runtime
            .services()
            .approvals
            .respond(&id, answer, &format!("dbus:{caller}"))
            .map_err(|e| match e {
                RespondError::UnknownRequest(_) => no_such(),
                e @ RespondError::NotGrantable { .. } => Error::NotGrantable(e.to_string()),
            })
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
    ) -> Result<Vec<TaskRow>, Error> {
        self.caller(&hdr, conn).await?;
        self.ask(|reply| Op::ListTasks { reply }).await
    }

    /// Souls: id, description, model, max_iterations.
    #[zbus(out_args("souls"))]
    async fn list_souls(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<Vec<SoulRow>, Error> {
        self.caller(&hdr, conn).await?;
        let rt = self.shared.runtime.refresh();
        let config = &rt.settings.config;
        Ok(rt
            .settings
            .souls
            .souls
            .values()
            .map(|s| {
                let model = config
                    .model_for(s.provider.as_deref(), s.model.as_deref())
                    .unwrap_or_default()
                    .to_owned();
                SoulRow {
                    id: s.id.to_string(),
                    description: s.description.clone(),
                    model,
                    max_iterations: s.max_iterations,
                }
            })
            .collect())
    }

    /// Sessions: id, soul, title, updated (unix seconds), newest first.
    #[zbus(out_args("sessions"))]
    async fn list_sessions(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<Vec<SessionRow>, Error> {
        self.caller(&hdr, conn).await?;
        let store = Arc::clone(&self.shared.runtime.services().store);
        let sessions = blocking("listing sessions", move || store.list_sessions()).await??;
        Ok(sessions
            .into_iter()
            .map(|s| SessionRow {
                id: s.id.to_string(),
                soul: s.soul.to_string(),
                title: s.title,
                updated: s.updated_at,
            })
            .collect())
    }

    /// Long-term memory entries, oldest first: id, soul (`*`: every soul), text,
    /// created (RFC 3339).
    async fn list_memory(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<Vec<MemoryEntry>, Error> {
        self.caller(&hdr, conn).await?;
        let memory = self.memory();
        let entries = blocking("listing memory", move || memory.list()).await??;
        Ok(entries
            .into_iter()
            .map(|e| MemoryEntry {
                id: e.id.to_string(),
                soul: e.soul.to_string(),
                text: e.text,
                created: e.created,
            })
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

    /// Puts back what the task changed outside its workspace, as the person's own
    /// action (audited); returns what was restored.
    #[zbus(out_args("restored"))]
    async fn undo(
        &self,
        task_id: String,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<String, Error> {
        let caller = self.caller(&hdr, conn).await?;
        let id = self::task_id(&task_id)?;
        self.undo_task(id, &caller).await
    }

    /// Re-reads config.toml, the souls and the policies for new tasks, as SIGHUP does;
    /// returns what was kept from before because its new version does not load ("" when
    /// everything loaded).
    #[zbus(out_args("kept"))]
    async fn reload(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<String, Error> {
        self.caller(&hdr, conn).await?;
        let shared = Arc::clone(&self.shared);
        let kept = blocking("reloading", move || shared.runtime.reload()).await?;
        Ok(kept.err().map(|e| e.to_string()).unwrap_or_default())
    }

    /// The environment snapshot as JSON.
    #[zbus(out_args("snapshot_json"))]
    async fn snapshot(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<String, Error> {
        self.caller(&hdr, conn).await?;
        let snapshotter = Arc::clone(&self.shared.runtime.services().snapshotter);
        let snap = blocking("taking the snapshot", move || {
            let mut s = snapshotter.lock().unwrap_or_else(|e| e.into_inner());
            serde_json::to_string(&s.take(None))
        })
        .await?
        .map_err(failed)?;
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
        Ok(self
            .shared
            .runtime
            .services()
            .metrics
            .snapshot()
            .into_iter()
            .collect())
    }

    /// What the kernel enforces of the sandbox, as JSON `{"abi", "status", "missing"}`
    /// (probed once at start).
    #[zbus(property(emits_changed_signal = "const"))]
    async fn sandbox(
        &self,
        #[zbus(header)] hdr: Option<Header<'_>>,
        #[zbus(connection)] conn: &Connection,
    ) -> zbus::fdo::Result<String> {
        self.property_caller(hdr, conn).await?;
        Ok(crate::sandbox::report(&self.shared.runtime.services().enforcement).to_json())
    }

    /// The config the daemon runs with, as JSON `{"config", "provider", "model",
    /// "default_soul", "policy", "data_dir", "reload_error", "warm"}` (`warm`: each
    /// warmed soul's prefix, docs/dbus.md) (for `familiar status`,
    /// `ask` and `doctor`: a client's own config, or data dir, may not be the daemon's;
    /// `reload_error` says what a reload could not take). Not constant: config.toml is
    /// reloaded.
    #[zbus(property(emits_changed_signal = "false"))]
    async fn configuration(
        &self,
        #[zbus(header)] hdr: Option<Header<'_>>,
        #[zbus(connection)] conn: &Connection,
    ) -> zbus::fdo::Result<String> {
        self.property_caller(hdr, conn).await?;
        let rt = self.shared.runtime.refresh();
        let c = &rt.settings.config;
        let facts = Configuration {
            config: c.source.as_ref().map(|p| p.display().to_string()),
            provider: Some(c.default_provider.clone()),
            model: c.provider(None).ok().map(|p| p.model.clone()),
            default_soul: Some(c.default_soul.to_string()),
            policy: Some(c.policy.clone()),
            data_dir: Some(c.paths.data_dir.display().to_string()),
            reload_error: self.shared.runtime.error(),
            warm: (rt.services.warm.report().iter())
                .map(|(soul, w)| (soul.clone(), w.reported()))
                .collect(),
            result_timeout_ms: Some(
                u64::try_from(c.notifications.result_timeout.as_millis()).unwrap_or(u64::MAX),
            ),
        };
        Ok(facts.to_json())
    }

    /// Every loop event of every task: its kind and its JSON without `kind`, `task_id`
    /// and `session_id` (docs/events.md).
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

    /// A task ended: exactly once per accepted task, after all its `TaskEvent`s, with its
    /// final status (`completed`, `failed`, `cancelled`, `max_iterations`, ...).
    #[zbus(signal)]
    pub async fn task_finished(
        emitter: &SignalEmitter<'_>,
        task_id: &str,
        status: &str,
        result: &str,
    ) -> zbus::Result<()>;
}
