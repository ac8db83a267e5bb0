//! The answer notification's **Undo** (issue 40): the line saying what the task changed
//! outside its workspace ("changed 3 files, trashed 2", `GetTask`'s `changes`), and
//! what its action does: the daemon's `Undo`, as `familiar undo TASK` asks it, whose
//! outcome replaces the bubble.
//!
//! Invariant: offered only for a task whose change record has something to undo
//! (`GetTask`'s `undoable`); a daemon that does not say (an older one) offers none.

use crate::cli::client::classify;
use crate::dbus::proxy::Agent1Proxy;

/// The action key of the answer's Undo button.
pub(in crate::cli) const ACTION_UNDO: &str = "undo";

/// A finished task that can be undone, and how to ask the daemon to.
pub(in crate::cli) struct Undo {
    proxy: Agent1Proxy<'static>,
    task: String,
    /// "changed 3 files, trashed 2".
    summary: String,
}

impl Undo {
    /// The task's undo, when `GetTask` says it has one.
    pub(in crate::cli) async fn of(proxy: &Agent1Proxy<'static>, task: &str) -> Option<Undo> {
        let json = match proxy.get_task(task).await {
            Ok(j) => j,
            Err(e) => {
                tracing::debug!("no change summary for task {task}: {e}");
                return None;
            }
        };
        let v: serde_json::Value = serde_json::from_str(&json).ok()?;
        let summary = summary_of(&v)?;
        Some(Undo {
            proxy: proxy.clone(),
            task: task.to_owned(),
            summary,
        })
    }

    /// The body's line: with a button, the summary; without one (nothing will wait
    /// for its click), the command that does it.
    pub(in crate::cli) fn line(&self, button: bool) -> String {
        let summary = crate::approval::visible(&self.summary);
        match button {
            true => summary,
            false => format!(
                "{summary}: `familiar undo {}` takes it back",
                crate::approval::visible(&self.task)
            ),
        }
    }

    /// Asks the daemon to undo the task; the outcome in a line: "undone: …", or the
    /// refusal (naming the file changed since).
    pub(in crate::cli) async fn run(&self) -> String {
        match self.proxy.undo(&self.task).await {
            Ok(restored) => format!("undone: {restored}"),
            Err(e) => format!("not undone: {}", classify(e).message),
        }
    }
}

/// `GetTask`'s summary of a task that can be undone.
fn summary_of(task: &serde_json::Value) -> Option<String> {
    match task["undoable"].as_bool() {
        Some(true) => task["changes"].as_str().map(str::to_owned),
        Some(false) | None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_undoable_task_offers_undo() {
        let undoable = serde_json::json!({"changes": "changed 1 file", "undoable": true});
        assert_eq!(summary_of(&undoable).as_deref(), Some("changed 1 file"));
        let undone = serde_json::json!({"changes": "changed 1 file", "undoable": false});
        assert_eq!(summary_of(&undone), None);
        // An older daemon says neither.
        assert_eq!(
            summary_of(&serde_json::json!({"status": "completed"})),
            None
        );
    }
}
