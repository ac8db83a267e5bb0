//! A client's picture of the daemon's tasks, folded from what the bus says: built from
//! `ListTasks` and `GetTask` ([`Board::load`]), kept current by the `TaskEvent` and
//! `TaskFinished` signals ([`Board::event`], [`Board::finished`]). Which tasks run,
//! which approvals wait, what each task does now: what `familiar bar`,
//! `approve --dmenu`, `tasks` and `ask` show, and what any other client can (niri-ipc's
//! `state.rs` is the model).
//!
//! Invariant: the board only folds what it is given; it never calls the daemon itself
//! except in [`Board::load`]. Subscribe to the signals before loading, so nothing that
//! happens in between is missed (an event the board already holds changes nothing).

use std::collections::BTreeMap;

use crate::Error;
use crate::LIST_PROMPT_CHARS;
use crate::display;
use crate::events::EventPayload;
use crate::proxy::Agent1Proxy;
use crate::query::{PendingApproval, TaskRow, TaskView};
use crate::task::TaskStatus;

/// One task as the board knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Card {
    /// The task id.
    pub id: String,
    /// The soul it runs under.
    pub soul: String,
    /// Its status as the bus spells it.
    pub status: String,
    /// The prompt's first [`LIST_PROMPT_CHARS`] characters (untrusted).
    pub prompt: String,
    /// Its session, once known (from `GetTask` or an event).
    pub session_id: Option<String>,
    /// The task that delegated it, for a sub-task.
    pub parent: Option<String>,
    /// The approvals it waits for, oldest first.
    pub approvals: Vec<PendingApproval>,
    /// What it does now, in a few words (`thinking`, `running shell: du -sh ~`).
    pub doing: String,
    /// What `Undo` would take back, when it can (known from `GetTask`).
    pub undo: Option<String>,
    /// Its answer, once it ended.
    pub result: Option<String>,
}

impl Card {
    fn new(id: &str, soul: &str, status: &str, prompt: &str) -> Card {
        let doing = if status == TaskStatus::Queued.as_str() {
            "queued"
        } else {
            "thinking"
        };
        Card {
            id: id.to_owned(),
            soul: soul.to_owned(),
            status: status.to_owned(),
            prompt: prompt.chars().take(LIST_PROMPT_CHARS).collect(),
            session_id: None,
            parent: None,
            approvals: Vec::new(),
            doing: doing.to_owned(),
            undo: None,
            result: None,
        }
    }

    /// The status, when this build knows it.
    pub fn status(&self) -> Option<TaskStatus> {
        self.status.parse().ok()
    }

    /// Whether it has not ended (queued or running).
    pub fn unfinished(&self) -> bool {
        self.status().is_some_and(|s| !s.is_finished())
    }

    /// Whether it is a task a person submitted, not one a task delegated.
    pub fn top_level(&self) -> bool {
        self.parent.is_none()
    }

    /// `familiar: “the first words…”`, made visible.
    pub fn title(&self) -> String {
        display::title(&self.prompt)
    }
}

/// Every task the daemon told of, in `ListTasks` order (oldest first, sub-tasks after
/// their parent), then as events brought them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Board {
    cards: BTreeMap<String, Card>,
    order: Vec<String>,
}

impl Board {
    /// The daemon's tasks now: `ListTasks`, then `GetTask` for each (a task forgotten
    /// between the two calls is kept as its row alone).
    pub async fn load(proxy: &Agent1Proxy<'_>) -> Result<Board, Error> {
        let rows = proxy.list_tasks().await?;
        let mut views = Vec::with_capacity(rows.len());
        for row in &rows {
            views.push(proxy.get_task(&row.id).await.ok());
        }
        Ok(Board::from_replies(rows, views))
    }

    /// The board of these `ListTasks` rows and their `GetTask` replies (`None`: none).
    pub fn from_replies(rows: Vec<TaskRow>, views: Vec<Option<TaskView>>) -> Board {
        let mut board = Board::default();
        for (row, view) in rows.into_iter().zip(views) {
            board.insert(Card::new(&row.id, &row.soul, &row.status, &row.prompt));
            if let Some(v) = view {
                board.update(v);
            }
        }
        board
    }

    /// Takes in a `GetTask` reply: the task's family, approvals, status and undo.
    pub fn update(&mut self, view: TaskView) {
        let id = view.id.to_string();
        if !self.cards.contains_key(&id) {
            let card = Card::new(&id, view.soul.as_str(), &view.status, &view.prompt);
            self.insert(card);
        }
        let Some(card) = self.cards.get_mut(&id) else {
            return;
        };
        card.session_id = Some(view.session_id.to_string());
        card.parent = view.parent_task.as_ref().map(ToString::to_string);
        card.undo = view.undo().map(str::to_owned);
        card.status = view.status;
        card.result = view.result;
        card.approvals = view.approvals;
    }

    /// Folds one `TaskEvent` of `task`.
    pub fn event(&mut self, task: &str, payload: &EventPayload) {
        match payload {
            EventPayload::TaskStarted { soul, prompt, .. } => {
                let running = TaskStatus::Running.as_str();
                match self.cards.get_mut(task) {
                    Some(card) => card.status = running.to_owned(),
                    None => self.insert(Card::new(task, soul.as_str(), running, prompt)),
                }
            }
            EventPayload::SubagentStarted {
                child_task_id,
                child_session_id,
                soul,
                prompt,
                ..
            } => {
                let id = child_task_id.to_string();
                if !self.cards.contains_key(&id) {
                    let queued = TaskStatus::Queued.as_str();
                    self.insert(Card::new(&id, soul.as_str(), queued, prompt));
                }
                if let Some(child) = self.cards.get_mut(&id) {
                    child.parent = Some(task.to_owned());
                    child.session_id = Some(child_session_id.to_string());
                }
            }
            EventPayload::ApprovalRequested {
                request_id,
                tool,
                summary,
                tier,
                reason,
                ..
            } => {
                if let Some(card) = self.cards.get_mut(task)
                    && !card.approvals.iter().any(|a| a.request_id == *request_id)
                {
                    card.approvals.push(PendingApproval {
                        request_id: request_id.clone(),
                        tool: tool.clone(),
                        tier: *tier,
                        summary: summary.clone(),
                        reason: reason.clone(),
                        grant: None,
                    });
                }
            }
            EventPayload::ApprovalResolved { request_id, .. } => {
                for card in self.cards.values_mut() {
                    card.approvals.retain(|a| a.request_id != *request_id);
                }
            }
            EventPayload::TaskFinished { status, result, .. } => {
                self.finished(task, status.as_str(), result);
            }
            _ => {}
        }
        if let Some(now) = display::doing(payload)
            && let Some(card) = self.cards.get_mut(task)
        {
            card.doing = now;
        }
    }

    /// Folds a `TaskFinished` signal: the task ended with `status`.
    pub fn finished(&mut self, task: &str, status: &str, result: &str) {
        if let Some(card) = self.cards.get_mut(task) {
            card.status = status.to_owned();
            card.result = Some(result.to_owned());
            card.approvals.clear();
        }
    }

    /// Every task, in order.
    pub fn tasks(&self) -> impl Iterator<Item = &Card> {
        self.order.iter().filter_map(|id| self.cards.get(id))
    }

    /// One task.
    pub fn get(&self, id: &str) -> Option<&Card> {
        self.cards.get(id)
    }

    /// The tasks a person submitted that have not ended.
    pub fn running(&self) -> impl Iterator<Item = &Card> {
        self.tasks().filter(|c| c.top_level() && c.unfinished())
    }

    /// Every approval that waits, with its task, oldest task first.
    pub fn waiting(&self) -> impl Iterator<Item = (&Card, &PendingApproval)> {
        self.tasks()
            .filter(|c| c.status() == Some(TaskStatus::Running))
            .flat_map(|c| c.approvals.iter().map(move |a| (c, a)))
    }

    fn insert(&mut self, card: Card) {
        if !self.cards.contains_key(&card.id) {
            self.order.push(card.id.clone());
        }
        self.cards.insert(card.id.clone(), card);
    }
}

#[cfg(test)]
#[path = "board_tests.rs"]
mod tests;
