//! Loop detection: is the model repeating itself?
//!
//! Each turn that calls tools gets a signature: the tool names and their arguments, in
//! call order (arguments as canonical JSON, object keys sorted). The detector looks at
//! the trailing run of turns that repeat with period 1 (`A A A`) or period 2
//! (`A B A B`, ping-pong between two actions):
//! - period 1: [`WARN_AFTER`] identical turns → a steering note, [`STOP_AFTER`] → stop;
//! - period 2: two full cycles (`A B A B`) → a steering note, three (`A B A B A B`) → stop.
//!
//! After a warning, the count continues: the model gets one note per run, and stopping
//! needs the run to go on.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

pub const WARN_AFTER: usize = 3;
pub const STOP_AFTER: usize = 5;
const PINGPONG_WARN_CYCLES: usize = 2;
const PINGPONG_STOP_CYCLES: usize = 3;

/// What the loop should do after a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoopVerdict {
    Fine,
    /// Inject this note into the conversation.
    Warn(String),
    /// Stop the task with `loop_detected`.
    Stop(String),
}

/// The signature of one turn's tool calls.
pub fn signature<'a>(calls: impl IntoIterator<Item = (&'a str, &'a serde_json::Value)>) -> u64 {
    let mut h = DefaultHasher::new();
    for (name, args) in calls {
        name.hash(&mut h);
        // serde_json's Map is ordered by key, so to_string is canonical.
        args.to_string().hash(&mut h);
    }
    h.finish()
}

#[derive(Debug, Default)]
pub struct LoopDetector {
    turns: Vec<u64>,
    warned_at_run: Option<usize>,
}

impl LoopDetector {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one tool-calling turn and says what to do.
    pub fn record(&mut self, signature: u64) -> LoopVerdict {
        self.turns.push(signature);
        let same = self.trailing_run(1);
        let pingpong = self.trailing_run(2);

        if same >= STOP_AFTER {
            return LoopVerdict::Stop(format!(
                "the same tool calls were repeated {same} times in a row"
            ));
        }
        if pingpong >= 2 * PINGPONG_STOP_CYCLES {
            return LoopVerdict::Stop(format!(
                "the model alternated between the same two actions {} times",
                pingpong / 2
            ));
        }
        let warn = if same >= WARN_AFTER {
            Some((
                same,
                format!(
                    "You have made the same tool call {same} times in a row with the same result. \
                 Repeating it will not change the outcome. Use what you already have, try a \
                 different approach, or finish and explain what is blocking you."
                ),
            ))
        } else if pingpong >= 2 * PINGPONG_WARN_CYCLES {
            Some((
                pingpong,
                "You are alternating between the same two actions without making \
                 progress. Stop, use the results you already have, and either take a different \
                 step or finish and explain what is blocking you."
                    .to_owned(),
            ))
        } else {
            None
        };
        match warn {
            Some((run, note)) => {
                // One note per run: a run that keeps growing was already warned.
                let run_start = self.turns.len() - run;
                if self.warned_at_run == Some(run_start) {
                    LoopVerdict::Fine
                } else {
                    self.warned_at_run = Some(run_start);
                    LoopVerdict::Warn(note)
                }
            }
            None => LoopVerdict::Fine,
        }
    }

    /// Length of the trailing run of turns that repeat with `period`: each turn in it
    /// equals the one `period` turns earlier. Period 2 needs the last two turns to
    /// differ (two equal turns are a period-1 run).
    fn trailing_run(&self, period: usize) -> usize {
        let t = &self.turns;
        let n = t.len();
        if n < period || (period == 2 && t[n - 1] == t[n - 2]) {
            return 0;
        }
        let mut run = period;
        while run < n && t[n - 1 - run] == t[n - 1 - run + period] {
            run += 1;
        }
        run
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn sig(name: &str, arg: i64) -> u64 {
        signature([(name, &json!({"n": arg}))])
    }

    #[test]
    fn identical_turns_warn_at_three_and_stop_at_five() {
        let mut d = LoopDetector::new();
        let a = sig("read_file", 1);
        assert_eq!(d.record(a), LoopVerdict::Fine);
        assert_eq!(d.record(a), LoopVerdict::Fine);
        assert!(matches!(d.record(a), LoopVerdict::Warn(_)));
        assert_eq!(d.record(a), LoopVerdict::Fine, "one note per run");
        assert!(matches!(d.record(a), LoopVerdict::Stop(_)));
    }

    #[test]
    fn ping_pong_is_caught() {
        let mut d = LoopDetector::new();
        let (a, b) = (sig("list_dir", 1), sig("read_file", 2));
        assert_eq!(d.record(a), LoopVerdict::Fine);
        assert_eq!(d.record(b), LoopVerdict::Fine);
        assert_eq!(d.record(a), LoopVerdict::Fine);
        assert!(matches!(d.record(b), LoopVerdict::Warn(_)));
        assert_eq!(d.record(a), LoopVerdict::Fine);
        assert!(matches!(d.record(b), LoopVerdict::Stop(_)));
    }

    #[test]
    fn progress_resets_the_count() {
        let mut d = LoopDetector::new();
        let a = sig("read_file", 1);
        d.record(a);
        d.record(a);
        assert_eq!(d.record(sig("read_file", 2)), LoopVerdict::Fine);
        assert_eq!(d.record(a), LoopVerdict::Fine);
        assert_eq!(d.record(a), LoopVerdict::Fine);
        assert!(matches!(d.record(a), LoopVerdict::Warn(_)));
    }

    #[test]
    fn argument_order_does_not_change_the_signature() {
        let x = signature([("t", &json!({"a": 1, "b": 2}))]);
        let y = signature([("t", &json!({"b": 2, "a": 1}))]);
        assert_eq!(x, y);
        assert_ne!(x, signature([("t", &json!({"a": 1, "b": 3}))]));
    }
}
