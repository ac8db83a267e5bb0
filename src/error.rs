//! The crate's shared error types.
//!
//! Errors about user files ([`FileError`]) always name the file, the line and the key,
//! and say what is allowed, so a typo in a soul or a policy is fixed in one look:
//! `souls/mine.toml:4: key `max_iterations`: invalid type: string "ten", expected u32`.
//! Module-specific errors (LLM, store, tools) live next to their modules.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// An error in a user-edited file (config, soul, policy), located to the line and key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct FileError {
    /// The file as the user knows it (a path, or `built-in:souls/x.toml`).
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// Dotted key path (`permissions.write`), when known.
    pub key: Option<String>,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        write!(f, ": ")?;
        if let Some(key) = &self.key {
            write!(f, "key `{key}`: ")?;
        }
        f.write_str(&self.message)
    }
}

impl FileError {
    pub fn whole_file(file: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            file: file.into(),
            line: None,
            key: None,
            message: message.into(),
        }
    }

    /// An error at `span` of `src` (for semantic errors found after parsing, located
    /// with `toml::Spanned`).
    pub fn at(file: &str, src: &str, span: Range<usize>, message: impl Into<String>) -> Self {
        let (line, key) = locate(src, span);
        Self {
            file: file.to_owned(),
            line: Some(line),
            key,
            message: message.into(),
        }
    }

    /// An error about the value of the dotted `key` (found after parsing, where no
    /// span was kept): located to the line that sets it in `src`, when there is one.
    pub fn at_key(file: &str, src: Option<&str>, key: &str, message: impl Into<String>) -> Self {
        Self {
            file: file.to_owned(),
            line: src.and_then(|src| key_line(src, key)),
            key: Some(key.to_owned()),
            message: message.into(),
        }
    }
}

/// The 1-based line where the dotted `key` (`providers.local.base_url`) is written in
/// `src`: the line of its last segment's key, or of the deepest table that holds it.
fn key_line(src: &str, key: &str) -> Option<usize> {
    let doc = toml::de::DeTable::parse(src).ok()?;
    let mut table = doc.get_ref();
    let mut span = None;
    for segment in key.split('.') {
        let Some((k, v)) = table.iter().find(|(k, _)| k.get_ref().as_ref() == segment) else {
            break;
        };
        span = Some(k.span());
        match v.get_ref() {
            toml::de::DeValue::Table(t) => table = t,
            _ => break,
        }
    }
    span.map(|span| line_of(src, span.start))
}

/// The 1-based line of byte `offset` in `src`.
fn line_of(src: &str, offset: usize) -> usize {
    let offset = offset.min(src.len());
    src[..offset].bytes().filter(|&b| b == b'\n').count() + 1
}

/// Errors loading the config, souls or policies.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("unknown soul `{id}` (known: {known})")]
    UnknownSoul { id: String, known: String },
    #[error(
        "unknown policy `{name}` (known: {known}; a policy of your own goes in {dir}/{name}.toml)"
    )]
    UnknownPolicy {
        name: String,
        known: String,
        dir: String,
    },
    #[error("{0}")]
    Invalid(String),
}

/// Parses `src` as TOML into `T`, turning a parse or schema error into a [`FileError`]
/// that names `file`, the line and the key.
pub fn parse_toml<T: DeserializeOwned>(file: &str, src: &str) -> Result<T, FileError> {
    toml::from_str(src).map_err(|err| {
        let message = err.message().trim_end().to_owned();
        match err.span() {
            Some(span) => FileError::at(file, src, span, message),
            None => FileError::whole_file(file, message),
        }
    })
}

/// Reads a file, mapping the error to [`ConfigError::Read`].
pub fn read_file(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })
}

/// The 1-based line of `span.start` and, when it can be told, the dotted key there.
///
/// toml reports unknown fields with the span of the key itself and type errors with the
/// span of the value; either way the key is the `name =` at the start of the line (or
/// the span's own text), prefixed with the nearest `[table]` header above it.
fn locate(src: &str, span: Range<usize>) -> (usize, Option<String>) {
    let start = span.start.min(src.len());
    let line = line_of(src, start);
    let line_start = src[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = src[start..].find('\n').map_or(src.len(), |i| start + i);
    let text = &src[line_start..line_end];

    let table = src[..line_start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim().to_owned());

    let own = text.trim_start();
    let key = if own.starts_with('[') {
        // The span is on a table header: the header names itself.
        Some(own.trim_matches(|c| c == '[' || c == ']').trim().to_owned())
    } else {
        own.split_once('=')
            .map(|(k, _)| k.trim().trim_matches('"').to_owned())
            .filter(|k| !k.is_empty() && !k.contains(char::is_whitespace))
            .map(|k| match &table {
                Some(t) => format!("{t}.{k}"),
                None => k,
            })
    };
    // A line inside a value written over several lines (an array) sets no key itself:
    // the key is the one whose value holds the span.
    let key = key.or_else(|| key_holding(src, start)).or(table);
    (line, key)
}

/// The dotted key whose value holds byte `offset` of `src`, if `src` parses.
fn key_holding(src: &str, offset: usize) -> Option<String> {
    fn walk(table: &toml::de::DeTable<'_>, offset: usize, path: &mut Vec<String>) -> bool {
        for (k, v) in table.iter() {
            if !v.span().contains(&offset) {
                continue;
            }
            path.push(k.get_ref().to_string());
            if let toml::de::DeValue::Table(t) = v.get_ref() {
                walk(t, offset, path);
            }
            return true;
        }
        false
    }
    let doc = toml::de::DeTable::parse(src).ok()?;
    let mut path = Vec::new();
    walk(doc.get_ref(), offset, &mut path).then(|| path.join("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        count: u32,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Outer {
        name: Option<String>,
        inner: Option<Inner>,
    }

    #[test]
    fn type_error_names_line_and_dotted_key() {
        let src = "name = \"x\"\n\n[inner]\ncount = \"ten\"\n";
        let err = parse_toml::<Outer>("f.toml", src).unwrap_err();
        assert_eq!(err.line, Some(4));
        assert_eq!(err.key.as_deref(), Some("inner.count"));
        assert!(
            err.to_string().starts_with("f.toml:4: key `inner.count`: "),
            "{err}"
        );
    }

    #[test]
    fn unknown_key_names_the_key_and_the_allowed_ones() {
        let src = "nmae = \"x\"\n";
        let err = parse_toml::<Outer>("f.toml", src).unwrap_err();
        assert_eq!(err.line, Some(1));
        assert_eq!(err.key.as_deref(), Some("nmae"));
        assert!(err.message.contains("`name`"), "{err}");
    }

    #[test]
    fn syntax_error_has_a_line() {
        let err = parse_toml::<Outer>("f.toml", "name = \n").unwrap_err();
        assert_eq!(err.line, Some(1));
    }
}
