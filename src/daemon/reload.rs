//! Picking up config.toml, soul and policy changes while the daemon runs: on SIGHUP
//! (`systemctl --user reload familiar`), and lazily when a `Submit` or `ListSouls` sees
//! that config.toml or a file under the souls or policies directory changed (a
//! fingerprint of names, sizes and modification times, a few `stat`s).
//!
//! Invariant: a reload never makes things worse. A config.toml that does not load keeps
//! the previous config (and says so: [`Reloadable::error`], which `familiar ask` and
//! `status` show through the `Configuration` property); a policy that does not load
//! keeps the previous policy and souls; a soul file that does not load keeps that
//! soul's previous version (it is reported, as at start-up). Running tasks keep what
//! they started with. What config.toml cannot change while the daemon runs: `data_dir`
//! (the open store; a change is reported and waits for a restart). The swap replaces
//! only what changed (`agent::Settings::reloaded`): MCP servers whose tables and
//! protected paths did not change keep running, unchanged providers keep their
//! connections.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::SystemTime;

use crate::agent::{Runtime, Services};
use crate::config::{Config, ProcessEnv};
use crate::error::ConfigError;
use crate::soul::{SoulOrigin, SoulSet};

/// Files whose change triggers a reload: (path, size, modified).
type Fingerprint = Vec<(std::path::PathBuf, u64, Option<SystemTime>)>;

/// The daemon's one runtime: its services, and the settings new tasks get (swapped
/// whole by a reload) with the fingerprint they were loaded at.
pub struct Reloadable {
    services: Arc<Services>,
    current: RwLock<(Arc<Runtime>, Fingerprint)>,
    /// Why the last reload kept something previous (config.toml, the policy), until a
    /// reload succeeds.
    error: RwLock<Option<String>>,
}

impl Reloadable {
    pub fn new(rt: Arc<Runtime>) -> Reloadable {
        let fp = fingerprint(&rt.settings.config);
        Reloadable {
            services: Arc::clone(&rt.services),
            current: RwLock::new((rt, fp)),
            error: RwLock::new(None),
        }
    }

    /// What lives as long as the daemon (never replaced by a reload).
    pub fn services(&self) -> &Services {
        &self.services
    }

    /// What the last reload could not take (a broken config.toml or policy, whose
    /// previous version stays in force), if anything.
    pub fn error(&self) -> Option<String> {
        self.error
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_error(&self, error: Option<String>) {
        *self.error.write().unwrap_or_else(PoisonError::into_inner) = error;
    }

    /// The runtime new tasks run under.
    pub fn get(&self) -> Arc<Runtime> {
        Arc::clone(
            &self
                .current
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .0,
        )
    }

    /// Reloads when a file changed since the last load; the runtime in force either way.
    pub fn refresh(&self) -> Arc<Runtime> {
        let changed = {
            let cur = self.current.read().unwrap_or_else(PoisonError::into_inner);
            fingerprint(&cur.0.settings.config) != cur.1
        };
        if changed && let Err(e) = self.reload() {
            tracing::error!("{e}");
        }
        self.get()
    }

    /// Re-reads config.toml, the policy and the souls. Errors leave the previous ones
    /// in force, and are kept for [`Reloadable::error`].
    pub fn reload(&self) -> Result<(), ReloadError> {
        let result = self.reload_all();
        self.set_error(match &result {
            Ok(None) => None,
            Ok(Some(note)) => Some(note.clone()),
            Err(e) => Some(e.to_string()),
        });
        match result {
            Ok(Some(note)) => Err(ReloadError(note)),
            Ok(None) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The reload; `Ok(Some(why))` when config.toml was kept and the rest reloaded.
    fn reload_all(&self) -> Result<Option<String>, ReloadError> {
        let old = self.get();
        let settings = &old.settings;
        // The fingerprint is taken first: a change during the load triggers another.
        let fp = fingerprint(&settings.config);
        let (config, config_note) = match reload_config(&settings.config) {
            Ok((config, note)) => (config, note),
            Err(e) => (Arc::clone(&settings.config), Some(e.to_string())),
        };
        let keep = |e: ConfigError| {
            ReloadError(format!(
                "reload failed, the previous policy and souls stay in force: {e}"
            ))
        };
        let policy = crate::policy::load(&config.policy, &config.paths).map_err(keep)?;
        let mut souls = SoulSet::load(&config.paths, &policy).map_err(keep)?;
        let soul_notes = keep_previous_souls(&mut souls, &settings.souls);
        let (new, changed) = settings.reloaded(config, policy, souls, &self.services);
        if changed.policy {
            self.services
                .approvals
                .set_timeout(new.policy.approval_timeout);
        }
        // Warmed again even when nothing changed: a reload is also how a person says
        // "the model server restarted" (its cache is gone; a warm request that finds
        // the prefix cached costs little).
        self.services.warm.after_reload();
        tracing::info!(
            "reloaded ({changed}): policy `{}` and {} souls in force",
            new.policy.name,
            new.souls.souls.len()
        );
        let rt = Arc::new(old.with_settings(Arc::new(new)));
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = (rt, fp);
        let notes: Vec<String> = config_note.into_iter().chain(soul_notes).collect();
        Ok((!notes.is_empty()).then(|| notes.join("\n")))
    }
}

/// A soul file that changed but no longer loads keeps its previous version (reported,
/// as at start-up); one never loaded is skipped. Returns what it says of each, for the
/// caller of `Reload` (`familiar reload` exits 2 with it).
fn keep_previous_souls(souls: &mut SoulSet, previous: &SoulSet) -> Vec<String> {
    let mut notes = Vec::new();
    for err in &souls.errors {
        let kept = previous.souls.values().find(
            |s| matches!(&s.origin, SoulOrigin::File(p) if p.display().to_string() == err.file),
        );
        let note = match kept {
            Some(s) => {
                souls.souls.insert(s.id.to_string(), s.clone());
                format!(
                    "soul file changed but does not load, its previous version stays in force: {err}"
                )
            }
            None => format!("soul file skipped, it does not load: {err}"),
        };
        tracing::error!("{note}");
        notes.push(note);
    }
    notes
}

/// config.toml read again: the same `Arc` when it did not change, else the new config
/// and, when it changes what only a restart can (`data_dir`), a note saying so. An
/// error (it does not parse, it is gone) keeps the previous config; the message names
/// the file, line and key.
fn reload_config(old: &Arc<Config>) -> Result<(Arc<Config>, Option<String>), ConfigKept> {
    let path = config_path(old);
    let src = match std::fs::read_to_string(&path) {
        Ok(src) => src,
        // Never written: the built-in defaults stay in force.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && old.source.is_none() => {
            return Ok((Arc::clone(old), None));
        }
        Err(err) => return Err(ConfigKept::Read { path, err }),
    };
    let mut new = Config::from_toml(&path.display().to_string(), &src, &ProcessEnv)
        .map_err(ConfigKept::Invalid)?;
    let note = (new.data_dir_setting != old.data_dir_setting).then(|| {
        format!(
            "config.toml reloaded, but `data_dir` ({}) takes effect only when the daemon restarts (`systemctl --user restart familiar`); it uses {} until then",
            new.paths.data_dir.display(),
            old.paths.data_dir.display()
        )
    });
    // The directories are the running daemon's (its environment, its open store).
    new.paths = old.paths.clone();
    new.data_dir_setting = old.data_dir_setting.clone();
    if new == **old {
        return Ok((Arc::clone(old), note));
    }
    Ok((Arc::new(new), note))
}

/// Why config.toml was not reloaded (the daemon keeps its previous version).
#[derive(Debug, thiserror::Error)]
enum ConfigKept {
    #[error(
        "config.toml does not load, the daemon keeps its previous version: cannot read {}: {err}",
        path.display()
    )]
    Read { path: PathBuf, err: std::io::Error },
    #[error("config.toml does not load, the daemon keeps its previous version: {0}")]
    Invalid(ConfigError),
}

/// The config file the daemon reads: the one it loaded, else the default location
/// (a config.toml written after start is picked up).
fn config_path(config: &Config) -> PathBuf {
    config
        .source
        .clone()
        .unwrap_or_else(|| config.paths.config_dir.join("config.toml"))
}

/// A reload that kept something previous: config.toml, or the policy and souls.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ReloadError(String);

fn fingerprint(config: &Config) -> Fingerprint {
    let paths = &config.paths;
    let mut fp = Fingerprint::new();
    let config = config_path(config);
    if let Ok(m) = std::fs::metadata(&config) {
        fp.push((config, m.len(), m.modified().ok()));
    }
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
