//! A third-party status watcher: what `familiar bar --plain` shows, a line each time it
//! changes (`familiar: working (1)`, `asking (1)`, `idle`), with the running tasks and
//! what each does now below it, and the requests that wait. Built on the protocol
//! crate's [`Board`]: `ListTasks`/`GetTask` once, then the daemon's signals alone (no
//! polling). What a bar module, a desktop extension or a script does with
//! `familiar-protocol`:
//!
//! ```sh
//! cargo run -p familiar-protocol --example watch
//! ```

// An example prints: that is its whole job.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use familiar_protocol::Error;
use familiar_protocol::board::Board;
use familiar_protocol::display::{terminal_safe, visible};
use familiar_protocol::events::EventPayload;
use familiar_protocol::proxy::Agent1Proxy;
use familiar_protocol::task::{Outcome, TaskStatus};
use futures::StreamExt;
use futures::stream::{BoxStream, select};

/// What woke the watcher.
enum Signal {
    Event(String, String, String),
    Finished(String, String, String),
}

/// What the watcher shows besides the board: the last failure, until a task starts.
struct Watcher {
    board: Board,
    failed: Option<String>,
}

impl Watcher {
    fn signal(&mut self, signal: Signal) {
        match signal {
            Signal::Event(task, kind, json) => {
                // A kind a newer daemon adds is not this watcher's.
                let Ok(payload) = EventPayload::from_signal(&kind, &json) else {
                    return;
                };
                let top = self.board.get(&task).is_none_or(|c| c.top_level());
                if matches!(payload, EventPayload::TaskStarted { .. }) && top {
                    self.failed = None;
                }
                self.board.event(&task, &payload);
            }
            Signal::Finished(task, status, result) => {
                let title = self
                    .board
                    .get(&task)
                    .filter(|c| c.top_level())
                    .map(|c| c.title());
                self.board.finished(&task, &status, &result);
                let failed = status
                    .parse::<TaskStatus>()
                    .is_ok_and(|s| matches!(s.outcome(), Outcome::Failed | Outcome::Limit));
                if let Some(title) = title.filter(|_| failed) {
                    let first = result.lines().next().unwrap_or_default();
                    self.failed = Some(format!("{title}: {}", terminal_safe(first)));
                }
            }
        }
    }

    /// The bar's line, then the tasks, the requests and the last failure.
    fn render(&self) -> String {
        let running: Vec<_> = self.board.running().collect();
        let asking = self.board.waiting().count();
        let state = if asking > 0 {
            format!("asking ({asking})")
        } else if !running.is_empty() {
            format!("working ({})", running.len())
        } else if self.failed.is_some() {
            "failed".to_owned()
        } else {
            "idle".to_owned()
        };
        let mut lines = vec![format!("familiar: {state}")];
        for c in &running {
            lines.push(format!("  {} {}: {}", c.id, c.title(), c.doing));
        }
        for (task, a) in self.board.waiting() {
            let call = a.summary.lines().next().unwrap_or_default();
            lines.push(format!(
                "  {} waits ({}): {} — familiar approve {}",
                a.request_id,
                task.id,
                visible(call),
                a.request_id
            ));
        }
        if let Some(f) = self.failed.as_ref().filter(|_| running.is_empty()) {
            lines.push(format!("  last task failed: {f}"));
        }
        lines.join("\n")
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let connection = zbus::Connection::session().await?;
    let agent = Agent1Proxy::new(&connection).await?;
    // Subscribe before loading the board, so nothing falls between the two.
    let events = agent
        .receive_task_event()
        .await?
        .filter_map(|s| async move {
            let a = s.args().ok()?;
            Some(Signal::Event(a.task_id, a.kind, a.payload_json))
        });
    let finished = agent
        .receive_task_finished()
        .await?
        .filter_map(|s| async move {
            let a = s.args().ok()?;
            Some(Signal::Finished(a.task_id, a.status, a.result))
        });
    let mut signals: BoxStream<'_, Signal> = select(events.boxed(), finished.boxed()).boxed();
    let board = match Board::load(&agent).await {
        Ok(board) => board,
        // A typed error: `Error::ZBus` is the bus (no daemon, no activation file).
        Err(e) => {
            eprintln!("familiar is not running ({e}); waiting for it");
            Board::default()
        }
    };
    let mut watcher = Watcher {
        board,
        failed: None,
    };
    let mut last = String::new();
    loop {
        let shown = watcher.render();
        if shown != last {
            println!("{shown}");
            last = shown;
        }
        let Some(signal) = signals.next().await else {
            return Ok(());
        };
        watcher.signal(signal);
    }
}
