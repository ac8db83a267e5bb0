//! A small client of the Secret Service (`org.freedesktop.secrets` on the session bus:
//! GNOME Keyring, KeePassXC, KWallet) for API keys: [`lookup`] reads the secret of the
//! item with familiar's attributes, [`store`] creates or replaces one in the default
//! collection.
//!
//! familiar's items carry the attributes `application = "familiar"` and
//! `provider = NAME` (see [`attributes`]), so `secret-tool store --label=...
//! application familiar provider NAME` stores one by hand; the label is only what a
//! keyring manager shows.
//!
//! Invariants: a secret is held in a [`SecretText`] (its `Debug` prints `***`) and never
//! put in a [`SecretError`]. The session uses the `plain` algorithm: the secret travels
//! unencrypted over the session bus, which only this user can connect to. [`lookup`]
//! never shows an unlock prompt (a daemon has nobody to answer it) and gives up after
//! [`LOOKUP_TIMEOUT`]; only [`store`], run from a terminal, may show one, and waits for
//! it at most [`PROMPT_TIMEOUT`]. No other crate of the tree does this: `oo7` (every
//! release up to 0.7) is built on zbus 5 and would bring a second zbus.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use zbus::{Connection, ObjectPath, OwnedObjectPath, OwnedVariant, Variant, proxy};

/// The service's well-known name.
pub const SERVICE: &str = "org.freedesktop.secrets";
/// The collection `default` stands for (the login keyring, KeePassXC's exposed group).
pub const DEFAULT_COLLECTION: &str = "/org/freedesktop/secrets/aliases/default";
/// The `application` attribute of familiar's items.
pub const APPLICATION: &str = "familiar";
/// Longest a lookup may take, connecting included: past it a task fails with a clear
/// error instead of waiting on a keyring that does not answer.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest [`store`] waits for the person to answer an unlock prompt.
pub const PROMPT_TIMEOUT: Duration = Duration::from_secs(120);

/// The path the service returns for "no object" (no prompt needed, no item created).
const NO_OBJECT: &str = "/";

/// The attributes of the item holding `name`'s key.
pub fn attributes(name: &str) -> HashMap<&'static str, &str> {
    HashMap::from([("application", APPLICATION), ("provider", name)])
}

/// The label [`store`] gives the item (what Seahorse or KeePassXC shows).
pub fn label(name: &str) -> String {
    format!("familiar API key: {name}")
}

/// The `secret-tool lookup` command line that finds (and, on a locked keyring, prompts
/// to unlock) `name`'s item.
pub fn lookup_command(name: &str) -> String {
    format!("secret-tool lookup application {APPLICATION} provider {name}")
}

/// A secret read from the service. Only [`SecretText::expose`] reveals it.
pub struct SecretText(String);

impl SecretText {
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Debug for SecretText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretText(***)")
    }
}

/// Why a secret could not be read or stored. No variant carries the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// No session bus, or nothing owns `org.freedesktop.secrets` on it.
    #[error("no Secret Service on the session bus ({0})")]
    NoService(String),
    /// The item or collection is locked and was not unlocked.
    #[error("the keyring is locked")]
    Locked,
    /// The unlock prompt was dismissed.
    #[error("the unlock prompt was dismissed")]
    Dismissed,
    /// No item has the attributes.
    #[error("no item in the keyring has the attributes application={APPLICATION} provider={0}")]
    NotFound(String),
    /// The service has no default collection to store into.
    #[error("the keyring has no default collection")]
    NoDefaultCollection,
    /// The item's secret is not UTF-8 text, or is empty.
    #[error("the item's secret is {0}")]
    Unusable(&'static str),
    /// The service did not answer in time.
    #[error("the Secret Service did not answer within {}s", .0.as_secs())]
    Timeout(Duration),
    /// Any other failure the service or the bus reported.
    #[error("the Secret Service failed: {0}")]
    Bus(String),
}

/// A secret as the API carries it: `(oayays)`.
#[derive(Serialize, Deserialize, zbus::Type)]
struct WireSecret {
    session: OwnedObjectPath,
    parameters: Vec<u8>,
    value: Vec<u8>,
    content_type: String,
}

#[proxy(
    interface = "org.freedesktop.Secret.Service",
    default_service = "org.freedesktop.secrets",
    default_path = "/org/freedesktop/secrets"
)]
trait Service {
    fn open_session(
        &self,
        algorithm: &str,
        input: &Variant<'_>,
    ) -> zbus::Result<(OwnedVariant, OwnedObjectPath)>;

    fn search_items(
        &self,
        attributes: HashMap<&str, &str>,
    ) -> zbus::Result<(Vec<OwnedObjectPath>, Vec<OwnedObjectPath>)>;

    fn unlock(
        &self,
        objects: &[ObjectPath<'_>],
    ) -> zbus::Result<(Vec<OwnedObjectPath>, OwnedObjectPath)>;

    fn get_secrets(
        &self,
        items: &[ObjectPath<'_>],
        session: &ObjectPath<'_>,
    ) -> zbus::Result<HashMap<OwnedObjectPath, WireSecret>>;
}

#[proxy(
    interface = "org.freedesktop.Secret.Collection",
    default_service = "org.freedesktop.secrets"
)]
trait Collection {
    fn create_item(
        &self,
        properties: HashMap<&str, Variant<'_>>,
        secret: &WireSecret,
        replace: bool,
    ) -> zbus::Result<(OwnedObjectPath, OwnedObjectPath)>;

    #[zbus(property)]
    fn locked(&self) -> zbus::Result<bool>;
}

#[proxy(
    interface = "org.freedesktop.Secret.Prompt",
    default_service = "org.freedesktop.secrets"
)]
trait Prompt {
    fn prompt(&self, window_id: &str) -> zbus::Result<()>;

    #[zbus(signal)]
    fn completed(&self, dismissed: bool, result: OwnedVariant) -> zbus::Result<()>;
}

/// Where the session bus is: `address` (a `DBUS_SESSION_BUS_ADDRESS` value), else
/// zbus's default for the process.
#[derive(Debug, Clone, Default)]
pub struct Bus {
    pub address: Option<String>,
}

impl Bus {
    async fn connect(&self) -> Result<Connection, SecretError> {
        let builder = match &self.address {
            Some(a) => zbus::connection::Builder::address(a.as_str()),
            None => zbus::connection::Builder::session(),
        };
        builder
            .build()
            .await
            .map_err(|e| SecretError::NoService(format!("cannot connect to the session bus: {e}")))
    }
}

/// The secret of the item with [`attributes`]`(name)`, without prompting. A locked
/// item is unlocked when the service can do so without asking anyone.
pub async fn lookup(bus: &Bus, name: &str) -> Result<SecretText, SecretError> {
    tokio::time::timeout(LOOKUP_TIMEOUT, lookup_now(bus, name))
        .await
        .unwrap_or(Err(SecretError::Timeout(LOOKUP_TIMEOUT)))
}

async fn lookup_now(bus: &Bus, name: &str) -> Result<SecretText, SecretError> {
    let conn = bus.connect().await?;
    let service = ServiceProxy::new(&conn).await.map_err(bus_error)?;
    // The session ends with the connection, dropped on return.
    let session = open_session(&service).await?;
    let (unlocked, locked) = service
        .search_items(attributes(name))
        .await
        .map_err(bus_error)?;
    let item = match (unlocked.into_iter().next(), locked.first()) {
        (Some(item), _) => item,
        (None, None) => return Err(SecretError::NotFound(name.to_owned())),
        (None, Some(_)) => {
            let paths: Vec<ObjectPath<'_>> = locked.iter().map(|p| p.as_ref()).collect();
            let (now_unlocked, _prompt) = service.unlock(&paths).await.map_err(bus_error)?;
            // A prompt, if any, is left unanswered: the service drops it with the
            // connection.
            now_unlocked.into_iter().next().ok_or(SecretError::Locked)?
        }
    };
    let mut secrets = service
        .get_secrets(&[item.as_ref()], &session.as_ref())
        .await
        .map_err(bus_error)?;
    let secret = secrets
        .remove(&item)
        .ok_or_else(|| SecretError::Bus("GetSecrets returned no secret for the item".into()))?;
    let text = String::from_utf8(secret.value).map_err(|_| SecretError::Unusable("not text"))?;
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(SecretError::Unusable("empty"));
    }
    Ok(SecretText(trimmed.to_owned()))
}

/// Stores `secret` as `name`'s item in the default collection, replacing one with the
/// same attributes. A locked collection is unlocked first, through the service's
/// prompt if it has one.
pub async fn store(bus: &Bus, name: &str, secret: &str) -> Result<(), SecretError> {
    let conn = bus.connect().await?;
    let service = ServiceProxy::new(&conn).await.map_err(bus_error)?;
    let session = open_session(&service).await?;
    let collection = CollectionProxy::builder(&conn)
        .path(DEFAULT_COLLECTION)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .map_err(bus_error)?;
    let locked = collection
        .locked()
        .await
        .map_err(|e| match error_name(&e) {
            Some(n) if is_unknown_object(&n) => SecretError::NoDefaultCollection,
            _ => bus_error(e),
        })?;
    if locked {
        let path = collection.inner().path().clone();
        let (unlocked, prompt) = service.unlock(&[path]).await.map_err(bus_error)?;
        if unlocked.is_empty() {
            run_prompt(&conn, &prompt).await?;
        }
    }
    let properties = HashMap::from([
        (
            "org.freedesktop.Secret.Item.Label",
            Variant::from(label(name)),
        ),
        (
            "org.freedesktop.Secret.Item.Attributes",
            Variant::from(attributes(name)),
        ),
    ]);
    let wire = WireSecret {
        session,
        parameters: Vec::new(),
        value: secret.as_bytes().to_vec(),
        content_type: "text/plain".to_owned(),
    };
    let (item, prompt) = collection
        .create_item(properties, &wire, true)
        .await
        .map_err(bus_error)?;
    if item.as_str() == NO_OBJECT {
        // The service wants confirmation first (KeePassXC can ask for each new item).
        run_prompt(&conn, &prompt).await?;
    }
    Ok(())
}

async fn open_session(service: &ServiceProxy<'_>) -> Result<OwnedObjectPath, SecretError> {
    let (_, session) = service
        .open_session("plain", &Variant::from(""))
        .await
        .map_err(bus_error)?;
    Ok(session)
}

/// Shows `prompt` and waits for the person's answer; returns its result.
async fn run_prompt(
    conn: &Connection,
    prompt: &ObjectPath<'_>,
) -> Result<OwnedVariant, SecretError> {
    if prompt.as_str() == NO_OBJECT {
        return Err(SecretError::Locked);
    }
    let proxy = PromptProxy::builder(conn)
        .path(prompt.to_owned())
        .build()
        .await
        .map_err(bus_error)?;
    // Subscribed before asking, so a fast answer is not missed.
    let mut completed = proxy.receive_completed().await.map_err(bus_error)?;
    proxy.prompt("").await.map_err(bus_error)?;
    let signal = tokio::time::timeout(PROMPT_TIMEOUT, completed.next())
        .await
        .map_err(|_| SecretError::Timeout(PROMPT_TIMEOUT))?
        .ok_or_else(|| SecretError::Bus("the prompt went away without an answer".into()))?;
    let args = signal.args().map_err(bus_error)?;
    if args.dismissed {
        return Err(SecretError::Dismissed);
    }
    Ok(args.result)
}

/// The D-Bus error name of a method error.
fn error_name(e: &zbus::Error) -> Option<String> {
    match e {
        zbus::Error::MethodError(name, ..) => Some(name.to_string()),
        zbus::Error::FDO(f) => Some(zbus::DBusError::name(f.as_ref()).to_string()),
        _ => None,
    }
}

fn is_unknown_object(name: &str) -> bool {
    matches!(
        name,
        "org.freedesktop.Secret.Error.NoSuchObject"
            | "org.freedesktop.DBus.Error.UnknownObject"
            | "org.freedesktop.DBus.Error.UnknownMethod"
            | "org.freedesktop.DBus.Error.UnknownInterface"
    )
}

fn bus_error(e: zbus::Error) -> SecretError {
    match error_name(&e).as_deref() {
        Some(
            "org.freedesktop.DBus.Error.ServiceUnknown"
            | "org.freedesktop.DBus.Error.NameHasNoOwner",
        ) => SecretError::NoService(format!("nothing owns {SERVICE}")),
        Some("org.freedesktop.Secret.Error.IsLocked") => SecretError::Locked,
        _ => SecretError::Bus(e.to_string()),
    }
}
