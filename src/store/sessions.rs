//! Session contexts (`context/SESSION_ID.json`): saving one atomically, loading it (a
//! file that does not parse or has an unknown `version` is moved aside, never
//! overwritten), and listing every session newest first without building histories.

use std::fs::{self, File};
use std::path::Path;
use std::time::SystemTime;

use familiar_protocol::ids::{SessionId, SoulId};
use serde::Deserialize;
use serde::de::IgnoredAny;

use super::context::{self, CONTEXT_VERSION, Context};
use super::{CONTEXT_DIR, Store, StoreError, atomic, journal, move_aside};

/// One line of [`Store::list_sessions`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SessionSummary {
    pub id: SessionId,
    pub soul: SoulId,
    pub title: String,
    /// Unix seconds (0 when the file's timestamp does not parse).
    pub updated_at: u64,
    /// RFC 3339 UTC, as the context has it.
    pub created_at: String,
    /// How many tasks the session has run.
    pub tasks: usize,
}

impl Store {
    /// Replaces the session's context file atomically (see the module invariants) with
    /// the next `revision`, then deletes the session's journal, which the new file
    /// holds. `ctx.revision` is bumped only when the file was written.
    pub fn save_context(&self, ctx: &mut Context) -> Result<(), StoreError> {
        ctx.revision += 1;
        let written = self
            .write_temp(ctx)
            .and_then(|temp| atomic::commit(temp, &self.context_path(&ctx.session_id)));
        if written.is_err() {
            ctx.revision -= 1;
            return written;
        }
        // Left behind (a crash, or this failing), it names the old revision and is
        // ignored on load: not worth failing the save for.
        let journal = self.journal_path(&ctx.session_id);
        match fs::remove_file(&journal) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %journal.display(), error = %e, "cannot remove a session journal")
            }
        }
        Ok(())
    }

    /// Writes `ctx` to a fresh, synced temp file beside its target; the first half of
    /// [`Store::save_context`], split so tests can stop between the halves.
    fn write_temp(&self, ctx: &Context) -> Result<tempfile::TempPath, StoreError> {
        if ctx.version != CONTEXT_VERSION {
            return Err(StoreError::UnsupportedVersion(ctx.version));
        }
        let dir = self.data_dir.join(CONTEXT_DIR);
        atomic::write_temp(&dir, ctx.session_id.as_str(), |w| {
            serde_json::to_writer(w, ctx).map_err(StoreError::Serialize)
        })
    }

    /// The session's context, `None` when it has none. A file that does not parse or
    /// has another `version` is moved aside and reported as [`StoreError::Corrupt`].
    pub fn load_context(&self, id: &SessionId) -> Result<Option<Context>, StoreError> {
        let path = self.context_path(id);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::io("cannot read", &path, e)),
        };
        let reason = match serde_json::from_slice::<Context>(&bytes) {
            Ok(mut ctx) if ctx.version == CONTEXT_VERSION && &ctx.session_id == id => {
                journal::replay(&self.journal_path(id), &mut ctx)?;
                return Ok(Some(ctx));
            }
            Ok(ctx) if ctx.version != CONTEXT_VERSION => unknown_version(ctx.version),
            Ok(ctx) => format!("it holds session `{}`", ctx.session_id),
            // A newer schema may fail to parse as ours: name the version when it has one.
            Err(e) => match serde_json::from_slice::<VersionProbe>(&bytes) {
                Ok(VersionProbe { version: Some(v) }) if v != CONTEXT_VERSION => unknown_version(v),
                Ok(_) | Err(_) => format!("invalid JSON context: {e}"),
            },
        };
        let moved_to = move_aside(&path)?;
        tracing::warn!(path = %path.display(), moved_to = %moved_to.display(), %reason, "moved an unreadable session context aside");
        Err(StoreError::Corrupt {
            path,
            moved_to,
            reason,
        })
    }

    /// Every session, newest first. Unreadable contexts are skipped with a warning and
    /// left where they are (only [`Store::load_context`] moves files).
    pub fn list_sessions(&self) -> Result<Vec<SessionSummary>, StoreError> {
        let dir = self.data_dir.join(CONTEXT_DIR);
        let entries = fs::read_dir(&dir).map_err(|e| StoreError::io("cannot list", &dir, e))?;
        // With each one's update time in milliseconds: several sessions end within the
        // same second (a script, `-c` right after), and `-c` takes the first.
        let mut sessions: Vec<(u128, SessionSummary)> = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| StoreError::io("cannot list", &dir, e))?;
            let name = entry.file_name();
            let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(|n| SessionId::new(n).ok())
            else {
                continue;
            };
            match read_summary(&entry.path()) {
                Ok(s) if s.1.id == id => sessions.push(s),
                Ok((_, s)) => {
                    tracing::warn!(path = %entry.path().display(), holds = %s.id, "skipping a context file named for another session");
                }
                Err(reason) => {
                    tracing::warn!(path = %entry.path().display(), %reason, "skipping an unreadable session context");
                }
            }
        }
        sessions.sort_by(|(a_ms, a), (b_ms, b)| b_ms.cmp(a_ms).then(a.id.cmp(&b.id)));
        Ok(sessions.into_iter().map(|(_, s)| s).collect())
    }
}

fn unknown_version(v: u32) -> String {
    format!("unknown context version {v} (this build reads {CONTEXT_VERSION})")
}

#[derive(Deserialize)]
struct VersionProbe {
    version: Option<u32>,
}

/// Just what a listing shows; parsing skips the history without building it.
#[derive(Deserialize)]
struct SummaryProbe {
    version: u32,
    session_id: SessionId,
    soul: SoulId,
    #[serde(default)]
    title: String,
    #[serde(default)]
    created_at: String,
    updated_at: String,
    #[serde(default)]
    tasks: Vec<IgnoredAny>,
}

/// Why a listing skips a context file (it is logged, and the file is left alone).
#[derive(Debug, thiserror::Error)]
enum Unlisted {
    #[error("{0}")]
    Open(#[from] std::io::Error),
    #[error("invalid JSON context: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{}", unknown_version(*.0))]
    Version(u32),
}

/// The summary, and its update time in milliseconds (0 when it does not parse).
fn read_summary(path: &Path) -> Result<(u128, SessionSummary), Unlisted> {
    let file = File::open(path)?;
    let probe: SummaryProbe = serde_json::from_reader(std::io::BufReader::new(file))?;
    if probe.version != CONTEXT_VERSION {
        return Err(Unlisted::Version(probe.version));
    }
    let updated_ms = humantime::parse_rfc3339_weak(&probe.updated_at)
        .ok()
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis());
    Ok((
        updated_ms,
        SessionSummary {
            id: probe.session_id,
            soul: probe.soul,
            title: probe.title,
            updated_at: context::unix_secs(&probe.updated_at).unwrap_or(0),
            created_at: probe.created_at,
            tasks: probe.tasks.len(),
        },
    ))
}

#[cfg(test)]
mod tests {
    use familiar_protocol::ids::{CallId, TaskId};
    use familiar_protocol::task::{Plan, PlanStep, StepStatus, TaskStatus, Usage};
    use serde_json::json;

    use super::*;
    use crate::llm::{ContentBlock, Message, Role};
    use crate::store::tests::{sid, store};
    use crate::store::{TaskRecord, now_rfc3339};

    fn sample(id: &str) -> Context {
        let mut ctx = Context::new(
            sid(id),
            SoulId::new("system_admin").unwrap(),
            "why is the disk full?\nthanks",
        );
        ctx.summary = Some("earlier: looked at /var".into());
        ctx.facts = vec!["/home is on nvme0n1p2".into()];
        ctx.history = vec![
            Message::user_text("why is the disk full?"),
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::Thinking {
                        thinking: "check df".into(),
                        signature: Some("sig".into()),
                    },
                    ContentBlock::ToolUse {
                        id: CallId::from_provider("c1"),
                        name: "disk_usage".into(),
                        input: json!({"path": "/"}),
                    },
                ],
            },
            Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: CallId::from_provider("c1"),
                    content: "/ 93% used".into(),
                    is_error: false,
                }],
            },
        ];
        ctx.tasks.push(TaskRecord {
            task_id: TaskId::new("t-1").unwrap(),
            prompt: "why is the disk full?".into(),
            status: TaskStatus::Completed,
            origin: "cli".into(),
            workspace: Some("/tmp/w".into()),
            started_at: now_rfc3339(),
            finished_at: Some(now_rfc3339()),
            plan: Plan {
                goal: "find the big files".into(),
                steps: vec![PlanStep {
                    description: "run df".into(),
                    status: StepStatus::Completed,
                    output: Some("93%".into()),
                }],
            },
            usage: Usage {
                input_tokens: 10,
                output_tokens: 5,
                ..Usage::default()
            },
            result: Some("journal logs".into()),
        });
        ctx.record_tool_call("disk_usage", false, 12);
        ctx.usage = Usage {
            input_tokens: 10,
            output_tokens: 5,
            ..Usage::default()
        };
        ctx
    }

    #[test]
    fn context_round_trips() {
        let (_dir, store) = store();
        let mut ctx = sample("s1");
        store.save_context(&mut ctx).unwrap();
        assert_eq!(store.load_context(&sid("s1")).unwrap(), Some(ctx.clone()));
        // Saving again replaces, and leaves no temp file behind.
        let mut ctx2 = ctx;
        ctx2.facts.push("second".into());
        store.save_context(&mut ctx2).unwrap();
        assert_eq!(store.load_context(&sid("s1")).unwrap(), Some(ctx2));
        let names: Vec<_> = fs::read_dir(store.data_dir().join("context"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["s1.json"]);
    }

    #[test]
    fn context_has_the_documented_keys() {
        let v = serde_json::to_value(sample("s1")).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let mut want = [
            "version",
            "revision",
            "session_id",
            "soul",
            "created_at",
            "updated_at",
            "title",
            "summary",
            "facts",
            "history",
            "tasks",
            "tool_stats",
            "usage",
        ];
        want.sort_unstable();
        let mut keys = keys;
        keys.sort_unstable();
        assert_eq!(keys, want);
        assert_eq!(v["title"], "why is the disk full?");
        assert_eq!(v["tasks"][0]["status"], "completed");
        assert_eq!(v["tasks"][0]["plan"]["steps"][0]["status"], "completed");
        assert_eq!(
            v["tool_stats"]["disk_usage"],
            json!({"calls": 1, "failures": 0, "total_ms": 12})
        );
    }

    #[test]
    fn missing_context_is_none() {
        let (_dir, store) = store();
        assert_eq!(store.load_context(&sid("nope")).unwrap(), None);
    }

    #[test]
    fn crash_between_write_and_rename_keeps_the_old_file() {
        let (_dir, store) = store();
        let mut old = sample("s1");
        store.save_context(&mut old).unwrap();
        let mut new = old.clone();
        new.facts.push("never committed".into());
        // The process "dies" after the temp file is written and synced, before the rename.
        let temp = store.write_temp(&new).unwrap();
        assert!(temp.exists());
        assert_eq!(store.load_context(&sid("s1")).unwrap(), Some(old.clone()));
        // Also a half-written temp file (crash mid-write) changes nothing.
        fs::write(
            store.data_dir().join("context/.s1.json.tmp-999999999-0"),
            b"{\"version\":1,\"sess",
        )
        .unwrap();
        assert_eq!(store.load_context(&sid("s1")).unwrap(), Some(old.clone()));
        assert_eq!(store.list_sessions().unwrap().len(), 1);
    }

    #[test]
    fn a_failed_or_uncommitted_write_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let failed =
            super::atomic::write_temp(dir.path(), "s1", |_| Err(StoreError::UnsupportedVersion(0)));
        assert!(failed.is_err());
        let uncommitted = super::atomic::write_temp(dir.path(), "s1", |_| Ok(())).unwrap();
        let name = uncommitted
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(
            crate::store::temp_file_pid(&name),
            Some(std::process::id()),
            "{name}"
        );
        drop(uncommitted);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    fn assert_moved_aside(store: &Store, id: &str, contents: &[u8], reason_has: &str) {
        let path = store.context_path(&sid(id));
        fs::write(&path, contents).unwrap();
        let err = store.load_context(&sid(id)).unwrap_err();
        let StoreError::Corrupt {
            path: p,
            moved_to,
            reason,
        } = err
        else {
            panic!("not Corrupt: {err}");
        };
        assert_eq!(p, path);
        assert!(reason.contains(reason_has), "{reason}");
        assert!(!path.exists());
        assert_eq!(fs::read(&moved_to).unwrap(), contents);
        let name = moved_to.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with(&format!("{id}.json.corrupt-")), "{name}");
        // Now absent: a new session can start, and saving it does not touch the copy.
        assert_eq!(store.load_context(&sid(id)).unwrap(), None);
        store.save_context(&mut sample(id)).unwrap();
        assert_eq!(fs::read(&moved_to).unwrap(), contents);
    }

    #[test]
    fn corrupt_context_is_moved_aside_not_overwritten() {
        let (_dir, store) = store();
        assert_moved_aside(
            &store,
            "s1",
            b"{\"version\":1,\"session_id\":",
            "invalid JSON",
        );
    }

    #[test]
    fn unknown_version_is_moved_aside_not_overwritten() {
        let (_dir, store) = store();
        let mut v = serde_json::to_value(sample("s2")).unwrap();
        v["version"] = json!(2);
        assert_moved_aside(&store, "s2", v.to_string().as_bytes(), "version 2");
        // A future schema that does not even parse as ours still names its version.
        assert_moved_aside(
            &store,
            "s3",
            br#"{"version":3,"history":"elsewhere"}"#,
            "version 3",
        );
    }

    #[test]
    fn a_second_corrupt_copy_does_not_replace_the_first() {
        let (_dir, store) = store();
        let path = store.context_path(&sid("s1"));
        fs::write(&path, b"first").unwrap();
        let Err(StoreError::Corrupt { moved_to: a, .. }) = store.load_context(&sid("s1")) else {
            panic!()
        };
        fs::write(&path, b"second").unwrap();
        let Err(StoreError::Corrupt { moved_to: b, .. }) = store.load_context(&sid("s1")) else {
            panic!()
        };
        assert_ne!(a, b);
        assert_eq!(fs::read(a).unwrap(), b"first");
        assert_eq!(fs::read(b).unwrap(), b"second");
    }

    #[test]
    fn saving_another_version_is_refused() {
        let (_dir, store) = store();
        let mut ctx = sample("s1");
        ctx.version = 2;
        assert!(matches!(
            store.save_context(&mut ctx),
            Err(StoreError::UnsupportedVersion(2))
        ));
    }

    #[test]
    fn sessions_are_listed_newest_first_skipping_corrupt_ones() {
        let (_dir, store) = store();
        let mut a = sample("a");
        a.updated_at = "2026-01-01T00:00:00Z".into();
        let mut b = sample("b");
        b.updated_at = "2026-06-01T00:00:00.500Z".into();
        store.save_context(&mut a).unwrap();
        store.save_context(&mut b).unwrap();
        fs::write(store.context_path(&sid("c")), b"garbage").unwrap();
        let list = store.list_sessions().unwrap();
        assert_eq!(
            list,
            [
                SessionSummary {
                    id: sid("b"),
                    soul: b.soul.clone(),
                    title: b.title.clone(),
                    updated_at: 1_780_272_000,
                    created_at: b.created_at.clone(),
                    tasks: 1,
                },
                SessionSummary {
                    id: sid("a"),
                    soul: a.soul.clone(),
                    title: a.title.clone(),
                    updated_at: 1_767_225_600,
                    created_at: a.created_at.clone(),
                    tasks: 1,
                },
            ]
        );
        // Listing never moves a file.
        assert!(store.context_path(&sid("c")).exists());
    }

    /// Regression: sessions that ended in the same second were ordered by id,
    /// so `run -c` could continue an older one.
    #[test]
    fn sessions_ending_in_the_same_second_are_ordered_by_their_milliseconds() {
        let (_dir, store) = store();
        let mut later = sample("b-later");
        later.updated_at = "2026-06-01T00:00:00.900Z".into();
        let mut earlier = sample("a-earlier");
        earlier.updated_at = "2026-06-01T00:00:00.100Z".into();
        store.save_context(&mut later).unwrap();
        store.save_context(&mut earlier).unwrap();
        let ids: Vec<String> = store
            .list_sessions()
            .unwrap()
            .into_iter()
            .map(|s| s.id.to_string())
            .collect();
        assert_eq!(ids, ["b-later", "a-earlier"]);
    }
}
