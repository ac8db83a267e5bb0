//! The sandbox spec: what one sandboxed call may touch ([`SandboxPolicy`], the daemon's
//! side) and what the daemon hands the `familiar-sandbox` helper
//! ([`familiar_sandbox::spec::HelperSpec`]: the ready rules of the
//! [`Plan`](super::plan::Plan), the limits and the environment).
//!
//! The invariant: a [`SandboxPolicy`] only ever grants what the [`SandboxSpec`] (the
//! soul's `[sandbox]` table, built by the caller), the task workspace and the start-up
//! baseline below name, minus the protected paths, which the plan carves out of the
//! readable trees; nothing here is trusted by the kernel until the helper turns it into
//! a Landlock ruleset.
//!
//! The read baseline is what a dynamically linked program needs to start and answer
//! the usual questions, and nothing else:
//! - `/usr`, `/bin`, `/sbin`, `/lib`, `/lib64`, `/lib32`: programs and their libraries
//!   (on merged-/usr systems the top-level ones are symlinks into `/usr`).
//! - `/etc/ld.so.cache`, `/etc/ld.so.conf`, `/etc/ld.so.conf.d`: the dynamic loader.
//! - `/etc/alternatives`: Debian's `update-alternatives` links (`awk`, `editor`).
//! - `/etc/localtime`: `date` and log timestamps in local time.
//! - `/etc/nsswitch.conf`, `/etc/passwd`, `/etc/group`: user and group names for `id`,
//!   `ls -l`, `whoami` (no password hashes: those are in `/etc/shadow`).
//! - `/dev/null`, `/dev/zero`, `/dev/urandom`, `/dev/random`: what shells and
//!   runtimes open unasked. `/dev/tty` is left out: a tool has no terminal.
//! - `/proc`: read-only. Landlock rules hold inodes, and `/proc/<pid>` inodes are made
//!   on lookup for each process, so a rule on `/proc/self` would only ever cover the
//!   helper's own pid; the rule has to sit on `/proc` itself. What that exposes is
//!   bounded by the kernel: `environ`, `mem`, `fd/` and the like of processes outside
//!   the sandbox need ptrace access, which Landlock denies across domains; `cmdline` and
//!   `stat` of other processes stay visible, as they are to `ps`.
//! - `/sys/devices/system/cpu`: `nproc` and thread pools sizing themselves.
//!
//! Writable: the soul's `write` trees and `[sandbox] startup` paths, the task workspace
//! (created here, because Landlock rules need an inode and `path_beneath_rules`
//! silently skips a missing path) and `/dev/null`, minus the closed places
//! ([`crate::policy::closed`]: hidden entries of the home, `$XDG_CONFIG_HOME`, the
//! user's program directories, …) carved out of every tree that is not inside one. A
//! soul's tree inside a closed place is granted only when the soul names it exactly in
//! `startup` (or it is a data directory of its own); the workspace always is. `TMPDIR`
//! points into the workspace, since `/tmp` is not writable.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use familiar_sandbox::spec::{HelperSpecRef, Limits};

use super::SandboxError;
use super::busproxy::BusProxy;
use super::plan::{PlanCache, Trees};
use super::resources::TaskResources;
use crate::policy::closed::Closed;

/// What a soul's tools may touch, as the soul's `[sandbox]` table says it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSpec {
    /// Readable trees (absolute, `~` expanded).
    pub read: Vec<PathBuf>,
    /// Writable trees, besides the task workspace.
    pub write: Vec<PathBuf>,
    /// TCP connect/bind allowed.
    pub network: bool,
    /// UDP as well (`[sandbox] udp`, only with `network`): DNS, QUIC.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub udp: bool,
    /// Refuse to run unless Landlock is fully enforced.
    pub require: bool,
    /// Paths in the closed places the tools may write (`[sandbox] startup`), each named
    /// exactly: writable trees of their own, otherwise carved out of every tree
    /// ([`crate::policy::closed`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup: Vec<PathBuf>,
    /// Trees where the tools may delete and truncate for good (`[sandbox] destroy`),
    /// each inside a writable tree; elsewhere only the task's workspace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub destroy: Vec<PathBuf>,
    /// Unix sockets the tools may connect to (`[sandbox] sockets`); none by default,
    /// and then no unix socket can be opened at all ([`super::seccomp`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sockets: Vec<PathBuf>,
    /// Well-known bus names the tools may talk to, through a filtering proxy of the
    /// task's own (`[sandbox] bus_talk`, [`super::busproxy`]); none by default, and
    /// then no session bus at all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bus_talk: Vec<String>,
}

/// Read-only trees every sandboxed program gets (see the module doc for each).
pub const BASELINE_READ: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/lib32",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/group",
    "/dev/null",
    "/dev/zero",
    "/dev/urandom",
    "/dev/random",
    "/proc",
    "/sys/devices/system/cpu",
];

/// Writable besides the soul's trees and the workspace.
pub const BASELINE_WRITE: &[&str] = &["/dev/null"];

/// Environment variables copied from the daemon into the command's environment. Nothing
/// else crosses: API keys, tokens and session sockets stay with the daemon.
pub const ENV_ALLOWLIST: &[&str] = &["PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ"];

/// Set, for a soul with `bus_talk` only, to the task's bus proxy.
pub const BUS_ENV: &str = "DBUS_SESSION_BUS_ADDRESS";

/// Prefixes of variables copied as well (locale categories).
pub const ENV_ALLOWLIST_PREFIXES: &[&str] = &["LC_"];

/// Used when the daemon has no `PATH` of its own (systemd gives one, `env -i` does not).
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// One task's sandbox, on the daemon's side: the trees, the protected paths, and the
/// plan worked out from them (kept while it is current, see [`super::plan`]).
#[derive(Debug, Clone)]
pub struct SandboxPolicy {
    /// Readable trees (absolute). Missing ones are skipped.
    pub read: Vec<PathBuf>,
    /// Readable and writable trees (absolute): files may be made and written, not
    /// removed or truncated, except in `destroy`.
    pub write: Vec<PathBuf>,
    /// Of `write`, where removing and truncating are granted too: the workspace and
    /// the soul's `[sandbox] destroy` trees.
    pub destroy: Vec<PathBuf>,
    /// A brokered file operation's sandbox ([`SandboxPolicy::brokered`]).
    pub brokered: bool,
    /// Carved out of every tree above, whatever it is named as.
    pub protected: Vec<PathBuf>,
    /// Carved out of the writable trees only: familiar's own binaries (added by the
    /// launcher, [`super::SandboxLauncher`]).
    pub write_protected: Vec<PathBuf>,
    /// Carved out of each writable tree that does not lie inside it: the closed places
    /// and the named start-up entries ([`Closed::carved`]). The trees inside one are
    /// only those [`Closed::admits`] and the workspace.
    pub closed: Vec<PathBuf>,
    /// TCP connect and bind allowed.
    pub network: bool,
    /// UDP sockets as well (with `network` only).
    pub udp: bool,
    /// The command as PID 1 of a PID namespace of its own (`familiar_sandbox::pidns`):
    /// every tool call; not an MCP server, which is stopped by SIGTERM, and PID 1
    /// ignores a signal it has no handler for.
    pub pid_namespace: bool,
    /// Signals and abstract unix sockets scoped to the sandbox (Landlock ABI 6).
    pub scope_signals: bool,
    /// Refuse to run the command unless every restriction is enforced.
    pub require_full: bool,
    /// Unix sockets granted: any lifts the helper's unix-socket block.
    pub sockets: Vec<PathBuf>,
    /// The task's bus proxy ([`SandboxPolicy::with_bus`]), started by the first command.
    pub bus: Option<Arc<BusProxy>>,
    /// Hidden from commands, but `uncover` (`familiar_sandbox`'s `cover`).
    pub cover: Vec<PathBuf>,
    pub uncover: Vec<PathBuf>,
    pub limits: Limits,
    /// The command's whole environment.
    pub env: Vec<(String, String)>,
    /// The command's working directory.
    pub cwd: PathBuf,
    /// Set in the helper's own environment (which is otherwise empty): the home Trash's
    /// `XDG_DATA_HOME` for a `trash` operation ([`SandboxPolicy::trashing`]).
    pub helper_env: Vec<(String, String)>,
    /// Shared by clones (one task's calls reuse one plan) and, through
    /// [`SandboxPolicy::with_plans`], by the tasks of one daemon.
    plan: PlanCache,
    /// The task's `[resources]`: each call's helper goes into its slice.
    pub resources: Option<Arc<TaskResources>>,
    /// Who the calls are for (`task t-… of soul S`), set in each helper's own
    /// environment so the daemon can name it when a sandboxed process calls it.
    pub owner: Option<String>,
}

impl SandboxPolicy {
    /// The policy for the calls of one task whose soul asks for `spec`, with
    /// `protected` carved out, creating the workspace if needed. The environment is the
    /// allowlisted part of the daemon's.
    pub fn new(
        spec: &SandboxSpec,
        protected: &[PathBuf],
        workspace: &Path,
        home: &Path,
    ) -> Result<SandboxPolicy, SandboxError> {
        // 0700 like the rest of the data dir (an MCP server's `mcp/NAME` is made here):
        // what a tool leaves in its workspace is the user's alone. An existing
        // directory keeps its mode.
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
            .create(workspace)
            .map_err(|source| SandboxError::Workspace {
                path: workspace.to_owned(),
                source,
            })?;
        let read = BASELINE_READ
            .iter()
            .map(PathBuf::from)
            .chain(spec.read.iter().cloned())
            .collect();
        let closed = Closed::from_env(home);
        let writable = writable_trees(spec, &closed);
        // Destroy trees are rules of their own (a tree inside a writable one gets more
        // rights than its surroundings), only inside what is writable here.
        let destroy: Vec<PathBuf> = spec
            .destroy
            .iter()
            .filter(|d| writable.iter().any(|w| d.starts_with(w)))
            .cloned()
            .chain([workspace.to_owned()])
            .collect();
        let write = BASELINE_WRITE
            .iter()
            .map(PathBuf::from)
            .chain(writable)
            .chain(destroy.iter().cloned())
            .collect();
        Ok(SandboxPolicy {
            read,
            write,
            destroy,
            brokered: false,
            protected: protected.to_vec(),
            write_protected: Vec::new(),
            closed: closed.carved(),
            network: spec.network,
            udp: spec.network && spec.udp,
            pid_namespace: true,
            scope_signals: true,
            require_full: spec.require,
            sockets: spec.sockets.clone(),
            bus: None,
            cover: Vec::new(),
            uncover: Vec::new(),
            limits: Limits::default(),
            env: allowed_env(std::env::vars(), home, workspace),
            cwd: workspace.to_owned(),
            helper_env: Vec::new(),
            plan: PlanCache::default(),
            resources: None,
            owner: None,
        })
    }

    /// Bounds every call by the task's `resources`: in its slice, or by the rlimits
    /// standing in where the slice does not bound memory or processes.
    pub fn with_resources(mut self, resources: Arc<TaskResources>) -> SandboxPolicy {
        if let Some(data) = resources.rlimit_data() {
            self.limits.max_data = Some(data);
        }
        if let Some(tasks) = resources.rlimit_tasks() {
            self.limits.max_processes = self.limits.max_processes.min(tasks);
        }
        self.resources = Some(resources);
        self
    }

    /// Names who the calls are for ([`SandboxPolicy::owner`]).
    pub fn with_owner(mut self, owner: impl Into<String>) -> SandboxPolicy {
        self.owner = Some(owner.into());
        self
    }

    /// This policy for a file operation the daemon brokers (`write_file`, `edit_file`):
    /// every writable tree may also remove and truncate, since the operation replaces
    /// one named file and the daemon kept what it replaces. The helper refuses it for a
    /// command.
    pub fn brokered(&self) -> SandboxPolicy {
        SandboxPolicy {
            brokered: true,
            ..self.clone()
        }
    }

    /// Gives the commands the session bus through `proxy` only: its socket granted and
    /// named in `DBUS_SESSION_BUS_ADDRESS`, and the user's runtime directory and the
    /// real bus's sockets hidden from them, but the proxy's directory and the soul's
    /// own `sockets` ([`super::busproxy`]).
    pub fn with_bus(mut self, proxy: Arc<BusProxy>) -> SandboxPolicy {
        let runtime = proxy.bus().runtime_dir.clone();
        let mut cover = vec![runtime.clone()];
        cover.extend(
            proxy
                .bus()
                .sockets()
                .into_iter()
                .filter(|p| !p.starts_with(&runtime)),
        );
        self.uncover = [proxy.dir().to_owned()]
            .into_iter()
            .chain(
                self.sockets
                    .iter()
                    .filter(|s| cover.iter().any(|c| s.starts_with(c)))
                    .cloned(),
            )
            .collect();
        self.cover = cover;
        self.sockets.push(proxy.socket().to_owned());
        self.env.retain(|(k, _)| k != BUS_ENV);
        self.env.push((BUS_ENV.to_owned(), proxy.address()));
        self.env.sort();
        self.bus = Some(proxy);
        self
    }

    /// This policy for the `trash` operation: the home Trash `trash` (made, mode 0700,
    /// if missing) writable and removable for this call alone, and named to the helper
    /// through `XDG_DATA_HOME` (the `trash` crate reads it). What may be moved there is
    /// still only what the soul may write: moving a file out of its directory needs the
    /// remove right there. The launcher makes it brokered.
    pub fn trashing(&self, trash: &Path) -> Result<SandboxPolicy, SandboxError> {
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
            .create(trash)
            .map_err(|source| SandboxError::Trash {
                path: trash.to_owned(),
                source,
            })?;
        let mut p = self.clone();
        p.write.push(trash.to_owned());
        p.destroy.push(trash.to_owned());
        if let Some(data_home) = trash.parent() {
            p.helper_env
                .push(("XDG_DATA_HOME".to_owned(), data_home.display().to_string()));
        }
        Ok(p)
    }

    /// Keeps this policy's plan in `plans`, a cache shared with other policies.
    pub fn with_plans(mut self, plans: PlanCache) -> SandboxPolicy {
        self.plan = plans;
        self
    }

    /// What the helper gets for one call, as JSON: the current plan (reused, or made
    /// again when something it depends on changed) and the rest of this policy, in the
    /// shape of [`HelperSpec`](familiar_sandbox::spec::HelperSpec). Blocking.
    pub fn helper_spec_json(&self) -> Result<Vec<u8>, SandboxError> {
        let plan = self.plan.get(&Trees {
            read: &self.read,
            write: &self.write,
            destroy: &self.destroy,
            protected: &self.protected,
            write_protected: &self.write_protected,
            closed: &self.closed,
        });
        serde_json::to_vec(&HelperSpecRef {
            plan: &plan,
            network: self.network,
            udp: self.udp,
            pid_namespace: self.pid_namespace,
            scope_signals: self.scope_signals,
            require_full: self.require_full,
            sockets: &self.sockets,
            cover: &self.cover,
            uncover: &self.uncover,
            limits: &self.limits,
            env: &self.env,
            cwd: &self.cwd,
            brokered: self.brokered,
        })
        .map_err(SandboxError::Spec)
    }
}

/// The soul's writable trees the closed places admit ([`Closed::admits_really`]), then its
/// `startup` paths. A tree inside a closed place that the soul did not name exactly is
/// left out (a soul file saying so is refused at load, but the daemon's `XDG_*` may
/// differ from the loader's).
pub fn writable_trees(spec: &SandboxSpec, closed: &Closed) -> Vec<PathBuf> {
    let mut out = Vec::with_capacity(spec.write.len() + spec.startup.len());
    for root in &spec.write {
        if closed.admits_really(root, &spec.startup) {
            out.push(root.clone());
        } else {
            tracing::warn!(
                "writable tree {} left out: it is in a place familiar keeps closed (name the exact path in [sandbox] startup)",
                root.display()
            );
        }
    }
    out.extend(spec.startup.iter().cloned());
    out
}

/// The command's environment: the allowlisted variables of `vars`, `HOME` set to
/// `home`, `TMPDIR` to the workspace, and a `PATH` even when the daemon has none.
pub fn allowed_env(
    vars: impl IntoIterator<Item = (String, String)>,
    home: &Path,
    workspace: &Path,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vars
        .into_iter()
        .filter(|(k, _)| {
            k != "HOME"
                && (ENV_ALLOWLIST.contains(&k.as_str())
                    || ENV_ALLOWLIST_PREFIXES.iter().any(|p| k.starts_with(p)))
        })
        .collect();
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push(("PATH".into(), DEFAULT_PATH.into()));
    }
    env.push(("HOME".into(), home.display().to_string()));
    env.push(("TMPDIR".into(), workspace.display().to_string()));
    env.sort();
    env
}

#[cfg(test)]
mod tests {
    use familiar_sandbox::spec::HelperSpec;

    use super::*;

    #[test]
    fn env_keeps_only_the_allowlist() {
        let vars = [
            ("PATH", "/usr/bin"),
            ("OPENAI_API_KEY", "secret"),
            ("LC_TIME", "C"),
            ("DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/user/1000/bus"),
            ("HOME", "/elsewhere"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        let env = allowed_env(vars, Path::new("/home/u"), Path::new("/w"));
        let want: Vec<(String, String)> = [
            ("HOME", "/home/u"),
            ("LC_TIME", "C"),
            ("PATH", "/usr/bin"),
            ("TMPDIR", "/w"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into();
        assert_eq!(env, want);
    }

    #[test]
    fn env_gets_a_path_when_the_daemon_has_none() {
        let env = allowed_env([], Path::new("/h"), Path::new("/w"));
        assert!(env.contains(&("PATH".to_owned(), DEFAULT_PATH.to_owned())));
    }

    #[test]
    fn helper_spec_round_trips_through_json() {
        let t = tempfile::tempdir().unwrap();
        let spec = SandboxSpec {
            read: vec![t.path().to_owned()],
            write: vec![],
            network: false,
            udp: false,
            require: true,
            startup: Vec::new(),
            destroy: Vec::new(),
            sockets: vec![],
            bus_talk: vec![],
        };
        let ws = t.path().join("w");
        let p = SandboxPolicy::new(&spec, &[t.path().join(".ssh")], &ws, t.path()).unwrap();
        let h: HelperSpec = serde_json::from_slice(&p.helper_spec_json().unwrap()).unwrap();
        assert!(h.require_full && !h.network);
        assert_eq!(h.cwd, ws);
        assert!(h.plan.rules.iter().any(|r| r.path == ws), "{:?}", h.plan);
        assert!(!h.plan.rules.iter().any(|r| r.path.ends_with(".ssh")));
    }
}
