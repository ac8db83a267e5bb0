//! The approval broker: one place where "may this tool call run?" is asked and answered.
//!
//! A call whose mode is `ask` becomes an [`ApprovalRequest`]. The broker shows it on
//! every [`Frontend`] that can reach a person (the TTY of `familiar run`; the daemon adds
//! a D-Bus signal and a desktop notification) and waits for the first answer through
//! [`ApprovalBroker::respond`]. The first answer wins; later ones are refused. No
//! frontend, a timeout, or a cancelled task all mean *deny*: silence is never consent.
//! "Allow … for this task" answers leave a grant for the task and the request's
//! [`Scope`] (the tool, its action, what the call is about: see [`grant`]), which the
//! same task's later requests of an equal scope use without asking until it expires or
//! is revoked; another task, of the same soul or not, is asked again. A request that
//! is always asked ([`Grantable::Never`]) neither uses a grant nor leaves one: the
//! broker refuses such an answer ([`RespondError::NotGrantable`]).
//!
//! Every surface shows [`ApprovalRequest::summary`], made by [`describe_call`] from the
//! very arguments that run: all of them, escapes made visible ([`render`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use familiar_protocol::events::Resolution;
use familiar_protocol::ids::{RequestId, SessionId, SoulId, TaskId};
use familiar_protocol::tier::Tier;
use serde::Serialize;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

pub mod chooser;
pub mod grant;
pub mod notify;
pub mod render;
mod tty;

pub use grant::{About, Grantable, Scope};
pub use notify::NotificationFrontend;
pub use render::describe_call;
pub use tty::{LineSource, TtyFrontend, prompt_text};

/// What is being asked.
#[derive(Debug, Clone, Serialize)]
pub struct ApprovalRequest {
    pub request_id: RequestId,
    pub task_id: TaskId,
    pub session_id: SessionId,
    pub soul: SoulId,
    pub tool: String,
    pub tier: Tier,
    /// The call's arguments, as the model sent them.
    pub args: serde_json::Value,
    /// What a person judges: [`describe_call`] of `tool` and `args`, every argument
    /// with its escapes made visible (`shell: rm ./build/cache.bin`; more arguments
    /// each on a line of their own).
    pub summary: String,
    /// Why the policy asks (the tier mode, or the `[[ask]]` pattern that matched).
    pub reason: String,
    /// What an "Allow … for this task" answer covers, or why none is offered.
    pub grant: Grantable,
}

/// A person's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    Approve,
    Deny,
    /// Approve, and approve this task's calls of the request's scope without asking
    /// for a while.
    ApproveFor(#[serde(with = "secs")] Duration),
}

mod secs {
    pub fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_secs())
    }
}

/// A sentence for the model when the call does not run (`""` when it does).
pub fn denial_reason(resolution: &Resolution) -> String {
    match resolution {
        Resolution::Approved { .. } | Resolution::Granted => String::new(),
        Resolution::Denied { by } => format!("the user denied this call ({by})"),
        Resolution::TimedOut => "nobody answered the approval request in time; it was denied".into(),
        Resolution::NobodyToAsk => "this call needs the user's approval and nobody could be asked (no terminal, no desktop session); it was denied".into(),
        Resolution::Cancelled => "the task was cancelled while waiting for approval".into(),
    }
}

/// Somewhere a request can be shown to a person.
pub trait Frontend: Send + Sync {
    /// Shows the request. Returns false when this frontend cannot reach anyone (no
    /// terminal, no notification daemon). Answers come back via `broker.respond`.
    fn present(&self, request: &ApprovalRequest, broker: &ApprovalBroker) -> bool;

    /// The request was resolved elsewhere or timed out: take the question down.
    fn withdraw(&self, request_id: &RequestId);
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RespondError {
    #[error("no pending approval request `{0}` (already answered, timed out, or never asked)")]
    UnknownRequest(RequestId),
    /// A timed grant for a request that is always asked; it still waits for an answer.
    #[error(
        "approval request `{id}` is asked every time ({why}): it can be approved once, not granted for the task"
    )]
    NotGrantable { id: RequestId, why: String },
}

struct Pending {
    tx: oneshot::Sender<(Answer, String)>,
    /// What was asked, for `GetTask` and `familiar tasks`.
    request: ApprovalRequest,
}

struct Inner {
    frontends: Mutex<Vec<Arc<dyn Frontend>>>,
    pending: Mutex<HashMap<RequestId, Pending>>,
    grants: Mutex<HashMap<(TaskId, Scope), Instant>>,
    /// The policy's `approval_timeout` (a reload of the policy sets it anew).
    timeout: Mutex<Duration>,
}

/// Cheap to clone; all clones share state.
#[derive(Clone)]
pub struct ApprovalBroker {
    inner: Arc<Inner>,
}

impl ApprovalBroker {
    pub fn new(timeout: Duration) -> Self {
        ApprovalBroker {
            inner: Arc::new(Inner {
                frontends: Mutex::new(Vec::new()),
                pending: Mutex::new(HashMap::new()),
                grants: Mutex::new(HashMap::new()),
                timeout: Mutex::new(timeout),
            }),
        }
    }

    /// How long requests asked from now on wait for an answer.
    pub fn set_timeout(&self, timeout: Duration) {
        *lock(&self.inner.timeout) = timeout;
    }

    pub fn add_frontend(&self, frontend: Arc<dyn Frontend>) {
        lock(&self.inner.frontends).push(frontend);
    }

    /// Asks, and waits for the first answer, the timeout or `cancel`.
    pub async fn ask(&self, request: ApprovalRequest, cancel: &CancellationToken) -> Resolution {
        if let Some(scope) = request.grant.scope()
            && self.has_grant(&request.task_id, scope)
        {
            return Resolution::Granted;
        }
        let (tx, rx) = oneshot::channel();
        let id = request.request_id.clone();
        lock(&self.inner.pending).insert(
            id.clone(),
            Pending {
                tx,
                request: request.clone(),
            },
        );

        let frontends: Vec<_> = lock(&self.inner.frontends).clone();
        let mut shown = false;
        for f in &frontends {
            shown |= f.present(&request, self);
        }
        let timeout = *lock(&self.inner.timeout);
        let resolution = if !shown {
            Resolution::NobodyToAsk
        } else {
            tokio::select! {
                answer = rx => match answer {
                    Ok((Answer::Approve, by)) => Resolution::Approved { by },
                    Ok((Answer::ApproveFor(d), by)) => {
                        // `respond` let it through only for a request with a scope.
                        if let Some(scope) = request.grant.scope() {
                            lock(&self.inner.grants)
                                .insert((request.task_id.clone(), scope.clone()), Instant::now() + d);
                        }
                        Resolution::Approved { by }
                    }
                    Ok((Answer::Deny, by)) => Resolution::Denied { by },
                    // The sender lives in `pending` until answered; dropped means removed.
                    Err(_) => Resolution::Cancelled,
                },
                () = tokio::time::sleep(timeout) => Resolution::TimedOut,
                () = cancel.cancelled() => Resolution::Cancelled,
            }
        };
        lock(&self.inner.pending).remove(&id);
        for f in &frontends {
            f.withdraw(&id);
        }
        resolution
    }

    /// Answers a pending request; `by` says who (`tty`, `dbus:1.42`, `notification`).
    /// The first answer wins. A timed grant for a request that is always asked is
    /// refused, and the request keeps waiting for an answer it can take.
    pub fn respond(&self, id: &RequestId, answer: Answer, by: &str) -> Result<(), RespondError> {
        let pending = {
            let mut pending = lock(&self.inner.pending);
            let request = &pending
                .get(id)
                .ok_or_else(|| RespondError::UnknownRequest(id.clone()))?
                .request;
            if let (Answer::ApproveFor(_), Grantable::Never(why)) = (answer, &request.grant) {
                return Err(RespondError::NotGrantable {
                    id: id.clone(),
                    why: why.clone(),
                });
            }
            pending
                .remove(id)
                .ok_or_else(|| RespondError::UnknownRequest(id.clone()))?
        };
        pending
            .tx
            .send((answer, by.to_owned()))
            .map_err(|_| RespondError::UnknownRequest(id.clone()))
    }

    /// Requests waiting for an answer.
    pub fn pending(&self) -> Vec<RequestId> {
        lock(&self.inner.pending).keys().cloned().collect()
    }

    /// The requests of `task` waiting for an answer, oldest id first.
    pub fn pending_for(&self, task: &TaskId) -> Vec<ApprovalRequest> {
        let mut found: Vec<ApprovalRequest> = lock(&self.inner.pending)
            .values()
            .filter(|p| p.request.task_id == *task)
            .map(|p| p.request.clone())
            .collect();
        found.sort_by(|a, b| a.request_id.as_str().cmp(b.request_id.as_str()));
        found
    }

    fn has_grant(&self, task: &TaskId, scope: &Scope) -> bool {
        let mut grants = lock(&self.inner.grants);
        let now = Instant::now();
        grants.retain(|_, until| *until > now);
        grants.contains_key(&(task.clone(), scope.clone()))
    }

    /// Revokes a grant; true when there was one.
    pub fn revoke(&self, task: &TaskId, scope: &Scope) -> bool {
        lock(&self.inner.grants)
            .remove(&(task.clone(), scope.clone()))
            .is_some()
    }

    /// What is asked of request `id`, while it waits.
    pub fn request(&self, id: &RequestId) -> Option<ApprovalRequest> {
        lock(&self.inner.pending).get(id).map(|p| p.request.clone())
    }
}

/// The maps stay consistent across a panic elsewhere (every mutation is one call).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use familiar_protocol::display::chooser::GRANT_FOR;

    use super::*;

    /// A request of `tool` about `about`.
    fn about(tool: &str, about: About) -> ApprovalRequest {
        ApprovalRequest {
            request_id: RequestId::generate(),
            task_id: TaskId::generate(),
            session_id: SessionId::generate(),
            soul: SoulId::new("system_admin").unwrap(),
            tool: tool.into(),
            tier: Tier::Execute,
            args: serde_json::json!({"command": "ls"}),
            summary: "shell: ls".into(),
            reason: "execute tier is `ask`".into(),
            grant: Grantable::Within(Scope {
                tool: tool.into(),
                action: None,
                about,
            }),
        }
    }

    fn request(tool: &str) -> ApprovalRequest {
        about(tool, About::Any)
    }

    /// Answers every request at once with a fixed answer, from another task.
    struct Auto(Answer);
    impl Frontend for Auto {
        fn present(&self, r: &ApprovalRequest, broker: &ApprovalBroker) -> bool {
            let (broker, id, answer) = (broker.clone(), r.request_id.clone(), self.0);
            tokio::spawn(async move { broker.respond(&id, answer, "test").unwrap() });
            true
        }
        fn withdraw(&self, _: &RequestId) {}
    }

    /// Shows requests and never answers.
    struct Silent;
    impl Frontend for Silent {
        fn present(&self, _: &ApprovalRequest, _: &ApprovalBroker) -> bool {
            true
        }
        fn withdraw(&self, _: &RequestId) {
            // Nothing was put up.
        }
    }

    #[tokio::test]
    async fn nobody_to_ask_is_a_denial() {
        let broker = ApprovalBroker::new(Duration::from_secs(60));
        let r = broker
            .ask(request("shell"), &CancellationToken::new())
            .await;
        assert_eq!(r, Resolution::NobodyToAsk);
        assert!(!r.approved());
    }

    #[tokio::test]
    async fn first_answer_wins() {
        let broker = ApprovalBroker::new(Duration::from_secs(60));
        broker.add_frontend(Arc::new(Auto(Answer::Deny)));
        broker.add_frontend(Arc::new(Auto(Answer::Approve)));
        let r = broker
            .ask(request("shell"), &CancellationToken::new())
            .await;
        assert_eq!(r, Resolution::Denied { by: "test".into() });
        assert!(broker.pending().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn silence_times_out_as_denied() {
        let broker = ApprovalBroker::new(Duration::from_secs(120));
        broker.add_frontend(Arc::new(Silent));
        let r = broker
            .ask(request("shell"), &CancellationToken::new())
            .await;
        assert_eq!(r, Resolution::TimedOut);
        assert!(broker.pending().is_empty());
    }

    #[tokio::test]
    async fn cancel_ends_the_wait() {
        let broker = ApprovalBroker::new(Duration::from_secs(3600));
        broker.add_frontend(Arc::new(Silent));
        let cancel = CancellationToken::new();
        cancel.cancel();
        assert_eq!(
            broker.ask(request("shell"), &cancel).await,
            Resolution::Cancelled
        );
    }

    #[tokio::test]
    async fn allow_for_a_while_grants_the_same_tasks_later_calls_until_revoked() {
        let broker = ApprovalBroker::new(Duration::from_secs(60));
        broker.add_frontend(Arc::new(Auto(Answer::ApproveFor(GRANT_FOR))));
        let first = request("shell");
        let task = first.task_id.clone();
        assert!(
            broker
                .ask(first, &CancellationToken::new())
                .await
                .approved()
        );
        let mut again = request("shell");
        again.task_id = task.clone();
        assert_eq!(
            broker.ask(again, &CancellationToken::new()).await,
            Resolution::Granted
        );
        let scope = request("shell").grant.scope().unwrap().clone();
        assert!(broker.revoke(&task, &scope));
        let other = broker
            .ask(request("write_file"), &CancellationToken::new())
            .await;
        assert!(matches!(other, Resolution::Approved { .. }));
    }

    // Regression: "Allow write_file for 10 min" also let a later, separate task of the
    // same soul write without a question; the grant is the task's.
    #[tokio::test]
    async fn a_grant_does_not_reach_another_task_of_the_same_soul() {
        let broker = ApprovalBroker::new(Duration::from_secs(60));
        broker.add_frontend(Arc::new(Auto(Answer::ApproveFor(GRANT_FOR))));
        let first = broker
            .ask(request("shell"), &CancellationToken::new())
            .await;
        assert!(first.approved());
        let later_task = broker
            .ask(request("shell"), &CancellationToken::new())
            .await;
        assert!(
            matches!(later_task, Resolution::Approved { .. }),
            "{later_task:?}"
        );
    }

    // Regression (issue 39): after "Allow … for this task" on one write in `notes/`,
    // writes anywhere ran unasked; a grant covers its own scope only.
    #[tokio::test]
    async fn a_grant_covers_its_scope_and_nothing_wider() {
        let broker = ApprovalBroker::new(Duration::from_secs(60));
        broker.add_frontend(Arc::new(Auto(Answer::ApproveFor(GRANT_FOR))));
        let notes = || About::Directory("~/notes/".into());
        let first = about("write_file", notes());
        let task = first.task_id.clone();
        assert!(
            broker
                .ask(first, &CancellationToken::new())
                .await
                .approved()
        );
        let of_task = |about: About| {
            let mut r = self::about("write_file", about);
            r.task_id = task.clone();
            r
        };
        let same = broker
            .ask(of_task(notes()), &CancellationToken::new())
            .await;
        assert_eq!(same, Resolution::Granted);
        let elsewhere = broker
            .ask(
                of_task(About::Directory("~/src/".into())),
                &CancellationToken::new(),
            )
            .await;
        assert!(
            matches!(elsewhere, Resolution::Approved { .. }),
            "{elsewhere:?}"
        );
    }

    /// Tries a timed grant, keeps what the broker said, then approves once.
    #[derive(Default)]
    struct GrantThenApprove(Mutex<Option<Result<(), RespondError>>>);
    impl Frontend for GrantThenApprove {
        fn present(&self, r: &ApprovalRequest, broker: &ApprovalBroker) -> bool {
            let id = &r.request_id;
            *lock(&self.0) = Some(broker.respond(id, Answer::ApproveFor(GRANT_FOR), "test"));
            broker.respond(id, Answer::Approve, "test").unwrap();
            true
        }
        fn withdraw(&self, _: &RequestId) {}
    }

    /// A request that is always asked takes no grant: refused, it keeps waiting for an
    /// answer it can take, and leaves nothing behind.
    #[tokio::test]
    async fn a_request_always_asked_refuses_a_grant_and_keeps_waiting() {
        let broker = ApprovalBroker::new(Duration::from_secs(60));
        let frontend = Arc::new(GrantThenApprove::default());
        broker.add_frontend(frontend.clone());
        let mut r = request("open");
        r.grant = Grantable::Never("it runs outside familiar's sandbox".into());
        let id = r.request_id.clone();
        let task = r.task_id.clone();
        assert!(broker.ask(r, &CancellationToken::new()).await.approved());
        assert_eq!(
            lock(&frontend.0).take(),
            Some(Err(RespondError::NotGrantable {
                id,
                why: "it runs outside familiar's sandbox".into()
            }))
        );
        assert!(lock(&broker.inner.grants).is_empty());
        let mut again = request("open");
        again.task_id = task;
        again.grant = Grantable::Never("outside".into());
        assert!(matches!(
            broker.ask(again, &CancellationToken::new()).await,
            Resolution::Approved { .. }
        ));
    }

    #[tokio::test]
    async fn answering_an_unknown_request_is_a_typed_error() {
        let broker = ApprovalBroker::new(Duration::from_secs(60));
        let id = RequestId::generate();
        assert_eq!(
            broker.respond(&id, Answer::Approve, "x"),
            Err(RespondError::UnknownRequest(id))
        );
    }
}
