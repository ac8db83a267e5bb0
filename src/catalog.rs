//! The tool catalog: every tool's name, tier, whether it mutates, and what it does.
//!
//! Plain data that souls, policies, the agent loop and the tools all read, so it sits
//! at the bottom of the crate and imports nothing from it: the names, tiers and
//! argument keys are part of the contract (souls and models name them), and
//! [`CATALOG`] is the one list of them. A tool implementation (`tools::Tool`) points at
//! its entry here. [`Tier`] is the bus contract's (`familiar_protocol::tier`: events and
//! approvals carry it), imported by that path wherever it is named.

use familiar_protocol::tier::Tier;

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
pub const DESKTOP_STATE: ToolInfo = tool!(
    "desktop_state",
    Read,
    false,
    "the desktop: focused window, workspaces, outputs, windows (Hyprland, sway, niri)"
);
/// Deprecated: `desktop_state`'s name before sway and niri; kept for one release.
pub const HYPR_STATE: ToolInfo = tool!(
    "hypr_state",
    Read,
    false,
    "Hyprland workspaces, windows, active window (deprecated: desktop_state)"
);
pub const SCREENSHOT: ToolInfo = tool!(
    "screenshot",
    Read,
    false,
    "an image of the focused window, an output or a region (vision models)"
);
pub const UI_READ: ToolInfo = tool!(
    "ui_read",
    Read,
    false,
    "the focused window's controls, from its accessibility tree"
);
pub const WRITE_FILE: ToolInfo = tool!("write_file", Write, true, "create or replace a file");
pub const EDIT_FILE: ToolInfo = tool!(
    "edit_file",
    Write,
    true,
    "replace one exact snippet in a file"
);
pub const TRASH: ToolInfo = tool!(
    "trash",
    Write,
    true,
    "move a file or directory to the Trash (instead of deleting it)"
);
pub const SHELL: ToolInfo = tool!("shell", Execute, true, "run a shell command");
pub const SYSTEMD_USER: ToolInfo = tool!(
    "systemd_user",
    Execute,
    true,
    "status/list/start/stop/restart user units"
);
pub const NOTIFY: ToolInfo = tool!("notify", Execute, true, "show a desktop notification");
pub const DESKTOP_DISPATCH: ToolInfo = tool!(
    "desktop_dispatch",
    Execute,
    true,
    "focus, move or close a window, switch workspace, launch an app"
);
/// Deprecated: Hyprland's dispatchers, before `desktop_dispatch`; kept for one release.
pub const HYPR_DISPATCH: ToolInfo = tool!(
    "hypr_dispatch",
    Execute,
    true,
    "run a Hyprland dispatcher (deprecated: desktop_dispatch)"
);
pub const UI_ACT: ToolInfo = tool!(
    "ui_act",
    Execute,
    true,
    "press a control or set a field's text in the focused window, by ui_read's id"
);
pub const OPEN: ToolInfo = tool!(
    "open",
    Execute,
    true,
    "open a file or URL with the default application"
);
pub const TYPE_TEXT: ToolInfo = tool!(
    "type_text",
    SystemCritical,
    true,
    "type text and key chords into the focused window (asked every time)"
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

pub const DELEGATE: ToolInfo = tool!(
    "delegate",
    Read,
    false,
    "hand a sub-task to another soul (its calls are decided on their own)"
);
pub const REMEMBER: ToolInfo = tool!("remember", Write, true, "save a fact to long-term memory");
pub const FORGET: ToolInfo = tool!("forget", Write, true, "delete a long-term memory entry");

/// Every tool familiar knows, in the order of the contract table.
pub const CATALOG: &[ToolInfo] = &[
    READ_FILE,
    LIST_DIR,
    SEARCH_FILES,
    SYSTEM_SNAPSHOT,
    PROCESS_LIST,
    DISK_USAGE,
    JOURNAL,
    DESKTOP_STATE,
    HYPR_STATE,
    SCREENSHOT,
    UI_READ,
    WRITE_FILE,
    EDIT_FILE,
    TRASH,
    SHELL,
    SYSTEMD_USER,
    NOTIFY,
    DESKTOP_DISPATCH,
    HYPR_DISPATCH,
    UI_ACT,
    OPEN,
    TYPE_TEXT,
    KILL_PROCESS,
    POWER,
    DELEGATE,
    REMEMBER,
    FORGET,
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

/// `hypr_dispatch` dispatchers that launch a program through the compositor, outside
/// familiar's sandbox.
pub const LAUNCHING_DISPATCHERS: &[&str] = &["exec", "execr"];

/// Why a call will run outside familiar's sandbox, if it will: such calls are always
/// asked, whatever the policy's mode for their tier.
pub fn runs_outside_sandbox(name: &str, args: &serde_json::Value) -> Option<&'static str> {
    match name {
        "hypr_dispatch" => {
            let d = args
                .get("dispatcher")
                .and_then(|d| d.as_str())
                .unwrap_or("");
            LAUNCHING_DISPATCHERS
                .contains(&d)
                .then_some("the program is started by Hyprland, outside familiar's sandbox")
        }
        "desktop_dispatch" => (args.get("action").and_then(|a| a.as_str()) == Some("launch"))
            .then_some("the program is started by the compositor, outside familiar's sandbox"),
        "open" => Some("the file or URL opens in an application outside familiar's sandbox"),
        "type_text" => Some("the keystrokes go to the focused window, outside familiar's sandbox"),
        _ => None,
    }
}

/// What of the screen a tool's result carries, if it carries any (pixels, or the text
/// of the windows' controls): a soul's `screen` setting decides where it may go.
pub fn shows_screen(name: &str) -> Option<&'static str> {
    match name {
        "screenshot" => Some("a screenshot"),
        "ui_read" => Some("the window's controls and their text"),
        _ => None,
    }
}

/// What a soul's `tools` lists to use an MCP server's tools: `mcp:NAME` (all of them)
/// or `mcp:NAME/TOOL` (one).
pub const MCP_PREFIX: &str = "mcp:";

/// Between an MCP server's name and its tool's name in the name the model sees
/// (`NAME__TOOL`). No built-in tool has it in its name, and server names hold none.
pub const MCP_SEPARATOR: &str = "__";

/// `(server, tool)` of an MCP tool's name (`NAME__TOOL`); `None` for a built-in.
pub fn mcp_parts(name: &str) -> Option<(&str, &str)> {
    name.split_once(MCP_SEPARATOR)
        .filter(|(s, t)| !s.is_empty() && !t.is_empty())
}

/// `(server, Some(tool))` or `(server, None)` of a soul's `mcp:` entry; `None` when the
/// entry is not one.
pub fn mcp_entry(entry: &str) -> Option<(&str, Option<&str>)> {
    let rest = entry.strip_prefix(MCP_PREFIX)?;
    Some(match rest.split_once('/') {
        Some((server, tool)) => (server, Some(tool)),
        None => (rest, None),
    })
}

/// Whether a soul's allowlist lets it call `name`: the built-in listed by name, or an MCP
/// tool whose server (or the tool itself) is listed as an `mcp:` entry.
pub fn allowlist_allows(allowlist: &[String], name: &str) -> bool {
    match mcp_parts(name) {
        // An `mcp:` entry names tools; it is not one.
        None => !name.starts_with(MCP_PREFIX) && allowlist.iter().any(|t| t == name),
        Some((server, tool)) => allowlist.iter().any(|entry| match mcp_entry(entry) {
            Some((s, None)) => s == server,
            Some((s, Some(t))) => s == server && t == tool,
            None => false,
        }),
    }
}

/// The entries of `child` that `parent` also allows, in `child`'s order: what a
/// delegated sub-task may use. An `mcp:NAME` entry under a parent that lists only some of
/// the server's tools becomes those tools.
pub fn intersect_allowlists(child: &[String], parent: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |e: String| {
        if !out.contains(&e) {
            out.push(e);
        }
    };
    for entry in child {
        match mcp_entry(entry) {
            None if parent.contains(entry) => push(entry.clone()),
            None => {}
            Some((server, Some(tool)))
                if allowlist_allows(parent, &format!("{server}{MCP_SEPARATOR}{tool}")) =>
            {
                push(entry.clone());
            }
            Some((_, Some(_))) => {}
            Some((server, None)) => {
                for p in parent {
                    match mcp_entry(p) {
                        Some((s, None)) if s == server => push(entry.clone()),
                        Some((s, Some(_))) if s == server => push(p.clone()),
                        Some(_) | None => {}
                    }
                }
            }
        }
    }
    out
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
    fn mcp_names_are_allowed_by_their_server_or_themselves() {
        assert!(
            names().all(|n| mcp_parts(n).is_none()),
            "no built-in has `__`"
        );
        let list = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let whole = list(&["read_file", "mcp:notes"]);
        assert!(allowlist_allows(&whole, "notes__search"));
        assert!(allowlist_allows(&whole, "read_file"));
        assert!(!allowlist_allows(&whole, "other__search"));
        assert!(
            !allowlist_allows(&whole, "mcp:notes"),
            "an entry is not a tool"
        );
        let one = list(&["mcp:notes/search"]);
        assert!(allowlist_allows(&one, "notes__search"));
        assert!(!allowlist_allows(&one, "notes__write"));
        assert!(!allowlist_allows(&one, "notes__search__x"));
        assert_eq!(mcp_entry("mcp:a/b"), Some(("a", Some("b"))));
        assert_eq!(mcp_entry("shell"), None);
    }

    #[test]
    fn a_sub_task_gets_only_the_mcp_tools_both_allow() {
        let list = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let parent = list(&["read_file", "mcp:notes/search", "mcp:git"]);
        let child = list(&["shell", "read_file", "mcp:notes", "mcp:git/log", "mcp:web"]);
        assert_eq!(
            intersect_allowlists(&child, &parent),
            list(&["read_file", "mcp:notes/search", "mcp:git/log"])
        );
    }

    #[test]
    fn catalog_names_are_unique() {
        let mut names: Vec<_> = names().collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), CATALOG.len());
    }

    #[test]
    fn exec_dispatchers_and_open_run_outside_the_sandbox() {
        let exec = json!({"dispatcher": "exec", "args": "kitty"});
        assert!(runs_outside_sandbox("hypr_dispatch", &exec).is_some());
        let ws = json!({"dispatcher": "workspace", "args": "2"});
        assert_eq!(runs_outside_sandbox("hypr_dispatch", &ws), None);
        let launch = serde_json::json!({"action": "launch", "command": "foot"});
        assert!(runs_outside_sandbox("desktop_dispatch", &launch).is_some());
        let mv = serde_json::json!({"action": "move_to_workspace", "workspace": "2"});
        assert_eq!(runs_outside_sandbox("desktop_dispatch", &mv), None);
        assert!(runs_outside_sandbox("open", &json!({"target": "x"})).is_some());
        assert!(runs_outside_sandbox("type_text", &json!({"text": "x"})).is_some());
        assert_eq!(
            runs_outside_sandbox("shell", &json!({"command": "ls"})),
            None
        );
    }
}
