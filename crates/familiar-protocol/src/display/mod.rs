//! What a client shows of text it did not write: a prompt any client may have
//! submitted, a tool's arguments in an approval, a task's result, the summary the
//! daemon sends. Every client that shows an approval needs these (`familiar ask`,
//! `bar`, `approve --dmenu`, a desktop extension), so they live with the contract.
//!
//! The invariant: [`visible`] never returns a character that a terminal, a
//! notification or a text widget would act on or hide: control characters (so ANSI
//! and OSC escapes), bidi overrides and isolates, zero-width and other format
//! characters, separators other than the space, private-use and unassigned code
//! points all come out as escapes (`\n`, `\x1b`, `\u{202E}`). A backslash that could
//! be read as the start of such an escape is doubled, so the rendering reads back to
//! exactly one text. [`describe_call`] builds every approval surface's text from it:
//! every argument of the call, long ones as head and tail with their byte count, so
//! what is approved is what runs.

use serde_json::Value;
use unicode_general_category::{GeneralCategory, get_general_category};

pub mod chooser;
mod doing;

pub use doing::{doing, title};

/// A value longer than this (bytes) is shown as its head and tail.
pub const LONG_VALUE_BYTES: usize = 2048;
/// Bytes of a long value shown before the cut.
const HEAD_BYTES: usize = 1024;
/// Bytes of a long value shown after the cut.
const TAIL_BYTES: usize = 512;
/// Arguments shown one by one; the rest are counted.
pub const MAX_SHOWN_ARGS: usize = 24;
/// The longest rendering of a call an approval shows whole ([`describe_call_whole`]);
/// past it the call is shown cut, and no surface offers to approve it.
pub const REVIEW_MAX_BYTES: usize = 64 * 1024;
/// What marks a value shown cut (`… [N bytes not shown of M in all] …`).
const CUT_MARK: &str = " bytes not shown of ";

/// The argument that says what a call is about, first found in this order; shown on the
/// first line after the tool's name, here and in the plan's steps
/// ([`primary_argument`]): one list.
const PRIMARY_KEYS: &[&str] = &[
    "command",
    "path",
    "target",
    "fact",
    "unit",
    "dispatcher",
    "action",
    "pid",
    "summary",
    "pattern",
    "id",
    "prompt",
];

/// `s` with every character a person could not see, or that a terminal would act on,
/// written as an escape: `\n`, `\r`, `\t`, `\xHH` for the other ASCII controls,
/// `\u{HHHH}` for the rest (C1 controls, bidi and zero-width characters, other
/// separators than the space, private-use and unassigned code points).
pub fn visible(s: &str) -> String {
    render(s, Keep::Nothing)
}

/// `s` for a terminal that shows it as it comes (the model's streamed answer, a
/// tool's output): like [`visible`], but newlines and tabs stay, and the characters
/// that only change how text is shaped (bidi marks, joiners) stay, since languages
/// and emoji need them. What is escaped is what a terminal acts on: every other
/// control character, ANSI and OSC escapes among them.
pub fn terminal_safe(s: &str) -> String {
    render(s, Keep::Layout)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Keep {
    Nothing,
    /// Newlines, tabs and the format characters text needs to shape.
    Layout,
}

fn render(s: &str, keep: Keep) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' && keep == Keep::Nothing {
            // Doubled only where it could be read as one of our escapes. Text for a
            // terminal need not read back, and code in it keeps its backslashes.
            let next = chars.peek().copied();
            let ambiguous = next.is_some_and(|n| {
                matches!(n, '\\' | 'n' | 'r' | 't' | 'x' | 'u') || escaped(n, keep)
            });
            out.push_str(if ambiguous { "\\\\" } else { "\\" });
        } else if escaped(c, keep) {
            push_escape(&mut out, c);
        } else {
            out.push(c);
        }
    }
    out
}

fn push_escape(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
        c => out.push_str(&format!("\\u{{{:04X}}}", c as u32)),
    }
}

/// Whether `c` is written as an escape.
fn escaped(c: char, keep: Keep) -> bool {
    if keep == Keep::Layout && (c == '\n' || c == '\t') {
        return false;
    }
    if c == ' ' {
        return false;
    }
    match get_general_category(c) {
        GeneralCategory::Control => true,
        GeneralCategory::Format
        | GeneralCategory::LineSeparator
        | GeneralCategory::ParagraphSeparator => match keep {
            Keep::Nothing => true,
            // Bidi marks and joiners shape text; overrides and isolates reorder what a
            // reader sees, so they go even here.
            Keep::Layout => is_reordering(c),
        },
        GeneralCategory::SpaceSeparator
        | GeneralCategory::PrivateUse
        | GeneralCategory::Surrogate
        | GeneralCategory::Unassigned => keep == Keep::Nothing,
        GeneralCategory::NonspacingMark => keep == Keep::Nothing && is_invisible_mark(c),
        GeneralCategory::OtherLetter | GeneralCategory::OtherSymbol => {
            keep == Keep::Nothing && is_blank_letter(c)
        }
        _ => false,
    }
}

/// Bidi embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069).
fn is_reordering(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Marks that draw nothing: the combining grapheme joiner and variation selectors
/// (which can carry hidden bytes after any character).
fn is_invisible_mark(c: char) -> bool {
    matches!(
        c,
        '\u{034F}'
            | '\u{180B}'..='\u{180D}'
            | '\u{180F}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{E0100}'..='\u{E01EF}'
    )
}

/// Letters and symbols that render as blank space: the Hangul fillers, the Khmer
/// inherent vowels, the blank Braille pattern.
fn is_blank_letter(c: char) -> bool {
    matches!(
        c,
        '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}' | '\u{2800}' | '\u{3164}' | '\u{FFA0}'
    )
}

/// `text` with every closing tag of `tag` (`</tag`, in any case, with any spaces
/// after `<` or `/`) written `<\/tag`, so text placed inside a `<tag>` block for a
/// model cannot end the block early and speak outside it (memory text once closed its
/// block with `</MEMORY_NOTES>`). `tag` is ASCII.
pub fn neutralise_closing_tag(text: &str, tag: &str) -> String {
    let bytes = text.as_bytes();
    let skip_space = |mut k: usize| {
        while bytes.get(k).is_some_and(u8::is_ascii_whitespace) {
            k += 1;
        }
        k
    };
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while let Some(found) = text[i..].find('<') {
        let lt = i + found;
        i = lt + 1;
        let slash = skip_space(lt + 1);
        if bytes.get(slash) != Some(&b'/') {
            continue;
        }
        let name = skip_space(slash + 1);
        let end = name + tag.len();
        if bytes
            .get(name..end)
            .is_some_and(|b| b.eq_ignore_ascii_case(tag.as_bytes()))
        {
            // Only ASCII bytes were matched, so `lt`, `name` and `end` are char boundaries.
            out.push_str(&text[copied..lt]);
            out.push_str("<\\/");
            out.push_str(&text[name..end]);
            copied = end;
            i = end;
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// `&`, `<` and `>` as entities: text for a surface that renders markup (a
/// notification's body, waybar's `text` and `tooltip`, which render Pango markup), so
/// markup in untrusted text shows as written and cannot hide or restyle the rest.
pub fn escape_markup(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The argument that says what a call is about ([`PRIMARY_KEYS`]), if it has one.
pub fn primary_argument(args: &Value) -> Option<&Value> {
    let map = args.as_object()?;
    PRIMARY_KEYS.iter().find_map(|k| map.get(*k))
}

/// `s` made [`visible`]; when longer than [`LONG_VALUE_BYTES`], its head and tail
/// around a note of how many bytes are not shown and how many there are in all.
pub fn visible_capped(s: &str) -> String {
    if s.len() <= LONG_VALUE_BYTES {
        return visible(s);
    }
    let head = &s[..floor_boundary(s, HEAD_BYTES)];
    let tail = &s[ceil_boundary(s, s.len() - TAIL_BYTES)..];
    let hidden = s.len() - head.len() - tail.len();
    format!(
        "{} … [{hidden} bytes not shown of {} in all] … {}",
        visible(head),
        s.len(),
        visible(tail)
    )
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// What an approval shows of a call: `tool: ` and its main argument on the first
/// line, then every other argument on a line of its own (`  key: value`), each made
/// [`visible`] and long ones cut to head and tail with their size. Lines are ours:
/// every newline inside an argument is an escape.
pub fn describe_call(tool: &str, args: &Value) -> String {
    describe(tool, args, true)
}

/// What an approval asks about: the call as [`describe_call`] shows it but with no
/// argument cut, so the text approved is the text run; a call whose rendering passes
/// [`REVIEW_MAX_BYTES`] is shown cut instead, and [`is_cut`] then says so.
pub fn describe_call_whole(tool: &str, args: &Value) -> String {
    let whole = describe(tool, args, false);
    if whole.len() <= REVIEW_MAX_BYTES {
        whole
    } else {
        describe(tool, args, true)
    }
}

/// Whether a rendering hides part of the call (a value cut to head and tail, or
/// arguments counted, not shown). An argument that spells the marker itself only makes
/// its call look cut, which asks for more care, never less.
pub fn is_cut(summary: &str) -> bool {
    summary.contains(CUT_MARK) || summary.contains("more arguments not shown")
}

fn describe(tool: &str, args: &Value, cap: bool) -> String {
    let text = |v: &Value| if cap { value_text(v) } else { value_whole(v) };
    let mut out = visible(tool);
    let Some(map) = args.as_object() else {
        // Not an object: no tool takes it, but it is shown as it came.
        if !args.is_null() {
            out.push_str(": ");
            out.push_str(&text(args));
        }
        return out;
    };
    let primary = PRIMARY_KEYS.iter().find(|k| map.contains_key(**k)).copied();
    if let Some(key) = primary
        && let Some(v) = map.get(key)
    {
        out.push_str(": ");
        out.push_str(&text(v));
    }
    let rest: Vec<(&String, &Value)> = map
        .iter()
        .filter(|(k, _)| Some(k.as_str()) != primary)
        .collect();
    let shown = if cap { MAX_SHOWN_ARGS } else { rest.len() };
    for (k, v) in rest.iter().take(shown) {
        out.push_str(&format!("\n  {}: {}", visible_capped(k), text(v)));
    }
    if rest.len() > shown {
        let more = rest.len() - MAX_SHOWN_ARGS;
        out.push_str(&format!("\n  … and {more} more arguments not shown"));
    }
    out
}

/// A string as its text, anything else as compact JSON; made visible, whole.
fn value_whole(v: &Value) -> String {
    match v {
        Value::String(s) => visible(s),
        other => visible(&other.to_string()),
    }
}

/// A string as its text, anything else as compact JSON; made visible and capped.
fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => visible_capped(s),
        other => visible_capped(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    /// Reads a [`visible`] rendering back, to prove it is one-to-one.
    fn decode(s: &str) -> String {
        let mut out = String::new();
        let mut chars = s.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            match chars.peek().copied() {
                Some('\\') => {
                    chars.next();
                    out.push('\\');
                }
                Some('n') => {
                    chars.next();
                    out.push('\n');
                }
                Some('r') => {
                    chars.next();
                    out.push('\r');
                }
                Some('t') => {
                    chars.next();
                    out.push('\t');
                }
                Some('x') => {
                    chars.next();
                    let hex: String = chars.by_ref().take(2).collect();
                    out.push(char::from(u8::from_str_radix(&hex, 16).unwrap()));
                }
                Some('u') => {
                    chars.next();
                    assert_eq!(chars.next(), Some('{'));
                    let hex: String = chars.by_ref().take_while(|c| *c != '}').collect();
                    out.push(char::from_u32(u32::from_str_radix(&hex, 16).unwrap()).unwrap());
                }
                _ => out.push('\\'),
            }
        }
        out
    }

    /// What must never reach a person raw.
    fn is_dangerous(c: char) -> bool {
        c.is_control()
            || matches!(
                c,
                '\u{200B}'..='\u{200F}'
                    | '\u{202A}'..='\u{202E}'
                    | '\u{2060}'..='\u{2069}'
                    | '\u{FEFF}'
                    | '\u{061C}'
                    | '\u{2028}'
                    | '\u{2029}'
                    | '\u{00AD}'
                    | '\u{E0000}'..='\u{E007F}'
            )
    }

    // Regression: `ls -la ~/Documents\n\x1b[2K\rtouch x` showed as `shell: ls -la
    // ~/Documents`, and the hidden second command ran once approved.
    #[test]
    fn a_hidden_second_command_is_shown_whole() {
        let args = json!({"command": "ls -la ~/Documents\n\x1b[2K\rtouch x"});
        assert_eq!(
            describe_call("shell", &args),
            "shell: ls -la ~/Documents\\n\\x1b[2K\\rtouch x"
        );
    }

    #[test]
    fn bidi_zero_width_and_osc_links_are_escapes() {
        assert_eq!(visible("a\u{202E}b\u{200B}c"), "a\\u{202E}b\\u{200B}c");
        assert_eq!(
            visible("\x1b]8;;http://x\x1b\\ls\x1b]8;;\x1b\\"),
            "\\x1b]8;;http://x\\x1b\\ls\\x1b]8;;\\x1b\\"
        );
        assert_eq!(
            visible("a\u{a0}b\u{85}c\u{7f}"),
            "a\\u{00A0}b\\u{0085}c\\x7f"
        );
        assert_eq!(visible("tag\u{E0041}"), "tag\\u{E0041}");
    }

    #[test]
    fn a_backslash_is_doubled_only_where_it_could_read_as_an_escape() {
        assert_eq!(visible(r"grep 'a\|b' \*.rs"), r"grep 'a\|b' \*.rs");
        assert_eq!(visible(r"echo a\nb"), r"echo a\\nb");
        assert_eq!(visible("a\\\nb"), "a\\\\\\nb");
        assert_eq!(decode(&visible("a\\\nb")), "a\\\nb");
    }

    #[test]
    fn terminal_text_keeps_lines_and_shaping_but_not_escapes() {
        assert_eq!(
            terminal_safe("line\n\tnext \u{200D}\x1b[8mhidden\u{202E}"),
            "line\n\tnext \u{200D}\\x1b[8mhidden\\u{202E}"
        );
    }

    #[test]
    fn a_closing_tag_in_any_case_or_spacing_is_neutralised() {
        assert_eq!(
            neutralise_closing_tag(
                "a</MEMORY_NOTES>b< / Memory_Notes >c</memory_notesX",
                "memory_notes"
            ),
            "a<\\/MEMORY_NOTES>b<\\/Memory_Notes >c<\\/memory_notesX"
        );
        assert_eq!(
            neutralise_closing_tag("1 < 2 </ b>", "memory_notes"),
            "1 < 2 </ b>"
        );
        assert_eq!(
            neutralise_closing_tag("é</memory_notés", "memory_notes"),
            "é</memory_notés"
        );
    }

    #[test]
    fn a_long_command_shows_head_tail_and_size() {
        let long = format!("echo start{}; rm -rf ~/x", "a".repeat(100_000));
        let shown = describe_call("shell", &json!({ "command": long }));
        assert!(shown.starts_with("shell: echo start"), "{shown}");
        assert!(shown.ends_with("; rm -rf ~/x"), "{shown}");
        assert!(
            shown.contains(&format!("bytes not shown of {} in all", long.len())),
            "{shown}"
        );
        assert!(shown.len() < 2 * LONG_VALUE_BYTES);
    }

    #[test]
    fn every_argument_is_shown_main_one_first() {
        let args = json!({"content": "one\ntwo", "path": "notes.md"});
        assert_eq!(
            describe_call("write_file", &args),
            "write_file: notes.md\n  content: one\\ntwo"
        );
        assert_eq!(
            describe_call(
                "remember",
                &json!({"fact": "the user's \u{202E}name", "scope": "all"})
            ),
            "remember: the user's \\u{202E}name\n  scope: all"
        );
        assert_eq!(
            describe_call("system_snapshot", &json!({})),
            "system_snapshot"
        );
        assert_eq!(
            describe_call("shell", &json!({"command": "ls", "cwd\nx": 3})),
            "shell: ls\n  cwd\\nx: 3"
        );
    }

    #[test]
    fn many_arguments_are_counted_past_the_shown_ones() {
        let args: serde_json::Map<String, Value> = (0..MAX_SHOWN_ARGS + 5)
            .map(|i| (format!("k{i:03}"), json!(i)))
            .collect();
        let shown = describe_call("x__y", &Value::Object(args));
        assert!(
            shown.ends_with("… and 5 more arguments not shown"),
            "{shown}"
        );
    }

    proptest! {
        #[test]
        fn no_closing_tag_survives_neutralising(s in "([<>/ a-zA-Z_é]|MEMORY_NOTES|memory_notes){0,30}") {
            let out = neutralise_closing_tag(&s, "memory_notes").to_ascii_lowercase();
            let squeezed: String = out.chars().filter(|c| !c.is_ascii_whitespace()).collect();
            prop_assert!(!squeezed.contains("</memory_notes"), "{out:?}");
        }

        #[test]
        fn visible_never_lets_a_dangerous_character_through(s in any::<String>()) {
            let shown = visible(&s);
            prop_assert!(!shown.chars().any(is_dangerous), "{shown:?}");
            prop_assert_eq!(decode(&shown), s);
        }

        #[test]
        fn visible_of_hostile_mixes_reads_back(
            parts in proptest::collection::vec(
                prop_oneof![
                    Just("\\".to_owned()), Just("\n".to_owned()), Just("\x1b[2K".to_owned()),
                    Just("\u{202E}".to_owned()), Just("\u{200B}".to_owned()), Just("n".to_owned()),
                    Just("x1b".to_owned()), Just("u{202E}".to_owned()), "[a-z ]{0,3}",
                ],
                0..20,
            )
        ) {
            let s: String = parts.concat();
            let shown = visible(&s);
            prop_assert!(!shown.chars().any(is_dangerous), "{shown:?}");
            prop_assert_eq!(decode(&shown), s);
        }

        #[test]
        fn a_description_never_holds_a_dangerous_character(
            tool in any::<String>(),
            command in any::<String>(),
            key in any::<String>(),
            value in any::<String>(),
        ) {
            let args = json!({ "command": command, key: value });
            let shown = describe_call(&tool, &args);
            // Our own line breaks are the only newlines.
            prop_assert!(!shown.chars().any(|c| c != '\n' && is_dangerous(c)), "{shown:?}");
            prop_assert!(shown.lines().skip(1).all(|l| l.starts_with("  ")), "{shown:?}");
        }

        #[test]
        fn terminal_text_never_holds_a_control_but_newline_and_tab(s in any::<String>()) {
            let shown = terminal_safe(&s);
            prop_assert!(
                !shown.chars().any(|c| (c.is_control() && c != '\n' && c != '\t') || is_reordering(c)),
                "{shown:?}"
            );
        }
    }
}
