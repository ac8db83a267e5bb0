//! Delegated sub-tasks: the loop's side of the `delegate` tool.
//!
//! A [`Delegator`] is made for each iteration of a task that may delegate. For each
//! call it checks the target against the soul's `delegates`, builds the child's soul as
//! the stricter of both ([`Soul::restricted_to`]), clamps its budgets to what the
//! parent has left ([`Budget::child`], wall clock to the parent's deadline), and runs
//! the child as a task of its own: its own session (linked to the parent's) and
//! transcript, the parent's workspace, the parent's cancellation, and the same
//! decision pipeline, approvals and limiters (the parent's rate limits count the
//! child's calls too, see [`ParentLink::quota`]). Its events go to the parent's
//! subscribers with the child's task id, framed by `subagent_started` and
//! `subagent_finished` on the parent.
//!
//! Invariants: depth is at most [`MAX_DEPTH`] (a child gets no delegator, so its
//! `delegate` calls fail with a tool error saying why); at most [`MAX_CHILDREN`]
//! children of one task run at once (the rest wait, cancellably).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use familiar_protocol::events::{Event, EventPayload};
use familiar_protocol::ids::{SessionId, SoulId, TaskId};
use familiar_protocol::task::{Outcome, TaskStatus, Usage};
use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::json;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::agent::events::EventBus;
use crate::agent::family::budget::Budget;
use crate::agent::family::{MAX_DEPTH, ParentLink};
use crate::agent::runtime::Runtime;
use crate::soul::Soul;
use crate::store::Context;
use crate::tools::ToolFuture;
use crate::tools::delegate::{DelegateRequest, Subagents};
use crate::tools::{ToolContext, ToolError};

/// The souls a task of `soul` at `depth` may hand sub-tasks to: none at the depth limit,
/// or when the soul's allowlist has no `delegate`.
pub(in crate::agent) fn delegates(soul: &Soul, depth: u32) -> &[SoulId] {
    if depth >= MAX_DEPTH || !soul.grant.allows_tool("delegate") {
        return &[];
    }
    &soul.delegates
}

/// A sub-task to run: what the loop needs to make it a task of its own.
pub struct Child {
    pub task_id: TaskId,
    /// Created (linked to the parent's) before the child starts.
    pub session_id: SessionId,
    /// The stricter of the target soul and the parent's, its budgets clamped.
    pub soul: Arc<Soul>,
    pub prompt: String,
    pub workspace: PathBuf,
    pub origin: String,
    pub parent: ParentLink,
}

/// How a sub-task ended, as its parent reports it.
pub struct ChildEnd {
    pub status: TaskStatus,
    pub result: String,
    pub usage: Usage,
    pub iterations: u32,
}

/// Runs a child as a task of its own to its end: the loop's `run_task`, handed down by
/// the loop, which sits above the family.
pub type RunChild =
    fn(Arc<Runtime>, Child, EventBus, CancellationToken) -> BoxFuture<'static, ChildEnd>;

/// Runs the children of one task (one per iteration; cheap to make).
pub struct Delegator {
    pub rt: Arc<Runtime>,
    pub task_id: TaskId,
    pub session_id: SessionId,
    /// The soul the parent runs under (already restricted if it is a child itself).
    pub soul: Arc<Soul>,
    pub depth: u32,
    pub workspace: PathBuf,
    pub budget: Arc<Budget>,
    /// When the parent's wall clock runs out.
    pub deadline: Instant,
    /// The parent's own quota chain (its ancestors); the child adds the parent.
    pub quota: Vec<(SessionId, Arc<Soul>)>,
    /// A fork of the parent's event bus: the same subscribers.
    pub bus: EventBus,
    /// [`MAX_CHILDREN`](crate::agent::family::MAX_CHILDREN) permits, shared by every
    /// iteration of the task.
    pub slots: Arc<Semaphore>,
    /// How a child runs as a task of its own.
    pub run_child: RunChild,
}

impl Subagents for Delegator {
    fn run(&self, request: DelegateRequest, ctx: ToolContext) -> ToolFuture {
        let prepared = self.prepare(&request);
        let (rt, slots, run) = (
            Arc::clone(&self.rt),
            Arc::clone(&self.slots),
            self.run_child,
        );
        let (parent_task, parent_session) = (self.task_id.clone(), self.session_id.clone());
        let (mut started_bus, child_bus, mut finished_bus) =
            (self.bus.fork(), self.bus.fork(), self.bus.fork());
        // Spawned, not awaited in place: the dispatcher drops a cancelled call's future,
        // and the child must still run its own finish (status persisted, events sent).
        // It sees the same cancellation through its token and ends promptly.
        let child_run = tokio::spawn(async move {
            let spec = prepared?;
            let child_session = spec.session_id.clone();
            let cancel = ctx.cancel.child_token();
            let _slot = tokio::select! {
                permit = slots.acquire_owned() => permit.map_err(|_| ToolError::Fatal("the subagent slots are closed".into()))?,
                () = cancel.cancelled() => return Err(ToolError::model("cancelled: the task was stopped")),
            };
            let child = spec.task_id.clone();
            let soul = spec.soul.id.clone();
            let parent_event = |payload| {
                Arc::new(Event {
                    payload,
                    task_id: parent_task.clone(),
                    session_id: parent_session.clone(),
                })
            };
            // The child's session exists before it starts, linked to ours, so its id is
            // known to whoever follows our events.
            let mut ctx_file =
                Context::new(child_session.clone(), spec.soul.id.clone(), &spec.prompt);
            ctx_file.parent_session = Some(parent_session.clone());
            ctx_file.parent_task = Some(parent_task.clone());
            rt.services.store.save_context(&mut ctx_file).map_err(|e| {
                ToolError::model(format!("cannot create the sub-task's session: {e}"))
            })?;
            let started = parent_event(EventPayload::SubagentStarted {
                child_task_id: child.clone(),
                child_session_id: child_session.clone(),
                soul: soul.clone(),
                prompt: spec.prompt.clone(),
                max_iterations: spec.soul.max_iterations,
            });
            record(&rt, &parent_session, &started);
            started_bus.publish(started).await;
            let ChildEnd {
                status,
                result,
                usage,
                iterations,
            } = run(Arc::clone(&rt), spec, child_bus, cancel).await;
            let finished = parent_event(EventPayload::SubagentFinished {
                child_task_id: child.clone(),
                child_session_id: child_session.clone(),
                soul: soul.clone(),
                status,
                usage,
                iterations,
            });
            record(&rt, &parent_session, &finished);
            finished_bus.publish(finished).await;
            let text = format!("[subagent {soul}, task {child}: {status}]\n{result}");
            match status.outcome() {
                Outcome::Completed => Ok(text),
                Outcome::Limit
                | Outcome::Cancelled
                | Outcome::Skipped
                | Outcome::Failed
                | Outcome::Unfinished => Err(ToolError::RespondToModel(text)),
            }
        });
        async move {
            child_run
                .await
                .map_err(|e| ToolError::Fatal(format!("the sub-task crashed: {e}")))?
        }
        .boxed()
    }
}

impl Delegator {
    /// The child's task, or the reason it may not run.
    fn prepare(&self, req: &DelegateRequest) -> Result<Child, ToolError> {
        if self.depth >= MAX_DEPTH {
            return Err(ToolError::model(format!(
                "a delegated sub-task cannot delegate further (sub-tasks nest at most {MAX_DEPTH} deep): do the work yourself or report back what is left"
            )));
        }
        if !self.soul.delegates.iter().any(|d| d.as_str() == req.soul) {
            let known = self
                .soul
                .delegates
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>();
            return Err(ToolError::model(format!(
                "soul `{}` may not delegate to `{}`; it may delegate to: {}",
                self.soul.id,
                req.soul,
                if known.is_empty() {
                    "(none)".to_owned()
                } else {
                    known.join(", ")
                }
            )));
        }
        let target = self
            .rt
            .settings
            .souls
            .get(&req.soul)
            .map_err(|e| ToolError::model(e.to_string()))?;
        let mut soul = target.restricted_to(&self.soul);
        let wall_left = self.deadline.saturating_duration_since(Instant::now());
        soul.max_wall_clock = soul.max_wall_clock.min(wall_left);
        let budget = self.budget.child(
            req.max_iterations
                .unwrap_or(soul.max_iterations)
                .min(soul.max_iterations),
            soul.max_tokens,
        );
        if budget.max_iterations() == 0 || budget.max_tokens() == 0 || wall_left.is_zero() {
            return Err(ToolError::model(
                "no budget left for a sub-task: finish with what you have",
            ));
        }
        soul.max_iterations = budget.max_iterations();
        soul.max_tokens = budget.max_tokens();
        let mut quota = self.quota.clone();
        quota.push((self.session_id.clone(), Arc::clone(&self.soul)));
        Ok(Child {
            task_id: TaskId::generate(),
            session_id: SessionId::generate(),
            prompt: req.prompt.clone(),
            workspace: self.workspace.clone(),
            origin: format!("delegate:{}", self.task_id),
            soul: Arc::new(soul),
            parent: ParentLink {
                task_id: self.task_id.clone(),
                session_id: self.session_id.clone(),
                depth: self.depth + 1,
                budget,
                quota,
            },
        })
    }
}

/// Appends a parent event to the parent's transcript (a second `O_APPEND` handle: one
/// `write` per entry, so it interleaves safely with the parent loop's own).
fn record(rt: &Runtime, session: &SessionId, event: &Event) {
    let entry = serde_json::to_value(event).unwrap_or_else(|_| json!({}));
    match rt.services.store.transcript(session) {
        Ok(mut t) => {
            if let Err(e) = t.append(&entry) {
                tracing::error!(session_id = %session, "cannot append to the transcript: {e}");
            }
        }
        Err(e) => tracing::error!(session_id = %session, "cannot open the transcript: {e}"),
    }
}
