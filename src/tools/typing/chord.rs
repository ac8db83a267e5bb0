//! Key chords as the model writes them (`ctrl+s`, `Return`, `ctrl+shift+t`), checked
//! against the names we know and turned into wtype's words (`-M ctrl -k s -m ctrl`).
//!
//! Invariant: nothing the model writes reaches wtype's command line but a name from
//! [`MODIFIERS`] or [`KEYS`] (or one letter or digit): an unknown name is an error that
//! lists what is accepted, so a chord never becomes an option, a file name or text.
//! The typed text goes to wtype on its standard input, never as an argument.

use std::fmt;

/// Modifiers, as written (lowercase) → wtype's `-M`/`-m` names.
const MODIFIERS: &[(&str, &str)] = &[
    ("ctrl", "ctrl"),
    ("control", "ctrl"),
    ("shift", "shift"),
    ("alt", "alt"),
    ("altgr", "altgr"),
    ("super", "logo"),
    ("logo", "logo"),
    ("win", "logo"),
    ("meta", "logo"),
];

/// Named keys, as written (compared without case) → their XKB keysym name, which
/// wtype's `-k` takes. Letters, digits and `F1`–`F24` are accepted besides these.
const KEYS: &[(&str, &str)] = &[
    ("return", "Return"),
    ("enter", "Return"),
    ("tab", "Tab"),
    ("escape", "Escape"),
    ("esc", "Escape"),
    ("backspace", "BackSpace"),
    ("delete", "Delete"),
    ("del", "Delete"),
    ("insert", "Insert"),
    ("home", "Home"),
    ("end", "End"),
    ("page_up", "Prior"),
    ("pageup", "Prior"),
    ("prior", "Prior"),
    ("page_down", "Next"),
    ("pagedown", "Next"),
    ("next", "Next"),
    ("left", "Left"),
    ("right", "Right"),
    ("up", "Up"),
    ("down", "Down"),
    ("space", "space"),
    ("menu", "Menu"),
    ("print", "Print"),
    ("minus", "minus"),
    ("equal", "equal"),
    ("plus", "plus"),
    ("comma", "comma"),
    ("period", "period"),
    ("slash", "slash"),
    ("backslash", "backslash"),
    ("semicolon", "semicolon"),
    ("apostrophe", "apostrophe"),
    ("grave", "grave"),
    ("bracketleft", "bracketleft"),
    ("bracketright", "bracketright"),
];

/// Chords one call may press.
pub const MAX_CHORDS: usize = 32;

/// One chord: modifiers held (in the order written, each once) around one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chord {
    /// wtype's modifier names.
    pub modifiers: Vec<&'static str>,
    /// The key's keysym name.
    pub key: String,
}

/// A chord the model wrote that names something we do not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChordError {
    #[error(
        "the chord `{0}` is empty or has an empty part (write keys like ctrl+s, Return, ctrl+shift+t)"
    )]
    Empty(String),
    #[error(
        "unknown key `{key}` in `{chord}`: a letter, a digit, F1-F24 or one of {}",
        known_keys()
    )]
    UnknownKey { chord: String, key: String },
    #[error(
        "`{part}` in `{chord}` is not a modifier (modifiers: ctrl, shift, alt, altgr, super); only the last part is a key"
    )]
    UnknownModifier { chord: String, part: String },
    #[error("more than {MAX_CHORDS} chords in one call")]
    TooMany,
}

fn known_keys() -> String {
    let mut names: Vec<&str> = KEYS.iter().map(|(_, k)| *k).collect();
    names.dedup();
    names.join(", ")
}

impl Chord {
    /// Parses `ctrl+shift+t`: modifiers, then one key, joined by `+` (spaces around
    /// parts ignored). A lone `+` is the key `plus`.
    pub fn parse(chord: &str) -> Result<Chord, ChordError> {
        let empty = || ChordError::Empty(chord.to_owned());
        let trimmed = chord.trim();
        if trimmed.is_empty() {
            return Err(empty());
        }
        let parts: Vec<&str> = if trimmed == "+" {
            vec!["plus"]
        } else {
            trimmed.split('+').map(str::trim).collect()
        };
        let (key, mods) = parts.split_last().ok_or_else(empty)?;
        if key.is_empty() || mods.iter().any(|m| m.is_empty()) {
            return Err(empty());
        }
        let mut modifiers = Vec::new();
        for part in mods {
            let lower = part.to_lowercase();
            let Some((_, m)) = MODIFIERS.iter().find(|(n, _)| *n == lower) else {
                return Err(ChordError::UnknownModifier {
                    chord: chord.to_owned(),
                    part: (*part).to_owned(),
                });
            };
            if !modifiers.contains(m) {
                modifiers.push(*m);
            }
        }
        let key = keysym(key).ok_or_else(|| ChordError::UnknownKey {
            chord: chord.to_owned(),
            key: (*key).to_owned(),
        })?;
        Ok(Chord { modifiers, key })
    }

    /// wtype's words: `-M ctrl -k s -m ctrl` (modifiers released in reverse).
    pub fn wtype_args(&self) -> Vec<String> {
        let mut out = Vec::new();
        for m in &self.modifiers {
            out.extend(["-M".to_owned(), (*m).to_owned()]);
        }
        out.extend(["-k".to_owned(), self.key.clone()]);
        for m in self.modifiers.iter().rev() {
            out.extend(["-m".to_owned(), (*m).to_owned()]);
        }
        out
    }
}

/// `ctrl+shift+t`, as the approval and the result show it.
impl fmt::Display for Chord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for m in &self.modifiers {
            let shown = if *m == "logo" { "super" } else { m };
            write!(f, "{shown}+")?;
        }
        f.write_str(&self.key)
    }
}

/// The keysym name of a key as written, if we know it.
fn keysym(key: &str) -> Option<String> {
    let mut chars = key.chars();
    if let (Some(c), None) = (chars.next(), chars.next())
        && c.is_ascii_alphanumeric()
    {
        return Some(c.to_ascii_lowercase().to_string());
    }
    let lower = key.to_lowercase();
    if let Some(n) = lower.strip_prefix('f')
        && let Ok(n) = n.parse::<u8>()
        && (1..=24).contains(&n)
        && !n.to_string().starts_with('0')
        && lower.len() == n.to_string().len() + 1
    {
        return Some(format!("F{n}"));
    }
    KEYS.iter()
        .find(|(n, _)| *n == lower)
        .map(|(_, k)| (*k).to_owned())
}

/// Every chord of `keys`, parsed; the first error.
pub fn parse_all(keys: &[String]) -> Result<Vec<Chord>, ChordError> {
    if keys.len() > MAX_CHORDS {
        return Err(ChordError::TooMany);
    }
    keys.iter().map(|k| Chord::parse(k)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(chord: &str) -> Vec<String> {
        Chord::parse(chord).unwrap().wtype_args()
    }

    #[test]
    fn a_chord_holds_its_modifiers_around_the_key() {
        assert_eq!(args("ctrl+s"), ["-M", "ctrl", "-k", "s", "-m", "ctrl"]);
        assert_eq!(
            args("ctrl+shift+t"),
            [
                "-M", "ctrl", "-M", "shift", "-k", "t", "-m", "shift", "-m", "ctrl"
            ]
        );
        assert_eq!(args("Return"), ["-k", "Return"]);
        assert_eq!(
            args("super+Enter"),
            ["-M", "logo", "-k", "Return", "-m", "logo"]
        );
    }

    #[test]
    fn names_are_read_without_case_and_spaces() {
        assert_eq!(args(" Ctrl + S "), ["-M", "ctrl", "-k", "s", "-m", "ctrl"]);
        assert_eq!(args("ESC"), ["-k", "Escape"]);
        assert_eq!(args("page_down"), ["-k", "Next"]);
        assert_eq!(args("f12"), ["-k", "F12"]);
        assert_eq!(args("alt+F4"), ["-M", "alt", "-k", "F4", "-m", "alt"]);
        assert_eq!(args("+"), ["-k", "plus"]);
        assert_eq!(args("ctrl+ctrl+a"), ["-M", "ctrl", "-k", "a", "-m", "ctrl"]);
    }

    #[test]
    fn unknown_names_are_refused_with_what_is_accepted() {
        let err = Chord::parse("ctrl+frobnicate").unwrap_err();
        assert!(matches!(err, ChordError::UnknownKey { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("unknown key `frobnicate`"), "{text}");
        assert!(text.contains("Return") && text.contains("F1-F24"), "{text}");
        for bad in ["F25", "F0", "F01", "-k", "--help", "a b", "é", "Ctrl"] {
            assert!(Chord::parse(bad).is_err(), "{bad} must be refused");
        }
        assert!(matches!(
            Chord::parse("hyper+a"),
            Err(ChordError::UnknownModifier { .. })
        ));
        assert!(matches!(
            Chord::parse("s+ctrl"),
            Err(ChordError::UnknownModifier { .. })
        ));
        for empty in ["", "  ", "ctrl+", "+a", "ctrl++s"] {
            assert!(
                matches!(Chord::parse(empty), Err(ChordError::Empty(_))),
                "{empty:?}"
            );
        }
    }

    #[test]
    fn a_chord_reads_back_as_written() {
        assert_eq!(
            Chord::parse("control+SHIFT+t").unwrap().to_string(),
            "ctrl+shift+t"
        );
        assert_eq!(Chord::parse("win+l").unwrap().to_string(), "super+l");
    }

    #[test]
    fn too_many_chords_are_refused() {
        let keys = vec!["a".to_owned(); MAX_CHORDS + 1];
        assert_eq!(parse_all(&keys), Err(ChordError::TooMany));
        assert_eq!(parse_all(&keys[..2]).unwrap().len(), 2);
    }
}
