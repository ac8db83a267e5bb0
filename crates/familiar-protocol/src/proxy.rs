//! The client side of `dev.familiar.Agent1`, for `familiar ask`, `status`, `tasks`,
//! `cancel`, `approve`, `deny` and for tests.
//!
//! Methods and properties return the contract's [`Error`]: an error reply named
//! `dev.familiar.Agent1.Error.<Variant>` arrives as that variant with the daemon's
//! sentence (`Err(Error::SessionBusy(message))`), anything else as [`Error::ZBus`]
//! (no daemon, a lost bus, `org.freedesktop.DBus.Error.*`). Signal streams are zbus's.
//!
//! The `List*` methods return the rows of [`crate::query`]; `GetTask` and the `Sandbox`
//! and `Configuration` properties, JSON on the wire, are read into their types by
//! [`Agent1Proxy::get_task`], [`Agent1Proxy::sandbox`] and
//! [`Agent1Proxy::configuration`] (the `_json` methods give the string as it came).
//!
//! Invariant: signatures match the service object's `#[interface]` in
//! `daemon::service` exactly (a mismatch shows up in the daemon tests, which drive the
//! daemon through this proxy).

use std::collections::HashMap;

use zbus::{Variant, proxy};

use crate::Error;
use crate::query::{
    Configuration, MemoryEntry, SandboxReport, SessionRow, SoulRow, TaskRow, TaskView,
};

/// `dev.familiar.Agent1` as a client calls it (docs/dbus.md); zbus makes
/// `Agent1Proxy` of it, with a `receive_*` stream per signal.
#[proxy(
    interface = "dev.familiar.Agent1",
    default_service = "dev.familiar.Agent1",
    default_path = "/dev/familiar/Agent1"
)]
pub trait Agent1 {
    /// Submits a task: the soul (`""`: the default), the prompt and `Submit`'s options
    /// ([`crate::SubmitOptions::to_dict`]); the task's id and its session's.
    fn submit(
        &self,
        soul: &str,
        prompt: &str,
        options: HashMap<&str, Variant<'_>>,
    ) -> Result<(String, String), Error>;

    /// Stops a task at once (its context is saved); an ended task is left as it was.
    fn cancel(&self, task_id: &str) -> Result<(), Error>;

    /// Adds a message to a running task: it joins at the task's next step.
    fn steer(&self, task_id: &str, message: &str) -> Result<(), Error>;

    /// Answers an approval request: the call runs, or not.
    fn respond(&self, request_id: &str, approve: bool) -> Result<(), Error>;

    /// Approves, and lets the task make further calls of the tool for `seconds`.
    fn grant(&self, request_id: &str, seconds: u32) -> Result<(), Error>;

    /// `GetTask`'s JSON as it came ([`Agent1Proxy::get_task`] reads it).
    #[zbus(name = "GetTask")]
    fn get_task_json(&self, task_id: &str) -> Result<String, Error>;

    /// Every task the daemon knows, oldest first, sub-tasks after their parent.
    fn list_tasks(&self) -> Result<Vec<TaskRow>, Error>;

    /// The souls a task can run under.
    fn list_souls(&self) -> Result<Vec<SoulRow>, Error>;

    /// The sessions, newest first.
    fn list_sessions(&self) -> Result<Vec<SessionRow>, Error>;

    /// The environment snapshot, as JSON.
    fn snapshot(&self) -> Result<String, Error>;

    /// Re-reads config.toml, souls and policies; what was kept ("" when nothing).
    fn reload(&self) -> Result<String, Error>;

    /// Long-term memory, oldest first.
    fn list_memory(&self) -> Result<Vec<MemoryEntry>, Error>;

    /// Removes one long-term memory entry.
    fn forget(&self, id: &str) -> Result<(), Error>;

    /// Puts back the files the task changed outside its workspace; what was restored
    /// ("changed 3 files, trashed 2").
    fn undo(&self, task_id: &str) -> Result<String, Error>;

    /// The daemon's version.
    #[zbus(property)]
    fn version(&self) -> Result<String, Error>;

    /// Tasks running or queued now.
    #[zbus(property)]
    fn active_tasks(&self) -> Result<u32, Error>;

    /// The counters of [`crate::query::metrics`], by name.
    #[zbus(property)]
    fn metrics(&self) -> Result<HashMap<String, u64>, Error>;

    /// JSON of what the kernel enforces for tools (docs/dbus.md: `Sandbox`;
    /// [`Agent1Proxy::sandbox`] reads it).
    #[zbus(property, name = "Sandbox")]
    fn sandbox_json(&self) -> Result<String, Error>;

    /// JSON of the config the daemon runs with ([`Agent1Proxy::configuration`] reads
    /// it).
    #[zbus(property, name = "Configuration")]
    fn configuration_json(&self) -> Result<String, Error>;

    /// Every event of every task: its kind and its JSON (docs/events.md).
    #[zbus(signal)]
    fn task_event(&self, task_id: String, kind: String, payload_json: String) -> zbus::Result<()>;

    /// A tool call waits for a person's answer (`Respond`).
    #[zbus(signal)]
    fn approval_requested(
        &self,
        task_id: String,
        request_id: String,
        tool: String,
        summary: String,
        tier: String,
    ) -> zbus::Result<()>;

    /// A task ended: once per task, after all its events.
    #[zbus(signal)]
    fn task_finished(&self, task_id: String, status: String, result: String) -> zbus::Result<()>;
}

impl Agent1Proxy<'_> {
    /// One task (`GetTask`), read.
    pub async fn get_task(&self, task_id: &str) -> Result<TaskView, Error> {
        let json = self.get_task_json(task_id).await?;
        TaskView::from_json(&json).map_err(|e| not_understood("GetTask", &e))
    }

    /// What the kernel enforces for tools (the `Sandbox` property), read.
    pub async fn sandbox(&self) -> Result<SandboxReport, Error> {
        let json = self.sandbox_json().await?;
        serde_json::from_str(&json).map_err(|e| not_understood("Sandbox", &e))
    }

    /// The config the daemon runs with (the `Configuration` property), read.
    pub async fn configuration(&self) -> Result<Configuration, Error> {
        let json = self.configuration_json().await?;
        serde_json::from_str(&json).map_err(|e| not_understood("Configuration", &e))
    }
}

/// A reply this build cannot read (a daemon of another version).
fn not_understood(what: &str, e: &serde_json::Error) -> Error {
    Error::ZBus(zbus::Error::Failure(format!(
        "the daemon's {what} is not understood: {e}"
    )))
}

/// The D-Bus error name and message of a failed call, when it was an error reply.
pub fn method_error(e: &zbus::Error) -> Option<(String, String)> {
    use zbus::DBusError;
    match e {
        zbus::Error::MethodError(name, desc, _) => {
            Some((name.to_string(), desc.clone().unwrap_or_default()))
        }
        zbus::Error::FDO(fdo) => Some((
            fdo.name().to_string(),
            fdo.description().unwrap_or_default().to_owned(),
        )),
        // zbus's own enum: every other variant is a transport problem.
        _ => None,
    }
}
