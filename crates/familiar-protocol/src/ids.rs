//! Identifier newtypes.
//!
//! Every id that crosses a boundary (D-Bus, CLI, file names) is its own type, so a task
//! id can never be passed where a session id is expected. Ids that become file names
//! ([`SessionId`]) are validated on construction: only `[A-Za-z0-9._-]`, at most 64
//! bytes, not starting with a dot, so no id can name a path outside its directory.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Longest id we accept from outside.
pub const MAX_ID_LEN: usize = 64;

/// Why a string is not a valid id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// No characters.
    #[error("{kind} is empty")]
    Empty {
        /// Which id (`task id`).
        kind: &'static str,
    },
    /// Longer than [`MAX_ID_LEN`].
    #[error("{kind} `{id}` is longer than {MAX_ID_LEN} characters")]
    TooLong {
        /// Which id.
        kind: &'static str,
        /// Its first characters.
        id: String,
    },
    /// A character outside `[A-Za-z0-9._-]`, or a leading dot.
    #[error(
        "{kind} `{id}` may only contain letters, digits, `.`, `_` and `-`, and may not start with `.`"
    )]
    BadCharacter {
        /// Which id.
        kind: &'static str,
        /// The id.
        id: String,
    },
}

fn validate(kind: &'static str, id: &str) -> Result<(), IdError> {
    if id.is_empty() {
        return Err(IdError::Empty { kind });
    }
    if id.len() > MAX_ID_LEN {
        let id: String = id.chars().take(MAX_ID_LEN).collect();
        return Err(IdError::TooLong { kind, id });
    }
    let ok = !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !ok {
        return Err(IdError::BadCharacter {
            kind,
            id: id.to_owned(),
        });
    }
    Ok(())
}

/// A random lowercase hex string of `n` characters.
fn random_hex(n: usize) -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..n)
        .map(|_| char::from_digit(rng.random_range(0..16), 16).unwrap_or('0'))
        .collect()
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $prefix:literal, $validate:path) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Checks `id` and wraps it.
            pub fn new(id: impl Into<String>) -> Result<Self, IdError> {
                let id = id.into();
                $validate($kind, &id)?;
                Ok(Self(id))
            }

            /// A fresh random id.
            pub fn generate() -> Self {
                Self(format!("{}{}", $prefix, random_hex(12)))
            }

            /// The id as it crosses the bus.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(s: String) -> Result<Self, IdError> {
                Self::new(s)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                Self::new(s)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                // `pad` so tables can align ids with `{:<18}`.
                f.pad(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        // Compared with the text it is, as clients reading the JSON do.
        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }
    };
}

id_type!(
    /// One agent task: a prompt run to a finish status.
    TaskId, "task id", "t-",
    validate
);
id_type!(
    /// A conversation that persists across tasks (`context/SESSION_ID.json`).
    SessionId, "session id", "s-",
    validate
);
id_type!(
    /// A soul profile's id (`souls/ID.toml`).
    SoulId, "soul id", "soul-",
    validate
);
id_type!(
    /// One tool call inside a model response. Providers' own ids are kept as they are.
    CallId, "call id", "call-",
    validate_call_id
);
id_type!(
    /// One pending approval question.
    RequestId, "request id", "r-",
    validate
);
id_type!(
    /// One long-term memory entry (`memory.json`).
    MemoryId, "memory id", "m-",
    validate
);

/// Call ids come from providers, which use characters we would reject elsewhere
/// (some servers send `:` or spaces); they never become paths, so only emptiness and
/// length are checked.
fn validate_call_id(kind: &'static str, id: &str) -> Result<(), IdError> {
    if id.is_empty() {
        return Err(IdError::Empty { kind });
    }
    if id.len() > 256 {
        return Err(IdError::TooLong {
            kind,
            id: id.chars().take(MAX_ID_LEN).collect(),
        });
    }
    Ok(())
}

impl CallId {
    /// Wraps a provider's call id as it is (see [`validate_call_id`]); an empty or
    /// overlong one is replaced by a fresh id so the call can still be answered.
    pub fn from_provider(id: impl Into<String>) -> Self {
        let id = id.into();
        match validate_call_id("call id", &id) {
            Ok(()) => Self(id),
            Err(_) => Self::generate(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_are_valid_and_distinct() {
        let a = SessionId::generate();
        let b = SessionId::generate();
        assert_ne!(a, b);
        assert_eq!(SessionId::new(a.as_str()), Ok(a.clone()));
        assert!(a.as_str().starts_with("s-"));
    }

    #[test]
    fn ids_that_could_name_other_paths_are_rejected() {
        for bad in ["", "..", ".hidden", "a/b", "a\\b", "a b", "x\0", "é"] {
            assert!(SessionId::new(bad).is_err(), "{bad:?} accepted");
        }
        assert!(SessionId::new("x".repeat(65)).is_err());
        assert!(SessionId::new("x".repeat(64)).is_ok());
    }

    #[test]
    fn ids_deserialize_with_validation() {
        let ok: SoulId = serde_json::from_str("\"safe_assistant\"").unwrap();
        assert_eq!(ok.as_str(), "safe_assistant");
        assert!(serde_json::from_str::<SoulId>("\"../etc\"").is_err());
    }
}
