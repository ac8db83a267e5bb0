//! The answer notification's **Undo** (issue 40): the line saying what the task changed
//! outside its workspace ("changed 3 files, trashed 2", `GetTask`'s `changes`), and
//! what its action does: the daemon's `Undo`, as `familiar undo TASK` asks it, whose
//! outcome replaces the bubble.
//!
//! Invariant: offered only for a task whose change record has something to undo
//! (`GetTask`'s `undoable`); a daemon that does not say (an older one) offers none.

use familiar_protocol::proxy::Agent1Proxy;

use crate::cli::client::classify;

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
        let view = match proxy.get_task(task).await {
            Ok(v) => v,
            Err(e) => {
                tracing::debug!("no change summary for task {task}: {e}");
                return None;
            }
        };
        // `TaskView::undo`: the changes of a task that can be undone (an older daemon
        // says neither, and offers none).
        let summary = view.undo()?.to_owned();
        Some(Undo {
            proxy: proxy.clone(),
            task: task.to_owned(),
            summary,
        })
    }

    /// The body's line: with a button, the summary; without one (nothing will wait
    /// for its click), the command that does it.
    pub(in crate::cli) fn line(&self, button: bool) -> String {
        let summary = familiar_protocol::display::visible(&self.summary);
        match button {
            true => summary,
            false => format!(
                "{summary}: `familiar undo {}` takes it back",
                familiar_protocol::display::visible(&self.task)
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
