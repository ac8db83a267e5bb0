//! What the D-Bus object and the owner task (the supervisor) say to each other: the
//! [`Op`]s sent to the owner, the validated [`SubmitRequest`], and the [`Shared`] state
//! the object reads without asking.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32};

use familiar_protocol::Error;
use familiar_protocol::ids::{SessionId, TaskId};
use tokio::sync::oneshot;

use super::{reload, supervisor};
use crate::policy::RateSpec;
use crate::soul::Soul;

/// Ops waiting for the owner; D-Bus callers wait (backpressure) when it is full.
pub const OP_BUFFER: usize = 64;
/// Finished tasks the daemon remembers for `GetTask` and `ListTasks`.
pub const MAX_FINISHED: usize = 256;

/// State the D-Bus object reads without asking the owner.
pub struct Shared {
    /// The one runtime: the services every task shares, and the settings new tasks
    /// get (swapped by a reload, see [`reload`]).
    pub runtime: reload::Reloadable,
    /// Queued plus running tasks (the `ActiveTasks` property).
    pub active: AtomicU32,
    pub shutting_down: AtomicBool,
    /// The daemon's own uid; callers must match it.
    pub uid: u32,
    pub submit_rate: RateSpec,
}

/// A validated `Submit`.
#[derive(Debug)]
pub struct SubmitRequest {
    pub soul: Arc<Soul>,
    pub prompt: String,
    pub session: Option<SessionId>,
    pub workspace: Option<std::path::PathBuf>,
    pub origin: String,
    pub max_iterations: Option<u32>,
    /// Run only if these hold when the task starts (`when`), else it ends `skipped`.
    pub when: Option<crate::snapshot::conditions::Conditions>,
    /// The caller's unique bus name (the rate-limit key).
    pub caller: String,
}

/// What the owner task is asked to do.
pub enum Op {
    Submit {
        req: SubmitRequest,
        reply: oneshot::Sender<Result<(TaskId, SessionId), Error>>,
    },
    Cancel {
        id: TaskId,
        reply: oneshot::Sender<Result<(), Error>>,
    },
    Steer {
        id: TaskId,
        message: String,
        reply: oneshot::Sender<Result<(), Error>>,
    },
    GetTask {
        id: TaskId,
        reply: oneshot::Sender<Result<String, Error>>,
    },
    ListTasks {
        reply: oneshot::Sender<Vec<familiar_protocol::query::TaskRow>>,
    },
    /// A task's runner is done (its events are all forwarded).
    Finished(supervisor::Finished),
    /// A delegated sub-task of a running task started or ended (seen in its events).
    Child(supervisor::ChildNote),
    /// Stop accepting, cancel everything, return once no task runs.
    Shutdown,
}
