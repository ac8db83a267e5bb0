//! `[mcp.NAME]` tables: the MCP tool servers a user declares, raw ([`McpServerToml`])
//! and effective ([`McpServerConfig`]).
//!
//! Invariant: an effective server has exactly one transport (a `command` or a `url`),
//! a name that cannot make a tool name collide with a built-in (`NAME__TOOL`), and a
//! sandbox that grants nothing it does not list (no network unless declared).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use familiar_protocol::tier::Tier;
use serde::{Deserialize, Serialize};

use super::parse::expand_home;

/// One `[mcp.NAME]` table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerToml {
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    pub url: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub tier: Option<Tier>,
    /// Per-tool tiers, by the server's own tool name.
    #[serde(default)]
    pub tools: BTreeMap<String, Tier>,
    pub sandbox: Option<McpSandboxToml>,
}

/// `[mcp.NAME.sandbox]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSandboxToml {
    #[serde(default)]
    pub read: Vec<PathBuf>,
    #[serde(default)]
    pub write: Vec<PathBuf>,
    pub network: Option<bool>,
    /// UDP as well as TCP, with `network` (docs/mcp.md).
    pub udp: Option<bool>,
}

/// How the daemon talks to a server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum McpTransport {
    /// A child process speaking JSON-RPC on stdin/stdout, run inside the sandbox.
    Stdio { command: String, args: Vec<String> },
    /// A streamable-HTTP endpoint.
    Http { url: String },
}

/// One effective MCP server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct McpServerConfig {
    pub name: String,
    pub transport: McpTransport,
    /// Added to the scrubbed environment of a stdio server.
    pub env: BTreeMap<String, String>,
    /// The tier of every tool not named in `tools`.
    pub tier: Tier,
    pub tools: BTreeMap<String, Tier>,
    /// Readable trees besides the system directories (absolute).
    pub read: Vec<PathBuf>,
    /// The only writable trees (absolute).
    pub write: Vec<PathBuf>,
    pub network: bool,
    pub udp: bool,
}

impl McpServerConfig {
    /// The tier of the server's tool `tool`.
    pub fn tool_tier(&self, tool: &str) -> Tier {
        self.tools.get(tool).copied().unwrap_or(self.tier)
    }
}

/// Whether `name` may name a server: lowercase ASCII letters, digits, `-` and single
/// `_`, so `NAME__TOOL` splits back unambiguously.
pub fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && !name.contains("__")
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// Resolves one table; an error names the key (below `mcp.NAME`) and what is wrong.
pub fn resolve_server(
    name: &str,
    raw: McpServerToml,
    home: &Path,
) -> Result<McpServerConfig, (&'static str, String)> {
    if !valid_server_name(name) {
        return Err((
            "",
            format!("`{name}` is not a server name (lowercase letters, digits, `-`, `_`, no `__`)"),
        ));
    }
    let transport = match (raw.command, raw.url) {
        (Some(command), None) if !command.trim().is_empty() => McpTransport::Stdio {
            command,
            args: raw.args,
        },
        (None, Some(url)) if url.starts_with("http://") || url.starts_with("https://") => {
            if !raw.args.is_empty() {
                return Err(("args", "`args` is only for a `command`".to_owned()));
            }
            McpTransport::Http { url }
        }
        (None, Some(url)) => {
            return Err(("url", format!("`{url}` is not an http:// or https:// URL")));
        }
        (Some(_), Some(_)) => {
            return Err(("url", "give either `command` or `url`, not both".to_owned()));
        }
        (Some(_), None) => return Err(("command", "must not be empty".to_owned())),
        (None, None) => return Err(("command", "a `command` or a `url` is needed".to_owned())),
    };
    let sandbox = raw.sandbox.unwrap_or_default();
    let absolute = |key: &'static str, list: Vec<PathBuf>| {
        list.into_iter()
            .map(|p| {
                let p = expand_home(&p, home);
                if p.is_absolute() {
                    Ok(p)
                } else {
                    Err((
                        key,
                        format!("`{}` must be absolute (or start with ~/)", p.display()),
                    ))
                }
            })
            .collect::<Result<Vec<_>, _>>()
    };
    Ok(McpServerConfig {
        name: name.to_owned(),
        transport,
        env: raw.env,
        tier: raw.tier.unwrap_or(Tier::Execute),
        tools: raw.tools,
        read: absolute("sandbox.read", sandbox.read)?,
        write: absolute("sandbox.write", sandbox.write)?,
        network: sandbox.network.unwrap_or(false),
        udp: sandbox.udp.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(src: &str) -> Result<McpServerConfig, (&'static str, String)> {
        let raw: McpServerToml = toml::from_str(src).map_err(|e| ("toml", e.to_string()))?;
        resolve_server("files", raw, Path::new("/home/u"))
    }

    #[test]
    fn stdio_defaults_to_execute_and_no_network() {
        let c = parse("command = \"srv\"\nargs = [\"-v\"]\n[sandbox]\nwrite = [\"~/out\"]\n")
            .map_err(|e| e.1);
        let c = c.as_ref().map_err(String::as_str);
        assert_eq!(c.map(|c| c.tier), Ok(Tier::Execute));
        assert_eq!(c.map(|c| c.network), Ok(false));
        assert_eq!(
            c.map(|c| c.write.clone()),
            Ok(vec![PathBuf::from("/home/u/out")])
        );
    }

    #[test]
    fn per_tool_tiers_override() {
        let c =
            parse("url = \"http://127.0.0.1:1/mcp\"\ntier = \"write\"\n[tools]\nlook = \"read\"\n");
        let c = c.map_err(|e| e.1);
        assert_eq!(c.as_ref().map(|c| c.tool_tier("look")), Ok(Tier::Read));
        assert_eq!(c.as_ref().map(|c| c.tool_tier("other")), Ok(Tier::Write));
    }

    #[test]
    fn bad_tables_name_the_key() {
        assert_eq!(parse("args = []").map_err(|e| e.0), Err("command"));
        assert_eq!(
            parse("command = \"a\"\nurl = \"http://x\"").map_err(|e| e.0),
            Err("url")
        );
        assert_eq!(parse("url = \"ftp://x\"").map_err(|e| e.0), Err("url"));
        assert_eq!(
            parse("command = \"a\"\n[sandbox]\nread = [\"rel\"]").map_err(|e| e.0),
            Err("sandbox.read")
        );
        assert!(!valid_server_name("a__b"));
        assert!(!valid_server_name("A"));
        assert!(valid_server_name("git-hub_2"));
    }
}
