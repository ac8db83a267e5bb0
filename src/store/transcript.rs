//! Session transcripts (`transcripts/SESSION_ID.jsonl`): every message and event, one
//! JSON object per line, append-only.
//!
//! Invariants: a transcript is never truncated, rewritten or compacted; each entry is
//! written with one `write` on an `O_APPEND` descriptor and carries a `ts`. A crash
//! mid-append can leave a torn last line: the writer starts a fresh line after it on
//! reopen, and the reader skips unparseable lines and says which.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use familiar_protocol::ids::SessionId;

use super::context::now_rfc3339;
use super::{Store, StoreError};

/// An open transcript, positioned for appending.
#[derive(Debug)]
pub struct Transcript {
    file: File,
    path: PathBuf,
    /// An append failed (a full disk can leave half a line): the next one starts a
    /// fresh line, so it is not glued onto the torn one.
    torn: bool,
}

impl Transcript {
    pub(super) fn open(path: PathBuf) -> Result<Transcript, StoreError> {
        let io = |source| StoreError::io("cannot open transcript", &path, source);
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        // A torn last line from a crash would swallow our first entry: end it first.
        let len = file.metadata().map_err(io)?.len();
        if len > 0 {
            let mut last = [0u8; 1];
            file.seek(SeekFrom::Start(len - 1)).map_err(io)?;
            file.read_exact(&mut last).map_err(io)?;
            if last[0] != b'\n' {
                tracing::warn!(path = %path.display(), "transcript ends with a torn line (crash mid-append?); starting a new line");
                file.write_all(b"\n").map_err(io)?;
            }
        }
        Ok(Transcript {
            file,
            path,
            torn: false,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one entry. `entry` must be a JSON object; a `ts` (RFC 3339, now) is added
    /// when it has none. Not synced: call [`Transcript::sync`] at the points that matter
    /// (end of an iteration), since an fsync per text delta would dominate the loop.
    pub fn append(&mut self, entry: &serde_json::Value) -> Result<(), StoreError> {
        let Some(obj) = entry.as_object() else {
            return Err(StoreError::NotAnObject);
        };
        let body = serde_json::to_vec(entry).map_err(StoreError::Serialize)?;
        let mut line = if obj.contains_key("ts") {
            let mut line = body;
            line.push(b'\n');
            line
        } else {
            // Splice `"ts"` in front of the serialised object instead of cloning the
            // entry, which may hold a large tool output.
            let ts = serde_json::to_vec(&now_rfc3339()).map_err(StoreError::Serialize)?;
            let mut line = Vec::with_capacity(body.len() + ts.len() + 8);
            line.extend_from_slice(b"{\"ts\":");
            line.extend_from_slice(&ts);
            if obj.is_empty() {
                line.push(b'}');
            } else {
                line.push(b',');
                line.extend_from_slice(body.get(1..).unwrap_or_default());
            }
            line.push(b'\n');
            line
        };
        if self.torn {
            line.insert(0, b'\n');
        }
        let written = self.file.write_all(&line);
        self.torn = written.is_err();
        written.map_err(|e| StoreError::io("cannot append to transcript", &self.path, e))
    }

    /// Flushes appended entries to disk.
    pub fn sync(&mut self) -> Result<(), StoreError> {
        self.file
            .sync_data()
            .map_err(|e| StoreError::io("cannot sync transcript", &self.path, e))
    }
}

/// A transcript as read back.
#[derive(Debug, Clone, PartialEq)]
pub struct TranscriptContents {
    pub entries: Vec<serde_json::Value>,
    /// 1-based numbers of lines that did not parse: a crash mid-append leaves at most
    /// one per crash, normally the last line.
    pub torn_lines: Vec<usize>,
}

pub(super) fn read(path: &Path) -> Result<TranscriptContents, StoreError> {
    let io = |source| StoreError::io("cannot read transcript", path, source);
    let file = File::open(path).map_err(io)?;
    let mut entries = Vec::new();
    let mut torn_lines = Vec::new();
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    let mut number = 0;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).map_err(io)? == 0 {
            break;
        }
        number += 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<serde_json::Value>(&line) {
            Ok(v) => entries.push(v),
            Err(e) => {
                tracing::warn!(path = %path.display(), line = number, error = %e, "skipping a torn transcript line");
                torn_lines.push(number);
            }
        }
    }
    Ok(TranscriptContents {
        entries,
        torn_lines,
    })
}

impl Store {
    /// Opens the session's transcript for appending.
    pub fn transcript(&self, id: &SessionId) -> Result<Transcript, StoreError> {
        Transcript::open(self.transcript_path(id))
    }

    /// Every parseable entry of the session's transcript (empty when it has none).
    /// Torn lines (a crash mid-append) are skipped with a warning; use
    /// [`Store::read_transcript_contents`] to learn which.
    pub fn read_transcript(&self, id: &SessionId) -> Result<Vec<serde_json::Value>, StoreError> {
        Ok(self.read_transcript_contents(id)?.entries)
    }

    pub fn read_transcript_contents(
        &self,
        id: &SessionId,
    ) -> Result<TranscriptContents, StoreError> {
        let path = self.transcript_path(id);
        if !path.exists() {
            return Ok(TranscriptContents {
                entries: Vec::new(),
                torn_lines: Vec::new(),
            });
        }
        read(&path)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use std::fs::OpenOptions;

    use crate::store::StoreError;
    use crate::store::tests::{sid, store};

    #[test]
    fn transcript_appends_with_timestamps() {
        let (_dir, store) = store();
        let mut t = store.transcript(&sid("s1")).unwrap();
        t.append(&json!({"kind": "message", "role": "user", "text": "hi"}))
            .unwrap();
        t.append(&json!({})).unwrap();
        t.append(&json!({"ts": "2026-01-01T00:00:00Z", "kind": "task_finished"}))
            .unwrap();
        t.sync().unwrap();
        assert!(matches!(
            t.append(&json!("not an object")),
            Err(StoreError::NotAnObject)
        ));
        drop(t);
        // Reopening appends; nothing is rewritten.
        let mut t = store.transcript(&sid("s1")).unwrap();
        t.append(&json!({"kind": "x"})).unwrap();
        let entries = store.read_transcript(&sid("s1")).unwrap();
        assert_eq!(entries.len(), 4);
        assert_eq!(entries[0]["kind"], "message");
        assert!(entries[0]["ts"].as_str().unwrap().ends_with('Z'));
        assert!(entries[1]["ts"].is_string());
        assert_eq!(entries[2]["ts"], "2026-01-01T00:00:00Z");
        assert_eq!(
            store.read_transcript(&sid("none")).unwrap(),
            Vec::<serde_json::Value>::new()
        );
    }

    #[test]
    fn torn_transcript_last_line_is_tolerated_and_reported() {
        let (_dir, store) = store();
        let mut t = store.transcript(&sid("s1")).unwrap();
        t.append(&json!({"kind": "a"})).unwrap();
        drop(t);
        // A crash mid-append: half a line, no newline.
        let path = store.transcript_path(&sid("s1"));
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        std::io::Write::write_all(&mut f, b"{\"ts\":\"2026").unwrap();
        let c = store.read_transcript_contents(&sid("s1")).unwrap();
        assert_eq!(c.entries.len(), 1);
        assert_eq!(c.torn_lines, [2]);
        // The next writer starts a new line, so its entry survives.
        let mut t = store.transcript(&sid("s1")).unwrap();
        t.append(&json!({"kind": "b"})).unwrap();
        let c = store.read_transcript_contents(&sid("s1")).unwrap();
        let kinds: Vec<_> = c.entries.iter().map(|e| e["kind"].clone()).collect();
        assert_eq!(kinds, [json!("a"), json!("b")]);
        assert_eq!(c.torn_lines, [2]);
    }
}
