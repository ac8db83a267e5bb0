//! What a timed grant of one asked call covers ([`grantable`]): the one place that
//! says, per tool, what a call is about for a grant, and which calls never take one.
//!
//! Invariant: a grant never widens. Its scope is the narrowest thing the person could
//! have judged from the one call they answered, and a call that is always asked has
//! none ([`Grantable::Never`]): one that runs outside the sandbox (`open`,
//! `desktop_dispatch launch`, `hypr_dispatch exec`, an MCP server that runs
//! unconfined), a write of a file that runs programs later (a start-up file, a
//! `.git/hooks` or `.git/config`: [`startup::runs`]), and a `system_critical` call.
//!
//! The scope of each tool, from what the policy already reads of a call (the paths it
//! names, the command it runs: [`super::subjects`]):
//!
//! | tool | action | about |
//! |---|---|---|
//! | `read_file`, `write_file`, `edit_file` | | the file's directory (files directly in it); a hidden file: that file alone |
//! | `list_dir`, `search_files`, `disk_usage` | | that directory |
//! | `open` (never granted) | | a URL's origin (scheme, host, port); a file as above |
//! | `shell` | | the exact command line, in the same `cwd` |
//! | `systemd_user` | its action | the unit |
//! | `desktop_dispatch`, `hypr_dispatch` | the action, the dispatcher | any target |
//! | `remember` | | the memory scope (`soul`, `all`) |
//! | `forget` | | the entry |
//! | `notify`, the tools that only read the system | | any call |
//! | MCP tools, and any other | | the exact arguments |
//!
//! Paths are compared resolved (symlinks of what exists followed, `..` gone), so a
//! link in a granted directory does not carry the grant somewhere else.

use std::path::Path;

use familiar_protocol::tier::Tier;

use super::paths::{PathContext, normalize};
use super::startup::{self, Runs};
use super::subjects::{Call, command_of, named_paths};
use crate::approval::{About, Grantable, Scope};

/// Why a `system_critical` call takes no grant.
const CRITICAL: &str = "a system_critical call is asked every time";

/// What a grant of `call` would cover, or why it takes none. `outside_sandbox` is why
/// the call runs outside familiar's sandbox, if it does (the catalog's reason, or an
/// MCP server's); the catalog's own list is checked here too.
pub fn grantable(call: &Call, ctx: &PathContext, outside_sandbox: Option<&str>) -> Grantable {
    if call.tier == Tier::SystemCritical {
        return Grantable::Never(CRITICAL.to_owned());
    }
    let outside =
        outside_sandbox.or_else(|| crate::catalog::runs_outside_sandbox(call.tool, call.args));
    if let Some(why) = outside {
        return Grantable::Never(format!("{why}: it is asked every time"));
    }
    if let Some((path, runs)) = startup_write(call, ctx) {
        return Grantable::Never(format!("`{path}`: {}", runs.words()));
    }
    Grantable::Within(scope(call, ctx))
}

/// A write of a file that runs programs later, if `call` is one: the path as named and
/// what it runs. The policy asks such a write whatever the tier's mode, and no grant
/// covers it.
pub(super) fn startup_write(call: &Call, ctx: &PathContext) -> Option<(String, Runs)> {
    if !matches!(call.tool, "write_file" | "edit_file") {
        return None;
    }
    named_paths(call).into_iter().find_map(|p| {
        let runs = startup::runs(&normalize(&p, ctx), ctx.home)?;
        Some((p, runs))
    })
}

/// The scope of a call that may take a grant (the table in the module docs).
fn scope(call: &Call, ctx: &PathContext) -> Scope {
    let str_arg = |k: &str| call.args.get(k).and_then(|v| v.as_str());
    let exact = || About::Arguments(call.args.to_string());
    let (action, about) = match call.tool {
        "read_file" | "write_file" | "edit_file" | "open" => (None, file(call, ctx)),
        "list_dir" | "search_files" | "disk_usage" => {
            let about = named_paths(call).first().map_or_else(exact, |p| {
                About::Path(shown(&normalize(p, ctx), ctx.home, true))
            });
            (None, about)
        }
        "shell" => {
            let cwd = str_arg("cwd").map(|c| shown(&normalize(c, ctx), ctx.home, true));
            let about =
                command_of(call).map_or_else(exact, |(line, _)| About::Command { line, cwd });
            (None, about)
        }
        "systemd_user" => (
            str_arg("action").map(str::to_owned),
            About::Name(str_arg("unit").unwrap_or_default().to_owned()),
        ),
        "desktop_dispatch" => (str_arg("action").map(str::to_owned), About::Any),
        "hypr_dispatch" => (str_arg("dispatcher").map(str::to_owned), About::Any),
        "remember" => (
            None,
            About::Name(str_arg("scope").unwrap_or("soul").to_owned()),
        ),
        "forget" => (
            None,
            About::Name(str_arg("id").unwrap_or_default().to_owned()),
        ),
        "notify" | "system_snapshot" | "process_list" | "journal" | "desktop_state"
        | "hypr_state" => (None, About::Any),
        _ => (None, exact()),
    };
    Scope {
        tool: call.tool.to_owned(),
        action,
        about,
    }
}

/// A file's scope: its directory, or a hidden file alone (a grant to write `notes.txt`
/// in home says nothing about `~/.vimrc`); a URL's origin.
fn file(call: &Call, ctx: &PathContext) -> About {
    let Some(p) = named_paths(call).into_iter().next() else {
        // `open` of a URL names no path.
        let target = call.args.get("target").and_then(|v| v.as_str());
        return match target.and_then(origin) {
            Some(origin) => About::Origin(origin),
            None => About::Arguments(call.args.to_string()),
        };
    };
    let path = normalize(&p, ctx);
    let hidden = path
        .file_name()
        .is_some_and(|n| n.as_encoded_bytes().starts_with(b"."));
    match path.parent() {
        Some(dir) if !hidden => About::Directory(shown(dir, ctx.home, true)),
        Some(_) | None => About::Path(shown(&path, ctx.home, false)),
    }
}

/// A URL's origin, `scheme://host[:port]`, lowercased (as a browser compares them);
/// `None` for what has no host (`mailto:`, a bare word).
fn origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    // Credentials before `@` are not part of the origin.
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    (!host_port.is_empty() && !scheme.is_empty())
        .then(|| format!("{scheme}://{host_port}").to_ascii_lowercase())
}

/// `path` as a person reads it: `~/…` under home; a directory ends with `/`.
fn shown(path: &Path, home: &Path, dir: bool) -> String {
    let mut out = match path.strip_prefix(home) {
        Ok(rest) if rest.as_os_str().is_empty() => "~".to_owned(),
        Ok(rest) => format!("~/{}", rest.display()),
        Err(_) => path.display().to_string(),
    };
    if dir && !out.ends_with('/') {
        out.push('/');
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::policy::tests::world;

    fn of(tool: &str, args: Value) -> Grantable {
        let w = world();
        let ctx = PathContext {
            home: &w.home,
            cwd: &w.cwd,
        };
        let info = crate::catalog::info(tool);
        let tier = info.map_or(Tier::Write, |i| crate::catalog::tier_for_call(i, &args));
        let call = Call {
            tool,
            tier,
            args: &args,
        };
        grantable(&call, &ctx, None)
    }

    fn label(tool: &str, args: Value) -> Option<String> {
        of(tool, args).label()
    }

    fn never(tool: &str, args: Value) -> bool {
        matches!(of(tool, args), Grantable::Never(_))
    }

    // Regression (issue 39): a grant on `write_file notes.txt` let
    // `.git/hooks/post-checkout` be written unasked.
    #[test]
    fn a_grant_on_a_file_is_its_directory_and_never_a_hook() {
        let notes = of("write_file", json!({"path": "notes.txt"}));
        assert_eq!(
            notes.label().unwrap(),
            "Allow write_file in ~/work/ for this task (10 min)"
        );
        let same_dir = of("edit_file", json!({"path": "~/work/todo.md"}));
        assert_eq!(
            notes.scope().unwrap().about,
            same_dir.scope().unwrap().about
        );
        for path in [".git/hooks/post-checkout", ".git/config", "~/.bashrc"] {
            assert!(never("write_file", json!({ "path": path })), "{path}");
        }
        let deeper = of("write_file", json!({"path": "sub/notes.txt"}));
        assert_ne!(notes.scope(), deeper.scope());
        assert_eq!(
            label("write_file", json!({"path": "~/.vimrc"})).unwrap(),
            "Allow write_file of ~/.vimrc for this task (10 min)"
        );
    }

    // Regression (issue 39): after one `open` of a harmless URL a second one ran
    // unasked; what runs outside the sandbox is never granted.
    #[test]
    fn what_runs_outside_the_sandbox_is_never_granted() {
        assert!(never("open", json!({"target": "https://example.org/a"})));
        assert!(never(
            "desktop_dispatch",
            json!({"action": "launch", "command": "foot"})
        ));
        assert!(never(
            "hypr_dispatch",
            json!({"dispatcher": "exec", "args": "foot"})
        ));
        let w = world();
        let ctx = PathContext {
            home: &w.home,
            cwd: &w.cwd,
        };
        let args = json!({"q": "x"});
        let call = Call {
            tool: "web__fetch",
            tier: Tier::Read,
            args: &args,
        };
        let mcp = grantable(&call, &ctx, Some("the server runs unconfined"));
        assert_eq!(
            mcp,
            Grantable::Never("the server runs unconfined: it is asked every time".into())
        );
    }

    #[test]
    fn a_system_critical_call_is_never_granted() {
        assert_eq!(
            of("kill_process", json!({"pid": 42})),
            Grantable::Never(CRITICAL.into())
        );
        assert!(never("power", json!({"action": "suspend"})));
        assert!(never("type_text", json!({"text": "x"})));
    }

    // A grant for `desktop_dispatch focus_window` would have let `launch` through.
    #[test]
    fn an_action_is_part_of_the_scope() {
        let focus = of(
            "desktop_dispatch",
            json!({"action": "focus_window", "window": "0x1"}),
        );
        let other = of(
            "desktop_dispatch",
            json!({"action": "focus_window", "window": "0x2"}),
        );
        let close = of("desktop_dispatch", json!({"action": "close_window"}));
        assert_eq!(focus.scope(), other.scope());
        assert_ne!(focus.scope(), close.scope());
        assert_eq!(
            focus.label().unwrap(),
            "Allow desktop_dispatch focus_window for this task (10 min)"
        );
        let restart = label(
            "systemd_user",
            json!({"action": "restart", "unit": "pipewire.service"}),
        );
        assert_eq!(
            restart.unwrap(),
            "Allow systemd_user restart of pipewire.service for this task (10 min)"
        );
    }

    #[test]
    fn a_command_is_granted_exactly() {
        let test = of("shell", json!({"command": "cargo test"}));
        assert_eq!(test, of("shell", json!({"command": "cargo test"})));
        assert_ne!(test, of("shell", json!({"command": "cargo test --all"})));
        assert_ne!(
            test,
            of("shell", json!({"command": "cargo test", "cwd": "/tmp"}))
        );
        let mcp = of("notes__write", json!({"path": "a"}));
        assert_ne!(mcp, of("notes__write", json!({"path": "b"})));
    }

    #[test]
    fn a_urls_scope_is_its_origin() {
        assert_eq!(
            origin("https://user@Example.org:8443/a?b#c").as_deref(),
            Some("https://example.org:8443")
        );
        assert_eq!(origin("mailto:a@b"), None);
        let w = world();
        let ctx = PathContext {
            home: &w.home,
            cwd: &w.cwd,
        };
        let args = json!({"target": "https://example.org/a"});
        let call = Call {
            tool: "open",
            tier: Tier::Execute,
            args: &args,
        };
        assert_eq!(
            file(&call, &ctx),
            About::Origin("https://example.org".into())
        );
    }
}
