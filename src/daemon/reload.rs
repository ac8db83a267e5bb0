//! Picking up soul and policy changes while the daemon runs: on SIGHUP (`systemctl
//! --user reload familiar`), and lazily when a `Submit` or `ListSouls` sees that a file
//! under the souls or policies directory changed (a fingerprint of names, sizes and
//! modification times, a few `stat`s).
//!
//! Invariant: a reload never makes things worse. A policy that does not load keeps
//! the previous policy and souls; a soul file that does not load keeps that soul's
//! previous version (it is reported, as at start-up). Running tasks keep what they
//! started with; config.toml itself is read only at start.

use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::SystemTime;

use crate::agent::Runtime;
use crate::error::ConfigError;
use crate::soul::{SoulOrigin, SoulSet};

/// What new tasks run under: the runtime (with the policy) and the souls.
#[derive(Clone)]
pub struct Loaded {
    pub rt: Arc<Runtime>,
    pub souls: Arc<SoulSet>,
}

/// Files whose change triggers a reload: (path, size, modified).
type Fingerprint = Vec<(std::path::PathBuf, u64, Option<SystemTime>)>;

/// The current [`Loaded`] and the fingerprint it was loaded at.
pub struct Reloadable {
    current: RwLock<(Loaded, Fingerprint)>,
}

impl Reloadable {
    pub fn new(rt: Arc<Runtime>, souls: Arc<SoulSet>) -> Reloadable {
        let fp = fingerprint(&rt);
        Reloadable {
            current: RwLock::new((Loaded { rt, souls }, fp)),
        }
    }

    pub fn get(&self) -> Loaded {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .0
            .clone()
    }

    /// Reloads when a file changed since the last load; the souls in force either way.
    pub fn refresh(&self) -> Loaded {
        let changed = {
            let cur = self.current.read().unwrap_or_else(PoisonError::into_inner);
            fingerprint(&cur.0.rt) != cur.1
        };
        if changed && let Err(e) = self.reload() {
            tracing::error!("{e}");
        }
        self.get()
    }

    /// Re-reads the policy and the souls. Errors leave the previous ones in force.
    pub fn reload(&self) -> Result<(), ReloadError> {
        let old = self.get();
        let rt = &old.rt;
        // The fingerprint is taken first: a change during the load triggers another.
        let fp = fingerprint(rt);
        let keep = |e: ConfigError| ReloadError(e.to_string());
        let policy =
            Arc::new(crate::policy::load(&rt.config.policy, &rt.config.paths).map_err(keep)?);
        let mut souls = SoulSet::load(&rt.config.paths, &policy).map_err(keep)?;
        for err in &souls.errors {
            let previous = old.souls.souls.values().find(
                |s| matches!(&s.origin, SoulOrigin::File(p) if p.display().to_string() == err.file),
            );
            match previous {
                Some(s) => {
                    tracing::error!(
                        "soul file changed but does not load, keeping its previous version: {err}"
                    );
                    souls.souls.insert(s.id.to_string(), s.clone());
                }
                None => tracing::error!("skipping soul file: {err}"),
            }
        }
        let souls = Arc::new(souls);
        let rt = Arc::new(Runtime {
            policy,
            souls: Arc::clone(&souls),
            memory: rt.memory.clone(),
            config: Arc::clone(&rt.config),
            store: Arc::clone(&rt.store),
            tools: Arc::clone(&rt.tools),
            limiters: Arc::clone(&rt.limiters),
            approvals: rt.approvals.clone(),
            metrics: Arc::clone(&rt.metrics),
            snapshotter: Arc::clone(&rt.snapshotter),
            hooks: rt.hooks.clone(),
            llm: Arc::clone(&rt.llm),
            launcher: Arc::clone(&rt.launcher),
            plans: rt.plans.clone(),
            enforcement: rt.enforcement.clone(),
            // Its servers run with the protected paths of the policy they started under
            // until the daemon restarts (docs/mcp.md).
            mcp: Arc::clone(&rt.mcp),
        });
        tracing::info!(
            "reloaded policy `{}` and {} souls",
            rt.policy.name,
            souls.souls.len()
        );
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = (Loaded { rt, souls }, fp);
        Ok(())
    }
}

/// A reload that kept the previous policy and souls.
#[derive(Debug, thiserror::Error)]
#[error("reload failed, the previous policy and souls stay in force: {0}")]
pub struct ReloadError(String);

fn fingerprint(rt: &Runtime) -> Fingerprint {
    let paths = &rt.config.paths;
    let mut fp = Fingerprint::new();
    for dir in [paths.souls_dir(), paths.policies_dir()] {
        collect(&dir, &mut fp);
        // Prompt files of souls live one level down (`prompts/*.md`).
        collect(&dir.join("prompts"), &mut fp);
    }
    fp.sort();
    fp
}

fn collect(dir: &Path, fp: &mut Fingerprint) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if let Ok(m) = e.metadata()
            && m.is_file()
        {
            fp.push((e.path(), m.len(), m.modified().ok()));
        }
    }
}
