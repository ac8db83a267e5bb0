//! A fake logind for the lock check: `org.freedesktop.login1` on a private bus with
//! the three objects familiar reads (the manager's `GetUser`, the user's `Display`, the
//! session's `LockedHint`), written with zbus at the real names, paths and interfaces
//! (python3-dbusmock is not installed here; its logind template has the same shape).
//! The test flips the lock with [`FakeLogind::set_locked`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use zbus::{OwnedObjectPath, interface};

const USER_PATH: &str = "/org/freedesktop/login1/user/_1000";
const SESSION_PATH: &str = "/org/freedesktop/login1/session/c1";

struct Manager;

#[interface(name = "org.freedesktop.login1.Manager")]
impl Manager {
    /// Every uid is the one user: the tests run as root, the session as another user.
    fn get_user(&self, _uid: u32) -> OwnedObjectPath {
        OwnedObjectPath::try_from(USER_PATH).expect("a path")
    }
}

struct User;

#[interface(name = "org.freedesktop.login1.User")]
impl User {
    #[zbus(property)]
    fn display(&self) -> (String, OwnedObjectPath) {
        (
            "c1".to_owned(),
            OwnedObjectPath::try_from(SESSION_PATH).expect("a path"),
        )
    }

    #[zbus(property)]
    fn idle_hint(&self) -> bool {
        false
    }

    #[zbus(property)]
    fn idle_since_hint(&self) -> u64 {
        0
    }
}

struct Session {
    locked: Arc<AtomicBool>,
}

#[interface(name = "org.freedesktop.login1.Session")]
impl Session {
    #[zbus(property)]
    fn locked_hint(&self) -> bool {
        self.locked.load(Ordering::SeqCst)
    }
}

/// logind on `address` while this lives.
pub struct FakeLogind {
    _conn: zbus::Connection,
    locked: Arc<AtomicBool>,
}

impl FakeLogind {
    pub async fn start(address: &str) -> FakeLogind {
        let locked = Arc::new(AtomicBool::new(false));
        let conn = zbus::connection::Builder::address(address)
            .serve_at("/org/freedesktop/login1", Manager)
            .serve_at(USER_PATH, User)
            .serve_at(
                SESSION_PATH,
                Session {
                    locked: Arc::clone(&locked),
                },
            )
            .name("org.freedesktop.login1")
            .build()
            .await
            .expect("serving logind");
        FakeLogind {
            _conn: conn,
            locked,
        }
    }

    /// What `LockedHint` says from now on (read fresh by every check).
    pub fn set_locked(&self, locked: bool) {
        self.locked.store(locked, Ordering::SeqCst);
    }
}
