//! Running one turn's tool calls as they stream in.
//!
//! A call is submitted the moment its block is complete, already decided (policy and
//! rate limits ran on the loop). Scheduling keeps two rules: non-mutating calls run in
//! parallel (at most [`MAX_PARALLEL`] at once); a mutating call waits for every call
//! before it, and every call after it waits for it. Results come back in call order.
//!
//! A model attempt that the client discards (retry, fallback) leaves its started calls
//! running; they become *orphans*, matched by (tool, arguments) against the next
//! attempt's calls, so a retried response never runs a tool twice.
//!
//! Events from running calls (approval asked and answered, call finished) travel back
//! to the loop over an unbounded channel: bounded in practice by three events per call,
//! and the loop drains it while it streams.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use familiar_protocol::events::{CallDecision, EventPayload, Resolution};
use familiar_protocol::ids::{CallId, RequestId, SessionId, SoulId, TaskId};
use familiar_protocol::tier::Tier;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use tokio::sync::{Semaphore, mpsc};
use tracing::Instrument;

use crate::agent::hooks::{Hooks, TaskRef, ToolCallRef};
use crate::agent::plan::shorten;
use crate::agent::trail::{Approval, Judgement, Trail};
use crate::approval::{ApprovalBroker, ApprovalRequest, Grantable, denial_reason};
use crate::store::{AuditDecision, AuditOutcome};
use crate::tools::{ImageFile, Tool, ToolContext, ToolError};

/// Non-mutating calls running at once.
pub const MAX_PARALLEL: usize = 10;

/// How the dispatcher treats a call: what the call gate ([`crate::agent::calls::gate`])
/// concluded before it was submitted.
#[derive(Debug, Clone)]
pub enum Disposition {
    Run,
    Ask {
        reason: String,
        /// What "Allow … for this task" covers, or why it is not offered.
        grant: Grantable,
        /// The host a screen tool's result goes to (a hosted model): the question is
        /// then "send WHAT to HOST?", WHAT as the tool describes it.
        sends_to: Option<String>,
    },
    Refuse {
        decision: AuditDecision,
        reason: String,
    },
}

/// What `tool_call_started` says of a call so disposed: a refusal is a deny there,
/// whether the policy or a quota refused it.
impl From<&Disposition> for CallDecision {
    fn from(disposition: &Disposition) -> CallDecision {
        match disposition {
            Disposition::Run => CallDecision::Allow,
            Disposition::Ask { .. } => CallDecision::Ask,
            Disposition::Refuse { .. } => CallDecision::Deny,
        }
    }
}

/// One call, decided, ready to schedule.
pub struct CallSpec {
    pub call_id: CallId,
    pub name: String,
    pub tier: Tier,
    pub args: serde_json::Value,
    /// `None` for tools this build does not implement.
    pub tool: Option<Arc<dyn Tool>>,
    pub mutating: bool,
    pub disposition: Disposition,
    pub summary: String,
    /// How it was decided, for the audit log; an ask's answer is added to it.
    pub trail: Trail,
}

/// What became of a call.
#[derive(Debug, Clone)]
pub struct CallResult {
    pub ok: bool,
    /// The full output (or the error/denial text the model will see).
    pub output: String,
    /// The image the tool returned with it (a screenshot), saved.
    pub image: Option<ImageFile>,
    pub decision: AuditDecision,
    pub reason: Option<String>,
    pub outcome: AuditOutcome,
    /// The tool reported an error the task cannot survive.
    pub fatal: bool,
    pub duration_ms: u64,
    /// How it was decided (see [`CallSpec::trail`]).
    pub trail: Trail,
}

impl CallResult {
    fn refused(decision: AuditDecision, reason: String, trail: Trail) -> Self {
        CallResult {
            ok: false,
            output: reason.clone(),
            image: None,
            decision,
            reason: Some(reason),
            outcome: AuditOutcome::NotRun,
            fatal: false,
            duration_ms: 0,
            trail,
        }
    }
}

/// What every call of a turn shares.
#[derive(Clone)]
pub struct CallEnv {
    pub task_id: TaskId,
    pub session_id: SessionId,
    pub soul: SoulId,
    pub approvals: ApprovalBroker,
    pub tool_ctx: ToolContext,
    pub events: mpsc::UnboundedSender<EventPayload>,
    pub parallel: Arc<Semaphore>,
    /// Told just before a decided call runs (`before_tool`).
    pub hooks: Arc<[Arc<dyn Hooks>]>,
}

impl CallEnv {
    fn task_ref(&self) -> TaskRef<'_> {
        TaskRef {
            task_id: &self.task_id,
            session_id: &self.session_id,
            soul: &self.soul,
        }
    }

    /// Fires `before_tool` for a call that is about to run.
    fn before_tool(&self, call: &ToolCallRef<'_>) {
        for h in self.hooks.iter() {
            h.before_tool(&self.task_ref(), call);
        }
    }

    fn send(&self, payload: EventPayload) {
        // The loop holds the receiver until every call of the turn has finished, so a
        // closed channel means the loop itself is gone; there is nobody left to tell.
        if self.events.send(payload).is_err() {
            tracing::debug!(task_id = %self.task_id, "event dropped: the loop has ended");
        }
    }
}

type SharedResult = Shared<BoxFuture<'static, CallResult>>;

pub struct Submitted {
    pub call_id: CallId,
    pub name: String,
    pub tier: Tier,
    pub args: serde_json::Value,
    result: SharedResult,
}

/// The calls of one turn.
#[derive(Default)]
pub struct Dispatcher {
    submitted: Vec<Submitted>,
    /// Done when the latest mutating call is done.
    last_mutating: Option<SharedResult>,
    orphans: HashMap<String, SharedResult>,
}

fn signature(name: &str, args: &serde_json::Value) -> String {
    format!("{name}\u{0}{args}")
}

impl Dispatcher {
    pub fn new() -> Self {
        Self::default()
    }

    /// Schedules a call; it starts at once unless an earlier call must finish first.
    pub fn submit(&mut self, env: &CallEnv, spec: CallSpec) {
        let sig = signature(&spec.name, &spec.args);
        let (call_id, name, tier, args) = (
            spec.call_id.clone(),
            spec.name.clone(),
            spec.tier,
            spec.args.clone(),
        );
        let result = if let Some(orphan) = self.orphans.remove(&sig) {
            // The discarded attempt already ran (or is running) exactly this call.
            orphan
        } else {
            let barrier: Vec<SharedResult> = if spec.mutating {
                self.submitted
                    .iter()
                    .map(|s| s.result.clone())
                    .chain(self.orphans.values().cloned())
                    .collect()
            } else {
                self.last_mutating.iter().cloned().collect()
            };
            let env = env.clone();
            let mutating = spec.mutating;
            let crashed_id = spec.call_id.clone();
            // The call's log lines carry the task's fields (inherited) and TOOL.
            let span = tracing::info_span!("tool_call", tool = %spec.name, call_id = %spec.call_id);
            let handle = tokio::spawn(
                async move {
                    futures::future::join_all(barrier).await;
                    run_call(&env, spec).await
                }
                .instrument(span),
            );
            let shared = async move {
                handle.await.unwrap_or_else(|e| CallResult {
                    ok: false,
                    output: format!("the tool call {crashed_id} crashed: {e}"),
                    image: None,
                    decision: AuditDecision::Allowed,
                    reason: None,
                    outcome: AuditOutcome::Failed,
                    fatal: false,
                    duration_ms: 0,
                    trail: Trail::from(Judgement::Lost),
                })
            }
            .boxed()
            .shared();
            if mutating {
                self.last_mutating = Some(shared.clone());
            }
            shared
        };
        self.submitted.push(Submitted {
            call_id,
            name,
            tier,
            args,
            result,
        });
    }

    /// The model attempt was discarded: its calls keep running as orphans.
    pub fn discard_attempt(&mut self) {
        for s in self.submitted.drain(..) {
            self.orphans.insert(signature(&s.name, &s.args), s.result);
        }
    }

    /// Waits for every call; returns the turn's calls in order, and the orphans that the
    /// final attempt did not repeat (they ran, and belong in the transcript).
    pub async fn finish(self) -> (Vec<(Submitted, CallResult)>, Vec<CallResult>) {
        let mut done = Vec::with_capacity(self.submitted.len());
        for s in self.submitted {
            let r = s.result.clone().await;
            done.push((s, r));
        }
        let mut orphans = Vec::with_capacity(self.orphans.len());
        for (_, o) in self.orphans {
            orphans.push(o.await);
        }
        (done, orphans)
    }

    pub fn is_empty(&self) -> bool {
        self.submitted.is_empty()
    }
}

/// Asks for approval of a call (`reason`: why it is asked) and records the answer in
/// its trail. The audit decision when approved; when not, the decision and the reason
/// the model is told.
async fn ask(
    env: &CallEnv,
    spec: &mut CallSpec,
    reason: String,
    grant: Grantable,
) -> Result<AuditDecision, (AuditDecision, String)> {
    let request = ApprovalRequest {
        request_id: RequestId::generate(),
        task_id: env.task_id.clone(),
        session_id: env.session_id.clone(),
        soul: env.soul.clone(),
        tool: spec.name.clone(),
        tier: spec.tier,
        args: spec.args.clone(),
        summary: spec.summary.clone(),
        reason: reason.clone(),
        grant,
    };
    let request_id = request.request_id.clone();
    env.send(EventPayload::ApprovalRequested {
        request_id: request_id.clone(),
        call_id: spec.call_id.clone(),
        tool: spec.name.clone(),
        summary: spec.summary.clone(),
        tier: spec.tier,
        reason,
    });
    let resolution = env.approvals.ask(request, &env.tool_ctx.cancel).await;
    env.send(EventPayload::ApprovalResolved {
        request_id: request_id.clone(),
        call_id: spec.call_id.clone(),
        approved: resolution.approved(),
        outcome: resolution.clone(),
    });
    spec.trail.approval = Some(if resolution.approved() {
        Approval::Approved
    } else {
        Approval::Refused
    });
    match resolution {
        Resolution::Approved { .. } | Resolution::Granted => Ok(AuditDecision::Approved),
        Resolution::TimedOut => Err((AuditDecision::ApprovalTimeout, denial_reason(&resolution))),
        Resolution::Denied { .. } | Resolution::NobodyToAsk | Resolution::Cancelled => {
            Err((AuditDecision::Denied, denial_reason(&resolution)))
        }
    }
}

/// Runs one call and reports how it ended: every started call gets its
/// `tool_call_finished`, whether it ran, was refused, timed out waiting for approval or
/// named a tool this build lacks.
async fn run_call(env: &CallEnv, spec: CallSpec) -> CallResult {
    let (call_id, tool) = (spec.call_id.clone(), spec.name.clone());
    // The person's time to answer is not the tool's: reported apart.
    let mut approval_wait = None;
    let result = decide_and_run(env, spec, &mut approval_wait).await;
    env.send(EventPayload::ToolCallFinished {
        call_id,
        tool,
        ok: result.ok,
        preview: preview(&result.output),
        duration_ms: result.duration_ms,
        approval_wait_ms: approval_wait,
    });
    result
}

/// Most characters of a call's preview.
const PREVIEW_CHARS: usize = 160;

/// A call's output on one line for people: every run of whitespace (line breaks
/// included) as one space, so a pretty-printed JSON object or a command's sections
/// show their content, not a lone `{`; at most [`PREVIEW_CHARS`], `…` when cut.
fn preview(output: &str) -> String {
    let flat = output.split_whitespace().collect::<Vec<_>>().join(" ");
    shorten(&flat, PREVIEW_CHARS)
}

/// A command of a soul that may delete for good outside its workspace says so in its
/// approval (issue 40): everywhere else the kernel keeps what is there. `destroy`: the
/// sandbox's destroy trees, the workspace among them.
fn deletes_for_good(
    reason: String,
    tool: &str,
    destroy: &[std::path::PathBuf],
    workspace: &std::path::Path,
) -> String {
    let trees: Vec<String> = destroy
        .iter()
        .filter(|d| *d != workspace)
        .map(|d| d.display().to_string())
        .collect();
    if tool != "shell" || trees.is_empty() {
        return reason;
    }
    format!("{reason}; it deletes for good in {}", trees.join(", "))
}

/// Lets the tool word its approval from what the call names now (`ui_act`: the app and
/// the control behind an id): the summary is replaced, and the window focused now is
/// returned for a tool that must find it unchanged (`type_text`); a call the tool finds
/// nothing to ask about (the control is gone) ends here, unasked, with the tool's answer.
async fn describe(spec: &mut CallSpec) -> Result<Option<crate::compositor::Window>, CallResult> {
    let Some(described) = spec.tool.as_ref().and_then(|t| t.describe(&spec.args)) else {
        return Ok(None);
    };
    match described.await {
        Ok(described) => {
            spec.summary = described.summary;
            if spec.trail.call.is_some() {
                spec.trail.call = Some(spec.summary.clone());
            }
            Ok(described.focus)
        }
        Err(ToolError::RespondToModel(msg) | ToolError::Fatal(msg)) => Err(CallResult {
            ok: false,
            output: msg,
            image: None,
            decision: AuditDecision::Allowed,
            reason: None,
            outcome: AuditOutcome::Failed,
            fatal: false,
            duration_ms: 0,
            trail: spec.trail.clone(),
        }),
    }
}

/// The call's decision: refused as the gate decided, run, or asked (the wait for the
/// answer recorded in `approval_wait`). `Ok` carries the decision and the window that
/// had the focus when the person was asked; `Err` the refused call's result.
async fn decide(
    env: &CallEnv,
    spec: &mut CallSpec,
    approval_wait: &mut Option<u64>,
) -> Result<(AuditDecision, Option<crate::compositor::Window>), CallResult> {
    // Cloned: `ask` needs the whole spec, to record the answer in its trail.
    match spec.disposition.clone() {
        Disposition::Refuse { decision, reason } => {
            Err(CallResult::refused(decision, reason, spec.trail.clone()))
        }
        Disposition::Run => Ok((AuditDecision::Allowed, None)),
        Disposition::Ask {
            reason,
            grant,
            sends_to,
        } => {
            let asked_focus = describe(spec).await?;
            if let Some(host) = sends_to {
                spec.summary = format!("send {} to {host}?", spec.summary);
            }
            let asked = Instant::now();
            let ctx = &env.tool_ctx;
            let reason = deletes_for_good(reason, &spec.name, &ctx.sandbox.destroy, &ctx.workspace);
            let answer = ask(env, spec, reason, grant).await;
            *approval_wait = Some(asked.elapsed().as_millis() as u64);
            match answer {
                Ok(decision) => Ok((decision, asked_focus)),
                Err((decision, why)) => Err(CallResult::refused(decision, why, spec.trail.clone())),
            }
        }
    }
}

async fn decide_and_run(
    env: &CallEnv,
    mut spec: CallSpec,
    approval_wait: &mut Option<u64>,
) -> CallResult {
    let cancel = env.tool_ctx.cancel.clone();
    let audited = spec.tool.as_ref().is_some_and(|t| t.audited_in_full());
    if audited {
        spec.trail.call = Some(spec.summary.clone());
    }
    let (decision, asked_focus) = match decide(env, &mut spec, approval_wait).await {
        Ok(decided) => decided,
        Err(refused) => return refused,
    };

    let Some(tool) = spec.tool else {
        return CallResult {
            ok: false,
            output: format!(
                "the tool `{}` is not available in this build of familiar",
                spec.name
            ),
            image: None,
            decision,
            reason: None,
            outcome: AuditOutcome::NotRun,
            fatal: false,
            duration_ms: 0,
            trail: spec.trail,
        };
    };
    let _permit = if spec.mutating {
        None
    } else {
        // The semaphore is never closed, so acquiring only waits.
        env.parallel.clone().acquire_owned().await.ok()
    };
    env.before_tool(&ToolCallRef {
        call_id: &spec.call_id,
        tool: &spec.name,
        tier: spec.tier,
        args: &spec.args,
        decision,
        reason: None,
        trail: &spec.trail,
    });
    let started = Instant::now();
    let ctx = ToolContext {
        asked_focus,
        ..env.tool_ctx.clone()
    };
    let result = tokio::select! {
        r = tool.run(spec.args.clone(), ctx) => r,
        () = cancel.cancelled() => Err(ToolError::RespondToModel("cancelled: the task was stopped".into())),
    };
    let duration_ms = started.elapsed().as_millis() as u64;
    let (ok, output, image, fatal) = match result {
        Ok(out) => (true, out.text, out.image, false),
        Err(ToolError::RespondToModel(msg)) => (false, msg, None, false),
        Err(ToolError::Fatal(msg)) => (false, msg, None, true),
    };
    if audited {
        spec.trail.result = Some(output.clone());
    }
    CallResult {
        ok,
        output,
        image,
        decision,
        reason: None,
        outcome: if ok {
            AuditOutcome::Succeeded
        } else {
            AuditOutcome::Failed
        },
        fatal,
        duration_ms,
        trail: spec.trail,
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::deletes_for_good;

    #[test]
    fn a_command_that_may_delete_outside_its_workspace_says_so() {
        let ws = Path::new("/w");
        let only_ws = [PathBuf::from("/w")];
        let with_cache = [PathBuf::from("/h/.cache"), PathBuf::from("/w")];
        assert_eq!(
            deletes_for_good("asked".into(), "shell", &only_ws, ws),
            "asked"
        );
        assert_eq!(
            deletes_for_good("asked".into(), "shell", &with_cache, ws),
            "asked; it deletes for good in /h/.cache"
        );
        assert_eq!(
            deletes_for_good("asked".into(), "read_file", &with_cache, ws),
            "asked"
        );
    }
}
