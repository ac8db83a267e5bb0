//! The compactor: compacting a running task's context: micro before every model call, full (a summary
//! written by the model) when the request's estimate says the window is nearly full.
//! Each compaction is reported as a `compaction` event and to the hooks.

use futures::StreamExt;

use crate::agent::compaction::{
    CONTEXT_RESERVE, CompactionMode, MAX_FACTS, MAX_FULL_COMPACTIONS, apply_cut, merge_facts,
    micro_compact, needs_full, parse_summary, split_point, summary_prompt,
};
use crate::agent::events::EventPayload;
use crate::agent::request::SystemPrompt;
use crate::agent::task::Task;
use crate::llm::{ClientEvent, LlmClient, LlmError, Message, Request, StreamEvent, Usage};

impl Task {
    /// Clears old tool results when that saves enough.
    pub(super) async fn micro_compact(&mut self) {
        let history = &mut self.session.ctx.history;
        let Some(stats) = micro_compact(history) else {
            return;
        };
        let messages = history.len();
        self.compacted(CompactionMode::Micro);
        self.emit(EventPayload::Compaction {
            mode: CompactionMode::Micro.as_str().into(),
            tokens_before: (stats.chars_saved / 4) as u64,
            tokens_after: 0,
            messages_before: messages,
            messages_after: messages,
        })
        .await;
    }

    /// Runs a full compaction when `estimate` (of `request`) leaves too little room, and
    /// rebuilds the request over the compacted history. Returns the request's estimate.
    pub(super) async fn compact_if_full(
        &mut self,
        client: &mut LlmClient,
        request: &mut Request,
        estimate: u64,
        system: &SystemPrompt,
    ) -> u64 {
        let due = self.model.context_window > 0
            && needs_full(
                estimate,
                self.model.context_window,
                u64::from(request.max_tokens) + CONTEXT_RESERVE,
                self.session.ctx.history.len(),
            )
            && self.progress.full_compactions < MAX_FULL_COMPACTIONS;
        if !due {
            return estimate;
        }
        self.full_compact(client, estimate).await;
        request.system = system.build(self, &self.session.ctx);
        request.messages = self.session.ctx.history.clone();
        self.model.estimator.request(request)
    }

    /// Summarises the older history with the model; on failure, keeps going without.
    /// Returns whether the history was cut.
    pub(in crate::agent) async fn full_compact(
        &mut self,
        client: &mut LlmClient,
        tokens_before: u64,
    ) -> bool {
        let ctx = &self.session.ctx;
        let Some(cut) = split_point(&ctx.history) else {
            return false;
        };
        self.progress.full_compactions += 1;
        let messages_before = ctx.history.len();
        let prompt = summary_prompt(ctx.summary.as_deref(), &ctx.facts, &ctx.history[..cut]);
        let request = Request {
            model: client
                .model_override()
                .unwrap_or(&self.model.name)
                .to_owned(),
            system: "You write concise, faithful summaries of agent sessions.".into(),
            messages: vec![Message::user_text(prompt)],
            tools: Vec::new(),
            max_tokens: self.max_output_tokens(),
            temperature: client.temperature(),
        };
        let answer = match self.summarise(client, &request).await {
            Ok(answer) => answer,
            Err(e) => {
                tracing::warn!(task_id = %self.spec.task_id, "compaction summary failed: {e}");
                return false;
            }
        };
        let (summary, facts) = parse_summary(&answer);
        if summary.is_empty() {
            return false;
        }
        let ctx = &mut self.session.ctx;
        ctx.summary = Some(summary);
        merge_facts(&mut ctx.facts, facts, MAX_FACTS);
        apply_cut(&mut ctx.history, cut, &self.spec.prompt);
        self.compacted(CompactionMode::Full);
        let tokens_after = self.model.estimator.messages(&self.session.ctx.history);
        let messages_after = self.session.ctx.history.len();
        self.emit(EventPayload::Compaction {
            mode: CompactionMode::Full.as_str().into(),
            tokens_before,
            tokens_after,
            messages_before,
            messages_after,
        })
        .await;
        true
    }

    /// The model's answer to the summary request; its tokens count toward the task.
    async fn summarise(
        &mut self,
        client: &mut LlmClient,
        request: &Request,
    ) -> Result<String, LlmError> {
        for h in &self.rt.hooks {
            h.before_llm(&self.task_ref(), request);
        }
        let mut answer = String::new();
        let mut usage = Usage::default();
        let mut failed = None;
        {
            let mut stream = client.stream(request, self.clock.cancel.child_token());
            while let Some(item) = stream.next().await {
                match item {
                    Ok(ClientEvent::Event(StreamEvent::TextDelta { text })) => {
                        answer.push_str(&text)
                    }
                    Ok(ClientEvent::Event(StreamEvent::Usage { usage: u })) => {
                        self.progress.usage.add(&u);
                        self.family.budget.spend_tokens(u.total());
                        usage.add(&u);
                    }
                    Ok(ClientEvent::AttemptDiscarded) => answer.clear(),
                    Ok(ClientEvent::Repetition { keep, .. }) => {
                        if answer.is_char_boundary(keep) {
                            answer.truncate(keep);
                        }
                    }
                    // A summary request offers no tools; the rest is progress.
                    Ok(ClientEvent::Event(
                        StreamEvent::ThinkingDelta { .. }
                        | StreamEvent::ThinkingComplete { .. }
                        | StreamEvent::ToolCallStarted { .. }
                        | StreamEvent::ToolCallComplete { .. }
                        | StreamEvent::Finish { .. }
                        | StreamEvent::PromptProgress { .. },
                    ))
                    | Ok(ClientEvent::Retry { .. } | ClientEvent::ModelFallback { .. }) => {}
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
        }
        let result = match &failed {
            Some(e) => Err(e),
            None => Ok(&usage),
        };
        for h in &self.rt.hooks {
            h.after_llm(&self.task_ref(), result);
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(answer),
        }
    }

    fn compacted(&self, mode: CompactionMode) {
        for h in &self.rt.hooks {
            h.compacted(&self.task_ref(), mode);
        }
    }
}
