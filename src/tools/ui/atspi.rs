//! A thin AT-SPI client on familiar's own zbus: the accessibility bus, and the five
//! `org.a11y.atspi` interfaces `ui_read` and `ui_act` use (Accessible, Action, Text,
//! EditableText, Value), declared with `#[zbus::proxy]`.
//!
//! Why not the `atspi` crate: 0.30 (the current one) is built on zbus 5, and familiar
//! is on zbus 6; two zbus majors would double the D-Bus stack in the binary for five
//! interfaces of which a handful of methods are called.
//!
//! Invariant: every call is bounded by [`CALL_TIMEOUT`] (a hung application delays a
//! read, never hangs the task), and a node is named by its application's unique bus
//! name and object path, never by anything the application chooses to call itself.

use std::time::Duration;

use zbus::Connection;
use zbus::OwnedObjectPath;
use zbus::proxy::CacheProperties;

use crate::tools::bus::Bus;

/// Longest any one call to an application may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// The registry's root: its children are the applications.
pub const ROOT_PATH: &str = "/org/a11y/atspi/accessible/root";
pub const REGISTRY: &str = "org.a11y.atspi.Registry";

/// An accessible: its application's bus name and its object path.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, serde::Deserialize, serde::Serialize, zbus::zvariant::Type,
)]
pub struct Node {
    pub bus: String,
    pub path: OwnedObjectPath,
}

#[zbus::proxy(
    default_service = "org.a11y.Bus",
    default_path = "/org/a11y/bus",
    interface = "org.a11y.Bus"
)]
trait A11yBus {
    fn get_address(&self) -> zbus::Result<String>;
}

#[zbus::proxy(interface = "org.a11y.atspi.Accessible", assume_defaults = false)]
pub trait Accessible {
    fn get_children(&self) -> zbus::Result<Vec<Node>>;
    fn get_role_name(&self) -> zbus::Result<String>;
    fn get_state(&self) -> zbus::Result<Vec<u32>>;
    fn get_interfaces(&self) -> zbus::Result<Vec<String>>;
    #[zbus(property)]
    fn name(&self) -> zbus::Result<String>;
}

#[zbus::proxy(interface = "org.a11y.atspi.Action", assume_defaults = false)]
pub trait Action {
    /// (name, description, key binding) of each action, by index.
    fn get_actions(&self) -> zbus::Result<Vec<(String, String, String)>>;
    fn do_action(&self, index: i32) -> zbus::Result<bool>;
}

#[zbus::proxy(interface = "org.a11y.atspi.Text", assume_defaults = false)]
pub trait Text {
    fn get_text(&self, start: i32, end: i32) -> zbus::Result<String>;
    #[zbus(property)]
    fn character_count(&self) -> zbus::Result<i32>;
}

#[zbus::proxy(interface = "org.a11y.atspi.EditableText", assume_defaults = false)]
pub trait EditableText {
    fn set_text_contents(&self, text: &str) -> zbus::Result<bool>;
}

#[zbus::proxy(interface = "org.a11y.atspi.Value", assume_defaults = false)]
pub trait Value {
    #[zbus(property)]
    fn current_value(&self) -> zbus::Result<f64>;
}

#[zbus::proxy(interface = "org.a11y.atspi.Component", assume_defaults = false)]
pub trait Component {
    fn grab_focus(&self) -> zbus::Result<bool>;
}

/// Which accessibility bus to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum A11ySource {
    /// The one the session bus's `org.a11y.Bus` names (what a desktop runs).
    Session(Bus),
    /// This address (tests).
    Address(String),
}

/// Connects to the accessibility bus.
pub async fn connect(source: &A11ySource) -> zbus::Result<Connection> {
    let address = match source {
        A11ySource::Address(a) => a.clone(),
        A11ySource::Session(bus) => {
            let session = bus.connect().await?;
            A11yBusProxy::new(&session).await?.get_address().await?
        }
    };
    zbus::connection::Builder::address(address.as_str())
        .method_timeout(CALL_TIMEOUT)
        .build()
        .await
}

/// A proxy of `P` for `node`, with no property cache (each read asks: the UI changes).
pub async fn proxy<'a, P>(conn: &Connection, node: &'a Node) -> zbus::Result<P>
where
    P: From<zbus::Proxy<'a>> + zbus::proxy::Defaults,
{
    zbus::proxy::Builder::<P>::new(conn)
        .destination(node.bus.as_str())
        .path(node.path.as_str())
        .cache_properties(CacheProperties::No)
        .build()
        .await
}

/// The pid of an application's connection, when the bus says.
pub async fn pid_of(conn: &Connection, bus: &str) -> Option<u32> {
    let dbus = zbus::fdo::DBusProxy::new(conn).await.ok()?;
    let name = zbus::names::BusName::try_from(bus).ok()?;
    dbus.get_connection_unix_process_id(name).await.ok()
}
