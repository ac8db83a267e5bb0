//! The client side of `dev.familiar.Agent1`, for `familiar ask`, `status`, `tasks`,
//! `cancel`, `approve`, `deny` and for tests.
//!
//! Invariant: signatures match the service object's `#[interface]` in
//! `daemon::service` exactly (a mismatch shows up in the daemon tests, which drive the
//! daemon through this proxy).

use std::collections::HashMap;

use zbus::{Variant, proxy};

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
    ) -> zbus::Result<(String, String)>;

    fn cancel(&self, task_id: &str) -> zbus::Result<()>;

    fn steer(&self, task_id: &str, message: &str) -> zbus::Result<()>;

    fn respond(&self, request_id: &str, approve: bool) -> zbus::Result<()>;

    /// Approves, and lets the task make further calls of the tool for `seconds`.
    fn grant(&self, request_id: &str, seconds: u32) -> zbus::Result<()>;

    fn get_task(&self, task_id: &str) -> zbus::Result<String>;

    fn list_tasks(&self) -> zbus::Result<Vec<(String, String, String, String)>>;

    fn list_souls(&self) -> zbus::Result<Vec<(String, String, String, u32)>>;

    fn list_sessions(&self) -> zbus::Result<Vec<(String, String, String, u64)>>;

    fn snapshot(&self) -> zbus::Result<String>;

    /// Re-reads config.toml, souls and policies; what was kept ("" when nothing).
    fn reload(&self) -> zbus::Result<String>;

    /// Long-term memory: id, soul (`*`: every soul), text, created (RFC 3339).
    fn list_memory(&self) -> zbus::Result<Vec<(String, String, String, String)>>;

    fn forget(&self, id: &str) -> zbus::Result<()>;

    #[zbus(property)]
    fn version(&self) -> zbus::Result<String>;

    #[zbus(property)]
    fn active_tasks(&self) -> zbus::Result<u32>;

    #[zbus(property)]
    fn metrics(&self) -> zbus::Result<HashMap<String, u64>>;

    /// JSON of what the kernel enforces for tools (docs/dbus.md: `Sandbox`).
    #[zbus(property)]
    fn sandbox(&self) -> zbus::Result<String>;

    #[zbus(property)]
    fn configuration(&self) -> zbus::Result<String>;

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
