//! Which soul, provider and model a task runs under, for `familiar run` and the
//! daemon's `Submit` alike.
//!
//! Invariant: a task that continues a session runs under the session's soul (a
//! session's history was written for that persona and its tools); asking for another
//! soul there is an error rather than a silent switch. `--provider`/`--model` override
//! the soul's choice for this one task; a provider without a model uses that
//! provider's own default model (the soul's model belongs to the soul's provider).

use std::sync::Arc;

use crate::config::Config;
use crate::error::ConfigError;
use crate::ids::SessionId;
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
    #[error("--model must not be empty")]
    EmptyModel,
    #[error(transparent)]
    Store(#[from] StoreError),
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
        (None, None) => config.default_soul.to_string(),
    };
    let shared = souls.get(&id).map_err(ChoiceError::UnknownSoul)?;
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
