//! `familiar memory`: list, forget and clear long-term memory entries.
//!
//! Works on `data_dir/memory.json` directly, without the daemon: the file is locked
//! for every change, so a running daemon sees the result at its next task.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context as _;
use familiar_protocol::display::visible;

use super::{Exit, MemoryAction, Out};
use crate::config::{Config, ProcessEnv};
use crate::store::{Memory, MemoryError, MemoryScope, Store};

pub fn memory(
    config: &Option<PathBuf>,
    action: Option<MemoryAction>,
    json: bool,
    out: &mut Out,
) -> anyhow::Result<Exit> {
    let config = Config::load(config.as_deref(), &ProcessEnv)?;
    let data_dir = &config.paths.data_dir;
    let store = Store::open(data_dir)
        .with_context(|| format!("cannot open the data dir {}", data_dir.display()))?;
    let memory = Memory::new(store.data_dir(), config.memory.max_entries_per_scope);
    match action.unwrap_or(MemoryAction::List) {
        MemoryAction::List => {
            for e in memory.list()? {
                if json {
                    out.json_line(&e)?;
                } else {
                    writeln!(out, "{}\t{}\t{}", e.id, e.soul, visible(&e.text))?;
                }
            }
            Ok(Exit::Completed)
        }
        MemoryAction::Forget { id } => match memory.forget(&id) {
            Ok(e) => {
                if json {
                    out.json_line(&e)?;
                } else {
                    writeln!(out, "forgot {}\t{}\t{}", e.id, e.soul, visible(&e.text))?;
                }
                Ok(Exit::Completed)
            }
            // An unknown id, as for `cancel`, `undo` and `sessions rm`.
            Err(e @ MemoryError::NotFound(_)) => {
                writeln!(std::io::stderr().lock(), "familiar: {e}")?;
                Ok(Exit::Usage)
            }
            Err(e) => Err(e.into()),
        },
        MemoryAction::Clear { soul } => {
            let scope = soul
                .map(|s| s.parse::<MemoryScope>())
                .transpose()
                .context("--soul takes a soul id, or * for the entries every soul sees")?;
            let n = memory.clear(scope.as_ref())?;
            // Nothing removed for a soul that does not exist is a typo, not success;
            // a removed soul's leftover entries still clear.
            if n == 0
                && let Some(MemoryScope::Soul(id)) = &scope
                && let Ok(policy) = crate::policy::load(&config.policy, &config.paths)
                && let Ok(souls) = crate::soul::SoulSet::load(&config.paths, &policy)
            {
                souls.get(id.as_str())?;
            }
            if json {
                out.json_line(&serde_json::json!({"removed": n}))?;
            } else {
                writeln!(out, "removed {n} entries")?;
            }
            Ok(Exit::Completed)
        }
    }
}
