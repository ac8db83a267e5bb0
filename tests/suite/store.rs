//! The session lock holds across processes: `flock(1)` from util-linux takes the same
//! `flock(2)` lock std's `File::try_lock` uses.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use familiar::store::{Store, StoreError};
use familiar_protocol::ids::SessionId;

#[test]
fn another_process_holding_the_lock_makes_the_session_busy() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let id = SessionId::new("s-locked").unwrap();
    // Create the lock file the way the store names it, then release it.
    drop(store.lock_session(&id).unwrap());
    let lock_file = dir.path().join("context/s-locked.lock");
    assert!(lock_file.exists());

    let mut child = Command::new("flock")
        .arg("-n")
        .arg(&lock_file)
        .args(["sh", "-c", "echo locked; read x"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("flock(1) from util-linux");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "locked\n");

    match store.lock_session(&id) {
        Err(StoreError::SessionBusy(busy)) => assert_eq!(busy, id),
        other => panic!("expected SessionBusy, got {other:?}"),
    }

    // Closing its stdin ends `read`, so flock exits and the lock is released.
    drop(child.stdin.take());
    // `read` at EOF makes sh exit 1, and flock passes the status through.
    assert_eq!(child.wait().unwrap().code(), Some(1));
    let lock = store.lock_session(&id).unwrap();

    // And the other way round: while we hold it, flock -n fails.
    let status = Command::new("flock")
        .arg("-n")
        .arg(&lock_file)
        .arg("true")
        .status()
        .unwrap();
    assert!(!status.success());
    drop(lock);
}
