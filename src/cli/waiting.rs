//! The line `run` and `ask` show while the model has not answered yet: what the server
//! said last and how long the request has been out, ticking, so that a local model
//! reading a long prompt on a CPU (96 s for 1,945 tokens with SmolLM2) is not a frozen
//! "reading the prompt: 0 / 1,945 tokens".
//!
//! Invariant: the line says only what the events tell. A `model_progress` event means
//! the server accepted the request and is reading it (llama.cpp's `prompt_progress`);
//! before one, all that is known is that the request went out (`iteration_started`):
//! a thinking model's thoughts and a connection still being made look the same here.

use tokio::time::{Duration, Instant};

/// On a pipe (a log, a test) the line is repeated at these seconds after the request
/// went out, then every [`PIPE_EVERY`]: a sign of life, not a flood.
const PIPE_TICKS: [u64; 5] = [2, 5, 10, 20, 30];
const PIPE_EVERY: u64 = 30;

/// A model call that has not answered yet.
#[derive(Debug, Clone)]
pub(super) struct Waiting {
    /// When the request went out (or, following a task already under way, when the
    /// first report came).
    since: Instant,
    /// The server's last prefill report: processed and total tokens, when it came.
    report: Option<(u64, u64, Instant)>,
    /// The pipe ticks printed so far.
    pipe_ticks: u64,
}

impl Waiting {
    pub(super) fn new(now: Instant) -> Waiting {
        Waiting {
            since: now,
            report: None,
            pipe_ticks: 0,
        }
    }

    /// The server reports `processed` of `total` prompt tokens read.
    pub(super) fn report(&mut self, processed: u64, total: u64, now: Instant) {
        self.report = Some((processed, total, now));
    }

    /// Whether the server has said anything: on a pipe only such a wait ticks (a
    /// hosted model's first token is a matter of seconds, and logs stay as they were).
    pub(super) fn reported(&self) -> bool {
        self.report.is_some()
    }

    /// Whether the line is worth showing yet: the server reported, or a second passed
    /// (a quick answer never shows it).
    pub(super) fn shown(&self) -> bool {
        self.report.is_some() || self.since.elapsed() >= Duration::from_secs(1)
    }

    pub(super) fn line(&self, now: Instant) -> String {
        line(
            self.report
                .map(|(processed, total, at)| (processed, total, now.duration_since(at))),
            now.duration_since(self.since),
        )
    }

    /// When the line is next due: each second on a terminal, else on the pipe's
    /// schedule.
    pub(super) fn next_tick(&self, terminal: bool) -> Instant {
        let elapsed = self.since.elapsed().as_secs();
        let at = if terminal {
            elapsed + 1
        } else {
            let n = self.pipe_ticks as usize;
            match PIPE_TICKS.get(n) {
                Some(s) => *s,
                None => {
                    let last = PIPE_TICKS[PIPE_TICKS.len() - 1];
                    last + PIPE_EVERY * (self.pipe_ticks + 1 - PIPE_TICKS.len() as u64)
                }
            }
        };
        self.since + Duration::from_secs(at)
    }

    /// Counts a line printed on the pipe.
    pub(super) fn ticked(&mut self) {
        self.pipe_ticks += 1;
    }
}

/// The line for a wait of `elapsed` so far, with the server's last report (processed,
/// total, how long ago) if it sent one.
pub(super) fn line(report: Option<(u64, u64, Duration)>, elapsed: Duration) -> String {
    let elapsed = duration(elapsed);
    let Some((processed, total, ago)) = report else {
        return format!("waiting for the model's answer, {elapsed} (the request is sent)");
    };
    // Read whole: what is left is the model's first token.
    if processed >= total {
        return format!(
            "the prompt is read ({} tokens); waiting for the first word, {elapsed}",
            thousands(total)
        );
    }
    let mut line = format!(
        "reading the prompt: {} / {} tokens, {elapsed}",
        thousands(processed),
        thousands(total)
    );
    // llama.cpp reports per batch: a small model on a CPU may say nothing between "0"
    // and the end. Say that it took the request and when it last spoke.
    if ago >= Duration::from_secs(2) {
        line.push_str(&format!(
            " (the server took the request; its last report {} ago)",
            duration(ago)
        ));
    }
    line
}

/// "12 s", "1 min 36 s".
fn duration(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s} s")
    } else {
        format!("{} min {} s", s / 60, s % 60)
    }
}

/// 1945 → "1,945".
pub(super) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    // Regression (issue 42 §5): "reading the prompt: 0 / 1,945 tokens" stayed as it
    // was for 96 s, with no sign of life.
    #[test]
    fn a_long_prefill_shows_its_time_and_the_servers_last_word() {
        assert_eq!(
            line(Some((0, 1945, S(1))), S(1)),
            "reading the prompt: 0 / 1,945 tokens, 1 s"
        );
        assert_eq!(
            line(Some((0, 1945, S(95))), S(96)),
            "reading the prompt: 0 / 1,945 tokens, 1 min 36 s (the server took the request; its last report 1 min 35 s ago)"
        );
        assert_eq!(
            line(Some((1945, 1945, S(3))), S(99)),
            "the prompt is read (1,945 tokens); waiting for the first word, 1 min 39 s"
        );
        assert_eq!(
            line(None, S(12)),
            "waiting for the model's answer, 12 s (the request is sent)"
        );
    }

    #[test]
    fn the_line_ticks_each_second_on_a_terminal_and_sparsely_on_a_pipe() {
        let now = Instant::now();
        let mut w = Waiting::new(now);
        assert!(!w.reported());
        w.report(0, 10, now);
        assert!(w.reported());
        assert_eq!(w.next_tick(true), now + S(1));
        let mut pipe = Vec::new();
        for _ in 0..7 {
            pipe.push(w.next_tick(false).duration_since(now).as_secs());
            w.ticked();
        }
        assert_eq!(pipe, [2, 5, 10, 20, 30, 60, 90]);
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_945), "1,945");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
