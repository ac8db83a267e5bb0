//! The xdg-desktop-portal's Screenshot, where grim cannot capture (GNOME and KDE have
//! no wlroots screencopy): `org.freedesktop.portal.Screenshot.Screenshot` on
//! `/org/freedesktop/portal/desktop`, answered by a `Response(u, a{sv})` signal on
//! the call's Request object with the `uri` of a PNG of the whole screen.
//!
//! Invariants: the Response is subscribed to before the call, at the path the portal
//! documents (`…/request/SENDER/TOKEN`), so an answer that comes before the call's
//! reply is not lost; a Request still open when the wait ends (timed out, the task
//! stopped) is closed; the portal's file is read through a descriptor that follows no
//! link, and removed (some desktops put it in ~/Pictures) only when it is the file
//! this call made: a regular file of ours, modified since the call, still the same
//! inode at that path. A file that was there before is never touched.

use std::collections::HashMap;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use zbus::{Connection, MatchRule, MessageStream, OwnedObjectPath, OwnedVariant, Variant, proxy};

use crate::tools::bus::Bus;

/// The portal's well-known name.
pub const PORTAL: &str = "org.freedesktop.portal.Desktop";
const PORTAL_PATH: &str = "/org/freedesktop/portal/desktop";
const REQUEST: &str = "org.freedesktop.portal.Request";
/// The longest wait for the portal's answer: GNOME asks the person the first time
/// (a permission dialog), which takes a person's time, not a machine's.
pub const PORTAL_TIMEOUT: Duration = Duration::from_secs(60);
/// The largest file read back (a PNG of an 8K screen is well under it).
const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;
/// A file system's modification times can be coarser than the clock: a file the
/// portal wrote right after the call may carry a time this much before it.
const MTIME_SLACK: Duration = Duration::from_secs(2);

#[proxy(
    interface = "org.freedesktop.portal.Screenshot",
    default_service = "org.freedesktop.portal.Desktop",
    default_path = "/org/freedesktop/portal/desktop"
)]
trait Screenshot {
    fn screenshot(
        &self,
        parent_window: &str,
        options: HashMap<&str, Variant<'_>>,
    ) -> zbus::Result<OwnedObjectPath>;
}

/// Why the portal gave no image; each is a text for the model.
#[derive(Debug, thiserror::Error)]
pub enum PortalError {
    #[error(
        "the screenshot was cancelled on the desktop (the portal's dialog was dismissed or permission refused)"
    )]
    Cancelled,
    #[error("the desktop's screenshot portal failed to take the screenshot (response {0})")]
    Failed(u32),
    #[error("the desktop's screenshot portal gave no usable image: {0}")]
    BadUri(String),
    #[error("the desktop's screenshot portal did not answer within {} s", PORTAL_TIMEOUT.as_secs())]
    TimedOut,
    #[error("cancelled: the task was stopped")]
    Stopped,
    #[error("the desktop's screenshot portal is not reachable: {0}")]
    Bus(#[from] zbus::Error),
}

/// Asks the portal on `bus` for a screenshot of the whole screen; its PNG, the file
/// removed.
pub async fn capture(bus: &Bus, cancel: &CancellationToken) -> Result<Vec<u8>, PortalError> {
    let conn = bus.connect().await?;
    let token = handle_token();
    let sender = conn
        .unique_name()
        .ok_or_else(|| PortalError::BadUri("the bus gave this connection no name".to_owned()))?;
    let predicted = request_path(sender.as_str(), &token);
    let mut responses = subscribe(&conn, &predicted).await?;
    let started = SystemTime::now();
    let options = HashMap::from([
        ("handle_token", Variant::from(token.as_str())),
        ("interactive", Variant::from(false)),
    ]);
    let handle = ScreenshotProxy::new(&conn)
        .await?
        .screenshot("", options)
        .await?;
    if handle.as_str() != predicted {
        // A portal older than 0.9 names its own path: listen there too.
        responses = subscribe(&conn, handle.as_str()).await?;
    }
    let answer = tokio::select! {
        answer = tokio::time::timeout(PORTAL_TIMEOUT, responses.next()) => answer,
        () = cancel.cancelled() => {
            close(&conn, &handle).await;
            return Err(PortalError::Stopped);
        }
    };
    let message = match answer {
        Ok(Some(message)) => message?,
        Ok(None) => return Err(PortalError::BadUri("the bus connection closed".to_owned())),
        Err(_) => {
            close(&conn, &handle).await;
            return Err(PortalError::TimedOut);
        }
    };
    let (code, results): (u32, HashMap<String, OwnedVariant>) = message.body().deserialize()?;
    match code {
        0 => {}
        1 => return Err(PortalError::Cancelled),
        other => return Err(PortalError::Failed(other)),
    }
    let uri = results
        .get("uri")
        .and_then(|v| <&str>::try_from(&**v).ok())
        .ok_or_else(|| PortalError::BadUri("its answer has no uri".to_owned()))?;
    let path = file_path(uri)?;
    let read = path.clone();
    tokio::task::spawn_blocking(move || read_and_remove(&read, started))
        .await
        .map_err(|e| PortalError::BadUri(format!("the reader failed: {e}")))?
}

/// The Request path the portal will use: the sender's unique name without its `:` and
/// with `_` for `.`, then the token.
pub fn request_path(unique_name: &str, token: &str) -> String {
    let sender = unique_name.trim_start_matches(':').replace('.', "_");
    format!("{PORTAL_PATH}/request/{sender}/{token}")
}

/// A token no earlier call of this process used (a valid object path element).
fn handle_token() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "familiar_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The Response signals of the Request at `path`.
async fn subscribe(conn: &Connection, path: &str) -> Result<MessageStream, PortalError> {
    let rule = MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .interface(REQUEST)
        .member("Response")
        .path(path.to_owned())
        .build()?;
    Ok(MessageStream::for_match_rule(rule, conn, None).await?)
}

/// Closes a Request nobody waits for any more; a portal that already answered has
/// removed it, so an error here is expected and says nothing.
async fn close(conn: &Connection, handle: &OwnedObjectPath) {
    let closed = conn
        .call_method(Some(PORTAL), handle.as_str(), Some(REQUEST), "Close", &())
        .await;
    if let Err(e) = closed {
        tracing::debug!("closing the portal request {}: {e}", handle.as_str());
    }
}

/// The local path of a `file://` URI.
fn file_path(uri: &str) -> Result<PathBuf, PortalError> {
    let rest = uri
        .strip_prefix("file://")
        .ok_or_else(|| PortalError::BadUri(format!("`{uri}` is no file:// URI")))?;
    let rest = rest.strip_prefix("localhost").unwrap_or(rest);
    if !rest.starts_with('/') {
        return Err(PortalError::BadUri(format!("`{uri}` names no local file")));
    }
    let bytes: Vec<u8> = percent_encoding::percent_decode_str(rest).collect();
    Ok(PathBuf::from(
        <std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(bytes),
    ))
}

/// The PNG at `path`; the file removed when it is the one made since `started`.
fn read_and_remove(path: &Path, started: SystemTime) -> Result<Vec<u8>, PortalError> {
    use std::io::Read;
    let bad = |what: String| PortalError::BadUri(format!("{}: {what}", path.display()));
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| bad(e.to_string()))?;
    let meta = file.metadata().map_err(|e| bad(e.to_string()))?;
    if !meta.is_file() {
        return Err(bad("not a regular file".to_owned()));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(bad(format!("{} bytes is too large", meta.len())));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.read_to_end(&mut bytes)
        .map_err(|e| bad(e.to_string()))?;
    let fresh = meta.modified().is_ok_and(|m| m + MTIME_SLACK >= started);
    let ours = meta.uid() == nix::unistd::geteuid().as_raw();
    let same = std::fs::symlink_metadata(path)
        .is_ok_and(|now| now.dev() == meta.dev() && now.ino() == meta.ino());
    if fresh && ours && same {
        if let Err(e) = std::fs::remove_file(path) {
            tracing::warn!(
                "cannot remove the portal's screenshot {}: {e}",
                path.display()
            );
        }
    } else {
        tracing::warn!(
            "the portal named {}, which it did not make now: left in place",
            path.display()
        );
    }
    if super::png::size(&bytes).is_none() {
        return Err(bad("not a PNG image".to_owned()));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_path_is_predicted_as_the_portal_documents() {
        assert_eq!(
            request_path(":1.42", "familiar_7_0"),
            "/org/freedesktop/portal/desktop/request/1_42/familiar_7_0"
        );
    }

    #[test]
    fn only_local_file_uris_name_a_file() {
        assert_eq!(
            file_path("file:///home/me/Pictures/Screenshot%20from%202026.png").unwrap(),
            PathBuf::from("/home/me/Pictures/Screenshot from 2026.png")
        );
        assert_eq!(
            file_path("file://localhost/tmp/a.png").unwrap(),
            PathBuf::from("/tmp/a.png")
        );
        assert!(file_path("https://example.com/a.png").is_err());
        assert!(file_path("file://otherhost/a.png").is_err());
    }

    #[test]
    fn a_file_that_was_there_before_is_read_and_left() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("old.png");
        std::fs::write(&old, super::super::fit::test_png(10, 10)).unwrap();
        let file = std::fs::File::options().write(true).open(&old).unwrap();
        file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1_600_000_000))
            .unwrap();
        drop(file);
        assert!(read_and_remove(&old, SystemTime::now()).is_ok());
        assert!(old.exists());
        let new = dir.path().join("new.png");
        let started = SystemTime::now();
        std::fs::write(&new, super::super::fit::test_png(10, 10)).unwrap();
        assert!(read_and_remove(&new, started).is_ok());
        assert!(!new.exists());
    }
}
