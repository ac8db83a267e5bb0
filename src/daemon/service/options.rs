//! `Submit`'s options as the daemon takes them: the bus contract's
//! [`SubmitOptions::from_dict`] checks each key for its type and value, then what needs
//! this machine is checked here (the workspace exists, the `when` conditions parse).
//! Every refusal is an `InvalidArgument` that names the key.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use familiar_protocol::ids::SessionId;
use familiar_protocol::{ContextSource, Error, SubmitOptions};
use zbus::OwnedVariant;

use crate::snapshot::conditions::Conditions;

/// `Submit`'s options, checked.
#[derive(Default)]
pub(super) struct Options {
    pub(super) session: Option<SessionId>,
    pub(super) origin: Option<String>,
    pub(super) workspace: Option<PathBuf>,
    pub(super) max_iterations: Option<u32>,
    pub(super) provider: Option<String>,
    pub(super) model: Option<String>,
    pub(super) when: Option<Conditions>,
    /// What the user pointed at, read by the client ([`crate::agent::context::attached`]).
    pub(super) context: BTreeMap<ContextSource, String>,
}

/// Checks `Submit`'s options: each key known, of its type, its value valid.
pub(super) fn parse(options: HashMap<String, OwnedVariant>) -> Result<Options, Error> {
    let o = SubmitOptions::from_dict(options)?;
    if let Some(w) = &o.workspace
        && !w.is_dir()
    {
        return Err(Error::InvalidArgument(format!(
            "option `workspace`: {} is not an existing directory",
            w.display()
        )));
    }
    let when = o
        .when
        .map(|s| s.parse::<Conditions>())
        .transpose()
        .map_err(|e| Error::InvalidArgument(format!("option `when`: {e}")))?;
    Ok(Options {
        session: o.session,
        origin: o.origin,
        workspace: o.workspace,
        max_iterations: o.max_iterations,
        provider: o.provider,
        model: o.model,
        when,
        context: o.context,
    })
}
