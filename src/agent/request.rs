//! What the model is sent each iteration: the system prompt over a fresh snapshot of
//! the machine, the tools the soul may use, and the history after compaction, with the
//! notes the loop queued for the model added to it.

use std::sync::Arc;

use crate::agent::prompt::{PromptParts, system_prompt};
use crate::agent::task::Task;
use crate::llm::{LlmClient, Request};
use crate::store::Context;

/// The parts of the system prompt that stay fixed for one iteration, so it can be built
/// again after a full compaction changed the summary and facts.
pub(super) struct SystemPrompt {
    tool_names: Vec<&'static str>,
    snapshot_text: String,
    iteration: u32,
}

impl SystemPrompt {
    pub(super) fn build(&self, task: &Task, ctx: &Context) -> String {
        system_prompt(&PromptParts {
            soul: &task.spec.soul,
            policy: &task.rt.policy,
            tools: &self.tool_names,
            workspace: &task.place.workspace,
            snapshot_text: &self.snapshot_text,
            summary: ctx.summary.as_deref(),
            facts: &ctx.facts,
            iteration: self.iteration,
            max_iterations: task.limits.max_iterations,
        })
    }
}

impl Task {
    /// The request for this iteration and its estimated input tokens.
    pub(super) async fn build_request(&mut self, client: &mut LlmClient) -> (Request, u64) {
        let system = SystemPrompt {
            tool_names: self
                .rt
                .tools
                .offered(&self.spec.soul.grant.tools)
                .iter()
                .map(|t| t.info().name)
                .collect(),
            snapshot_text: self.snapshot_text().await,
            iteration: self.progress.iteration,
        };
        if !self.progress.notes.is_empty() {
            let text = std::mem::take(&mut self.progress.notes).join("\n\n");
            self.add_user_note(text);
        }
        self.micro_compact().await;
        let mut request = Request {
            model: client
                .model_override()
                .unwrap_or(&self.model.name)
                .to_owned(),
            system: system.build(self, &self.session.ctx),
            messages: self.session.ctx.history.clone(),
            tools: self.rt.tools.definitions(&self.spec.soul.grant.tools),
            max_tokens: self.max_output_tokens(),
            temperature: None,
        };
        let estimate = self.model.estimator.request(&request);
        let estimate = self
            .compact_if_full(client, &mut request, estimate, &system)
            .await;
        (request, estimate)
    }

    /// The machine's state for the prompt. The snapshot reads /proc: off the async
    /// threads.
    async fn snapshot_text(&self) -> String {
        let snap = Arc::clone(&self.rt.snapshotter);
        let ws = self.place.workspace.clone();
        tokio::task::spawn_blocking(move || {
            let mut s = snap.lock().unwrap_or_else(|e| e.into_inner());
            s.take(Some(&ws)).to_prompt_text()
        })
        .await
        .unwrap_or_else(|e| format!("(snapshot unavailable: {e})"))
    }
}
