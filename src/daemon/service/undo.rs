//! `Undo(task_id)`: the service's side of [`crate::store::undo`]. It runs here, on the
//! blocking pool, as the caller's own action (the caller was checked: same user, not a
//! sandboxed process), not through the supervisor, since it touches no task state: only
//! the files of the task's change record and the record itself.

use familiar_protocol::ids::TaskId;
use familiar_protocol::task::TaskStatus;

use super::{Error, Service, blocking, failed};
use crate::daemon::Op;
use crate::store::{UndoError, Versions, home_trash};

impl Service {
    pub(super) async fn undo_task(&self, id: TaskId, caller: &str) -> Result<String, Error> {
        let known = self
            .ask(|reply| Op::GetTask {
                id: id.clone(),
                reply,
            })
            .await?;
        let status = known
            .as_ref()
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok())
            .and_then(|t| {
                t["status"]
                    .as_str()
                    .and_then(|s| s.parse::<TaskStatus>().ok())
            });
        if status.is_some_and(|s| !s.is_finished()) {
            return Err(Error::UndoRefused(format!(
                "task {id} is still running: cancel it (`familiar cancel {id}`) or let it end, then undo"
            )));
        }
        let services = self.shared.runtime.services();
        let store = std::sync::Arc::clone(&services.store);
        let config = &self.shared.runtime.get().settings.config;
        let (limits, trash) = (config.versions, home_trash(&config.paths.home));
        let task = id.clone();
        let undone = blocking("undoing", move || {
            let versions = Versions::new(store.data_dir(), limits);
            crate::store::undo(&store, &versions, &trash, &task)
        })
        .await?;
        match undone {
            Ok(Some(u)) => {
                tracing::info!(task_id = %id, %caller, changes = u.changes, "task undone");
                Ok(u.summary)
            }
            Ok(None) => match known {
                Ok(_) => Err(Error::NothingToUndo(format!(
                    "task {id} changed nothing outside its workspace: nothing to undo"
                ))),
                Err(e) => Err(e),
            },
            Err(e @ (UndoError::NothingToUndo(_) | UndoError::AlreadyUndone { .. })) => {
                Err(Error::NothingToUndo(e.to_string()))
            }
            Err(e @ UndoError::Refused { .. }) => Err(Error::UndoRefused(e.to_string())),
            Err(e @ (UndoError::Failed { .. } | UndoError::Store(_))) => Err(failed(e)),
        }
    }
}
