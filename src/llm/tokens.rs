//! Token estimates for messages and tool definitions, for compaction and budgets
//! before the server has said anything.
//!
//! The heuristic is chars/4 for ASCII text and one token per other character (CJK is
//! about one token per character; counting accented Latin the same errs high, which is
//! the safe side). JSON is walked, not stringified: keys and string values count as
//! text, and each structural token (braces, quotes, colons, commas) adds a little.
//! A calibration factor learned from the server's real counts corrects the rest.

use serde_json::Value;

use super::{ContentBlock, Message, Request, ToolDef};

/// Per-message framing (role markers, separators).
const MESSAGE_OVERHEAD: u64 = 4;
/// Per-block framing (block type, ids).
const BLOCK_OVERHEAD: u64 = 3;
/// Per-tool framing in the tools list.
const TOOL_OVERHEAD: u64 = 8;
/// The factor never leaves this range: a wild server number must not make compaction
/// fire every turn or never.
pub const MIN_FACTOR: f64 = 0.5;
pub const MAX_FACTOR: f64 = 3.0;
/// Estimates smaller than this are too noisy to learn from.
const MIN_CALIBRATION_SAMPLE: u64 = 50;

/// Estimates tokens, corrected by what the server reports.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimator {
    factor: f64,
}

impl Default for Estimator {
    fn default() -> Self {
        Estimator { factor: 1.0 }
    }
}

impl Estimator {
    pub fn new() -> Self {
        Self::default()
    }

    /// An estimator that starts from `factor` (what an earlier task learned).
    pub fn with_factor(factor: f64) -> Self {
        let factor = if factor.is_finite() { factor } else { 1.0 };
        Estimator {
            factor: factor.clamp(MIN_FACTOR, MAX_FACTOR),
        }
    }

    pub fn factor(&self) -> f64 {
        self.factor
    }

    fn scale(&self, raw: u64) -> u64 {
        (raw as f64 * self.factor).ceil() as u64
    }

    pub fn text(&self, text: &str) -> u64 {
        self.scale(text_tokens(text))
    }

    pub fn messages(&self, messages: &[Message]) -> u64 {
        self.scale(messages.iter().map(message_tokens).sum())
    }

    pub fn tools(&self, tools: &[ToolDef]) -> u64 {
        self.scale(tools.iter().map(tool_tokens).sum())
    }

    /// The whole request's input: system prompt, messages and tools.
    pub fn request(&self, req: &Request) -> u64 {
        let raw = text_tokens(&req.system)
            + req.messages.iter().map(message_tokens).sum::<u64>()
            + req.tools.iter().map(tool_tokens).sum::<u64>();
        self.scale(raw)
    }

    /// Learns from one request: `estimated` is what this estimator said for it,
    /// `actual` the server's input count (including cached tokens).
    pub fn calibrate(&mut self, estimated: u64, actual: u64) {
        if estimated < MIN_CALIBRATION_SAMPLE || actual == 0 {
            return;
        }
        let raw = estimated as f64 / self.factor;
        let target = actual as f64 / raw;
        // Half-way each time: one odd response moves the factor, but does not own it.
        self.factor = ((self.factor + target) / 2.0).clamp(MIN_FACTOR, MAX_FACTOR);
    }

    /// Learns from a count the next request must be sized by (a server's refusal of a
    /// request too long for it): the factor takes the server's ratio whole.
    pub fn calibrate_exact(&mut self, estimated: u64, actual: u64) {
        if estimated == 0 || actual == 0 {
            return;
        }
        let raw = estimated as f64 / self.factor;
        self.factor = (actual as f64 / raw).clamp(MIN_FACTOR, MAX_FACTOR);
    }
}

fn text_tokens(text: &str) -> u64 {
    let mut ascii = 0u64;
    let mut other = 0u64;
    for c in text.chars() {
        if c.is_ascii() {
            ascii += 1;
        } else {
            other += 1;
        }
    }
    ascii.div_ceil(4) + other
}

fn json_tokens(v: &Value) -> u64 {
    match v {
        Value::Null | Value::Bool(_) => 1,
        Value::Number(n) => text_tokens(&n.to_string()),
        Value::String(s) => 1 + text_tokens(s),
        Value::Array(a) => 1 + a.iter().map(|x| 1 + json_tokens(x)).sum::<u64>(),
        Value::Object(o) => {
            1 + o
                .iter()
                .map(|(k, x)| 2 + text_tokens(k) + json_tokens(x))
                .sum::<u64>()
        }
    }
}

fn message_tokens(m: &Message) -> u64 {
    MESSAGE_OVERHEAD
        + m.content
            .iter()
            .map(|b| {
                BLOCK_OVERHEAD
                    + match b {
                        ContentBlock::Text { text } | ContentBlock::Reminder { text } => {
                            text_tokens(text)
                        }
                        ContentBlock::Thinking { thinking, .. } => text_tokens(thinking),
                        ContentBlock::ToolUse { name, input, .. } => {
                            text_tokens(name) + json_tokens(input)
                        }
                        ContentBlock::ToolResult { content, .. } => text_tokens(content),
                        ContentBlock::Image { width, height, .. } => image_tokens(*width, *height),
                    }
            })
            .sum::<u64>()
}

/// An image's tokens as Anthropic bills them (width × height / 750); OpenAI's tiles
/// come to about the same at the sizes familiar sends.
fn image_tokens(width: u32, height: u32) -> u64 {
    (u64::from(width) * u64::from(height)).div_ceil(750)
}

fn tool_tokens(t: &ToolDef) -> u64 {
    TOOL_OVERHEAD
        + text_tokens(&t.name)
        + text_tokens(&t.description)
        + json_tokens(&t.input_schema)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ascii_is_about_four_chars_per_token() {
        let e = Estimator::new();
        assert_eq!(e.text(&"abcd".repeat(100)), 100);
        assert_eq!(e.text("日本語"), 3);
    }

    #[test]
    fn json_counts_structure_not_just_text() {
        let flat = text_tokens(r#"{"path":"/tmp/x"}"#);
        let walked = json_tokens(&json!({"path": "/tmp/x"}));
        assert!(walked >= flat, "{walked} < {flat}");
    }

    #[test]
    fn calibration_moves_toward_the_server_and_is_clamped() {
        let mut e = Estimator::new();
        e.calibrate(1000, 1500);
        assert!((e.factor() - 1.25).abs() < 1e-9);
        assert_eq!(e.text(&"abcd".repeat(100)), 125);
        for _ in 0..20 {
            let est = e.text(&"abcd".repeat(100));
            e.calibrate(est, 100_000);
        }
        assert_eq!(e.factor(), MAX_FACTOR);
        e.calibrate(10, 1_000_000);
        assert_eq!(e.factor(), MAX_FACTOR);
    }

    #[test]
    fn an_exact_calibration_takes_the_server_count_whole() {
        let mut e = Estimator::new();
        let text = "abcd".repeat(1000);
        e.calibrate_exact(e.text(&text), 1333);
        assert_eq!(e.text(&text), 1333);
        e.calibrate_exact(e.text(&text), 100_000);
        assert_eq!(e.factor(), MAX_FACTOR);
    }
}
