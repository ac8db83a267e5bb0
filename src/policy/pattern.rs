//! The regex of a `[[blocked]]` or `[[ask]]` rule, and when it is compiled.
//!
//! Compiling the built-in `default` policy's regexes was ~4 ms of every `familiar run`
//! (the perl classes `\S` and `\w` are Unicode-aware, so large), though most runs never
//! check a shell command. So a pattern of a built-in policy is compiled at its first
//! match: each of them is known to compile (`builtin_patterns_compile` in the tests of
//! `file.rs`). A pattern a user wrote is compiled when its file loads, so a bad one is
//! still an error naming its file and line, and never a surprise at decision time.
//!
//! Invariant: [`Pattern::is_match`] answers what `Regex::new(source)?.is_match` answers;
//! a clone shares the compiled regex, so it is compiled at most once per process.

use std::fmt;
use std::sync::{Arc, OnceLock};

use regex::Regex;

/// A rule's regex, compiled now ([`Pattern::compile`]) or at its first match
/// ([`Pattern::builtin`]).
#[derive(Clone)]
pub struct Pattern(Arc<Inner>);

struct Inner {
    source: String,
    regex: OnceLock<Result<Regex, regex::Error>>,
}

impl Pattern {
    /// Compiles `source` now: a user's pattern, checked when its file loads.
    pub fn compile(source: &str) -> Result<Pattern, regex::Error> {
        let regex = Regex::new(source)?;
        Ok(Pattern(Arc::new(Inner {
            source: source.to_owned(),
            regex: OnceLock::from(Ok(regex)),
        })))
    }

    /// A pattern of a built-in policy, compiled at its first match.
    pub(super) fn builtin(source: &str) -> Pattern {
        Pattern(Arc::new(Inner {
            source: source.to_owned(),
            regex: OnceLock::new(),
        }))
    }

    pub fn as_str(&self) -> &str {
        &self.0.source
    }

    /// Whether the regex matches anywhere in `haystack`.
    pub fn is_match(&self, haystack: &str) -> bool {
        match self.regex() {
            Ok(regex) => regex.is_match(haystack),
            // Only a built-in pattern can get here, and the tests compile each one; were
            // one broken, its rule applies (deny or ask) rather than silently not.
            Err(_) => true,
        }
    }

    fn regex(&self) -> &Result<Regex, regex::Error> {
        self.0.regex.get_or_init(|| Regex::new(&self.0.source))
    }

    /// Whether the regex has been compiled (for tests of when that happens).
    #[cfg(test)]
    pub(super) fn is_compiled(&self) -> bool {
        self.0.regex.get().is_some()
    }
}

/// Shown as `Regex("…")`, as the compiled regex shows itself (the policy snapshots).
impl fmt::Debug for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Regex").field(&self.as_str()).finish()
    }
}
