//! `Submit`'s options (an `a{sv}`): each known key checked for its type and value, so the
//! service object reads a typed [`SubmitOptions`]; an unknown key or a wrong type is an
//! `InvalidArgument` that names the key.

use std::collections::HashMap;
use std::path::PathBuf;

use zbus::OwnedVariant;

use crate::dbus::{Error, MAX_ORIGIN_CHARS};
use crate::ids::SessionId;
use crate::snapshot::conditions::Conditions;

/// `Submit`'s options, checked.
#[derive(Default)]
pub(super) struct SubmitOptions {
    pub(super) session: Option<SessionId>,
    pub(super) origin: Option<String>,
    pub(super) workspace: Option<PathBuf>,
    pub(super) max_iterations: Option<u32>,
    pub(super) provider: Option<String>,
    pub(super) model: Option<String>,
    pub(super) when: Option<Conditions>,
}

/// Checks `Submit`'s options: each key known, of its type, its value valid.
pub(super) fn parse(options: HashMap<String, OwnedVariant>) -> Result<SubmitOptions, Error> {
    let mut o = SubmitOptions::default();
    for (key, value) in options {
        match key.as_str() {
            "session" => {
                let s = string_option(&key, value)?;
                let id = SessionId::new(s.clone())
                    .map_err(|e| Error::InvalidArgument(format!("option `session`: {e}")))?;
                o.session = Some(id);
            }
            "origin" => {
                let s = string_option(&key, value)?;
                if s.is_empty() || s.chars().count() > MAX_ORIGIN_CHARS {
                    return Err(Error::InvalidArgument(format!(
                        "option `origin` must be 1 to {MAX_ORIGIN_CHARS} characters (cli, hyprland, timer, …)"
                    )));
                }
                o.origin = Some(s);
            }
            "workspace" => {
                let s = string_option(&key, value)?;
                let path = PathBuf::from(&s);
                if !path.is_absolute() {
                    return Err(Error::InvalidArgument(format!(
                        "option `workspace` must be an absolute path, got `{s}`"
                    )));
                }
                if !path.is_dir() {
                    return Err(Error::InvalidArgument(format!(
                        "option `workspace`: {s} is not an existing directory"
                    )));
                }
                o.workspace = Some(path);
            }
            "max_iterations" => {
                let n = u32::try_from(value).map_err(|_| wrong_type(&key, "u (uint32)"))?;
                if n == 0 {
                    return Err(Error::InvalidArgument(
                        "option `max_iterations` must be at least 1".to_owned(),
                    ));
                }
                o.max_iterations = Some(n);
            }
            "provider" => o.provider = Some(string_option(&key, value)?),
            "model" => o.model = Some(string_option(&key, value)?),
            "when" => {
                let s = string_option(&key, value)?;
                let when = s
                    .parse::<Conditions>()
                    .map_err(|e| Error::InvalidArgument(format!("option `when`: {e}")))?;
                o.when = Some(when);
            }
            other => {
                return Err(Error::InvalidArgument(format!(
                    "unknown option `{other}`; Submit takes session (s), origin (s), workspace (s), max_iterations (u), provider (s), model (s), when (s)"
                )));
            }
        }
    }
    Ok(o)
}

fn string_option(key: &str, value: OwnedVariant) -> Result<String, Error> {
    String::try_from(value).map_err(|_| wrong_type(key, "s (string)"))
}

fn wrong_type(key: &str, want: &str) -> Error {
    Error::InvalidArgument(format!("option `{key}` must be of type {want}"))
}
