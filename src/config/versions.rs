//! `[versions]`: how much of what tasks overwrote, changed or trashed outside their
//! workspace the data directory keeps (`versions/`, [`crate::store::versions`]), so a
//! task can be undone. Raw ([`VersionsToml`]) and effective ([`VersionsConfig`]) types.
//!
//! The rule for a file larger than `max_file`: it is changed all the same (the policy
//! allowed it), but its previous content is not kept, the tool's result says the change
//! cannot be undone, and `familiar undo` refuses that file by name.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::parse::{parse_bytes, parse_duration};

pub const DEFAULT_VERSIONS_MAX_TOTAL: u64 = 512 << 20;
pub const DEFAULT_VERSIONS_MAX_FILE: u64 = 32 << 20;
pub const DEFAULT_VERSIONS_MAX_AGE: Duration = Duration::from_secs(30 * 24 * 3600);

/// `[versions]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VersionsToml {
    /// All kept versions together (`"512M"`); the oldest go first past it.
    pub max_total: Option<String>,
    /// A version older than this goes (`"30d"`).
    pub max_age: Option<String>,
    /// A file larger than this is not kept (`"32M"`).
    pub max_file: Option<String>,
}

/// `[versions]`, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct VersionsConfig {
    pub max_total: u64,
    #[serde(with = "humantime_secs")]
    pub max_age: Duration,
    pub max_file: u64,
}

impl Default for VersionsConfig {
    fn default() -> Self {
        VersionsConfig {
            max_total: DEFAULT_VERSIONS_MAX_TOTAL,
            max_age: DEFAULT_VERSIONS_MAX_AGE,
            max_file: DEFAULT_VERSIONS_MAX_FILE,
        }
    }
}

mod humantime_secs {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }
}

/// The effective `[versions]`; an error names the key.
pub(super) fn resolve(raw: VersionsToml) -> Result<VersionsConfig, (String, String)> {
    let d = VersionsConfig::default();
    let size = |key: &str, v: Option<String>, default: u64| match v {
        None => Ok(default),
        Some(t) => parse_bytes(&t).ok_or_else(|| {
            (
                format!("versions.{key}"),
                format!("`{t}` is not a size (e.g. \"512M\", \"2G\", \"1048576\")"),
            )
        }),
    };
    let max_total = size("max_total", raw.max_total, d.max_total)?;
    let max_file = size("max_file", raw.max_file, d.max_file)?;
    let max_age = match raw.max_age {
        None => d.max_age,
        Some(t) => parse_duration(t.trim())
            .map_err(|e| ("versions.max_age".to_owned(), format!("{e} (e.g. \"30d\")")))?,
    };
    if max_file > max_total {
        return Err((
            "versions.max_file".to_owned(),
            format!("{max_file} bytes is more than versions.max_total ({max_total})"),
        ));
    }
    Ok(VersionsConfig {
        max_total,
        max_age,
        max_file,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_sizes_and_ages_and_default_the_rest() {
        let raw = VersionsToml {
            max_total: Some("1G".into()),
            max_age: Some("7d".into()),
            max_file: None,
        };
        assert_eq!(
            resolve(raw).unwrap(),
            VersionsConfig {
                max_total: 1 << 30,
                max_age: Duration::from_secs(7 * 24 * 3600),
                max_file: DEFAULT_VERSIONS_MAX_FILE,
            }
        );
        let bad = VersionsToml {
            max_file: Some("lots".into()),
            ..VersionsToml::default()
        };
        assert_eq!(resolve(bad).unwrap_err().0, "versions.max_file");
    }
}
