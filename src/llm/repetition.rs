//! The degenerate output guard: tells when a streamed answer has started repeating
//! itself, so the stream can be cancelled (a small model at temperature 0 can write the
//! same sentence until it hits `max_output_tokens`, minutes on a CPU).
//!
//! Pure: text in, a verdict out, no I/O. Two shapes count as degenerate, each at
//! [`REPEATS`] copies in a row:
//! - a **line** (at least [`MIN_LINE`] non-blank characters) repeated whole;
//! - a **span** of up to [`MAX_SPAN`] bytes repeated back to back, with or without
//!   newlines ("the the the …", a sentence with no line break), once the repeated
//!   region is at least [`MIN_REGION`] bytes long (so a rule of `=====` or a table
//!   separator never counts).
//!
//! Invariant: [`Repetition::keep`] is a char boundary of the text pushed so far, at the
//! end of the first copy: the answer is kept up to and with one copy. Where a copy
//! starts is ambiguous by a rotation (`"x. I said. I said."` repeats `" I said."` or
//! `". I said"`), so the kept copy may lack its last few bytes.
//!
//! Cost: one counter per span length, updated per byte (`MAX_SPAN` steps per byte),
//! about 3 M steps for a 4,096-token answer.

/// Copies in a row that make an answer degenerate.
pub const REPEATS: usize = 8;
/// A repeated line counts from this many non-blank characters.
pub const MIN_LINE: usize = 8;
/// The longest span checked for back-to-back repetition, in bytes.
pub const MAX_SPAN: usize = 200;
/// A repeated span counts once the repetition covers this many bytes.
pub const MIN_REGION: usize = 256;

/// What repeated, and how much of the text to keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repetition {
    /// Bytes of the text pushed since the last reset to keep (one copy included).
    pub keep: usize,
    /// The repeated line or span.
    pub unit: String,
    /// Copies seen in a row when the guard fired.
    pub repeats: usize,
}

/// Watches one run of answer text (reset at a tool call and at each new attempt).
#[derive(Debug, Clone)]
pub struct RepetitionGuard {
    text: Vec<u8>,
    /// `run[p - 1]`: how many trailing bytes equal the byte `p` before them.
    run: Vec<usize>,
    /// Where the current (unfinished) line starts.
    line_start: usize,
    /// The last complete line (trimmed), where its first copy in the streak ended,
    /// and how many copies in a row.
    last_line: Option<(String, usize)>,
    line_streak: usize,
    fired: bool,
}

impl Default for RepetitionGuard {
    fn default() -> Self {
        RepetitionGuard {
            text: Vec::new(),
            run: vec![0; MAX_SPAN],
            line_start: 0,
            last_line: None,
            line_streak: 0,
            fired: false,
        }
    }
}

impl RepetitionGuard {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a new run of text.
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// Feeds the next piece of the answer; `Some` the first time it turns degenerate.
    pub fn push(&mut self, delta: &str) -> Option<Repetition> {
        if self.fired {
            return None;
        }
        let mut found = None;
        for &b in delta.as_bytes() {
            self.text.push(b);
            let i = self.text.len() - 1;
            for p in 1..=MAX_SPAN.min(i) {
                let r = &mut self.run[p - 1];
                *r = if self.text[i - p] == b { *r + 1 } else { 0 };
            }
            if b == b'\n' {
                found = found.or_else(|| self.end_line(i));
            }
            found = found.or_else(|| self.span());
        }
        if found.is_some() {
            self.fired = true;
        }
        found
    }

    /// The smallest span whose back-to-back copies reach both thresholds.
    fn span(&self) -> Option<Repetition> {
        let len = self.text.len();
        (1..=MAX_SPAN).find_map(|p| {
            let run = self.run[p - 1];
            if run < (REPEATS - 1) * p || run + p < MIN_REGION {
                return None;
            }
            let first = len - run - p;
            // A unit with a newline is a line (or lines): keep the first copy that starts
            // after a newline, whole (`run` ≥ 7 copies, so it is all there).
            let keep = match self.text[first..first + p].iter().position(|&b| b == b'\n') {
                Some(q) => first + (q + 1) % p + p,
                None => self.boundary(len - run),
            };
            let start = keep.saturating_sub(p);
            Some(Repetition {
                keep,
                unit: String::from_utf8_lossy(&self.text[start..keep]).into_owned(),
                repeats: run / p + 1,
            })
        })
    }

    /// A line ended at byte `i` (its newline): counts it toward a streak of the same.
    fn end_line(&mut self, i: usize) -> Option<Repetition> {
        let line = String::from_utf8_lossy(&self.text[self.line_start..i])
            .trim()
            .to_owned();
        self.line_start = i + 1;
        if line.chars().filter(|c| !c.is_whitespace()).count() < MIN_LINE {
            self.last_line = None;
            self.line_streak = 0;
            return None;
        }
        match &self.last_line {
            Some((last, _)) if *last == line => self.line_streak += 1,
            Some(_) | None => {
                self.last_line = Some((line, i + 1));
                self.line_streak = 1;
            }
        }
        let (unit, first_end) = self.last_line.as_ref()?;
        (self.line_streak >= REPEATS).then(|| Repetition {
            keep: *first_end,
            unit: unit.clone(),
            repeats: self.line_streak,
        })
    }

    /// `at`, moved forward to the next char boundary of the text.
    fn boundary(&self, mut at: usize) -> usize {
        while at < self.text.len() && (self.text[at] & 0xC0) == 0x80 {
            at += 1;
        }
        at
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn feed(g: &mut RepetitionGuard, text: &str, chunk: usize) -> Option<Repetition> {
        let mut found = None;
        let mut rest = text;
        while !rest.is_empty() {
            let mut end = chunk.min(rest.len());
            while !rest.is_char_boundary(end) {
                end += 1;
            }
            let (head, tail) = rest.split_at(end);
            if let Some(r) = g.push(head) {
                found.get_or_insert(r);
            }
            rest = tail;
        }
        found
    }

    #[test]
    fn a_sentence_repeated_on_lines_is_cut_after_one_copy() {
        let line = "The answer is that the file is in the folder.\n";
        let text = format!("Here it is.\n{}", line.repeat(20));
        let r = feed(&mut RepetitionGuard::new(), &text, 5).unwrap();
        assert_eq!(&text[..r.keep], format!("Here it is.\n{line}"));
        assert!(r.repeats >= REPEATS && r.repeats < 20, "{r:?}");
    }

    #[test]
    fn a_span_without_newlines_is_cut() {
        let text = format!("Sure. {}", "I can help with that. ".repeat(30));
        let r = feed(&mut RepetitionGuard::new(), &text, 3).unwrap();
        assert!(text[..r.keep].starts_with("Sure. I can help with that"));
        assert!(r.keep < 6 + 2 * 22, "one copy kept: {r:?}");
        assert_eq!(r.unit.len(), "I can help with that. ".len());
    }

    #[test]
    fn ordinary_text_rules_and_short_lists_pass() {
        let ok = [
            "# Title\n\n=========================================\n\nSome text.\n".to_owned(),
            "| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\n".to_owned(),
            "0,0,0\n".repeat(12),
            (1..200)
                .map(|i| format!("line {i} of the listing\n"))
                .collect(),
            "    }\n".repeat(9),
        ];
        for text in ok {
            assert_eq!(feed(&mut RepetitionGuard::new(), &text, 7), None, "{text}");
        }
    }

    proptest! {
        /// Any split of the same text gives the same verdict.
        #[test]
        fn chunking_does_not_matter(unit in "[a-zé ]{3,30}\n?", n in 0usize..20, prefix in "[a-z .]{0,40}", chunk in 1usize..50) {
            let text = format!("{prefix}{}", unit.repeat(n));
            let whole = feed(&mut RepetitionGuard::new(), &text, text.len().max(1));
            let split = feed(&mut RepetitionGuard::new(), &text, chunk);
            prop_assert_eq!(whole, split);
        }

        /// What is kept is a prefix at a char boundary, and repeating a long enough
        /// unit enough times always fires.
        #[test]
        fn keep_is_a_prefix_and_long_repeats_fire(unit in "[a-zé ]{8,60}\n", extra in 0usize..10) {
            let n = REPEATS + (MIN_REGION / unit.len()) + extra;
            let text = unit.repeat(n);
            let r = feed(&mut RepetitionGuard::new(), &text, 4);
            prop_assert!(r.is_some());
            let r = r.unwrap();
            prop_assert!(text.is_char_boundary(r.keep));
            prop_assert!(r.keep <= unit.len() * 2);
        }

        /// Text where no line or span repeats never fires.
        #[test]
        fn distinct_lines_never_fire(lines in proptest::collection::vec("[a-z]{4,12}", 1..60)) {
            let text: String = lines.iter().enumerate().map(|(i, l)| format!("{i}: {l}\n")).collect();
            prop_assert_eq!(feed(&mut RepetitionGuard::new(), &text, 5), None);
        }
    }
}
