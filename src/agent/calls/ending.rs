//! How one model call ends: from what the stream and its calls left ([`Collected`],
//! the collector's), the calls' results folded into the conversation in call order, the
//! answer recorded (cut, empty or whole), and what the task does next ([`CallEnd`]:
//! the [`Turn`] for the state machine, a retry, an overflow for the context keeper, or
//! the task's end in [`failure`](super::failure)'s words). The stream loop that fills
//! `Collected` is the [`collector`](super::collector).

use familiar_protocol::events::EventPayload;
use familiar_protocol::task::TaskStatus;
use serde_json::json;

use crate::agent::calls::collector::{Collected, Collector, streamed_text};
use crate::agent::calls::dispatch::{CallResult, Submitted};
use crate::agent::calls::failure;
use crate::agent::context::record;
use crate::agent::context::system_prompt::wrap_tool_output;
use crate::agent::hooks::ToolCallRef;
use crate::llm::{ContentBlock, ContextOverflow, FinishReason, LlmError, Message, Role};

/// What one model call and its tools produced.
#[derive(Debug)]
pub(in crate::agent) struct Turn {
    pub(in crate::agent) text: String,
    pub(in crate::agent) finish: FinishReason,
    /// Signatures of the calls, for loop detection.
    pub(in crate::agent) calls: Vec<(String, serde_json::Value)>,
    pub(in crate::agent) all_refused: bool,
    pub(in crate::agent) fatal: Option<String>,
    /// Copies in a row, when the repetition guard cut the answer.
    pub(in crate::agent) repeated: Option<usize>,
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

/// The calls' results folded into the conversation.
struct Folded {
    results: Vec<ContentBlock>,
    fatal: Option<String>,
    signatures: Vec<(String, serde_json::Value)>,
}

/// Closes an answer the task's stop cut (Ctrl-C, `cancel`, the wall clock, a daemon stop).
pub const CUT_MARKER: &str =
    "\n\n[familiar cut this answer here: the task was stopped while the model was still answering]";

/// What an answer with no text is recorded and reported as.
pub const EMPTY_ANSWER: &str = "(empty answer)";

impl<'t> Collector<'t> {
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
            if let Some(image) = &result.image {
                folded.results.push(ContentBlock::Image {
                    tool_use_id: call.call_id.clone(),
                    media_type: image.media_type.to_owned(),
                    path: image.path.clone(),
                    width: image.width,
                    height: image.height,
                });
            }
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
            repeated: c.repeated.as_ref().map(|r| r.repeats),
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
            self.record_turn(blocks, results);
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
