//! Lines typed on the terminal while a task runs (`familiar run`, `familiar ask`):
//! an open approval question takes the next line; every other line steers the task.
//!
//! One thread reads the terminal, so an approval prompt and steering never compete
//! for the same line. A question is opened before its prompt is printed
//! ([`TypedLines::open`]), so the answer to a prompt on screen never steers; a line
//! typed before the prompt appeared does.

use std::io::{BufRead, IsTerminal};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};

/// The terminal's lines; clones share the reader.
#[derive(Clone)]
pub struct TypedLines {
    /// Where the next line goes when a question waits for it.
    waiting: Arc<Mutex<Option<SyncSender<String>>>>,
}

impl TypedLines {
    /// Starts reading stdin when it is a terminal; `steer` gets each line no question
    /// waits for.
    pub fn start(steer: impl Fn(String) + Send + 'static) -> Option<TypedLines> {
        if !std::io::stdin().is_terminal() {
            return None;
        }
        let lines = TypedLines {
            waiting: Arc::new(Mutex::new(None)),
        };
        let waiting = Arc::clone(&lines.waiting);
        // Blocks on the terminal for the life of the process; nothing waits for it.
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { return };
                let taker = waiting
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take();
                match taker {
                    Some(tx) => {
                        if tx.send(line).is_err() {
                            tracing::debug!("the question was answered another way");
                        }
                    }
                    None if line.trim().is_empty() => {}
                    None => steer(line.trim().to_owned()),
                }
            }
        });
        Some(lines)
    }

    /// Opens a question: the next typed line goes to the returned [`Question`], not to
    /// steering. Open it before printing the prompt.
    pub fn open(&self) -> Question {
        let (tx, rx) = sync_channel(1);
        *self.waiting.lock().unwrap_or_else(PoisonError::into_inner) = Some(tx);
        Question(rx)
    }
}

/// An open question's answer, to wait for.
pub struct Question(Receiver<String>);

impl Question {
    /// Blocks until the answer is typed; `None` at the end of input.
    pub fn answer(self) -> Option<String> {
        self.0.recv().ok()
    }
}
