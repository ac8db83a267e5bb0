//! The system services the desktop's state comes from, on the system bus: logind (the
//! user, their idle time and lock, and power actions), UPower (mains or battery, the
//! charge) and NetworkManager (a metered connection). Typed proxies, the part familiar
//! reads: `snapshot::conditions` (`--when`) and the `power` tool.
//!
//! Ours rather than `zbus_systemd`'s `login1` (see [`super::systemd`]). The
//! readers build them with `CacheProperties::No`: a condition is read fresh each time,
//! and a cached proxy would subscribe to every change for a single read.

use zbus::{OwnedObjectPath, proxy};

/// logind's bus name.
pub const LOGIND: &str = "org.freedesktop.login1";
/// UPower's bus name.
pub const UPOWER: &str = "org.freedesktop.UPower";
/// NetworkManager's bus name.
pub const NETWORK_MANAGER: &str = "org.freedesktop.NetworkManager";

#[proxy(
    interface = "org.freedesktop.login1.Manager",
    default_service = "org.freedesktop.login1",
    default_path = "/org/freedesktop/login1"
)]
pub trait Login1Manager {
    fn can_suspend(&self) -> zbus::Result<String>;
    fn can_reboot(&self) -> zbus::Result<String>;
    fn can_power_off(&self) -> zbus::Result<String>;
    fn suspend(&self, interactive: bool) -> zbus::Result<()>;
    fn reboot(&self, interactive: bool) -> zbus::Result<()>;
    fn power_off(&self, interactive: bool) -> zbus::Result<()>;
    /// The object of the user with this uid.
    fn get_user(&self, uid: u32) -> zbus::Result<OwnedObjectPath>;
}

/// One user (the path [`Login1ManagerProxy::get_user`] answers).
#[proxy(
    interface = "org.freedesktop.login1.User",
    default_service = "org.freedesktop.login1"
)]
pub trait Login1User {
    #[zbus(property)]
    fn idle_hint(&self) -> zbus::Result<bool>;
    /// Microseconds since the epoch.
    #[zbus(property)]
    fn idle_since_hint(&self) -> zbus::Result<u64>;
    /// The user's graphical session: its id (empty without one) and object.
    #[zbus(property)]
    fn display(&self) -> zbus::Result<(String, OwnedObjectPath)>;
}

/// One session (the object of [`Login1UserProxy::display`]).
#[proxy(
    interface = "org.freedesktop.login1.Session",
    default_service = "org.freedesktop.login1"
)]
pub trait Login1Session {
    #[zbus(property)]
    fn locked_hint(&self) -> zbus::Result<bool>;
}

#[proxy(
    interface = "org.freedesktop.UPower",
    default_service = "org.freedesktop.UPower",
    default_path = "/org/freedesktop/UPower"
)]
pub trait UPower {
    #[zbus(property)]
    fn on_battery(&self) -> zbus::Result<bool>;
}

/// UPower's display device: the batteries as one.
#[proxy(
    interface = "org.freedesktop.UPower.Device",
    default_service = "org.freedesktop.UPower",
    default_path = "/org/freedesktop/UPower/devices/DisplayDevice"
)]
pub trait UPowerDevice {
    #[zbus(property)]
    fn is_present(&self) -> zbus::Result<bool>;
    #[zbus(property)]
    fn percentage(&self) -> zbus::Result<f64>;
}

#[proxy(
    interface = "org.freedesktop.NetworkManager",
    default_service = "org.freedesktop.NetworkManager",
    default_path = "/org/freedesktop/NetworkManager"
)]
pub trait NetworkManager {
    /// NMMetered: 0 unknown, 1 yes, 2 no, 3 guess-yes, 4 guess-no.
    #[zbus(property)]
    fn metered(&self) -> zbus::Result<u32>;
}
