//! Tools the model can call.
//!
//! The names, tiers and argument keys are part of the contract (souls and models name
//! them): [`CATALOG`] is the one list of them. The `Tool` trait, the registry and the
//! implementations come with the agent loop.

use crate::policy::Tier;

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

/// Every tool familiar knows, in the order of the contract table.
pub const CATALOG: &[ToolInfo] = &[
    tool!(
        "read_file",
        Read,
        false,
        "read a text file (optionally a line range)"
    ),
    tool!("list_dir", Read, false, "list a directory"),
    tool!(
        "search_files",
        Read,
        false,
        "search file contents with a regex"
    ),
    tool!(
        "system_snapshot",
        Read,
        false,
        "processes, memory, disks, battery, desktop"
    ),
    tool!(
        "process_list",
        Read,
        false,
        "top processes by CPU or memory"
    ),
    tool!("disk_usage", Read, false, "space used under a directory"),
    tool!("journal", Read, false, "read the user journal"),
    tool!(
        "hypr_state",
        Read,
        false,
        "Hyprland workspaces, windows, active window"
    ),
    tool!("write_file", Write, true, "create or replace a file"),
    tool!(
        "edit_file",
        Write,
        true,
        "replace one exact snippet in a file"
    ),
    tool!("shell", Execute, true, "run a shell command"),
    tool!(
        "systemd_user",
        Execute,
        true,
        "status/list/start/stop/restart user units"
    ),
    tool!("notify", Execute, true, "show a desktop notification"),
    tool!("hypr_dispatch", Execute, true, "run a Hyprland dispatcher"),
    tool!(
        "open",
        Execute,
        true,
        "open a file or URL with the default application"
    ),
    tool!(
        "kill_process",
        SystemCritical,
        true,
        "send a signal to a process"
    ),
    tool!(
        "power",
        SystemCritical,
        true,
        "suspend, reboot or power off"
    ),
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
