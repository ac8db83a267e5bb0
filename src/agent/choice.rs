//! Which soul, provider and model a task runs under, for `familiar run` and the
//! daemon's `Submit` alike.
//!
//! Invariant: a task that continues a session runs under the session's soul (a
//! session's history was written for that persona and its tools); asking for another
//! soul there is an error rather than a silent switch. `--provider`/`--model` override
//! the soul's choice for this one task; a provider without a model uses that
//! provider's own default model (the soul's model belongs to the soul's provider).

use std::sync::Arc;

use familiar_protocol::ids::SessionId;

use crate::config::Config;
use crate::error::{ConfigError, FileError};
use crate::soul::{Soul, SoulSet};
use crate::store::{Store, StoreError};

/// What the caller asked for.
#[derive(Debug, Default, Clone)]
pub struct Choice<'a> {
    /// `None` (or empty): the session's soul, else `default_soul`.
    pub soul: Option<&'a str>,
    pub session: Option<&'a SessionId>,
    pub provider: Option<&'a str>,
    pub model: Option<&'a str>,
}

#[derive(Debug, thiserror::Error)]
pub enum ChoiceError {
    #[error(transparent)]
    UnknownSoul(ConfigError),
    #[error("no session `{0}` (`familiar sessions` lists them)")]
    UnknownSession(SessionId),
    #[error(
        "session {session} runs under the soul `{has}`, not `{asked}`: continue it without --soul, or start a new session with --soul {asked}"
    )]
    SoulMismatch {
        session: SessionId,
        has: String,
        asked: String,
    },
    #[error(transparent)]
    UnknownProvider(ConfigError),
    /// The soul, or config.toml's `default_soul`, names what config.toml lacks: the
    /// error `familiar souls validate` gives, at its file, line and key.
    #[error(transparent)]
    Config(FileError),
    #[error("--model must not be empty")]
    EmptyModel,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// `default_soul` names no soul: config.toml's line says so (a soul file that failed to
/// load keeps its own error, which `get` gives).
fn unknown_default_soul(config: &Config, e: ConfigError) -> ChoiceError {
    let Some(path) = &config.source else {
        return ChoiceError::UnknownSoul(e);
    };
    let src = std::fs::read_to_string(path).ok();
    ChoiceError::Config(FileError::at_key(
        &path.display().to_string(),
        src.as_deref(),
        "default_soul",
        e.to_string(),
    ))
}

/// The first thing a user soul names that config.toml lacks (a provider, an
/// `mcp:NAME`), at the soul file's line. Built-in souls name nothing of config.toml.
fn soul_config_error(soul: &Soul, config: &Config) -> Option<FileError> {
    let crate::soul::SoulOrigin::File(path) = &soul.origin else {
        return None;
    };
    let src = std::fs::read_to_string(path).ok();
    let file = path.display().to_string();
    crate::soul::config_errors(soul, &file, src.as_deref(), config)
        .into_iter()
        .next()
}

/// The soul the task runs under, with the per-task provider/model applied.
pub fn choose(
    souls: &SoulSet,
    config: &Config,
    store: &Store,
    c: &Choice<'_>,
) -> Result<Arc<Soul>, ChoiceError> {
    let asked = c.soul.filter(|s| !s.is_empty());
    let session_soul = match c.session {
        Some(id) => {
            let ctx = store
                .load_context(id)?
                .ok_or_else(|| ChoiceError::UnknownSession(id.clone()))?;
            Some((id, ctx.soul.to_string()))
        }
        None => None,
    };
    let id = match (session_soul, asked) {
        (Some((session, has)), Some(asked)) if has != asked => {
            return Err(ChoiceError::SoulMismatch {
                session: session.clone(),
                has,
                asked: asked.to_owned(),
            });
        }
        (Some((_, has)), _) => has,
        (None, Some(asked)) => asked.to_owned(),
        (None, None) => {
            let id = config.default_soul.to_string();
            if let Err(e) = souls.get(&id) {
                return Err(unknown_default_soul(config, e));
            }
            id
        }
    };
    let shared = souls.get(&id).map_err(ChoiceError::UnknownSoul)?;
    if let Some(e) = soul_config_error(shared, config) {
        return Err(ChoiceError::Config(e));
    }
    if c.provider.is_none() && c.model.is_none() {
        return Ok(Arc::clone(shared));
    }
    let mut soul = Soul::clone(shared);
    if let Some(p) = c.provider {
        config
            .provider(Some(p))
            .map_err(ChoiceError::UnknownProvider)?;
        soul.provider = Some(p.to_owned());
        soul.model = None;
    }
    if let Some(m) = c.model {
        if m.trim().is_empty() {
            return Err(ChoiceError::EmptyModel);
        }
        soul.model = Some(m.to_owned());
    }
    Ok(Arc::new(soul))
}
