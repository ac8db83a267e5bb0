//! Cutting tool output to size: the middle of a long output goes, its head and tail stay,
//! and a marker in its place says how much was cut and how to read the rest.
//!
//! Two sizes apply. A new tool result is cut to [`result_cap_chars`]: at most
//! [`MODEL_OUTPUT_CHARS`] and at most [`RESULT_SHARE_PERCENT`] % of the context window
//! in calibrated tokens, before the model first sees it (older results are left as they
//! were sent, so the prompt cache holds). When a request does not fit,
//! [`trim_oldest`] cuts the results already in the history, oldest first and only as far
//! as needed, down to [`floor_chars`].
//!
//! Invariant: cutting text that was cut before leaves one marker, which counts
//! everything cut so far; a result is never cut below the floor, and the block it sits
//! in (a tool result for its call) stays where it is.

use std::collections::HashMap;
use std::sync::LazyLock;

use regex::Regex;

use crate::llm::{ContentBlock, Estimator, Message, Role};

/// Characters of one tool output the model sees at most, whatever the window.
pub const MODEL_OUTPUT_CHARS: usize = 16_000;
/// A single tool result takes at most this share of the context window.
pub const RESULT_SHARE_PERCENT: u64 = 25;
/// What trimming leaves of a result at least (smaller windows leave less).
pub const TRIM_FLOOR_CHARS: usize = 1_000;
/// The tail keeps a quarter of what is kept, at most this much.
const TAIL_CHARS: usize = 4_000;

const MARKER_PREFIX: &str = "[familiar cut ";

/// An earlier cut's marker: what it counted.
static MARKER: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"\n?\[familiar cut (\d+) characters \((\d+) lines\) here[^\]]*\]\n?").ok()
});

/// Characters per token the estimator assumes now (plain ASCII text).
fn chars_per_token(estimator: &Estimator) -> f64 {
    4.0 / estimator.factor()
}

/// The most characters a new tool result may keep with a `context_window` of tokens
/// (0: unknown, only the fixed cap applies).
pub fn result_cap_chars(context_window: u32, estimator: &Estimator) -> usize {
    if context_window == 0 {
        return MODEL_OUTPUT_CHARS;
    }
    let tokens = u64::from(context_window) * RESULT_SHARE_PERCENT / 100;
    let chars = (tokens as f64 * chars_per_token(estimator)) as usize;
    chars.clamp(floor_chars(context_window, estimator), MODEL_OUTPUT_CHARS)
}

/// What trimming leaves of a result: [`TRIM_FLOOR_CHARS`], or a sixteenth of a small
/// window.
pub fn floor_chars(context_window: u32, estimator: &Estimator) -> usize {
    if context_window == 0 {
        return TRIM_FLOOR_CHARS;
    }
    let sixteenth = (f64::from(context_window) / 16.0 * chars_per_token(estimator)) as usize;
    sixteenth.clamp(200, TRIM_FLOOR_CHARS)
}

/// How the model can read what was cut from `tool`'s output.
fn hint(tool: &str) -> &'static str {
    match tool {
        "read_file" => "read the part you need with read_file's offset and limit",
        "shell" => {
            "run the command again narrowed (grep, head, tail), or redirect its output to a \
             file in the workspace and read that with read_file's offset and limit"
        }
        // Not a tool's: a summary request's conversation.
        "" => "the rest is in the session transcript",
        _ => "ask for less at a time (a filter, a narrower path, an offset and limit)",
    }
}

/// `s` itself when it has at most `max` characters, else its head and tail around a
/// marker saying how much was cut (counting an earlier cut's) and how to read the rest.
pub fn cut_middle(s: &str, max: usize, tool: &str) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    // Without its earlier marker, with where that marker was and what it counted.
    let (plain, gap, mut cut_chars, mut cut_lines) = match earlier_cut(s) {
        Some((start, end, chars, lines)) => {
            let plain = format!("{}{}", &s[..start], &s[end..]);
            (plain, Some(s[..start].chars().count()), chars, lines)
        }
        None => (s.to_owned(), None, 0, 0),
    };
    let total = plain.chars().count();
    // The marker counts toward `max` too, when there is room for both.
    let marker = marker_text(usize::MAX, usize::MAX, tool).chars().count();
    let budget = if max > 2 * marker {
        max - marker
    } else {
        max / 2
    };
    let keep = budget.min(total);
    let mut tail = TAIL_CHARS.min(keep / 4);
    let mut head = keep - tail;
    // The earlier cut falls inside the new one, so one marker tells the whole story.
    if let Some(gap) = gap {
        if head > gap {
            tail += head - gap;
            head = gap;
        }
        if tail > total - gap {
            head = (head + tail - (total - gap)).min(gap);
            tail = total - gap;
        }
    }
    let head_end = byte_at(&plain, head);
    let tail_start = byte_at(&plain, total - tail);
    let removed = &plain[head_end..tail_start];
    // A marker's numbers may come from the tool's own output: never trust them to add.
    cut_chars = cut_chars.saturating_add(removed.chars().count());
    cut_lines = cut_lines.saturating_add(removed.matches('\n').count());
    if cut_chars == 0 {
        return plain;
    }
    format!(
        "{}{}{}",
        &plain[..head_end],
        marker_text(cut_chars, cut_lines, tool),
        &plain[tail_start..]
    )
}

/// The marker in place of what was cut (on a line of its own).
fn marker_text(chars: usize, lines: usize, tool: &str) -> String {
    format!(
        "\n{MARKER_PREFIX}{chars} characters ({lines} lines) here to fit the model's context; \
         {}]\n",
        hint(tool)
    )
}

/// The byte offset of character `n` of `s` (its length past the end).
fn byte_at(s: &str, n: usize) -> usize {
    s.char_indices().nth(n).map_or(s.len(), |(i, _)| i)
}

/// An earlier marker in `s`: its byte range and the characters and lines it counted.
fn earlier_cut(s: &str) -> Option<(usize, usize, usize, usize)> {
    let caps = MARKER.as_ref()?.captures(s)?;
    let whole = caps.get(0)?;
    let chars = caps.get(1)?.as_str().parse().ok()?;
    let lines = caps.get(2)?.as_str().parse().ok()?;
    Some((whole.start(), whole.end(), chars, lines))
}

/// The tool each call id in `history` named.
fn tool_names(history: &[Message]) -> HashMap<String, String> {
    history
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            ContentBlock::ToolUse { id, name, .. } => Some((id.to_string(), name.clone())),
            ContentBlock::Text { .. }
            | ContentBlock::Reminder { .. }
            | ContentBlock::Thinking { .. }
            | ContentBlock::ToolResult { .. }
            | ContentBlock::Image { .. } => None,
        })
        .collect()
}

/// Cuts the tool results the model has not seen yet (those after the newest assistant
/// message) to `max` characters each. Returns how many were cut.
pub fn cap_new_results(history: &mut [Message], max: usize) -> usize {
    let first_new = history
        .iter()
        .rposition(|m| m.role == Role::Assistant)
        .map_or(0, |i| i + 1);
    let names = tool_names(history);
    let mut cut = 0;
    for m in &mut history[first_new..] {
        for b in &mut m.content {
            if let ContentBlock::ToolResult {
                tool_use_id,
                content,
                ..
            } = b
                && content.chars().count() > max
            {
                let tool = names
                    .get(&tool_use_id.to_string())
                    .map_or("", String::as_str);
                *content = cut_middle(content, max, tool);
                cut += 1;
            }
        }
    }
    cut
}

/// Cuts tool results, oldest first, each only as far as `excess` asks (down to
/// `floor` characters), re-measuring with `over` after each: `over(history)` is how
/// many characters the history still has to lose (0 when it fits). Returns how many
/// results were cut.
pub fn trim_oldest(
    history: &mut [Message],
    floor: usize,
    mut over: impl FnMut(&[Message]) -> usize,
) -> usize {
    let names = tool_names(history);
    let mut trimmed = 0;
    for m in 0..history.len() {
        for b in 0..history[m].content.len() {
            let excess = over(history);
            if excess == 0 {
                return trimmed;
            }
            if let ContentBlock::ToolResult {
                tool_use_id,
                content,
                ..
            } = &mut history[m].content[b]
            {
                let len = content.chars().count();
                if len <= floor {
                    continue;
                }
                // The marker itself takes room: ask for a little more.
                let target = len.saturating_sub(excess.saturating_add(200)).max(floor);
                let tool = names
                    .get(&tool_use_id.to_string())
                    .map_or("", String::as_str);
                let shorter = cut_middle(content, target, tool);
                if shorter.len() < content.len() {
                    *content = shorter;
                    trimmed += 1;
                }
            }
        }
    }
    trimmed
}

#[cfg(test)]
mod tests {
    use familiar_protocol::ids::CallId;
    use serde_json::json;

    use super::*;

    fn numbered(lines: usize) -> String {
        (0..lines).map(|i| format!("line {i:05}\n")).collect()
    }

    #[test]
    fn a_long_output_keeps_head_and_tail_and_says_what_was_cut() {
        let s = format!("{}{}", "a".repeat(20_000), "z".repeat(10));
        let out = cut_middle(&s, 1000, "read_file");
        assert!(out.chars().count() <= 1000, "{out}");
        assert!(out.starts_with(&"a".repeat(500)));
        assert!(out.ends_with("zzzzzzzzzz"));
        let (_, _, chars, lines) = earlier_cut(&out).unwrap();
        assert_eq!(chars + out.chars().count() - earlier_cut_len(&out), 20_010);
        assert_eq!(lines, 0);
        assert!(out.contains("read_file's offset and limit"), "{out}");
        assert_eq!(cut_middle("short", 1000, "shell"), "short");
    }

    #[test]
    fn cutting_again_leaves_one_marker_counting_both_cuts() {
        let s = numbered(2_000);
        let once = cut_middle(&s, 4_000, "shell");
        let twice = cut_middle(&once, 1_000, "shell");
        assert_eq!(twice.matches(MARKER_PREFIX).count(), 1, "{twice}");
        let (_, _, chars, lines) = earlier_cut(&twice).unwrap();
        let kept = twice.chars().count() - earlier_cut_len(&twice);
        assert_eq!(chars + kept, s.chars().count(), "{twice}");
        assert!(lines > 1_800 && lines < 2_000, "{lines}");
        assert!(twice.starts_with("line 00000\n"));
        assert!(twice.ends_with("line 01999\n"));
    }

    #[test]
    fn a_marker_in_the_output_itself_cannot_overflow_the_count() {
        let forged = format!(
            "{}\n[familiar cut {} characters ({} lines) here x]\n{}",
            "a".repeat(3_000),
            usize::MAX,
            usize::MAX,
            "b".repeat(3_000)
        );
        let out = cut_middle(&forged, 1_000, "shell");
        assert_eq!(out.matches(MARKER_PREFIX).count(), 1, "{out}");
    }

    fn earlier_cut_len(s: &str) -> usize {
        let (start, end, _, _) = earlier_cut(s).unwrap();
        s[start..end].chars().count()
    }

    #[test]
    fn the_cap_is_a_quarter_of_the_window_and_at_most_the_fixed_one() {
        let e = Estimator::new();
        assert_eq!(result_cap_chars(0, &e), MODEL_OUTPUT_CHARS);
        assert_eq!(result_cap_chars(200_000, &e), MODEL_OUTPUT_CHARS);
        // 4096 tokens: a quarter is 1024 tokens, 4096 characters at 4 a token.
        assert_eq!(result_cap_chars(4096, &e), 4096);
        let mut dense = Estimator::new();
        dense.calibrate(1000, 2000);
        assert!(result_cap_chars(4096, &dense) < 4096);
    }

    fn tool_turn(id: &str, output: String) -> [Message; 2] {
        let id = CallId::from_provider(id.to_owned());
        [
            Message {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolUse {
                    id: id.clone(),
                    name: "shell".into(),
                    input: json!({}),
                }],
            },
            Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: id,
                    content: output,
                    is_error: false,
                }],
            },
        ]
    }

    fn result_len(m: &Message) -> usize {
        match &m.content[0] {
            ContentBlock::ToolResult { content, .. } => content.chars().count(),
            other => panic!("not a result: {other:?}"),
        }
    }

    #[test]
    fn only_results_not_yet_sent_are_capped() {
        let mut h = vec![Message::user_text("go")];
        h.extend(tool_turn("c1", "x".repeat(9_000)));
        h.extend(tool_turn("c2", "y".repeat(9_000)));
        assert_eq!(cap_new_results(&mut h, 2_000), 1);
        assert_eq!(result_len(&h[2]), 9_000);
        assert!(result_len(&h[4]) < 2_300);
    }

    #[test]
    fn trimming_cuts_the_oldest_first_and_only_as_far_as_needed() {
        let mut h = vec![Message::user_text("go")];
        for i in 0..3 {
            h.extend(tool_turn(&format!("c{i}"), "x".repeat(10_000)));
        }
        let total = |h: &[Message]| -> usize { h.iter().map(result_len_any).sum() };
        let budget = 21_000;
        let n = trim_oldest(&mut h, 500, |h| total(h).saturating_sub(budget));
        assert_eq!(n, 1, "one result was enough");
        assert!(result_len(&h[2]) < 10_000);
        assert_eq!(result_len(&h[4]), 10_000);
        assert_eq!(result_len(&h[6]), 10_000);
        // Past what every result can give, each stops at the floor.
        let n = trim_oldest(&mut h, 500, |_| usize::MAX);
        assert_eq!(n, 3);
        for i in [2, 4, 6] {
            assert!(result_len(&h[i]) <= 500, "{}", result_len(&h[i]));
        }
    }

    proptest::proptest! {
        /// Whatever the text (multi-byte characters, newlines, a marker of its own) and
        /// the sizes, a cut keeps head and tail, one marker, at most `max` characters
        /// when there is room for the marker, and counts every character it dropped.
        #[test]
        fn cuts_keep_one_marker_and_count_what_went(
            text in "(\\PC|\n){0,3000}",
            first in 0usize..4000,
            second in 0usize..4000,
        ) {
            let total = text.chars().count();
            let once = cut_middle(&text, first, "shell");
            let twice = cut_middle(&once, second, "shell");
            for (out, max) in [(&once, first), (&twice, second)] {
                match earlier_cut(out) {
                    None => proptest::prop_assert_eq!(out.as_str(), text.as_str()),
                    Some((_, _, chars, _)) => {
                        proptest::prop_assert_eq!(out.matches(MARKER_PREFIX).count(), 1);
                        let kept = out.chars().count() - earlier_cut_len(out);
                        proptest::prop_assert_eq!(kept + chars, total);
                        if max > 600 {
                            proptest::prop_assert!(out.chars().count() <= max);
                        }
                    }
                }
            }
        }
    }

    fn result_len_any(m: &Message) -> usize {
        m.content
            .iter()
            .map(|b| match b {
                ContentBlock::ToolResult { content, .. } => content.chars().count(),
                ContentBlock::Text { text } => text.chars().count(),
                ContentBlock::Reminder { .. }
                | ContentBlock::Thinking { .. }
                | ContentBlock::ToolUse { .. }
                | ContentBlock::Image { .. } => 0,
            })
            .sum()
    }
}
