//! A small xdg-desktop-portal for tests, on a private bus: `org.freedesktop.portal.Desktop`
//! serving `org.freedesktop.portal.Screenshot.Screenshot` at the real path. It answers
//! as the portal documents: the Request's path from the caller's unique name and its
//! `handle_token`, and a `Response(u, a{sv})` signal there. The signal is sent
//! *before* the method's reply, so a client that subscribes only after its call
//! returned misses it (the race the portal's documentation warns of).
//!
//! [`FakePortal::answer`] says what the next calls get: a real PNG written to the
//! portal's directory (as GNOME writes to ~/Pictures), a cancellation, a failure, a
//! URI of the test's choice, no URI, or no answer at all (then the Request stays open
//! and [`FakePortal::closed`] lists the ones the client closed).
// Test helpers: a failed setup step should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use zbus::message::Header;
use zbus::{Connection, ObjectServer, OwnedObjectPath, OwnedVariant, Variant, interface};

const PORTAL_PATH: &str = "/org/freedesktop/portal/desktop";

/// What the portal answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Success, with a PNG of this size written to the portal's directory.
    Png { width: u32, height: u32 },
    /// Response 1: the person dismissed the dialog.
    Cancelled,
    /// Response 2.
    Failed,
    /// Success with this URI; nothing written.
    Uri(String),
    /// Success without a `uri`.
    NoUri,
    /// No Response: the Request stays open until closed.
    Never,
}

/// One Screenshot call: its parent window and options (as text), and the handle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub parent_window: String,
    pub options: HashMap<String, String>,
    pub handle: String,
}

struct State {
    answer: Answer,
    dir: PathBuf,
    calls: Vec<Call>,
    closed: Vec<String>,
    written: u32,
    called: Arc<Notify>,
}

type Shared = Arc<Mutex<State>>;

struct Screenshot(Shared);

#[interface(name = "org.freedesktop.portal.Screenshot")]
impl Screenshot {
    async fn screenshot(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        #[zbus(object_server)] server: &ObjectServer,
        parent_window: String,
        options: HashMap<String, OwnedVariant>,
    ) -> zbus::fdo::Result<OwnedObjectPath> {
        let sender = header.sender().unwrap().as_str().to_owned();
        let token = options
            .get("handle_token")
            .and_then(|v| <&str>::try_from(&**v).ok())
            .unwrap_or("t")
            .to_owned();
        let handle = format!(
            "{PORTAL_PATH}/request/{}/{token}",
            sender.trim_start_matches(':').replace('.', "_")
        );
        let (answer, response) = {
            let mut st = self.0.lock().unwrap();
            st.calls.push(Call {
                parent_window,
                options: options
                    .iter()
                    .map(|(k, v)| (k.clone(), format!("{:?}", &**v)))
                    .collect(),
                handle: handle.clone(),
            });
            st.called.notify_waiters();
            let answer = st.answer.clone();
            let response = respond(&mut st, &answer);
            (answer, response)
        };
        match response {
            Some((code, results)) => {
                conn.emit_signal(
                    Some(sender.as_str()),
                    handle.as_str(),
                    "org.freedesktop.portal.Request",
                    "Response",
                    &(code, results),
                )
                .await?;
            }
            None => {
                assert_eq!(answer, Answer::Never);
                server
                    .at(handle.as_str(), Request(Arc::clone(&self.0)))
                    .await?;
            }
        }
        Ok(OwnedObjectPath::try_from(handle).unwrap())
    }

    #[zbus(property)]
    fn version(&self) -> u32 {
        2
    }
}

/// The Response for `answer` (writing its PNG), `None` for no Response.
fn respond(st: &mut State, answer: &Answer) -> Option<(u32, HashMap<String, OwnedVariant>)> {
    let uri = |s: &str| {
        HashMap::from([(
            "uri".to_owned(),
            OwnedVariant::try_from(Variant::from(s)).unwrap(),
        )])
    };
    match answer {
        Answer::Png { width, height } => {
            st.written += 1;
            let path = st.dir.join(format!("Screenshot {}.png", st.written));
            std::fs::write(
                &path,
                familiar::tools::screen::fit::test_png(*width, *height),
            )
            .unwrap();
            let encoded = path.display().to_string().replace(' ', "%20");
            Some((0, uri(&format!("file://{encoded}"))))
        }
        Answer::Cancelled => Some((1, HashMap::new())),
        Answer::Failed => Some((2, HashMap::new())),
        Answer::Uri(u) => Some((0, uri(u))),
        Answer::NoUri => Some((0, HashMap::new())),
        Answer::Never => None,
    }
}

/// An open Request, which the client may close.
struct Request(Shared);

#[interface(name = "org.freedesktop.portal.Request")]
impl Request {
    async fn close(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(object_server)] server: &ObjectServer,
    ) -> zbus::fdo::Result<()> {
        let path = header.path().unwrap().as_str().to_owned();
        self.0.lock().unwrap().closed.push(path.clone());
        server.remove::<Request, _>(path.as_str()).await?;
        Ok(())
    }
}

/// The fake portal, owning `org.freedesktop.portal.Desktop` on a bus until dropped.
pub struct FakePortal {
    _conn: Connection,
    state: Shared,
}

impl FakePortal {
    /// Serves the portal on the bus at `address`, writing its screenshots into `dir`;
    /// it answers with a 2560x1440 PNG until told otherwise.
    pub async fn start(address: &str, dir: PathBuf) -> FakePortal {
        let state = Arc::new(Mutex::new(State {
            answer: Answer::Png {
                width: 2560,
                height: 1440,
            },
            dir,
            calls: Vec::new(),
            closed: Vec::new(),
            written: 0,
            called: Arc::new(Notify::new()),
        }));
        let conn = zbus::connection::Builder::address(address)
            .serve_at(PORTAL_PATH, Screenshot(Arc::clone(&state)))
            .name("org.freedesktop.portal.Desktop")
            .build()
            .await
            .unwrap();
        FakePortal { _conn: conn, state }
    }

    pub fn answer(&self, answer: Answer) {
        self.state.lock().unwrap().answer = answer;
    }

    /// Waits until the portal has had `n` calls.
    pub async fn wait_calls(&self, n: usize) {
        loop {
            let called = Arc::clone(&self.state.lock().unwrap().called);
            let notified = called.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.calls().len() >= n {
                return;
            }
            notified.await;
        }
    }

    pub fn calls(&self) -> Vec<Call> {
        self.state.lock().unwrap().calls.clone()
    }

    /// The Requests the client closed.
    pub fn closed(&self) -> Vec<String> {
        self.state.lock().unwrap().closed.clone()
    }
}
