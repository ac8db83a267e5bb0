//! `familiar man [COMMAND…] [--install [DIR]]`: the manual pages, `familiar(1)` and one
//! per subcommand (`familiar-run(1)`, `familiar-sessions-show(1)`, …), generated from
//! the clap definitions with the sections a reader looks for: EXIT STATUS, ENVIRONMENT,
//! FILES and EXAMPLES (their text follows docs/cli.md), and SEE ALSO.
//!
//! Invariant: every page a page names exists: the pages are exactly the non-hidden
//! commands, so `familiar(1)`'s list of `familiar-COMMAND(1)` is the list installed.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::CommandFactory;

use super::{Cli, Exit, Out};

/// The exit codes, as docs/cli.md gives them.
const EXIT_STATUS: &[(&str, &str)] = &[
    (
        "0",
        "The command or the task did what was asked, also when that was nothing (a task skipped because its --when conditions did not hold, a dismissed menu).",
    ),
    (
        "1",
        "The task failed, was denied or was cancelled; a command that could not do what it was asked (a failed doctor check, a menu that cannot open; policy check: the call would be asked or denied).",
    ),
    (
        "2",
        "A usage or configuration error; an unknown soul, session, task, approval request or memory entry; any other error a command stops at.",
    ),
    (
        "3",
        "The daemon cannot be reached (for status: the daemon is not running; for ask: the daemon stopped or was replaced while it followed the task, which its session keeps up to its last step).",
    ),
    (
        "4",
        "A limit was reached: iterations, tokens or wall clock.",
    ),
    (
        "130",
        "Interrupted by Ctrl-C (run, ask: the task is cancelled and its context saved first; ask exits 130 even when the daemon could not take the cancel, and says so).",
    ),
];

const ENVIRONMENT: &[(&str, &str)] = &[
    ("FAMILIAR_CONFIG", "The config file, as --config gives it."),
    (
        "XDG_CONFIG_HOME",
        "The config directory is $XDG_CONFIG_HOME/familiar (default ~/.config/familiar).",
    ),
    (
        "XDG_STATE_HOME",
        "The data directory is $XDG_STATE_HOME/familiar (default ~/.local/state/familiar), unless data_dir is set in config.toml.",
    ),
    (
        "XDG_DATA_HOME",
        "Where setup installs the user units and the D-Bus activation file, and man --install the pages (default ~/.local/share).",
    ),
    (
        "ANTHROPIC_API_KEY, OPENAI_API_KEY",
        "With no [providers.NAME] in config.toml, the first one set picks Anthropic or OpenAI; with neither, a local server at http://127.0.0.1:11434 (Ollama) is used.",
    ),
    (
        "FAMILIAR_DMENU",
        "No longer read (a warning says so): the menu is [desktop] menu in config.toml, else the first of fuzzel, wofi, rofi, bemenu installed in the system's directories.",
    ),
    (
        "DBUS_SESSION_BUS_ADDRESS",
        "The session bus the daemon serves dev.familiar.Agent1 on, and the clients call it over.",
    ),
    ("RUST_LOG", "The log filter; overrides -v."),
];

const FILES: &[(&str, &str)] = &[
    (
        "~/.config/familiar/config.toml",
        "Providers, the default soul and policy, daemon limits, MCP servers.",
    ),
    (
        "~/.config/familiar/souls/ID.toml",
        "Souls of the user's own; one named like a shipped soul replaces it.",
    ),
    (
        "~/.config/familiar/policies/NAME.toml",
        "Policies of the user's own, named by policy = \"NAME\" in config.toml.",
    ),
    (
        "~/.local/state/familiar/",
        "The data directory (mode 0700): context/ and transcripts/ of each session, audit.jsonl, memory.json, workspaces/.",
    ),
    (
        "~/.local/share/systemd/user/familiar.service",
        "The daemon's user unit, with familiar-maintenance.service and .timer, as setup installs them.",
    ),
    (
        "~/.local/share/dbus-1/services/dev.familiar.Agent1.service",
        "D-Bus activation: the first call starts the daemon.",
    ),
    (
        "~/.local/share/man/man1/familiar*.1",
        "These pages, as man --install writes them.",
    ),
];

/// Examples per top-level command; the top page's under "".
const EXAMPLES: &[(&str, &[&str])] = &[
    (
        "",
        &[
            "familiar run \"what is using my disk?\"",
            "familiar setup && familiar ask \"is anything eating my battery?\"",
            "familiar doctor",
        ],
    ),
    (
        "run",
        &[
            "familiar run --soul system_admin \"why did my last login take so long?\"",
            "familiar run -c \"and the day before?\"",
            "echo \"summarise ~/notes/todo.md\" | familiar run -",
            "familiar run --json \"how full is my disk?\" | jq -c 'select(.kind == \"tool_call_started\")'",
        ],
    ),
    (
        "ask",
        &[
            "familiar ask \"is anything eating my battery?\"",
            "familiar ask --detach --notify \"clean up ~/Downloads older than a month\"",
            "familiar ask --when ac,load<2 --wait 6h --soul maintenance \"weekly check-up\"",
        ],
    ),
    (
        "steer",
        &["familiar steer t-1a2b3c4d5e6f \"only the home partition, please\""],
    ),
    ("tasks", &["familiar tasks", "familiar tasks --json"]),
    ("cancel", &["familiar cancel t-1a2b3c4d5e6f"]),
    ("undo", &["familiar undo t-1a2b3c4d5e6f"]),
    ("reload", &["familiar reload"]),
    (
        "approve",
        &[
            "familiar approve r-1a2b3c4d5e6f",
            "familiar approve --dmenu",
        ],
    ),
    ("bar", &["familiar bar", "familiar bar --plain"]),
    ("deny", &["familiar deny r-1a2b3c4d5e6f"]),
    (
        "status",
        &["familiar status", "familiar status --json | jq .metrics"],
    ),
    (
        "sessions",
        &[
            "familiar sessions",
            "familiar sessions show s-1a2b3c4d5e6f",
            "familiar sessions prune --older-than 30d --dry-run",
        ],
    ),
    (
        "memory",
        &[
            "familiar memory list",
            "familiar memory forget m-1a2b3c4d5e6f",
            "familiar memory clear --soul desktop",
        ],
    ),
    (
        "souls",
        &[
            "familiar souls",
            "familiar souls show system_admin",
            "familiar souls copy system_admin",
            "familiar souls validate ~/.config/familiar/souls/mine.toml",
        ],
    ),
    (
        "mcp",
        &["familiar mcp list", "familiar mcp list --no-start --json"],
    ),
    (
        "policy",
        &[
            "familiar policy check -- shell '{\"command\": \"rm -rf ~\"}'",
            "familiar policy check --soul safe_assistant -- read_file '{\"path\": \"/etc/hostname\"}'",
        ],
    ),
    (
        "snapshot",
        &["familiar snapshot", "familiar snapshot --json | jq .disks"],
    ),
    (
        "setup",
        &[
            "familiar setup --dry-run",
            "familiar setup",
            "familiar setup --uninstall",
            "familiar setup --store-key anthropic",
        ],
    ),
    (
        "man",
        &[
            "familiar man run | man -l -",
            "familiar man --install && man familiar-ask",
        ],
    ),
    (
        "completions",
        &[
            "familiar completions bash > ~/.local/share/bash-completion/completions/familiar",
            "source <(COMPLETE=bash familiar)",
        ],
    ),
    (
        "doctor",
        &[
            "familiar doctor",
            "familiar doctor --json | jq -c 'select(.status != \"ok\")'",
        ],
    ),
    (
        "daemon",
        &["systemctl --user start familiar", "familiar -v daemon"],
    ),
];

/// `familiar man`: one page on stdout, or every page written to a directory.
pub fn man(
    command: &[String],
    install: Option<Option<PathBuf>>,
    out: &mut Out,
) -> anyhow::Result<Exit> {
    let pages = pages();
    if let Some(dir) = install {
        let dir = match dir {
            Some(d) => d,
            None => default_dir()?,
        };
        return install_pages(&pages, &dir, out);
    }
    let name = std::iter::once("familiar")
        .chain(command.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join("-");
    let Some((_, cmd)) = pages.iter().find(|(n, _)| *n == name) else {
        let names: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
        anyhow::bail!(
            "no manual page for `{}`: the pages are {}",
            name.replace('-', " "),
            names.join(", ")
        );
    };
    out.write_all(&render(cmd)?)?;
    Ok(Exit::Completed)
}

/// Where man-db finds the pages with no MANPATH: beside the running binary when it is a
/// `bin` under HOME (`~/.cargo/bin/familiar` → `~/.cargo/share/man/man1`: man-db
/// derives `../share/man` from each PATH directory); else `$XDG_DATA_HOME/man/man1`,
/// or `~/.local/share/man/man1`.
fn default_dir() -> anyhow::Result<PathBuf> {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute());
    let beside_binary = std::env::current_exe().ok().and_then(|exe| {
        let bin = exe.parent()?;
        let prefix = bin.parent()?;
        (bin.file_name()? == "bin" && prefix.starts_with(home.as_ref()?))
            .then(|| prefix.join("share/man/man1"))
    });
    if let Some(dir) = beside_binary {
        return Ok(dir);
    }
    if let Some(d) = std::env::var_os("XDG_DATA_HOME").map(PathBuf::from)
        && d.is_absolute()
    {
        return Ok(d.join("man/man1"));
    }
    let home = home.context(
        "HOME is not set to an absolute path: give the directory, `familiar man --install DIR`",
    )?;
    Ok(home.join(".local/share/man/man1"))
}

/// Whether `man` searches `root` (the directory above `man1`): `manpath` says; a
/// machine without it is assumed not to.
fn man_searches(root: &Path) -> bool {
    let Ok(out) = std::process::Command::new("manpath")
        .stderr(std::process::Stdio::null())
        .output()
    else {
        return false;
    };
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    listed.trim().split(':').any(|d| {
        let d = Path::new(d);
        d == root || d.canonicalize().is_ok_and(|d| d == root)
    })
}

fn install_pages(
    pages: &[(String, clap::Command)],
    dir: &Path,
    out: &mut Out,
) -> anyhow::Result<Exit> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (name, cmd) in pages {
        let path = dir.join(format!("{name}.1"));
        std::fs::write(&path, render(cmd)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    writeln!(
        out,
        "wrote {} pages to {} (familiar.1, familiar-run.1, …): `man familiar`, `man familiar-ask`",
        pages.len(),
        dir.display()
    )?;
    let root = dir.parent().unwrap_or(dir);
    if !man_searches(root) {
        writeln!(
            out,
            "man does not search {} yet: add `export MANPATH=\"{}:\"` to your shell's profile",
            root.display(),
            root.display()
        )?;
    }
    Ok(Exit::Completed)
}

/// Every page: the top command and each non-hidden subcommand, depth first, named as
/// clap names them in the SUBCOMMANDS lists (`familiar-sessions-show`).
fn pages() -> Vec<(String, clap::Command)> {
    fn walk(cmd: &clap::Command, pages: &mut Vec<(String, clap::Command)>) {
        let name = cmd
            .get_display_name()
            .unwrap_or_else(|| cmd.get_name())
            .to_owned();
        pages.push((name, cmd.clone()));
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            walk(sub, pages);
        }
    }
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut pages = Vec::new();
    walk(&cmd, &mut pages);
    pages
}

/// One page: clap_mangen's sections, then ours.
fn render(cmd: &clap::Command) -> std::io::Result<Vec<u8>> {
    let page = clap_mangen::Man::new(cmd.clone())
        .manual("familiar manual")
        .source(format!("familiar {}", env!("CARGO_PKG_VERSION")));
    let mut roff = Vec::new();
    page.render_title(&mut roff)?;
    page.render_name_section(&mut roff)?;
    page.render_synopsis_section(&mut roff)?;
    page.render_description_section(&mut roff)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        page.render_options_section(&mut roff)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        page.render_subcommands_section(&mut roff)?;
    }
    let name = cmd.get_display_name().unwrap_or_else(|| cmd.get_name());
    section(&mut roff, "EXIT STATUS", EXIT_STATUS)?;
    section(&mut roff, "ENVIRONMENT", ENVIRONMENT)?;
    section(&mut roff, "FILES", FILES)?;
    // `familiar-sessions-show` → the examples of `sessions`.
    let top = name
        .strip_prefix("familiar-")
        .and_then(|n| n.split('-').next())
        .unwrap_or("");
    if let Some((_, examples)) = EXAMPLES.iter().find(|(k, _)| *k == top) {
        writeln!(roff, ".SH EXAMPLES")?;
        for e in *examples {
            writeln!(roff, ".PP\n.nf\n{}\n.fi", escape(e))?;
        }
    }
    writeln!(roff, ".SH \"SEE ALSO\"")?;
    let see = if name == "familiar" {
        "familiar-run(1), familiar-ask(1), familiar-doctor(1), systemctl(1), journalctl(1)"
    } else {
        "familiar(1); the project's docs/cli.md and README.md"
    };
    writeln!(roff, "{}", escape(see))?;
    page.render_version_section(&mut roff)?;
    Ok(roff)
}

/// A section of tagged paragraphs: the tag in bold, its text below.
fn section(roff: &mut Vec<u8>, title: &str, items: &[(&str, &str)]) -> std::io::Result<()> {
    writeln!(roff, ".SH \"{title}\"")?;
    for (tag, text) in items {
        writeln!(roff, ".TP\n\\fB{}\\fR\n{}", escape(tag), escape(text))?;
    }
    Ok(())
}

/// `text` as roff input: backslashes and hyphens escaped, and a line that would start
/// with a control character (`.`, `'`) made plain text.
fn escape(text: &str) -> String {
    let body = text.replace('\\', "\\e").replace('-', "\\-");
    if body.starts_with('.') || body.starts_with('\'') {
        format!("\\&{body}")
    } else {
        body
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_page_named_in_a_subcommand_list_exists() {
        let pages = pages();
        let names: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
        for (name, cmd) in &pages {
            for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
                let page = format!("{name}-{}", sub.get_name());
                assert!(names.contains(&page.as_str()), "{name} names {page}");
            }
        }
        assert!(names.contains(&"familiar-run"), "{names:?}");
        assert!(names.contains(&"familiar-sessions-show"), "{names:?}");
        assert!(
            !names.iter().any(|n| n.contains("sandbox-exec")),
            "{names:?}"
        );
    }

    #[test]
    fn each_page_has_the_sections_a_reader_looks_for() {
        for (name, cmd) in pages() {
            let roff = String::from_utf8(render(&cmd).unwrap()).unwrap();
            assert!(roff.contains(&format!("\n.TH {name} 1 ")), "{name}: {roff}");
            for heading in [
                ".SH NAME",
                ".SH SYNOPSIS",
                ".SH \"EXIT STATUS\"",
                ".SH \"ENVIRONMENT\"",
                ".SH \"FILES\"",
                ".SH EXAMPLES",
                ".SH \"SEE ALSO\"",
            ] {
                assert!(roff.contains(heading), "{name} lacks {heading}");
            }
        }
    }

    #[test]
    fn roff_control_characters_in_text_are_escaped() {
        assert_eq!(escape("rm -rf ~"), "rm \\-rf ~");
        assert_eq!(escape(".hidden"), "\\&.hidden");
        assert_eq!(escape("a\\b"), "a\\eb");
    }
}
