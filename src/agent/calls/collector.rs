//! Collecting one model call: the stream loop that passes each complete tool call
//! through the gate and submits it to the dispatcher while the model is still writing,
//! and drains the calls' events until every call has finished: what is left is the
//! [`Collected`]. What the call then
//! becomes (the results folded in call order, the [`Turn`](super::ending::Turn) or a
//! failure) is [`ending`](super::ending).
//!
//! The calls' events are forwarded while the stream runs, so an approval prompt is seen
//! at once, not at the end of the model's answer.

use familiar_protocol::events::{CallDecision, EventPayload};
use familiar_protocol::ids::{CallId, TaskId};
use familiar_protocol::task::Usage;
use futures::StreamExt;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::agent::calls::dispatch::{
    CallEnv, CallResult, CallSpec, Dispatcher, Disposition, Submitted,
};
use crate::agent::calls::gate::{CallGate, Decided, rate_limited_event};
use crate::agent::emitter::Emitter;
use crate::agent::plan::{PlanTracker, describe_call};
use crate::agent::trail::{Judgement, Trail};
use crate::llm::{
    ClientEvent, ContentBlock, ContextOverflow, FinishReason, InvalidArguments, LlmClient,
    LlmError, Request, StreamEvent,
};
use crate::store::{AuditDecision, Context};

/// What one model call left behind once every call it made has finished.
#[derive(Default)]
pub(in crate::agent) struct Collected {
    /// The assistant's content so far (text before a call, thinking, calls).
    pub(super) blocks: Vec<ContentBlock>,
    /// Text after the last block.
    pub(super) text: String,
    pub(super) finish: Option<FinishReason>,
    pub(super) usage: Usage,
    /// Calls the gate refused.
    pub(super) refused: usize,
    pub(in crate::agent) error: Option<LlmError>,
    pub(super) calls: Vec<(Submitted, CallResult)>,
    /// Set when the repetition guard cut the answer.
    pub(super) repeated: Option<RepeatCut>,
}

/// An answer the repetition guard cut: the server never sends its counts for it.
pub(in crate::agent) struct RepeatCut {
    /// Copies in a row when the guard fired.
    pub(in crate::agent) repeats: usize,
    /// Everything the model wrote of it (the copies cut included), which it was paid for.
    pub(in crate::agent) streamed: String,
}

impl Collected {
    pub(in crate::agent) fn usage(&self) -> &Usage {
        &self.usage
    }

    pub(in crate::agent) fn repeated(&self) -> Option<&RepeatCut> {
        self.repeated.as_ref()
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
pub(super) fn streamed_text(blocks: &[ContentBlock], tail: &str) -> String {
    let mut text: String = blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            ContentBlock::Thinking { .. }
            | ContentBlock::Reminder { .. }
            | ContentBlock::ToolUse { .. }
            | ContentBlock::ToolResult { .. }
            | ContentBlock::Image { .. } => None,
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

/// Closes an answer cut for repeating itself (`… {repeats} times]` follows), so the
/// model reads on the next turn what happened to its answer.
pub const DEGENERATE_MARKER: &str = "\n\n[familiar cut this answer here: the same text repeated";

/// The events of one turn's calls, as they run.
pub(in crate::agent) type CallEvents = mpsc::UnboundedReceiver<EventPayload>;

/// Collects one model call: the stream, the gate's decisions, the dispatcher's calls,
/// and the conversation they are folded into.
pub(in crate::agent) struct Collector<'t> {
    pub(super) gate: &'t CallGate,
    pub(super) emitter: &'t mut Emitter,
    pub(super) plan: &'t mut PlanTracker,
    /// The session's context: the turn's messages and its tool statistics go here.
    pub(super) ctx: &'t mut Context,
    /// A sub-task's parent: approval summaries say on whose behalf it asks.
    pub(super) parent: Option<&'t TaskId>,
    pub(super) dispatcher: Dispatcher,
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
                c.repeated = Some(RepeatCut {
                    repeats,
                    streamed: streamed_text(&c.blocks, &c.text),
                });
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
            Disposition::Ask { reason, .. } => Some(reason.clone()),
            Disposition::Refuse { reason, .. } => {
                c.refused += 1;
                Some(reason.clone())
            }
        };
        self.emitter
            .emit(EventPayload::ToolCallStarted {
                call_id: id.clone(),
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
}

/// A call refused before the policy sees it, for the reason `judgement` names.
fn refused(tier: familiar_protocol::tier::Tier, reason: String, judgement: Judgement) -> Decided {
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
