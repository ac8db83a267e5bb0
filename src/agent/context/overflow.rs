//! A request the server says does not fit its context: learn the server's real limit
//! when it states one (for the rest of the task, logged), run a full compaction (a
//! `compaction` event), and send the request again over the compacted history. Only a
//! request that still does not fit fails the task, with a message naming the limit and
//! the setting to change.

use tokio_util::sync::CancellationToken;

use crate::agent::context::ContextKeeper;
use crate::agent::emitter::Emitter;
use crate::llm::{ContextOverflow, LlmClient, Request, Usage};

impl ContextKeeper {
    /// Makes room after `overflow`; rebuilds `request` and returns its new estimate, or
    /// `None` when nothing could be compacted (the request would fail again); and what
    /// the summary cost either way.
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
        // The server's own count is the best calibration there is.
        if let Some(requested) = overflow.requested {
            self.model.estimator.calibrate(estimate, requested);
        }
        let (cut, usage) = self.full_compact(client, emitter, estimate, cancel).await;
        if !cut {
            return (None, usage);
        }
        request.system = self.system();
        request.messages = self.session.ctx.history.clone();
        (Some(self.model.estimator.request(request)), usage)
    }

    /// The task's failure message for a request that does not fit even after
    /// compaction (or could not be compacted).
    pub(in crate::agent) fn overflow_failure(&self, overflow: &ContextOverflow) -> String {
        let provider = &self.settings.provider;
        let limit = match overflow.limit {
            Some(l) => format!("the server's limit of {l} tokens"),
            None => "the server's context".to_owned(),
        };
        format!(
            "the request does not fit {limit} even after compacting the conversation ({}). \
             Give the server a larger context (llama-server -c, Ollama num_ctx / \
             OLLAMA_CONTEXT_LENGTH, vLLM --max-model-len) and set the same number as \
             context_window in [providers.{provider}], or lower max_output_tokens there",
            overflow.message
        )
    }
}
