//! What the model is sent each iteration: the task's stable system prompt, the tools
//! the soul may use in a stable order, and the history after compaction, whose newest
//! message gets this iteration's system reminder (the machine's state, the notes the
//! loop queued for the model, progress and budget).
//!
//! The reminder is appended to the history itself and never rewritten, so the next
//! request repeats this one byte for byte up to its new tail (docs/providers.md).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::agent::events::EventPayload;
use crate::agent::prompt::{PromptParts, system_prompt};
use crate::agent::reminder::{self, Budget, Environment, Inputs};
use crate::agent::steering;
use crate::agent::task::Task;
use crate::llm::{ContentBlock, LlmClient, Message, Request, Role};
use crate::snapshot::Snapshot;
use crate::store::Context;

/// How long the reminder's sources may take together; a slower snapshot is skipped
/// (the reminder says so), never waited for.
pub const REMINDER_DEADLINE: Duration = Duration::from_secs(1);

/// What the system prompt is built from besides the task: the same for the whole task
/// (the summary and facts change only with a full compaction, which rewrites the
/// history anyway).
pub(super) struct SystemPrompt {
    tool_names: Vec<String>,
}

impl SystemPrompt {
    pub(super) fn build(&self, task: &Task, ctx: &Context) -> String {
        let tools: Vec<&str> = self.tool_names.iter().map(String::as_str).collect();
        system_prompt(&PromptParts {
            soul: &task.spec.soul,
            policy: &task.rt.policy,
            tools: &tools,
            workspace: &task.place.workspace,
            summary: ctx.summary.as_deref(),
            facts: &ctx.facts,
            memory: &task.memory,
            delegates: task.delegates(),
        })
    }
}

impl Task {
    /// The system prompt's parts for this task.
    pub(super) fn system_parts(&self) -> SystemPrompt {
        SystemPrompt {
            tool_names: self
                .rt
                .tools
                .offered(&self.spec.soul.grant.tools)
                .iter()
                .map(|t| t.info().name)
                .chain(self.mcp.names())
                .map(str::to_owned)
                .collect(),
        }
    }

    /// The tools this task offers: its soul's built-ins in the allowlist's order, then
    /// its MCP tools sorted by name.
    fn tool_definitions(&self) -> Vec<crate::llm::ToolDef> {
        let mut defs = self.rt.tools.definitions(&self.spec.soul.grant.tools);
        defs.extend_from_slice(self.mcp.definitions());
        defs
    }

    /// The tier of a call: the catalog's for a built-in (by its arguments), the
    /// server's for an MCP tool, `system_critical` for a name nobody offers.
    pub(super) fn tier_of(&self, name: &str, args: &serde_json::Value) -> crate::policy::Tier {
        match crate::catalog::info(name) {
            Some(i) => crate::catalog::tier_for_call(i, args),
            None => self
                .mcp
                .tier(name)
                .unwrap_or(crate::policy::Tier::SystemCritical),
        }
    }

    /// The request for this iteration and its estimated input tokens.
    pub(super) async fn build_request(&mut self, client: &mut LlmClient) -> (Request, u64) {
        let system = self.system_parts();
        self.micro_compact().await;
        self.add_steering().await;
        self.add_reminder().await;
        let mut request = Request {
            model: client
                .model_override()
                .unwrap_or(&self.model.name)
                .to_owned(),
            system: system.build(self, &self.session.ctx),
            messages: self.session.ctx.history.clone(),
            tools: self.tool_definitions(),
            max_tokens: self.max_output_tokens(),
            temperature: client.temperature(),
        };
        let estimate = self.model.estimator.request(&request);
        let estimate = self
            .compact_if_full(client, &mut request, estimate, &system)
            .await;
        (request, estimate)
    }

    /// Appends the messages the user sent while the task ran (at this boundary: after
    /// the last tool batch, before the model call) to the newest user message, as the
    /// reminder is: earlier messages stay byte for byte.
    async fn add_steering(&mut self) {
        for message in self.spec.steering.take() {
            let entry = json!({"kind": "steering", "task_id": self.spec.task_id,
                "iteration": self.progress.iteration, "message": message});
            self.session.append(&entry);
            append_to_newest_user(
                &mut self.session.ctx.history,
                ContentBlock::Text {
                    text: steering::as_text(&message),
                },
            );
            self.emit(EventPayload::SteeringReceived { message }).await;
        }
    }

    /// Appends this iteration's system reminder to the newest message (a new user
    /// message when the newest is the model's), and records it in the transcript.
    async fn add_reminder(&mut self) {
        let started = Instant::now();
        let snapshot = self.snapshot_within(REMINDER_DEADLINE).await;
        let notes = std::mem::take(&mut self.progress.notes);
        let environment = match &snapshot {
            Some(current) => Environment::Fresh {
                previous: self.progress.last_snapshot.as_ref(),
                current,
            },
            None => Environment::Skipped,
        };
        let text = reminder::build(&Inputs {
            environment,
            plan: self.plan.plan(),
            budget: Budget {
                iteration: self.progress.iteration,
                max_iterations: self.limits.max_iterations,
                tokens_used: self.progress.usage.total(),
                max_tokens: self.limits.max_tokens,
                elapsed: self.clock.elapsed(),
                max_wall_clock: self.limits.max_wall_clock,
            },
            notes: &notes,
        });
        if snapshot.is_some() {
            self.progress.last_snapshot = snapshot;
        }
        tracing::debug!(
            chars = text.chars().count(),
            micros = started.elapsed().as_micros() as u64,
            "system reminder"
        );
        let entry = json!({"kind": "reminder", "task_id": self.spec.task_id,
            "iteration": self.progress.iteration, "text": text});
        self.session.append(&entry);
        append_to_newest_user(
            &mut self.session.ctx.history,
            ContentBlock::Reminder { text },
        );
    }

    /// A snapshot of the machine, or `None` when it takes longer than `deadline`. It
    /// reads /proc: off the async threads.
    async fn snapshot_within(&self, deadline: Duration) -> Option<Snapshot> {
        let snap = Arc::clone(&self.rt.snapshotter);
        let ws = self.place.workspace.clone();
        let take = tokio::task::spawn_blocking(move || {
            let mut s = snap.lock().unwrap_or_else(|e| e.into_inner());
            s.take(Some(&ws))
        });
        match tokio::time::timeout(deadline, take).await {
            Ok(Ok(s)) => Some(s),
            Ok(Err(e)) => {
                tracing::warn!("the snapshot failed: {e}");
                None
            }
            Err(_) => {
                tracing::warn!("the snapshot took longer than {deadline:?}: skipped");
                None
            }
        }
    }
}

/// Adds `block` to the newest message when it is the user's (the prompt, or the tool
/// results not yet sent), else as a new user message: roles keep alternating and no
/// message the model has seen changes.
fn append_to_newest_user(history: &mut Vec<Message>, block: ContentBlock) {
    match history.last_mut() {
        Some(m) if m.role == Role::User => m.content.push(block),
        Some(_) | None => history.push(Message {
            role: Role::User,
            content: vec![block],
        }),
    }
}
