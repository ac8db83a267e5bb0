//! `ask --context selection|clipboard|window`: what the user pointed at, read once by the
//! client when the key is pressed, and sent in `Submit`'s `context` option.
//!
//! The client reads, not the daemon: `familiar ask` runs in the graphical session (the
//! key binding's process has `WAYLAND_DISPLAY` and the compositor's socket; the daemon
//! under systemd may have neither), and a daemon that read the clipboard on request
//! would read it for any caller on the bus. The selection and the clipboard come from
//! `wl-paste` (Debian's `wl-clipboard`, found on the fixed system `PATH`): it speaks
//! `wlr-data-control` (and, from 2.2, `ext-data-control`), costs no dependency and no
//! binary size, and is one short process per read (docs/cli.md says more). The focused
//! window comes from the desktop layer ([`crate::compositor`]).
//!
//! Invariant: only text is taken (a text MIME type, at most [`MAX_CONTEXT_BYTES`],
//! with a note when cut), never an offer a password manager marks as secret
//! (`x-kde-passwordManagerHint: secret`); every read is bounded by [`READ_TIMEOUT`]; a
//! source that cannot be read is a note for the person, never a failed request.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use familiar_protocol::{ContextSource, MAX_CONTEXT_BYTES};
use tokio::io::AsyncReadExt;

use crate::compositor::Compositor;
use crate::config::ProcessEnv;

/// Longest one `wl-paste` may take (a clipboard owner that hangs cannot hold the task).
const READ_TIMEOUT: Duration = Duration::from_secs(1);
/// The MIME type a password manager offers beside a secret (KeePassXC, KDE's Klipper).
pub(super) const PASSWORD_HINT: &str = "x-kde-passwordManagerHint";
/// The text types taken, best first.
const TEXT_TYPES: &[&str] = &[
    "text/plain;charset=utf-8",
    "text/plain",
    "UTF8_STRING",
    "STRING",
    "TEXT",
];
/// Room kept under [`MAX_CONTEXT_BYTES`] for the note saying a text was cut.
const CUT_NOTE_ROOM: usize = 128;
/// Characters of a taken text's first line in the progress bubble.
const SHOWN_CHARS: usize = 60;

/// What was read: the texts to send, and what the person is told (in the progress
/// bubble, and on stderr for what was not sent).
#[derive(Debug, Default)]
pub(super) struct Taken {
    pub(super) context: BTreeMap<ContextSource, String>,
    /// One line per source: the first line of what was taken, or why nothing was.
    pub(super) lines: Vec<String>,
    /// Why a source asked for was not sent.
    skipped: Vec<String>,
}

impl Taken {
    /// The lines for the progress bubble, one per source; empty when none was asked.
    pub(super) fn summary(&self) -> String {
        self.lines.join("\n")
    }

    /// Says on stderr what was asked for and not sent (under a keybinding, the log).
    pub(super) fn warn_skipped(&self) -> std::io::Result<()> {
        let mut err = std::io::stderr().lock();
        for why in &self.skipped {
            writeln!(err, "familiar: warning: {why}")?;
        }
        Ok(())
    }
}

/// What one source gave.
#[derive(Debug, PartialEq, Eq)]
enum Read {
    Text(String),
    /// Not sent, and why (shown to the person).
    Skipped(String),
}

/// Reads each of `sources` once, in order.
pub(super) async fn read(sources: &[ContextSource]) -> Taken {
    let mut taken = Taken::default();
    for &source in sources {
        if taken.context.contains_key(&source) {
            continue;
        }
        let read = match source {
            ContextSource::Selection => paste(true).await,
            ContextSource::Clipboard => paste(false).await,
            ContextSource::Window => focused_window().await,
        };
        match read {
            Read::Text(text) => {
                taken
                    .lines
                    .push(format!("{}: {}", source.describe(), first_line(&text)));
                taken.context.insert(source, text);
            }
            Read::Skipped(why) => {
                taken.lines.push(why.clone());
                taken.skipped.push(why);
            }
        }
    }
    taken
}

/// The first non-blank line of `text`, shortened for the bubble.
fn first_line(text: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    if line.chars().count() <= SHOWN_CHARS {
        format!("“{line}”")
    } else {
        let head: String = line.chars().take(SHOWN_CHARS).collect();
        format!("“{head}…”")
    }
}

/// What to do with a selection that offers `types`.
#[derive(Debug, PartialEq, Eq)]
enum Offer<'a> {
    /// A password manager's hint is offered: read it before anything else.
    AskHint,
    /// Take this text type.
    Text(&'a str),
    NotText,
}

fn offer<'a>(types: &[&'a str]) -> Offer<'a> {
    if types.contains(&PASSWORD_HINT) {
        return Offer::AskHint;
    }
    TEXT_TYPES
        .iter()
        .find_map(|want| types.iter().find(|t| t.eq_ignore_ascii_case(want)).copied())
        .map_or(Offer::NotText, Offer::Text)
}

/// The primary selection (`primary`) or the clipboard, as text.
async fn paste(primary: bool) -> Read {
    let name = if primary {
        "primary selection"
    } else {
        "clipboard"
    };
    let Some(program) = crate::programs::find("wl-paste") else {
        return Read::Skipped(format!(
            "the {name} cannot be read: wl-paste is not installed (Debian: wl-clipboard)"
        ));
    };
    let run = |args: Vec<&str>, limit: usize| {
        let mut cmd = tokio::process::Command::new(&program);
        if primary {
            cmd.arg("--primary");
        }
        cmd.args(args);
        output(cmd, limit)
    };
    let Some((listed, _)) = run(vec!["--list-types"], 64 * 1024).await else {
        return Read::Skipped(format!("the {name} is empty"));
    };
    let listed = String::from_utf8_lossy(&listed);
    let types: Vec<&str> = listed.lines().map(str::trim).collect();
    let chosen = match offer(&types) {
        Offer::AskHint => {
            let hint = run(vec!["--no-newline", "--type", PASSWORD_HINT], 64).await;
            if hint.is_none_or(|(h, _)| h.trim_ascii() == b"secret") {
                return Read::Skipped(format!("the {name} holds a password: not sent"));
            }
            match offer(
                &types
                    .iter()
                    .copied()
                    .filter(|t| *t != PASSWORD_HINT)
                    .collect::<Vec<_>>(),
            ) {
                Offer::Text(t) => t,
                Offer::AskHint | Offer::NotText => return not_text(name, &types),
            }
        }
        Offer::Text(t) => t,
        Offer::NotText => return not_text(name, &types),
    };
    let limit = MAX_CONTEXT_BYTES - CUT_NOTE_ROOM;
    match run(vec!["--no-newline", "--type", chosen], limit).await {
        Some((bytes, cut)) => bounded(&bytes, cut, limit),
        None => Read::Skipped(format!("the {name} could not be read")),
    }
}

fn not_text(name: &str, types: &[&str]) -> Read {
    let first = types.first().copied().unwrap_or("nothing");
    Read::Skipped(format!("the {name} is not text ({first}): not sent"))
}

/// `bytes` as text within `limit` bytes, with a note when the source held more.
fn bounded(bytes: &[u8], cut: bool, limit: usize) -> Read {
    let mut text = String::from_utf8_lossy(bytes).into_owned();
    let cut = cut || text.len() > limit;
    if cut {
        let mut end = limit.min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        // A character the cut split in two.
        text = text.trim_end_matches('\u{FFFD}').to_owned();
        text.push_str(&format!("\n[cut: only the first {limit} bytes were sent]"));
    }
    if text.trim().is_empty() {
        return Read::Skipped("nothing was selected".to_owned());
    }
    Read::Text(text)
}

/// What `cmd` writes, at most `limit` bytes (and whether it had more); `None` when it
/// fails, says nothing is there or takes longer than [`READ_TIMEOUT`].
async fn output(mut cmd: tokio::process::Command, limit: usize) -> Option<(Vec<u8>, bool)> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let read = async {
        let mut child = cmd.spawn().ok()?;
        let mut stdout = child.stdout.take()?;
        let mut bytes = Vec::new();
        (&mut stdout)
            .take(u64::try_from(limit).ok()? + 1)
            .read_to_end(&mut bytes)
            .await
            .ok()?;
        let cut = bytes.len() > limit;
        if cut {
            bytes.truncate(limit);
            // The rest is not wanted: the paste is stopped, not waited for.
            return Some((bytes, true));
        }
        let status = child.wait().await.ok()?;
        status.success().then_some((bytes, false))
    };
    tokio::time::timeout(READ_TIMEOUT, read)
        .await
        .ok()
        .flatten()
}

/// The focused window's app, title and workspace.
async fn focused_window() -> Read {
    let desktop = tokio::task::spawn_blocking(|| {
        let compositor = Compositor::detect(&ProcessEnv)?;
        compositor.desktop().ok()
    })
    .await
    .ok()
    .flatten();
    let Some(desktop) = desktop else {
        return Read::Skipped("no compositor answered: the focused window is not sent".to_owned());
    };
    let Some(w) = desktop.focused_window else {
        return Read::Skipped("no window has the focus".to_owned());
    };
    let workspace = w
        .workspace
        .or(desktop.focused_workspace)
        .unwrap_or_else(|| "unknown".to_owned());
    Read::Text(format!(
        "app: {}\ntitle: {}\nworkspace: {workspace}\ncompositor: {}",
        w.app_id, w.title, desktop.compositor
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_managers_hint_is_read_before_the_text() {
        // What `wl-paste --list-types` says for a password KeePassXC copied.
        let types = ["text/plain", "text/plain;charset=utf-8", PASSWORD_HINT];
        assert_eq!(offer(&types), Offer::AskHint);
    }

    #[test]
    fn the_best_text_type_is_taken() {
        let types = ["text/html", "UTF8_STRING", "text/plain;charset=utf-8"];
        assert_eq!(offer(&types), Offer::Text("text/plain;charset=utf-8"));
        assert_eq!(offer(&["image/png"]), Offer::NotText);
        assert_eq!(offer(&[]), Offer::NotText);
    }

    #[test]
    fn a_long_text_is_cut_with_a_note_within_the_limit() {
        let long = "é".repeat(MAX_CONTEXT_BYTES);
        let limit = MAX_CONTEXT_BYTES - CUT_NOTE_ROOM;
        let Read::Text(t) = bounded(&long.as_bytes()[..limit + 1], true, limit) else {
            panic!("not taken");
        };
        assert!(t.len() <= MAX_CONTEXT_BYTES, "{}", t.len());
        assert!(t.ends_with(&format!("[cut: only the first {limit} bytes were sent]")));
        assert!(!t.contains('\u{FFFD}'));
    }

    #[test]
    fn a_blank_selection_is_not_sent() {
        assert_eq!(
            bounded(b" \n", false, 100),
            Read::Skipped("nothing was selected".to_owned())
        );
    }

    #[test]
    fn the_bubble_shows_the_first_line_shortened() {
        assert_eq!(first_line("\n  bonjour\nle monde"), "“bonjour”");
        let long = "x".repeat(100);
        assert_eq!(first_line(&long), format!("“{}…”", "x".repeat(SHOWN_CHARS)));
    }
}
