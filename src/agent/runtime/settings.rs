//! What a reload replaces ([`Settings`]): config.toml, the policy, the souls and what is
//! made from them (model clients, the memory's limits, the MCP servers, what the model
//! servers taught), and the one rule of a reload ([`Settings::reloaded`]): a part is
//! replaced only when what it is made from changed, so a reload that touches one soul
//! keeps the HTTP connections, the MCP servers and the calibrations.

use std::sync::Arc;

use super::{ConfigLlmFactory, LlmFactory, Services};
use crate::agent::context::learned::Calibrations;
use crate::config::Config;
use crate::mcp::McpHub;
use crate::policy::Policy;
use crate::soul::SoulSet;
use crate::store::Memory;

/// What the user's files say, and what is made from them.
pub struct Settings {
    pub config: Arc<Config>,
    pub policy: Arc<Policy>,
    /// Every soul, for `Submit` and for `delegate` to find the one a task hands a
    /// sub-task to.
    pub souls: Arc<SoulSet>,
    pub llm: Arc<dyn LlmFactory>,
    /// Long-term memory (`data_dir/memory.json`), with config.toml's limits.
    pub memory: Memory,
    /// The MCP servers of `config.toml`, started when a task first uses one and kept
    /// until they are reloaded away or the process ends ([`McpHub::shutdown`]).
    pub mcp: Arc<McpHub>,
    /// What the model servers' counts taught earlier tasks (their token ratio and
    /// context size), per provider and model.
    pub calibrations: Calibrations,
}

/// Which parts of the settings a reload replaced (the others are the same objects).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reloaded {
    pub config: bool,
    pub policy: bool,
    pub souls: bool,
    /// Model clients (a provider or the default provider changed): new connections,
    /// calibrations forgotten.
    pub providers: bool,
    /// The MCP hub (a server's table or the protected paths changed).
    pub mcp: bool,
    pub memory: bool,
}

impl std::fmt::Display for Reloaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<&str> = [
            (self.config, "config.toml"),
            (self.policy, "the policy"),
            (self.souls, "the souls"),
            (self.providers, "the model clients"),
            (self.mcp, "the MCP servers"),
            (self.memory, "the memory limits"),
        ]
        .into_iter()
        .filter_map(|(changed, name)| changed.then_some(name))
        .collect();
        if parts.is_empty() {
            f.write_str("nothing changed")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

impl Settings {
    /// The settings `config`, `policy` and `souls` make, model clients from
    /// `config.toml`'s providers.
    pub fn new(
        config: Arc<Config>,
        policy: Arc<Policy>,
        souls: Arc<SoulSet>,
        services: &Services,
    ) -> Settings {
        Settings {
            llm: Arc::new(ConfigLlmFactory::new(Arc::clone(&config))),
            memory: Memory::new(
                services.store.data_dir(),
                config.memory.max_entries_per_scope,
            ),
            mcp: Arc::new(new_hub(&config, &policy, services)),
            calibrations: Calibrations::default(),
            config,
            policy,
            souls,
        }
    }

    /// These settings after a reload read `config`, `policy` and `souls`: every part
    /// whose inputs are unchanged is kept (the same object, shared with the tasks
    /// running under these settings), the others are made afresh. The old MCP hub's
    /// servers stop when the last task using them ends (dropping a connection stops its
    /// server).
    pub fn reloaded(
        &self,
        config: Arc<Config>,
        policy: Policy,
        souls: SoulSet,
        services: &Services,
    ) -> (Settings, Reloaded) {
        let config_changed = !Arc::ptr_eq(&config, &self.config) && *config != *self.config;
        let config = if config_changed {
            config
        } else {
            Arc::clone(&self.config)
        };
        let policy_changed = policy != *self.policy;
        let policy = if policy_changed {
            Arc::new(policy)
        } else {
            Arc::clone(&self.policy)
        };
        let souls_changed = !same_souls(&souls, &self.souls);
        let souls = if souls_changed {
            Arc::new(souls)
        } else {
            Arc::clone(&self.souls)
        };
        let (old, new) = (&*self.config, &*config);
        let changed = Reloaded {
            config: config_changed,
            policy: policy_changed,
            souls: souls_changed,
            providers: old.providers != new.providers
                || old.default_provider != new.default_provider,
            mcp: old.mcp != new.mcp || self.policy.protected_paths != policy.protected_paths,
            memory: old.memory != new.memory,
        };
        let settings = Settings {
            // A new factory reads the new providers; one that stays keeps its pooled
            // connections (and a test's own factory stays).
            llm: if changed.providers {
                Arc::new(ConfigLlmFactory::new(Arc::clone(&config)))
            } else {
                Arc::clone(&self.llm)
            },
            memory: if changed.memory {
                Memory::new(services.store.data_dir(), new.memory.max_entries_per_scope)
            } else {
                self.memory.clone()
            },
            mcp: if changed.mcp {
                Arc::new(new_hub(&config, &policy, services))
            } else {
                Arc::clone(&self.mcp)
            },
            // What the servers taught holds while their tables stay the same.
            calibrations: if changed.providers {
                Calibrations::default()
            } else {
                self.calibrations.clone()
            },
            config,
            policy,
            souls,
        };
        (settings, changed)
    }
}

/// The hub of `config`'s MCP servers, under `policy`'s protected paths.
fn new_hub(config: &Config, policy: &Policy, services: &Services) -> McpHub {
    McpHub::new(
        &config.mcp,
        crate::sandbox::SandboxLauncher::clone(&services.launcher),
        policy.protected_paths.clone(),
        config.paths.data_dir.join("mcp"),
        config.paths.home.clone(),
    )
}

/// The same souls, and the same files failing to load.
fn same_souls(a: &SoulSet, b: &SoulSet) -> bool {
    a.souls == b.souls
        && a.errors.len() == b.errors.len()
        && a.errors
            .iter()
            .zip(&b.errors)
            .all(|(x, y)| x.to_string() == y.to_string())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    const CONFIG: &str = "[providers.local]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n\n[mcp.notes]\ncommand = \"/bin/true\"\n";

    struct Fixture {
        home: tempfile::TempDir,
        services: Services,
    }

    impl Fixture {
        fn new() -> Fixture {
            let home = tempfile::tempdir().unwrap();
            let services = Services::for_tests(&home.path().join("data"));
            Fixture { home, services }
        }

        fn config(&self, src: &str) -> Arc<Config> {
            let env = BTreeMap::from([("HOME".to_owned(), self.home.path().display().to_string())]);
            Arc::new(Config::from_toml("config.toml", src, &env).unwrap())
        }

        /// The policy and souls `config` names, as a reload reads them.
        fn load(&self, config: &Config) -> (Policy, SoulSet) {
            let policy = crate::policy::load(&config.policy, &config.paths).unwrap();
            let souls = SoulSet::load(&config.paths, &policy).unwrap();
            (policy, souls)
        }

        fn settings(&self, src: &str) -> Settings {
            let config = self.config(src);
            let (policy, souls) = self.load(&config);
            Settings::new(config, Arc::new(policy), Arc::new(souls), &self.services)
        }
    }

    fn kept_llm(a: &Settings, b: &Settings) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&a.llm), Arc::as_ptr(&b.llm))
    }

    #[test]
    fn a_reload_of_unchanged_files_keeps_every_part() {
        let f = Fixture::new();
        let old = f.settings(CONFIG);
        let (policy, souls) = f.load(&old.config);
        let (new, changed) = old.reloaded(f.config(CONFIG), policy, souls, &f.services);
        assert_eq!(changed, Reloaded::default());
        assert_eq!(changed.to_string(), "nothing changed");
        assert!(Arc::ptr_eq(&old.config, &new.config));
        assert!(Arc::ptr_eq(&old.policy, &new.policy));
        assert!(Arc::ptr_eq(&old.souls, &new.souls));
        assert!(Arc::ptr_eq(&old.mcp, &new.mcp));
        assert!(kept_llm(&old, &new));
    }

    #[test]
    fn a_changed_soul_replaces_the_souls_alone() {
        let f = Fixture::new();
        let old = f.settings(CONFIG);
        let dir = old.config.paths.souls_dir();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("mine.toml"), "prompt = \"You help.\"\n").unwrap();
        let (policy, souls) = f.load(&old.config);
        let (new, changed) = old.reloaded(f.config(CONFIG), policy, souls, &f.services);
        assert_eq!(
            changed,
            Reloaded {
                souls: true,
                ..Reloaded::default()
            }
        );
        assert!(new.souls.souls.contains_key("mine"));
        assert!(Arc::ptr_eq(&old.config, &new.config));
        assert!(Arc::ptr_eq(&old.policy, &new.policy));
        assert!(
            Arc::ptr_eq(&old.mcp, &new.mcp),
            "the MCP servers keep running"
        );
        assert!(kept_llm(&old, &new), "the model connections stay");
    }

    #[test]
    fn a_changed_provider_replaces_the_model_clients_and_keeps_the_mcp_servers() {
        let f = Fixture::new();
        let old = f.settings(CONFIG);
        let (policy, souls) = f.load(&old.config);
        let src = CONFIG.replace("model = \"m\"", "model = \"other\"");
        let (new, changed) = old.reloaded(f.config(&src), policy, souls, &f.services);
        assert!(changed.config && changed.providers, "{changed:?}");
        assert!(!changed.mcp && !changed.policy && !changed.souls && !changed.memory);
        assert_eq!(changed.to_string(), "config.toml, the model clients");
        assert!(!kept_llm(&old, &new));
        assert!(Arc::ptr_eq(&old.mcp, &new.mcp));
        assert!(Arc::ptr_eq(&old.policy, &new.policy));
    }

    #[test]
    fn a_changed_server_table_or_protected_path_replaces_the_mcp_hub() {
        let f = Fixture::new();
        let old = f.settings(CONFIG);
        let (policy, souls) = f.load(&old.config);
        let src = CONFIG.replace("/bin/true", "/bin/false");
        let (new, changed) = old.reloaded(f.config(&src), policy, souls, &f.services);
        assert!(changed.mcp && !changed.providers, "{changed:?}");
        assert!(!Arc::ptr_eq(&old.mcp, &new.mcp));
        assert!(kept_llm(&old, &new));

        let (mut policy, souls) = f.load(&old.config);
        policy.protected_paths.push(f.home.path().join("vault"));
        let (new, changed) = old.reloaded(f.config(CONFIG), policy, souls, &f.services);
        assert!(
            changed.policy && changed.mcp && !changed.config,
            "{changed:?}"
        );
        assert!(!Arc::ptr_eq(&old.mcp, &new.mcp));
        assert!(Arc::ptr_eq(&old.config, &new.config));
    }
}
