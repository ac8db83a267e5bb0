//! Tools the model can call.
//!
//! The names, tiers and argument keys are part of the contract (souls and models name
//! them): [`CATALOG`] is the one list of them. A [`Tool`] implements one entry; the
//! [`Registry`] holds the implemented ones and tells the loop which to offer a soul.
//! Errors say who receives them: [`ToolError::RespondToModel`] goes back to the model
//! as a tool error it can correct, [`ToolError::Fatal`] ends the task.

pub mod bus;
mod disk;
mod files;
pub mod hypr;
pub mod journal;
pub mod notify;
pub mod open;
pub mod power;
mod process;
mod search;
mod shell;
mod system;
pub mod systemd;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::llm::ToolDef;
use crate::policy::Tier;
use crate::sandbox::{SandboxLauncher, SandboxPolicy};
use crate::snapshot::Snapshotter;
use crate::soul::Soul;

/// What a running tool may use.
#[derive(Clone)]
pub struct ToolContext {
    /// The task's writable root; relative paths resolve against it.
    pub workspace: PathBuf,
    pub home: PathBuf,
    pub snapshotter: Arc<Mutex<Snapshotter>>,
    pub cancel: CancellationToken,
    /// The kernel rules every file access and program of this task runs under.
    pub sandbox: Arc<SandboxPolicy>,
    pub launcher: Arc<SandboxLauncher>,
}

impl ToolContext {
    /// `~`, `~/x` and relative paths made absolute (no symlink resolution: the policy
    /// check and the sandbox do that).
    pub fn resolve(&self, path: &str) -> PathBuf {
        let p = crate::config::expand_home(Path::new(path), &self.home);
        if p.is_absolute() {
            p
        } else {
            self.workspace.join(p)
        }
    }
}

/// Who a tool error is for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The model can fix this and try again (bad path, bad arguments, not found).
    #[error("{0}")]
    RespondToModel(String),
    /// The task cannot go on (the sandbox could not be set up, the tool is broken).
    #[error("{0}")]
    Fatal(String),
}

impl ToolError {
    pub fn model(msg: impl Into<String>) -> Self {
        ToolError::RespondToModel(msg.into())
    }
}

/// One implemented tool.
pub trait Tool: Send + Sync {
    fn info(&self) -> &'static ToolInfo;

    /// What the model reads to decide whether to call it.
    fn description(&self) -> &'static str;

    /// JSON schema of the arguments object.
    fn schema(&self) -> serde_json::Value;

    /// Whether this call changes anything. When in doubt it does.
    fn is_mutating(&self, _args: &serde_json::Value) -> bool {
        self.info().mutating
    }

    /// Whether the tool can work here at all (Hyprland running, a journal present).
    /// Unavailable tools are not offered to the model.
    fn available(&self) -> bool {
        true
    }

    /// Runs the call. Must stop promptly when `ctx.cancel` fires.
    fn execute(
        &self,
        args: serde_json::Value,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<String, ToolError>>;
}

/// The implemented tools.
pub struct Registry {
    tools: BTreeMap<&'static str, Arc<dyn Tool>>,
}

impl Registry {
    /// Every tool this build implements.
    pub fn builtin() -> Registry {
        let tools: Vec<Arc<dyn Tool>> = vec![
            Arc::new(files::ReadFile),
            Arc::new(files::ListDir),
            Arc::new(files::WriteFile),
            Arc::new(files::EditFile),
            Arc::new(search::SearchFiles),
            Arc::new(disk::DiskUsage),
            Arc::new(journal::Journal::detect()),
            Arc::new(shell::Shell),
            Arc::new(process::KillProcess),
            Arc::new(open::Open::detect()),
            Arc::new(system::SystemSnapshot),
            Arc::new(system::ProcessList),
            Arc::new(hypr::HyprState {
                locate: hypr::locate_from_env(),
            }),
            Arc::new(hypr::HyprDispatch {
                locate: hypr::locate_from_env(),
            }),
            Arc::new(systemd::SystemdUser::session()),
            Arc::new(notify::Notify::session()),
            Arc::new(power::Power::system()),
        ];
        Registry {
            tools: tools.into_iter().map(|t| (t.info().name, t)).collect(),
        }
    }

    /// An empty registry plus `tools` (tests).
    pub fn with(tools: Vec<Arc<dyn Tool>>) -> Registry {
        Registry {
            tools: tools.into_iter().map(|t| (t.info().name, t)).collect(),
        }
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// The tools offered to a soul: in its allowlist, implemented, and available here,
    /// in the allowlist's order.
    pub fn offered(&self, soul: &Soul) -> Vec<Arc<dyn Tool>> {
        soul.tools
            .iter()
            .filter_map(|name| self.tools.get(name.as_str()))
            .filter(|t| t.available())
            .cloned()
            .collect()
    }

    /// Definitions for the model request.
    pub fn definitions(&self, soul: &Soul) -> Vec<ToolDef> {
        self.offered(soul)
            .iter()
            .map(|t| ToolDef {
                name: t.info().name.to_owned(),
                description: t.description().to_owned(),
                input_schema: t.schema(),
            })
            .collect()
    }
}

/// A required string argument, or an error the model can act on.
pub(crate) fn str_arg<'a>(args: &'a serde_json::Value, key: &str) -> Result<&'a str, ToolError> {
    args.get(key)
        .and_then(|v| v.as_str())
        .ok_or_else(|| ToolError::model(format!("missing string argument `{key}`")))
}

/// An optional unsigned argument (numbers sent as strings are accepted: small models do).
pub(crate) fn opt_u64(args: &serde_json::Value, key: &str) -> Result<Option<u64>, ToolError> {
    match args.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
            .map(Some)
            .ok_or_else(|| {
                ToolError::model(format!("`{key}` must be a non-negative integer, got {v}"))
            }),
    }
}

/// What every tool declares about itself before it is ever run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolInfo {
    pub name: &'static str,
    /// The tier of the tool's most dangerous use. `systemd_user` is `read` for
    /// `status`/`list` and `execute` otherwise: see [`tier_for_call`].
    pub tier: Tier,
    /// Whether the tool changes anything. When in doubt it does: mutating calls run
    /// alone and in order.
    pub mutating: bool,
    pub summary: &'static str,
}

macro_rules! tool {
    ($name:literal, $tier:ident, $mutating:literal, $summary:literal) => {
        ToolInfo {
            name: $name,
            tier: Tier::$tier,
            mutating: $mutating,
            summary: $summary,
        }
    };
}

pub const READ_FILE: ToolInfo = tool!(
    "read_file",
    Read,
    false,
    "read a text file (optionally a line range)"
);
pub const LIST_DIR: ToolInfo = tool!("list_dir", Read, false, "list a directory");
pub const SEARCH_FILES: ToolInfo = tool!(
    "search_files",
    Read,
    false,
    "search file contents with a regex"
);
pub const SYSTEM_SNAPSHOT: ToolInfo = tool!(
    "system_snapshot",
    Read,
    false,
    "processes, memory, disks, battery, desktop"
);
pub const PROCESS_LIST: ToolInfo = tool!(
    "process_list",
    Read,
    false,
    "top processes by CPU or memory"
);
pub const DISK_USAGE: ToolInfo = tool!("disk_usage", Read, false, "space used under a directory");
pub const JOURNAL: ToolInfo = tool!("journal", Read, false, "read the user journal");
pub const HYPR_STATE: ToolInfo = tool!(
    "hypr_state",
    Read,
    false,
    "Hyprland workspaces, windows, active window"
);
pub const WRITE_FILE: ToolInfo = tool!("write_file", Write, true, "create or replace a file");
pub const EDIT_FILE: ToolInfo = tool!(
    "edit_file",
    Write,
    true,
    "replace one exact snippet in a file"
);
pub const SHELL: ToolInfo = tool!("shell", Execute, true, "run a shell command");
pub const SYSTEMD_USER: ToolInfo = tool!(
    "systemd_user",
    Execute,
    true,
    "status/list/start/stop/restart user units"
);
pub const NOTIFY: ToolInfo = tool!("notify", Execute, true, "show a desktop notification");
pub const HYPR_DISPATCH: ToolInfo =
    tool!("hypr_dispatch", Execute, true, "run a Hyprland dispatcher");
pub const OPEN: ToolInfo = tool!(
    "open",
    Execute,
    true,
    "open a file or URL with the default application"
);
pub const KILL_PROCESS: ToolInfo = tool!(
    "kill_process",
    SystemCritical,
    true,
    "send a signal to a process"
);
pub const POWER: ToolInfo = tool!(
    "power",
    SystemCritical,
    true,
    "suspend, reboot or power off"
);

/// Every tool familiar knows, in the order of the contract table.
pub const CATALOG: &[ToolInfo] = &[
    READ_FILE,
    LIST_DIR,
    SEARCH_FILES,
    SYSTEM_SNAPSHOT,
    PROCESS_LIST,
    DISK_USAGE,
    JOURNAL,
    HYPR_STATE,
    WRITE_FILE,
    EDIT_FILE,
    SHELL,
    SYSTEMD_USER,
    NOTIFY,
    HYPR_DISPATCH,
    OPEN,
    KILL_PROCESS,
    POWER,
];

/// Looks a tool up by name.
pub fn info(name: &str) -> Option<&'static ToolInfo> {
    CATALOG.iter().find(|t| t.name == name)
}

/// The tier of one call: the tool's tier, except where the arguments make it safer
/// (`systemd_user` with `status` or `list` only reads).
pub fn tier_for_call(tool: &ToolInfo, args: &serde_json::Value) -> Tier {
    match tool.name {
        "systemd_user" => match args.get("action").and_then(|a| a.as_str()) {
            Some("status" | "list") => Tier::Read,
            _ => tool.tier,
        },
        _ => tool.tier,
    }
}

/// Why a call will run outside familiar's sandbox, if it will: such calls are always
/// asked, whatever the policy's mode for their tier.
pub fn runs_outside_sandbox(name: &str, args: &serde_json::Value) -> Option<&'static str> {
    match name {
        "hypr_dispatch" => {
            let d = args
                .get("dispatcher")
                .and_then(|d| d.as_str())
                .unwrap_or("");
            hypr::LAUNCHING_DISPATCHERS
                .contains(&d)
                .then_some("the program is started by Hyprland, outside familiar's sandbox")
        }
        "open" => Some("the file or URL opens in an application outside familiar's sandbox"),
        _ => None,
    }
}

/// All tool names, for error messages.
pub fn names() -> impl Iterator<Item = &'static str> {
    CATALOG.iter().map(|t| t.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn systemd_user_reads_for_status_and_list_only() {
        let t = info("systemd_user").unwrap();
        assert_eq!(tier_for_call(t, &json!({"action": "status"})), Tier::Read);
        assert_eq!(tier_for_call(t, &json!({"action": "list"})), Tier::Read);
        assert_eq!(
            tier_for_call(t, &json!({"action": "restart"})),
            Tier::Execute
        );
        assert_eq!(tier_for_call(t, &json!({})), Tier::Execute);
    }

    #[test]
    fn catalog_names_are_unique() {
        let mut names: Vec<_> = names().collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), CATALOG.len());
    }
}
