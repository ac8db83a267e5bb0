//! What a call is judged by: the command line it runs, the paths it names, and the
//! strings patterns are matched against (an MCP tool's every argument string).

use familiar_protocol::tier::Tier;

use super::PatternRule;
use super::shell::Analysis;

/// One tool call as the model asked for it.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub tool: &'a str,
    /// From [`crate::catalog::tier_for_call`].
    pub tier: Tier,
    pub args: &'a serde_json::Value,
}

/// The command line a call runs, and the `cwd` it starts in, if the tool runs one.
pub(super) fn command_of(call: &Call) -> Option<(String, Option<String>)> {
    let str_arg = |k: &str| call.args.get(k).and_then(|v| v.as_str());
    match call.tool {
        "shell" => Some((
            str_arg("command").unwrap_or_default().to_owned(),
            str_arg("cwd").map(str::to_owned),
        )),
        "hypr_dispatch" => match str_arg("dispatcher") {
            Some("exec" | "execr" | "exec-once") => {
                let args = str_arg("args").unwrap_or_default().trim_start();
                // `[workspace 2 silent] cmd`: window rules come before the command.
                let cmd = match args.strip_prefix('[').and_then(|r| r.split_once(']')) {
                    Some((_, cmd)) => cmd,
                    None => args,
                };
                Some((cmd.to_owned(), None))
            }
            _ => None,
        },
        // `launch` runs one program through the compositor: the patterns see its words
        // (as given; the older `command` string as it came when it is no plain words,
        // which the tool refuses anyway).
        "desktop_dispatch" => match str_arg("action") {
            Some("launch") => Some((
                crate::programs::argv::Argv::from_call(call.args).map_or_else(
                    |_| str_arg("command").unwrap_or_default().to_owned(),
                    |argv| argv.display(),
                ),
                None,
            )),
            _ => None,
        },
        "systemd_user" => {
            let action = str_arg("action").unwrap_or_default();
            let unit = str_arg("unit").unwrap_or_default();
            Some((
                shell_words::join(
                    ["systemctl", "--user", action, unit]
                        .iter()
                        .filter(|s| !s.is_empty()),
                ),
                None,
            ))
        }
        _ => None,
    }
}

/// The paths a call names directly in its arguments.
pub(super) fn named_paths(call: &Call) -> Vec<String> {
    let str_arg = |k: &str| call.args.get(k).and_then(|v| v.as_str());
    let key = match call.tool {
        "read_file" | "list_dir" | "search_files" | "disk_usage" | "write_file" | "edit_file"
        | "trash" => "path",
        "shell" => "cwd",
        "open" => "target",
        name if crate::catalog::mcp_parts(name).is_some() => {
            // Which argument is a path is the server's to say, in prose: every string
            // that is written as one is checked.
            return argument_strings(call.args)
                .iter()
                .filter_map(|s| as_path(s))
                .collect();
        }
        _ => return Vec::new(),
    };
    let Some(value) = str_arg(key) else {
        return Vec::new();
    };
    if call.tool == "open" {
        if let Some(rest) = value.strip_prefix("file://") {
            // file://host/path: only the local host is a path on this machine.
            let path = rest.strip_prefix("localhost").unwrap_or(rest);
            return vec![percent_decode(path)];
        }
        if value.contains("://") || value.starts_with("mailto:") {
            return Vec::new();
        }
    }
    vec![value.to_owned()]
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = s.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// At most this many strings of an MCP call's arguments are matched one by one; the
/// rest are matched joined together (see [`argument_strings`]).
const MAX_ARGUMENT_STRINGS: usize = 256;

/// Every string value in `args` (not the keys), depth first, in document order; past
/// [`MAX_ARGUMENT_STRINGS`] the rest are joined into one last string so nothing goes
/// unmatched.
pub(super) fn argument_strings(args: &serde_json::Value) -> Vec<String> {
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::String(s) => out.push(s.clone()),
            serde_json::Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
            serde_json::Value::Object(map) => map.values().for_each(|i| walk(i, out)),
            serde_json::Value::Null | serde_json::Value::Bool(_) | serde_json::Value::Number(_) => {
            }
        }
    }
    let mut out = Vec::new();
    walk(args, &mut out);
    if out.len() > MAX_ARGUMENT_STRINGS {
        let rest = out.split_off(MAX_ARGUMENT_STRINGS - 1).join(" ");
        out.push(rest);
    }
    out
}

/// The path an argument names, if it is written as one: absolute, home-relative or
/// explicitly relative (`./`, `../`), or a local `file://` URL.
fn as_path(s: &str) -> Option<String> {
    let s = s.trim();
    if let Some(rest) = s.strip_prefix("file://") {
        let path = rest.strip_prefix("localhost").unwrap_or(rest);
        return path.starts_with('/').then(|| percent_decode(path));
    }
    let is_path = s.starts_with('/')
        || s == "~"
        || s.starts_with("~/")
        || s.starts_with("./")
        || s.starts_with("../");
    is_path.then(|| s.to_owned())
}

/// What patterns are matched against: the canonical forms, then the raw line.
pub(super) fn subjects(raw: &str, a: &Analysis) -> Vec<String> {
    let mut out = a.subjects.clone();
    out.push(raw.to_owned());
    out
}

pub(super) fn first_match<'p>(
    rules: &'p [PatternRule],
    subjects: &[String],
) -> Option<(&'p PatternRule, String)> {
    rules.iter().find_map(|r| {
        subjects
            .iter()
            .find(|s| r.pattern.is_match(s))
            .map(|s| (r, s.clone()))
    })
}

pub(super) fn seen_as(raw: &str, subject: String) -> String {
    if raw.trim() == subject {
        String::new()
    } else {
        format!(" (runs `{}`)", abbreviate(&subject))
    }
}

/// Long commands shortened for messages (the audit log keeps the full arguments).
pub(super) fn abbreviate(s: &str) -> String {
    const MAX: usize = 120;
    let s = s.trim();
    if s.chars().count() <= MAX {
        return s.to_owned();
    }
    let head: String = s.chars().take(MAX).collect();
    format!("{head}…")
}

#[cfg(test)]
mod tests {
    use familiar_protocol::ids::SoulId;
    use familiar_protocol::tier::Tier;
    use serde_json::{Value, json};

    use crate::policy::tests::{ALLOW_ALL, Want, grant, kind, world};
    use crate::policy::tests::{Allow, BlockedPattern, Deny, NotInSoul, ProtectedPath};
    use crate::policy::{Call, PathContext, decide};

    #[test]
    fn an_mcp_tools_arguments_are_matched_like_a_command_and_checked_as_paths() {
        let w = world();
        let g = grant(&["mcp:notes"], ALLOW_ALL);
        let decide_mcp = |tool: &str, args: Value| {
            let call = Call {
                tool,
                tier: Tier::Write,
                args: &args,
            };
            let ctx = PathContext {
                home: &w.home,
                cwd: &w.cwd,
            };
            decide(&SoulId::new("tester").unwrap(), &g, &w.open, &call, &ctx).decision
        };
        #[rustfmt::skip]
        let cases: &[(&str, Value, Want)] = &[
            ("notes__write", json!({"path": "~/notes/a.md", "text": "hi"}), Allow),
            // Paths anywhere in the arguments, however deep, in any form a path is written.
            ("notes__write", json!({"path": "~/.ssh/id_rsa"}), Deny(ProtectedPath)),
            ("notes__write", json!({"files": [{"to": "innocent/id_rsa"}, "./innocent"]}), Deny(ProtectedPath)),
            ("notes__write", json!({"uri": "file:///etc/shadow"}), Deny(ProtectedPath)),
            // Prose that merely mentions a protected place is not a path.
            ("notes__write", json!({"text": "my keys live in .ssh"}), Allow),
            // Blocked patterns, on the canonical form of every string.
            ("notes__run", json!({"cmd": "rm -fr ~"}), Deny(BlockedPattern)),
            ("notes__run", json!({"argv": ["sh", "-c", "mkfs.ext4 /dev/sda1"]}), Deny(BlockedPattern)),
            // A tool the soul does not list.
            ("other__write", json!({}), Deny(NotInSoul)),
        ];
        let mut failures = Vec::new();
        for (tool, args, want) in cases {
            let d = decide_mcp(tool, args.clone());
            if kind(&d) != *want {
                failures.push(format!("{tool} {args}: want {want:?}, got {d}"));
            }
        }
        assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    }
}
