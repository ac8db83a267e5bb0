//! Keeping a request within the model's window, in tokens: before it is sent (the
//! calibrated estimate against the budget) and after the server says it does not fit.
//!
//! The budget is the context window less the output budget and a reserve. A request
//! over it is made smaller in this order: the oldest large tool results are trimmed
//! (head and tail kept, even in the recent messages a full compaction keeps), then a
//! full compaction summarises the older history when there is any. Each step that
//! changed the history is a `compaction` event whose numbers are whole-request
//! estimates.
//!
//! A server's overflow teaches two things before that: its real limit when it states
//! one (for the rest of the task, logged) and its count of the request's tokens, which
//! sets the estimator's ratio at once, so the retry is sized by the server's own
//! tokenizer. Only a request that nothing more can shrink fails the task, with a message
//! saying what was tried and what is left (the system prompt, the tools, the prompt).

use familiar_protocol::events::{CompactionMode, EventPayload};
use familiar_protocol::task::Usage;
use tokio_util::sync::CancellationToken;

use crate::agent::context::ContextKeeper;
use crate::agent::context::compaction::{CONTEXT_RESERVE, HISTORY_LIMIT, MAX_FULL_COMPACTIONS};
use crate::agent::context::trim;
use crate::agent::emitter::Emitter;
use crate::llm::{ContextOverflow, LlmClient, Message, Request};

/// What making room came to.
pub(in crate::agent) struct Room {
    /// The request's estimate now.
    pub(in crate::agent) estimate: u64,
    /// What a summary cost on the way.
    pub(in crate::agent) usage: Usage,
    /// Whether the history got smaller.
    pub(in crate::agent) changed: bool,
}

/// The tokens kept free below the window besides the output: [`CONTEXT_RESERVE`], or an
/// eighth of a small window.
pub fn reserve(context_window: u32) -> u64 {
    CONTEXT_RESERVE.min(u64::from(context_window) / 8)
}

impl ContextKeeper {
    /// The input tokens a request may take, or `None` when the window is unknown.
    pub(in crate::agent) fn input_budget(&self, max_tokens: u32) -> Option<u64> {
        let window = self.model.context_window;
        (window > 0).then(|| {
            u64::from(window)
                .saturating_sub(u64::from(max_tokens))
                .saturating_sub(reserve(window))
        })
    }

    /// Makes `request` fit its budget when it does not (or compacts a history past
    /// [`HISTORY_LIMIT`] messages): trims, then compacts, rebuilding the request.
    pub(in crate::agent) async fn make_room(
        &mut self,
        client: &mut LlmClient,
        emitter: &mut Emitter,
        request: &mut Request,
        cancel: &CancellationToken,
    ) -> Room {
        let mut room = Room {
            estimate: self.model.estimator.request(request),
            usage: Usage::default(),
            changed: false,
        };
        let Some(budget) = self.input_budget(request.max_tokens) else {
            return room;
        };
        if room.estimate > budget {
            self.trim_results(emitter, request, budget, &mut room).await;
        }
        let long = self.session.ctx.history.len() > HISTORY_LIMIT;
        if room.estimate <= budget && !long {
            return room;
        }
        if self.full_compactions >= MAX_FULL_COMPACTIONS {
            self.tried.push(format!(
                "no further full compaction ({MAX_FULL_COMPACTIONS} per task)"
            ));
            return room;
        }
        let (cut, usage) = self
            .full_compact(client, emitter, request, room.estimate, cancel)
            .await;
        room.usage.add(&usage);
        if cut {
            let after = self.model.estimator.request(request);
            room.changed |= after < room.estimate;
            room.estimate = after;
        }
        room
    }

    /// Trims the oldest large tool results until `request` fits `budget` or none is left
    /// to trim; a `compaction` event (`trim`) when any was.
    async fn trim_results(
        &mut self,
        emitter: &mut Emitter,
        request: &mut Request,
        budget: u64,
        room: &mut Room,
    ) {
        let est = self.model.estimator;
        let fixed = est.text(&request.system) + est.tools(&request.tools);
        let chars_per_token = 4.0 / est.factor();
        let floor = trim::floor_chars(self.model.context_window, &est);
        // A tenth below the budget, so the next iterations fit without cutting (and
        // changing the cached prefix) again.
        let target = budget - budget / 10;
        let history = &mut self.session.ctx.history;
        let over = |h: &[Message]| {
            let over = (fixed + est.messages(h)).saturating_sub(target);
            (over as f64 * chars_per_token).ceil() as usize
        };
        let mut trimmed = trim::trim_oldest(history, floor, over);
        // Still too long: what is left of each result is only its marker, which says
        // how to read it again.
        let mut floor_text = format!("{floor} characters each");
        if over(history) > 0 {
            trimmed += trim::trim_oldest(history, 0, over);
            floor_text = "their marker alone when that was not enough".to_owned();
        }
        if trimmed == 0 {
            self.tried
                .push("no tool result was left to trim".to_owned());
            return;
        }
        request.messages = history.clone();
        let messages = history.len();
        let after = est.request(request);
        self.tried.push(format!(
            "trimmed tool results {trimmed} time(s), oldest first, to as little as \
             {floor_text}"
        ));
        for h in emitter.hooks() {
            h.compacted(&emitter.task_ref(), CompactionMode::Trim);
        }
        emitter
            .emit(EventPayload::Compaction {
                mode: CompactionMode::Trim,
                tokens_before: room.estimate,
                tokens_after: after,
                messages_before: messages,
                messages_after: messages,
            })
            .await;
        room.estimate = after;
        room.changed = true;
    }

    /// Makes room after `overflow`, learning the server's limit and count first; rebuilds
    /// `request` and returns its new estimate, or `None` when nothing could be made
    /// smaller (the request would fail again); and what a summary cost either way.
    pub(in crate::agent) async fn recover_overflow(
        &mut self,
        client: &mut LlmClient,
        emitter: &mut Emitter,
        overflow: &ContextOverflow,
        request: &mut Request,
        estimate: u64,
        cancel: &CancellationToken,
    ) -> (Option<u64>, Usage) {
        if let Some(limit) = overflow.limit {
            let limit = u32::try_from(limit).unwrap_or(u32::MAX);
            let configured = self.model.context_window;
            if configured == 0 || limit < configured {
                tracing::warn!(
                    task_id = %emitter.task_id(),
                    "the server's context is {limit} tokens, not the configured context_window \
                     of {configured}: using {limit} for the rest of the task"
                );
                self.model.context_window = limit;
            }
        }
        // The server's own count is the best calibration there is. Without one, the
        // request was at least past the window: a tenth more is assumed.
        let window = u64::from(self.model.context_window);
        let counted = overflow
            .requested
            .unwrap_or_else(|| estimate.max(window) + window / 10);
        self.model.estimator.calibrate_exact(estimate, counted);
        let room = self.make_room(client, emitter, request, cancel).await;
        tracing::info!(
            task_id = %emitter.task_id(),
            server_count = counted,
            estimate = room.estimate,
            factor = self.model.estimator.factor(),
            changed = room.changed,
            "context overflow: made room"
        );
        (room.changed.then_some(room.estimate), room.usage)
    }

    /// The task's failure message for a request that does not fit even after all that
    /// could be tried: the limit, what was tried, what is left, and the settings.
    pub(in crate::agent) fn overflow_failure(
        &self,
        overflow: &ContextOverflow,
        request: &Request,
    ) -> String {
        let provider = &self.settings.provider;
        let limit = match overflow.limit {
            Some(l) => format!("the server's limit of {l} tokens"),
            None => "the server's context".to_owned(),
        };
        // The same step can be tried before the request is sent and after the refusal.
        let mut steps: Vec<&str> = Vec::new();
        for t in &self.tried {
            if !steps.contains(&t.as_str()) {
                steps.push(t);
            }
        }
        let tried = if steps.is_empty() {
            "nothing could be made smaller".to_owned()
        } else {
            steps.join("; ")
        };
        let est = &self.model.estimator;
        let fixed = est.text(&request.system) + est.tools(&request.tools);
        let prompt = est.text(&self.persona.prompt);
        format!(
            "the request does not fit {limit} ({}). Tried: {tried}. What is left is about \
             {fixed} tokens of system prompt and tools, {prompt} of the task's prompt and \
             {} of recent messages, with {} kept for the answer. Give the server a larger \
             context (llama-server -c, Ollama num_ctx / OLLAMA_CONTEXT_LENGTH, vLLM \
             --max-model-len) and set the same number as context_window in \
             [providers.{provider}], or lower max_output_tokens there",
            overflow.message,
            est.messages(&request.messages),
            request.max_tokens,
        )
    }
}
