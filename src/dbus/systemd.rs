//! The systemd user manager's D-Bus API (`org.freedesktop.systemd1` on the session
//! bus), the part familiar uses: the `systemd_user` tool and the pre-check list and
//! drive units, the sandbox puts a task's tool processes in a transient slice.
//!
//! Our declarations rather than `zbus_systemd` 0.26201 (evaluated: it is on zbus 6 and
//! passed the tests): +33 KB of release binary and ~10,000 lines of
//! generated proxies to compile, with `String` arguments, for these dozen calls of a
//! stable interface (the same goes for `tools::power`).

use zbus::proxy;
use zbus::{OwnedObjectPath, Variant};

/// The user manager's bus name.
pub const SERVICE: &str = "org.freedesktop.systemd1";

/// One row of `ListUnits`: name, description, load state, active state, sub state,
/// followed unit, object path, job id, job type, job path.
pub type UnitRow = (
    String,
    String,
    String,
    String,
    String,
    String,
    OwnedObjectPath,
    u32,
    String,
    OwnedObjectPath,
);

#[proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1"
)]
pub trait Manager {
    fn list_units(&self) -> zbus::Result<Vec<UnitRow>>;
    fn load_unit(&self, name: &str) -> zbus::Result<OwnedObjectPath>;
    fn start_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;
    fn stop_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;
    fn restart_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;
    fn reload_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;
    fn get_unit(&self, name: &str) -> zbus::Result<OwnedObjectPath>;
    /// Creates and starts a unit from `properties` (a slice, or a scope of running
    /// processes named in `PIDs`).
    fn start_transient_unit(
        &self,
        name: &str,
        mode: &str,
        properties: &[(&str, Variant<'_>)],
        aux: &[(&str, &[(&str, Variant<'_>)])],
    ) -> zbus::Result<OwnedObjectPath>;
    /// Asks the manager to send its signals (`JobRemoved`) to this connection.
    fn subscribe(&self) -> zbus::Result<()>;

    #[zbus(signal)]
    fn job_removed(
        &self,
        id: u32,
        job: OwnedObjectPath,
        unit: String,
        result: String,
    ) -> zbus::Result<()>;
}

#[proxy(
    interface = "org.freedesktop.systemd1.Unit",
    default_service = "org.freedesktop.systemd1"
)]
pub trait Unit {
    #[zbus(property)]
    fn description(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn load_state(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn active_state(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn sub_state(&self) -> zbus::Result<String>;
}

#[proxy(
    interface = "org.freedesktop.systemd1.Slice",
    default_service = "org.freedesktop.systemd1"
)]
pub trait Slice {
    /// The slice's cgroup, relative to the cgroup root.
    #[zbus(property)]
    fn control_group(&self) -> zbus::Result<String>;
}
