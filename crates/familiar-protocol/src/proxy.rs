//! The client side of `dev.familiar.Agent1`, for `familiar ask`, `status`, `tasks`,
//! `cancel`, `approve`, `deny` and for tests.
//!
//! Methods and properties return the contract's [`Error`]: an error reply named
//! `dev.familiar.Agent1.Error.<Variant>` arrives as that variant with the daemon's
//! sentence (`Err(Error::SessionBusy(message))`), anything else as [`Error::ZBus`]
//! (no daemon, a lost bus, `org.freedesktop.DBus.Error.*`). Signal streams are zbus's.
//!
//! Invariant: signatures match the service object's `#[interface]` in
//! `daemon::service` exactly (a mismatch shows up in the daemon tests, which drive the
//! daemon through this proxy).

use std::collections::HashMap;

use zbus::{Variant, proxy};

use crate::Error;

#[proxy(
    interface = "dev.familiar.Agent1",
    default_service = "dev.familiar.Agent1",
    default_path = "/dev/familiar/Agent1"
)]
pub trait Agent1 {
    fn submit(
        &self,
        soul: &str,
        prompt: &str,
        options: HashMap<&str, Variant<'_>>,
    ) -> Result<(String, String), Error>;

    fn cancel(&self, task_id: &str) -> Result<(), Error>;

    fn steer(&self, task_id: &str, message: &str) -> Result<(), Error>;

    fn respond(&self, request_id: &str, approve: bool) -> Result<(), Error>;

    /// Approves, and lets the task make further calls of the tool for `seconds`.
    fn grant(&self, request_id: &str, seconds: u32) -> Result<(), Error>;

    fn get_task(&self, task_id: &str) -> Result<String, Error>;

    fn list_tasks(&self) -> Result<Vec<(String, String, String, String)>, Error>;

    fn list_souls(&self) -> Result<Vec<(String, String, String, u32)>, Error>;

    fn list_sessions(&self) -> Result<Vec<(String, String, String, u64)>, Error>;

    fn snapshot(&self) -> Result<String, Error>;

    /// Re-reads config.toml, souls and policies; what was kept ("" when nothing).
    fn reload(&self) -> Result<String, Error>;

    /// Long-term memory: id, soul (`*`: every soul), text, created (RFC 3339).
    fn list_memory(&self) -> Result<Vec<(String, String, String, String)>, Error>;

    fn forget(&self, id: &str) -> Result<(), Error>;

    /// Puts back the files the task changed outside its workspace; what was restored
    /// ("changed 3 files, trashed 2").
    fn undo(&self, task_id: &str) -> Result<String, Error>;

    #[zbus(property)]
    fn version(&self) -> Result<String, Error>;

    #[zbus(property)]
    fn active_tasks(&self) -> Result<u32, Error>;

    #[zbus(property)]
    fn metrics(&self) -> Result<HashMap<String, u64>, Error>;

    /// JSON of what the kernel enforces for tools (docs/dbus.md: `Sandbox`).
    #[zbus(property)]
    fn sandbox(&self) -> Result<String, Error>;

    #[zbus(property)]
    fn configuration(&self) -> Result<String, Error>;

    #[zbus(signal)]
    fn task_event(&self, task_id: String, kind: String, payload_json: String) -> zbus::Result<()>;

    #[zbus(signal)]
    fn approval_requested(
        &self,
        task_id: String,
        request_id: String,
        tool: String,
        summary: String,
        tier: String,
    ) -> zbus::Result<()>;

    #[zbus(signal)]
    fn task_finished(&self, task_id: String, status: String, result: String) -> zbus::Result<()>;
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
