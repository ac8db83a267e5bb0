//! What a caller asks of one task: `Cancel` (a queued task ends at once, a running one
//! is told to stop) and `Steer` (a message into its inbox).

use familiar_protocol::Error;
use familiar_protocol::ids::TaskId;
use familiar_protocol::task::TaskStatus;

use super::{Effects, Supervisor};
use crate::agent::steering::{MAX_UNREAD, SteerError};

impl<E: Effects> Supervisor<E> {
    pub(super) async fn cancel(&mut self, id: &TaskId) -> Result<(), Error> {
        let Some(e) = self.tasks.get(id) else {
            return Err(unknown_task(id));
        };
        if let Some(parent) = &e.parent {
            return Err(Error::InvalidArgument(format!(
                "task {id} is a sub-task of {parent}: cancel {parent}, which cancels its sub-tasks"
            )));
        }
        match e.status {
            TaskStatus::Queued => {
                self.queue.retain(|q| q != id);
                self.finish_unstarted(id, TaskStatus::Cancelled, "cancelled before it started")
                    .await;
                Ok(())
            }
            TaskStatus::Running => {
                e.cancel.cancel();
                Ok(())
            }
            // Cancelling a finished task changes nothing; saying so is not an error.
            // (`TaskStatus::is_finished` is the one list of finished statuses.)
            finished => {
                debug_assert!(finished.is_finished(), "{finished} is not finished");
                Ok(())
            }
        }
    }

    /// Hands `message` to a queued or running task's inbox.
    pub(super) fn steer(&self, id: &TaskId, message: String) -> Result<(), Error> {
        let Some(e) = self.tasks.get(id) else {
            return Err(unknown_task(id));
        };
        if let Some(parent) = &e.parent {
            return Err(Error::InvalidArgument(format!(
                "task {id} is a sub-task of {parent}: steer {parent}, which can hand it on"
            )));
        }
        let not_running = || {
            Error::TaskNotRunning(format!(
                "task {id} has ended ({}); continue its session with `familiar ask --session {}`",
                e.status, e.session_id
            ))
        };
        if e.status.is_finished() {
            return Err(not_running());
        }
        match e.spec.steering.push(message) {
            Ok(()) => {
                tracing::info!(task_id = %id, "steering message accepted");
                Ok(())
            }
            Err(SteerError::Closed) => Err(not_running()),
            Err(SteerError::Full) => Err(Error::RateLimited(format!(
                "task {id} already holds {MAX_UNREAD} unread messages; wait for its next step"
            ))),
        }
    }
}

pub(super) fn unknown_task(id: &TaskId) -> Error {
    Error::UnknownTask(format!(
        "no task `{id}` (finished long ago, or never submitted); `familiar tasks` lists the daemon's tasks"
    ))
}
