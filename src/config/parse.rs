//! Small parsing helpers for user files: durations, sizes and `~` paths.
//!
//! Invariant: this file imports nothing from the crate, so the config, souls and
//! policies all use it without reaching up or around.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// A duration a user wrote that humantime does not read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid duration `{text}`: {source} (examples: \"30s\", \"10m\", \"1h\")")]
pub struct DurationError {
    text: String,
    #[source]
    source: humantime::DurationError,
}

/// `"30s"`, `"10m"`, `"1h 30m"` (humantime syntax).
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    humantime::parse_duration(s).map_err(|source| DurationError {
        text: s.to_owned(),
        source,
    })
}

/// Bytes from `"512M"`, `"2G"`, `"1048576"`: a whole number with an optional K, M, G or
/// T suffix, powers of 1024 as systemd reads `MemoryMax=` (a dozen lines do not need a
/// dependency; the crates for it read `M` as 10^6).
pub fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, shift) = match text.char_indices().last()? {
        (i, 'K' | 'k') => (&text[..i], 10),
        (i, 'M' | 'm') => (&text[..i], 20),
        (i, 'G' | 'g') => (&text[..i], 30),
        (i, 'T' | 't') => (&text[..i], 40),
        _ => (text, 0),
    };
    let n: u64 = digits.trim().parse().ok()?;
    n.checked_mul(1u64 << shift)
}

/// `~` and `~/x` become the home directory; other paths are returned as they are.
pub fn expand_home(path: &Path, home: &Path) -> PathBuf {
    match path.strip_prefix("~") {
        Ok(rest) if rest.as_os_str().is_empty() => home.to_owned(),
        Ok(rest) => home.join(rest),
        Err(_) => path.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_humantime_and_bad_ones_show_examples() {
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        let err = parse_duration("soon").unwrap_err().to_string();
        assert!(err.starts_with("invalid duration `soon`: "), "{err}");
        assert!(
            err.ends_with("(examples: \"30s\", \"10m\", \"1h\")"),
            "{err}"
        );
    }

    #[test]
    fn only_a_leading_tilde_is_the_home() {
        let home = Path::new("/home/u");
        assert_eq!(expand_home(Path::new("~"), home), PathBuf::from("/home/u"));
        assert_eq!(
            expand_home(Path::new("~/a"), home),
            PathBuf::from("/home/u/a")
        );
        assert_eq!(expand_home(Path::new("/a/~"), home), PathBuf::from("/a/~"));
        assert_eq!(expand_home(Path::new("~x/a"), home), PathBuf::from("~x/a"));
    }
}
