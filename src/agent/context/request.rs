//! What the model is sent each iteration: the soul's stable system prompt (the same
//! for every task and session of the soul), the tools
//! the soul may use in a stable order, and the history after compaction, whose newest
//! message gets this iteration's system reminder (the machine's state, the notes the
//! loop queued for the model, progress and budget).
//!
//! The reminder is appended to the history itself and never rewritten, so the next
//! request repeats this one byte for byte up to its new tail (docs/providers.md).

use std::sync::Arc;
use std::time::{Duration, Instant};

use familiar_protocol::events::EventPayload;
use familiar_protocol::task::{Plan, Usage};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::agent::context::reminder::{self, Budget, Environment, Inputs, Place};
use crate::agent::context::system_prompt::{PromptParts, system_prompt};
use crate::agent::context::{ContextKeeper, trim};
use crate::agent::emitter::Emitter;
use crate::agent::steering;
use crate::llm::{ContentBlock, LlmClient, Message, Request, Role, ToolDef};
use crate::snapshot::Snapshot;

/// How long the reminder's sources may take together; a slower snapshot is skipped
/// (the reminder says so), never waited for.
pub const REMINDER_DEADLINE: Duration = Duration::from_secs(1);

/// What one request is built from besides the session: the loop's state at this
/// iteration's boundary.
pub(in crate::agent) struct Boundary<'a> {
    /// The tools offered, in a stable order, and their names for the system prompt.
    pub(in crate::agent) tools: Vec<ToolDef>,
    pub(in crate::agent) tool_names: Vec<String>,
    /// Messages the user sent while the task ran, not yet read.
    pub(in crate::agent) steering: Vec<String>,
    /// Notes the loop queued for the model.
    pub(in crate::agent) notes: Vec<String>,
    pub(in crate::agent) plan: &'a Plan,
    pub(in crate::agent) budget: Budget,
    /// The task's: a summary request stops with it.
    pub(in crate::agent) cancel: &'a CancellationToken,
}

/// A request ready to send.
pub(in crate::agent) struct Built {
    pub(in crate::agent) request: Request,
    /// Its estimated input tokens.
    pub(in crate::agent) estimate: u64,
    /// What a full compaction's summary cost on the way (zero without one).
    pub(in crate::agent) usage: Usage,
}

impl ContextKeeper {
    /// The system prompt: the same for every task and session of the soul.
    pub(super) fn system(&self) -> String {
        let tools: Vec<&str> = self.tool_names.iter().map(String::as_str).collect();
        let p = &self.persona;
        system_prompt(&PromptParts {
            soul: &p.soul,
            policy: &p.policy,
            tools: &tools,
            memory: &p.memory,
            delegates: &p.delegates,
        })
    }

    /// The request for this iteration.
    pub(in crate::agent) async fn build_request(
        &mut self,
        client: &mut LlmClient,
        emitter: &mut Emitter,
        at: Boundary<'_>,
    ) -> Built {
        self.tool_names = at.tool_names;
        self.tried.clear();
        let est = self.model.estimator;
        // Tool results the model has not seen yet are cut to their share of the window
        // now; those it has seen stay as sent (the prompt cache).
        let cap = trim::result_cap_chars(self.model.context_window, &est);
        let capped = trim::cap_new_results(&mut self.session.ctx.history, cap);
        if capped > 0 {
            tracing::debug!(capped, cap, "tool results cut to their share of the window");
        }
        let fixed = est.text(&self.system()) + est.tools(&at.tools);
        self.micro_compact(emitter, fixed).await;
        self.add_steering(emitter, at.steering, at.budget.iteration)
            .await;
        self.add_reminder(emitter, at.notes, at.plan, at.budget)
            .await;
        let mut request = Request {
            model: client
                .model_override()
                .unwrap_or(&self.model.name)
                .to_owned(),
            system: self.system(),
            messages: self.session.ctx.history.clone(),
            tools: at.tools,
            max_tokens: self.settings.max_output_tokens,
            temperature: client.temperature(),
        };
        let room = self
            .make_room(client, emitter, &mut request, at.cancel)
            .await;
        let (estimate, usage) = (room.estimate, room.usage);
        Built {
            request,
            estimate,
            usage,
        }
    }

    /// Appends the messages the user sent while the task ran (at this boundary: after
    /// the last tool batch, before the model call) to the newest user message, as the
    /// reminder is: earlier messages stay byte for byte.
    async fn add_steering(&mut self, emitter: &mut Emitter, messages: Vec<String>, iteration: u32) {
        for message in messages {
            let entry = json!({"kind": "steering", "task_id": emitter.task_id(),
                "iteration": iteration, "message": message});
            emitter.append(&entry);
            append_to_newest_user(
                &mut self.session.ctx.history,
                ContentBlock::Text {
                    text: steering::as_text(&message),
                },
            );
            emitter
                .emit(EventPayload::SteeringReceived { message })
                .await;
        }
    }

    /// Appends this iteration's system reminder to the newest message (a new user
    /// message when the newest is the model's), and records it in the transcript.
    async fn add_reminder(
        &mut self,
        emitter: &mut Emitter,
        notes: Vec<String>,
        plan: &Plan,
        budget: Budget,
    ) {
        let started = Instant::now();
        let snapshot = self.snapshot_within(REMINDER_DEADLINE).await;
        let environment = match &snapshot {
            Some(current) => Environment::Fresh {
                previous: self.last_snapshot.as_ref(),
                current,
            },
            None => Environment::Skipped,
        };
        let iteration = budget.iteration;
        // The task's first reminder names its workspace (and so its session), which the
        // system prompt leaves out so every task of the soul shares its bytes.
        let place = (iteration == 1).then(|| Place {
            workspace: &self.persona.workspace,
        });
        let text = reminder::build(&Inputs {
            place,
            environment,
            plan,
            budget,
            notes: &notes,
        });
        if snapshot.is_some() {
            self.last_snapshot = snapshot;
        }
        tracing::debug!(
            chars = text.chars().count(),
            micros = started.elapsed().as_micros() as u64,
            "system reminder"
        );
        let entry = json!({"kind": "reminder", "task_id": emitter.task_id(),
            "iteration": iteration, "text": text});
        emitter.append(&entry);
        append_to_newest_user(
            &mut self.session.ctx.history,
            ContentBlock::Reminder { text },
        );
    }

    /// A snapshot of the machine, or `None` when it takes longer than `deadline`. It
    /// reads /proc: off the async threads.
    async fn snapshot_within(&self, deadline: Duration) -> Option<Snapshot> {
        let snap = Arc::clone(&self.settings.snapshotter);
        let ws = self.persona.workspace.clone();
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
