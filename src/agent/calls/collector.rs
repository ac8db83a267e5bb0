//! Collecting one model call into a [`Turn`]: the stream loop that passes each complete
//! tool call through the gate and submits it to the dispatcher while the model is still
//! writing, draining the calls' events until every call has finished, folding the
//! results back into the conversation in call order, and classifying a failed stream
//! (retry on the next iteration, or finish the task with [`failure`](super::failure)'s
//! words).
//!
//! The calls' events are forwarded while the stream runs, so an approval prompt is seen
//! at once, not at the end of the model's answer.

use futures::StreamExt;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::agent::calls::dispatch::{
    CallEnv, CallResult, CallSpec, Dispatcher, Disposition, Submitted,
};
use crate::agent::calls::failure;
use crate::agent::calls::gate::{CallGate, Decided, rate_limited_event};
use crate::agent::context::record;
use crate::agent::context::system_prompt::wrap_tool_output;
use crate::agent::emitter::Emitter;
use crate::agent::events::{CallDecision, EventPayload};
use crate::agent::hooks::ToolCallRef;
use crate::agent::plan::{PlanTracker, describe_call};
use crate::agent::trail::{Judgement, Trail};
use crate::ids::{CallId, TaskId};
use crate::llm::{
    ClientEvent, ContentBlock, ContextOverflow, FinishReason, InvalidArguments, LlmClient,
    LlmError, Message, Request, Role, StreamEvent, Usage,
};
use crate::store::{AuditDecision, Context, TaskStatus};

/// What one model call and its tools produced.
#[derive(Debug)]
pub(in crate::agent) struct Turn {
    pub(in crate::agent) text: String,
    pub(in crate::agent) finish: FinishReason,
    /// Signatures of the calls, for loop detection.
    pub(in crate::agent) calls: Vec<(String, serde_json::Value)>,
    pub(in crate::agent) all_refused: bool,
    pub(in crate::agent) fatal: Option<String>,
}

/// How a model call ended.
pub(in crate::agent) enum CallEnd {
    Turn(Turn),
    /// A transient failure (the client's retries spent); the turn is dropped.
    Failed(LlmError),
    /// The task was stopped while the model wrote; what ran is recorded.
    Cancelled,
    /// Too long for the server, with output or calls besides (so it is not sent again).
    Overflow(ContextOverflow),
    /// The task cannot go on: a failure no retry will fix.
    Finish(TaskStatus, String),
}

/// What one model call left behind once every call it made has finished.
#[derive(Default)]
pub(in crate::agent) struct Collected {
    /// The assistant's content so far (text before a call, thinking, calls).
    blocks: Vec<ContentBlock>,
    /// Text after the last block.
    text: String,
    finish: Option<FinishReason>,
    usage: Usage,
    /// Calls the gate refused.
    refused: usize,
    pub(in crate::agent) error: Option<LlmError>,
    calls: Vec<(Submitted, CallResult)>,
}

impl Collected {
    pub(in crate::agent) fn usage(&self) -> &Usage {
        &self.usage
    }

    /// The answer's text that streamed before the task was stopped (cancelled, its wall
    /// clock or budget out), which the session keeps; `None` when not stopped or no
    /// text came.
    pub(in crate::agent) fn cut_text(&self) -> Option<String> {
        if !matches!(self.error, Some(LlmError::Cancelled)) {
            return None;
        }
        let text = streamed_text(&self.blocks, &self.text);
        (!text.trim().is_empty()).then_some(text)
    }
}

/// The text blocks of an answer, then the text after the last block.
fn streamed_text(blocks: &[ContentBlock], tail: &str) -> String {
    let mut text: String = blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            ContentBlock::Thinking { .. }
            | ContentBlock::Reminder { .. }
            | ContentBlock::ToolUse { .. }
            | ContentBlock::ToolResult { .. } => None,
        })
        .collect();
    text.push_str(tail);
    text
}

impl Collected {
    /// The overflow the call failed with, when nothing else came of it (no output, no
    /// tool call): sending it again after compaction loses nothing.
    pub(in crate::agent) fn bare_overflow(&self) -> Option<ContextOverflow> {
        match &self.error {
            Some(LlmError::ContextOverflow(o))
                if self.blocks.is_empty() && self.text.is_empty() && self.calls.is_empty() =>
            {
                Some(o.clone())
            }
            Some(_) | None => None,
        }
    }
}

/// The calls' results folded into the conversation.
struct Folded {
    results: Vec<ContentBlock>,
    fatal: Option<String>,
    signatures: Vec<(String, serde_json::Value)>,
}

/// Closes an answer cut for repeating itself (`… {repeats} times]` follows), so the
/// model reads on the next turn what happened to its answer.
pub const DEGENERATE_MARKER: &str = "\n\n[familiar cut this answer here: the same text repeated";

/// Closes an answer the task's stop cut (Ctrl-C, `cancel`, the wall clock, a daemon stop).
pub const CUT_MARKER: &str =
    "\n\n[familiar cut this answer here: the task was stopped while the model was still answering]";

/// What an answer with no text is recorded and reported as.
pub const EMPTY_ANSWER: &str = "(empty answer)";

/// The events of one turn's calls, as they run.
pub(in crate::agent) type CallEvents = mpsc::UnboundedReceiver<EventPayload>;

/// Collects one model call: the stream, the gate's decisions, the dispatcher's calls,
/// and the conversation they are folded into.
pub(in crate::agent) struct Collector<'t> {
    gate: &'t CallGate,
    emitter: &'t mut Emitter,
    plan: &'t mut PlanTracker,
    /// The session's context: the turn's messages and its tool statistics go here.
    ctx: &'t mut Context,
    /// A sub-task's parent: approval summaries say on whose behalf it asks.
    parent: Option<&'t TaskId>,
    dispatcher: Dispatcher,
}

impl<'t> Collector<'t> {
    pub(in crate::agent) fn new(
        gate: &'t CallGate,
        emitter: &'t mut Emitter,
        plan: &'t mut PlanTracker,
        ctx: &'t mut Context,
        parent: Option<&'t TaskId>,
    ) -> Collector<'t> {
        Collector {
            gate,
            emitter,
            plan,
            ctx,
            parent,
            dispatcher: Dispatcher::new(),
        }
    }

    /// Streams `request` (stopped by `cancel`, which the calls in `env` share),
    /// submitting calls as they complete, and waits for every call.
    pub(in crate::agent) async fn collect(
        mut self,
        client: &mut LlmClient,
        request: &Request,
        env: CallEnv,
        mut events_rx: CallEvents,
        cancel: CancellationToken,
    ) -> Collected {
        let mut c = Collected::default();
        {
            let mut stream = client.stream(request, cancel);
            loop {
                tokio::select! {
                    Some(ev) = events_rx.recv() => self.emitter.emit(ev).await,
                    item = stream.next() => match item {
                        None => break,
                        Some(Err(e)) => { c.error = Some(e); break; }
                        Some(Ok(ev)) => self.on_stream_event(ev, &mut c, &env).await,
                    },
                }
            }
        }
        let (calls, orphans) = self.drain(env, events_rx).await;
        for o in orphans {
            let entry = json!({"kind": "orphaned_tool_result", "ok": o.ok, "output": o.output});
            self.emitter.append(&entry);
        }
        c.calls = calls;
        c
    }

    async fn on_stream_event(&mut self, ev: ClientEvent, c: &mut Collected, env: &CallEnv) {
        match ev {
            ClientEvent::Event(StreamEvent::TextDelta { text }) => {
                c.text.push_str(&text);
                self.emitter.emit(EventPayload::TextDelta { text }).await;
            }
            ClientEvent::Event(StreamEvent::ThinkingDelta { .. }) => {}
            ClientEvent::Event(StreamEvent::ThinkingComplete {
                thinking,
                signature,
            }) => {
                c.blocks.push(ContentBlock::Thinking {
                    thinking,
                    signature,
                });
            }
            ClientEvent::Event(StreamEvent::ToolCallStarted { .. }) => {}
            ClientEvent::Event(StreamEvent::ToolCallComplete { id, name, input }) => {
                if !c.text.is_empty() {
                    let text = std::mem::take(&mut c.text);
                    c.blocks.push(ContentBlock::Text { text });
                }
                self.submit_call(id, name, input, c, env).await;
            }
            ClientEvent::Event(StreamEvent::Usage { usage }) => c.usage = usage,
            ClientEvent::Event(StreamEvent::Finish { reason }) => c.finish = Some(reason),
            ClientEvent::Event(StreamEvent::PromptProgress {
                processed,
                total,
                cached,
            }) => {
                self.emitter
                    .emit(EventPayload::ModelProgress {
                        processed,
                        total,
                        cached,
                    })
                    .await;
            }
            ClientEvent::Retry {
                attempt,
                delay,
                reason,
            } => {
                let delay_ms = delay.as_millis() as u64;
                self.emitter
                    .emit(EventPayload::Retry {
                        attempt,
                        delay_ms,
                        reason,
                    })
                    .await;
            }
            ClientEvent::ModelFallback { from, to } => {
                let reason = "repeated overload or a stalled stream".into();
                self.emitter
                    .emit(EventPayload::ModelFallback { from, to, reason })
                    .await;
            }
            ClientEvent::Repetition {
                keep,
                unit,
                repeats,
            } => {
                if c.text.is_char_boundary(keep) {
                    c.text.truncate(keep);
                }
                c.text
                    .push_str(&format!("{DEGENERATE_MARKER} {repeats} times]"));
                self.emitter
                    .emit(EventPayload::DegenerateOutput {
                        unit: unit.chars().take(200).collect(),
                        repeats,
                        kept_chars: c.text.chars().count(),
                    })
                    .await;
            }
            ClientEvent::AttemptDiscarded => {
                c.blocks.clear();
                c.text.clear();
                c.refused = 0;
                self.dispatcher.discard_attempt();
            }
        }
    }

    /// Passes a complete call through the gate, reports the decision, and hands the
    /// call to the dispatcher.
    async fn submit_call(
        &mut self,
        id: CallId,
        name: String,
        input: Result<serde_json::Value, InvalidArguments>,
        c: &mut Collected,
        env: &CallEnv,
    ) {
        let (args, decided) = match input {
            // A name nothing implements (an MCP server the daemon's config lacks, a
            // made-up tool) is refused before the policy: asking a person to approve a
            // call that cannot run only wastes their time.
            Ok(args) if self.gate.unknown(&name).is_some() => {
                let reason = self.gate.unknown(&name).unwrap_or_default();
                let tier = self.gate.tier(&name, &args);
                (args, refused(tier, reason, Judgement::UnknownTool))
            }
            Ok(args) => {
                let decided = self.gate.decide(&name, &args);
                if let Some(limited) = &decided.limited {
                    self.emitter
                        .emit(rate_limited_event(limited, Some(&name)))
                        .await;
                }
                (args, decided)
            }
            Err(invalid) => {
                // Reported and stored like any refused call, with what arrived (a call
                // cut off by the output limit, or arguments that are not JSON).
                let args = json!({ "received": invalid.raw });
                let reason = format!(
                    "{invalid}. Send the call again with a JSON object that matches the tool's schema."
                );
                let tier = self.gate.tier(&name, &args);
                (args, refused(tier, reason, Judgement::InvalidArguments))
            }
        };
        let Decided {
            tier,
            disposition,
            trail,
            limited: _,
        } = decided;
        let reason = match &disposition {
            Disposition::Run => None,
            Disposition::Ask { reason } => Some(reason.clone()),
            Disposition::Refuse { reason, .. } => {
                c.refused += 1;
                Some(reason.clone())
            }
        };
        self.emitter
            .emit(EventPayload::ToolCallStarted {
                call_id: id.to_string(),
                tool: name.clone(),
                args: args.clone(),
                tier,
                decision: CallDecision::from(&disposition),
                reason,
            })
            .await;
        c.blocks.push(ContentBlock::ToolUse {
            id: id.clone(),
            name: name.clone(),
            input: args.clone(),
        });
        let tool = self.gate.tool(&name);
        let mutating = tool.as_ref().is_none_or(|t| t.is_mutating(&args));
        self.plan.start(&id, describe_call(&name, &args));
        // What the person approving sees: every argument, escapes visible.
        let summary = crate::approval::render::describe_call_whole(&name, &args);
        let on_behalf = match self.parent {
            Some(parent) => format!("{summary} (on behalf of task {parent})"),
            None => summary,
        };
        let spec = CallSpec {
            call_id: id,
            summary: on_behalf,
            name,
            tier,
            args,
            tool,
            mutating,
            disposition,
            trail,
        };
        self.dispatcher.submit(env, spec);
    }

    /// Every started call finishes (or sees the cancellation) before the turn ends;
    /// their events are forwarded meanwhile.
    async fn drain(
        &mut self,
        env: CallEnv,
        mut events_rx: CallEvents,
    ) -> (Vec<(Submitted, CallResult)>, Vec<CallResult>) {
        let dispatcher = std::mem::replace(&mut self.dispatcher, Dispatcher::new());
        let finished = {
            let wait = dispatcher.finish();
            tokio::pin!(wait);
            loop {
                tokio::select! {
                    Some(ev) = events_rx.recv() => self.emitter.emit(ev).await,
                    done = &mut wait => break done,
                }
            }
        };
        // The last sender: once it is gone, what is queued is all there is.
        drop(env);
        while let Ok(ev) = events_rx.try_recv() {
            self.emitter.emit(ev).await;
        }
        finished
    }

    /// Tool results, in call order, whatever happened to the stream: recorded in the
    /// transcript, the plan, the session's tool statistics and the audit log.
    fn fold_results(&mut self, calls: &[(Submitted, CallResult)]) -> Folded {
        let mut folded = Folded {
            results: Vec::with_capacity(calls.len()),
            fatal: None,
            signatures: Vec::with_capacity(calls.len()),
        };
        for (call, result) in calls {
            let cref = ToolCallRef {
                call_id: &call.call_id,
                tool: &call.name,
                tier: call.tier,
                args: &call.args,
                decision: result.decision,
                reason: result.reason.as_deref(),
                trail: &result.trail,
            };
            for h in self.emitter.hooks() {
                h.after_tool(&self.emitter.task_ref(), &cref, result.outcome);
            }
            self.ctx
                .record_tool_call(&call.name, !result.ok, result.duration_ms);
            self.plan.finish(&call.call_id, result.ok, &result.output);
            let entry = json!({"kind": "tool_result", "call_id": call.call_id, "tool": call.name, "ok": result.ok, "output": result.output});
            self.emitter.append(&entry);
            if result.fatal && folded.fatal.is_none() {
                folded.fatal = Some(format!("{} failed fatally: {}", call.name, result.output));
            }
            folded
                .signatures
                .push((call.name.clone(), call.args.clone()));
            folded.results.push(ContentBlock::ToolResult {
                tool_use_id: call.call_id.clone(),
                content: wrap_tool_output(&call.name, result.ok, &result.output),
                is_error: !result.ok,
            });
        }
        folded
    }

    /// Folds the results into the conversation and says how the call ended.
    pub(in crate::agent) async fn conclude(mut self, mut c: Collected) -> CallEnd {
        let folded = self.fold_results(&c.calls);
        if !c.calls.is_empty() {
            let plan = self.plan.plan().clone();
            let progress = self.plan.progress();
            self.emitter
                .emit(EventPayload::PlanUpdated { plan, progress })
                .await;
        }
        if let Some(err) = c.error.take() {
            // The partial turn is dropped from the history, but the calls that ran are
            // recorded above (transcript, plan, audit) and remembered by the dispatcher.
            return self.after_stream_error(err, c.blocks, c.text, folded.results);
        }

        if !c.text.is_empty() {
            c.blocks.push(ContentBlock::Text {
                text: c.text.clone(),
            });
        }
        let mut full_text = streamed_text(&c.blocks, "");
        if c.calls.is_empty() && full_text.trim().is_empty() {
            // An answer is always recorded, so roles keep alternating for the session's
            // next task (chat templates reject two user messages in a row) and the user
            // sees that the model said nothing.
            full_text = EMPTY_ANSWER.to_owned();
            c.blocks.push(ContentBlock::Text {
                text: full_text.clone(),
            });
        }
        self.record_turn(c.blocks, folded.results);
        let called_tools = !c.calls.is_empty();
        CallEnd::Turn(Turn {
            text: full_text,
            finish: c.finish.unwrap_or(if called_tools {
                FinishReason::ToolUse
            } else {
                FinishReason::Stop
            }),
            all_refused: called_tools && c.refused == c.calls.len(),
            calls: folded.signatures,
            fatal: folded.fatal,
        })
    }

    fn record(&mut self, message: Message) {
        record(self.ctx, self.emitter, message);
    }

    /// Records the assistant's message and the user message with the tool results,
    /// each when it has content.
    fn record_turn(&mut self, blocks: Vec<ContentBlock>, results: Vec<ContentBlock>) {
        if !blocks.is_empty() {
            self.record(Message {
                role: Role::Assistant,
                content: blocks,
            });
        }
        if !results.is_empty() {
            self.record(Message {
                role: Role::User,
                content: results,
            });
        }
    }

    /// A failed stream: cancelled (keep what ran, stop), or what
    /// [`call_end`] makes of it.
    fn after_stream_error(
        &mut self,
        err: LlmError,
        mut blocks: Vec<ContentBlock>,
        tail: String,
        results: Vec<ContentBlock>,
    ) -> CallEnd {
        if !matches!(err, LlmError::Cancelled) {
            return call_end(err);
        }
        // Stopped while the model wrote: its text so far is kept, marked as cut, and
        // calls that ran with their (possibly "cancelled") results.
        let cut = !streamed_text(&blocks, &tail).trim().is_empty();
        if cut {
            blocks.push(ContentBlock::Text {
                text: format!("{tail}{CUT_MARKER}"),
            });
        }
        if cut || !results.is_empty() {
            self.record(Message {
                role: Role::Assistant,
                content: blocks,
            });
        }
        if !results.is_empty() {
            self.record(Message {
                role: Role::User,
                content: results,
            });
        }
        call_end(err)
    }
}

/// What a failed stream (other than a cancel's recording, the collector's) means for
/// the task: fatal errors fail it, an overflow goes to the context keeper, transient
/// ones go to the state machine, which decides whether to try again.
fn call_end(err: LlmError) -> CallEnd {
    match err {
        LlmError::Cancelled => CallEnd::Cancelled,
        LlmError::ContextOverflow(o) => CallEnd::Overflow(o),
        e @ (LlmError::Auth(_)
        | LlmError::BadRequest(_)
        | LlmError::NotFound(_)
        | LlmError::NoToolSupport(_)
        | LlmError::Config(_)
        | LlmError::Http { .. }
        | LlmError::RetriesExhausted { .. }) => {
            CallEnd::Finish(TaskStatus::Failed, failure::model_failure(&e))
        }
        // A local server still reading the prompt would only queue a new request.
        LlmError::NoFirstToken(t) if t.local => CallEnd::Finish(
            TaskStatus::Failed,
            failure::model_failure(&LlmError::NoFirstToken(t)),
        ),
        e @ LlmError::NoFirstToken(_) => CallEnd::Failed(e),
        e @ (LlmError::RateLimited { .. }
        | LlmError::Overloaded { .. }
        | LlmError::Server { .. }
        | LlmError::Connect(_)
        | LlmError::Stalled(_)
        | LlmError::Truncated(_)
        | LlmError::Protocol(_)) => CallEnd::Failed(e),
    }
}

/// A call refused before the policy sees it, for the reason `judgement` names.
fn refused(tier: crate::catalog::Tier, reason: String, judgement: Judgement) -> Decided {
    Decided {
        tier,
        disposition: Disposition::Refuse {
            decision: AuditDecision::Denied,
            reason,
        },
        trail: Trail::from(judgement),
        limited: None,
    }
}
