//! A small `org.freedesktop.secrets` server for tests, on a private bus: the Service
//! (OpenSession with `plain` only, SearchItems, Unlock, GetSecrets), the default
//! collection (CreateItem, Locked) and one unlock Prompt. [`FakeSecrets::set_locked`]
//! locks everything; [`FakeSecrets::answer_prompts`] says whether the prompt unlocks
//! (the person typed the password) or is dismissed.
// Test helpers: a failed setup step should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use zbus::object_server::SignalEmitter;
use zbus::{Connection, OwnedObjectPath, OwnedVariant, Variant, interface};

const SERVICE_PATH: &str = "/org/freedesktop/secrets";
const COLLECTION_PATH: &str = "/org/freedesktop/secrets/aliases/default";
const PROMPT_PATH: &str = "/org/freedesktop/secrets/prompt/unlock";

/// `(oayays)`: session, parameters, value, content type.
type Secret = (OwnedObjectPath, Vec<u8>, Vec<u8>, String);

/// One stored item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub path: String,
    pub label: String,
    pub attributes: HashMap<String, String>,
    pub secret: Vec<u8>,
}

#[derive(Default)]
struct State {
    items: Vec<Item>,
    locked: bool,
    /// Whether the prompt unlocks (else it is dismissed).
    prompt_unlocks: bool,
    sessions: u32,
    prompts_shown: u32,
}

type Shared = Arc<Mutex<State>>;

#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "org.freedesktop.Secret.Error")]
enum SecretErr {
    #[zbus(error)]
    ZBus(zbus::Error),
    IsLocked(String),
    NoSuchObject(String),
}

#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "org.freedesktop.DBus.Error")]
enum DBusErr {
    #[zbus(error)]
    ZBus(zbus::Error),
    NotSupported(String),
}

struct Service(Shared);

#[interface(name = "org.freedesktop.Secret.Service")]
impl Service {
    fn open_session(
        &self,
        algorithm: String,
        _input: OwnedVariant,
    ) -> Result<(OwnedVariant, OwnedObjectPath), DBusErr> {
        if algorithm != "plain" {
            return Err(DBusErr::NotSupported(format!("algorithm {algorithm}")));
        }
        let mut st = self.0.lock().unwrap();
        st.sessions += 1;
        let path = format!("/org/freedesktop/secrets/session/s{}", st.sessions);
        Ok((
            OwnedVariant::try_from(Variant::from("")).unwrap(),
            OwnedObjectPath::try_from(path).unwrap(),
        ))
    }

    fn search_items(
        &self,
        attributes: HashMap<String, String>,
    ) -> (Vec<OwnedObjectPath>, Vec<OwnedObjectPath>) {
        let st = self.0.lock().unwrap();
        let found: Vec<OwnedObjectPath> = st
            .items
            .iter()
            .filter(|i| {
                attributes
                    .iter()
                    .all(|(k, v)| i.attributes.get(k) == Some(v))
            })
            .map(|i| OwnedObjectPath::try_from(i.path.clone()).unwrap())
            .collect();
        if st.locked {
            (Vec::new(), found)
        } else {
            (found, Vec::new())
        }
    }

    fn unlock(&self, objects: Vec<OwnedObjectPath>) -> (Vec<OwnedObjectPath>, OwnedObjectPath) {
        let st = self.0.lock().unwrap();
        if st.locked {
            (Vec::new(), OwnedObjectPath::try_from(PROMPT_PATH).unwrap())
        } else {
            (objects, OwnedObjectPath::try_from("/").unwrap())
        }
    }

    fn get_secrets(
        &self,
        items: Vec<OwnedObjectPath>,
        session: OwnedObjectPath,
    ) -> Result<HashMap<OwnedObjectPath, Secret>, SecretErr> {
        let st = self.0.lock().unwrap();
        if st.locked {
            return Err(SecretErr::IsLocked("the collection is locked".into()));
        }
        let mut out = HashMap::new();
        for path in items {
            let item = st
                .items
                .iter()
                .find(|i| i.path == path.as_str())
                .ok_or_else(|| SecretErr::NoSuchObject(path.to_string()))?;
            out.insert(
                path,
                (
                    session.clone(),
                    Vec::new(),
                    item.secret.clone(),
                    "text/plain".to_owned(),
                ),
            );
        }
        Ok(out)
    }
}

struct Collection(Shared);

#[interface(name = "org.freedesktop.Secret.Collection")]
impl Collection {
    fn create_item(
        &self,
        properties: HashMap<String, OwnedVariant>,
        secret: Secret,
        replace: bool,
    ) -> Result<(OwnedObjectPath, OwnedObjectPath), SecretErr> {
        let mut st = self.0.lock().unwrap();
        if st.locked {
            return Err(SecretErr::IsLocked("the collection is locked".into()));
        }
        let label: String = properties
            .get("org.freedesktop.Secret.Item.Label")
            .map(|v| String::try_from(v.try_clone().unwrap()).unwrap())
            .unwrap_or_default();
        let attributes: HashMap<String, String> = properties
            .get("org.freedesktop.Secret.Item.Attributes")
            .map(|v| HashMap::try_from(v.try_clone().unwrap()).unwrap())
            .unwrap_or_default();
        if replace {
            st.items.retain(|i| i.attributes != attributes);
        }
        let path = format!("{COLLECTION_PATH}/i{}", st.items.len() + 1);
        st.items.push(Item {
            path: path.clone(),
            label,
            attributes,
            secret: secret.2,
        });
        Ok((
            OwnedObjectPath::try_from(path).unwrap(),
            OwnedObjectPath::try_from("/").unwrap(),
        ))
    }

    #[zbus(property)]
    fn locked(&self) -> bool {
        self.0.lock().unwrap().locked
    }
}

struct Prompt(Shared);

#[interface(name = "org.freedesktop.Secret.Prompt")]
impl Prompt {
    async fn prompt(&self, _window_id: String, #[zbus(signal_emitter)] e: SignalEmitter<'_>) {
        let unlocks = {
            let mut st = self.0.lock().unwrap();
            st.prompts_shown += 1;
            if st.prompt_unlocks {
                st.locked = false;
            }
            st.prompt_unlocks
        };
        let result = if unlocks {
            Variant::from(vec![OwnedObjectPath::try_from(COLLECTION_PATH).unwrap()])
        } else {
            Variant::from("")
        };
        Prompt::completed(&e, !unlocks, result).await.unwrap();
    }

    #[zbus(signal)]
    async fn completed(
        e: &SignalEmitter<'_>,
        dismissed: bool,
        result: Variant<'_>,
    ) -> zbus::Result<()>;
}

/// The fake service, owning `org.freedesktop.secrets` on a bus until dropped.
pub struct FakeSecrets {
    _conn: Connection,
    state: Shared,
}

impl FakeSecrets {
    /// Serves the fake on the bus at `address`, empty and unlocked.
    pub async fn start(address: &str) -> FakeSecrets {
        let state = Shared::default();
        let conn = zbus::connection::Builder::address(address)
            .serve_at(SERVICE_PATH, Service(Arc::clone(&state)))
            .serve_at(COLLECTION_PATH, Collection(Arc::clone(&state)))
            .serve_at(PROMPT_PATH, Prompt(Arc::clone(&state)))
            .name("org.freedesktop.secrets")
            .build()
            .await
            .unwrap();
        FakeSecrets { _conn: conn, state }
    }

    /// Adds an item with familiar's attributes for `provider`.
    pub fn insert(&self, provider: &str, secret: &str) {
        let mut st = self.state.lock().unwrap();
        let path = format!("{COLLECTION_PATH}/i{}", st.items.len() + 1);
        st.items.push(Item {
            path,
            label: format!("test key {provider}"),
            attributes: HashMap::from([
                ("application".to_owned(), "familiar".to_owned()),
                ("provider".to_owned(), provider.to_owned()),
            ]),
            secret: secret.as_bytes().to_vec(),
        });
    }

    pub fn set_locked(&self, locked: bool) {
        self.state.lock().unwrap().locked = locked;
    }

    /// Whether the unlock prompt unlocks (true) or is dismissed (false, the default).
    pub fn answer_prompts(&self, unlock: bool) {
        self.state.lock().unwrap().prompt_unlocks = unlock;
    }

    pub fn items(&self) -> Vec<Item> {
        self.state.lock().unwrap().items.clone()
    }

    pub fn prompts_shown(&self) -> u32 {
        self.state.lock().unwrap().prompts_shown
    }
}
