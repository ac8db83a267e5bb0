//! What a timed grant ("Allow … for this task") covers, and the words that say so.
//!
//! A grant is keyed on the task and a [`Scope`]: the tool, the call's action, and what
//! the call is about (a directory, an origin, a command line…). Which scope a call has
//! is the policy's to say, in one place (`policy::scope`); this module holds the key
//! and its label, so every surface's wording is made from the very key the broker
//! compares ([`Scope::label`]): label and behaviour cannot drift.
//!
//! Invariant: a request that is always asked carries [`Grantable::Never`]; no surface
//! offers it a grant and the broker refuses one (`RespondError::NotGrantable`).

use familiar_protocol::display::chooser::GRANT_FOR;
use familiar_protocol::display::visible;
use serde::Serialize;

/// The characters of a command line a label shows; past it the label says "this exact
/// command" (the approval shows the whole line above it).
const LABEL_COMMAND_CHARS: usize = 48;

/// What one timed grant covers: later calls of the same task with an equal scope.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Scope {
    pub tool: String,
    /// The call's action, for tools that take one (`desktop_dispatch`'s `action`,
    /// `hypr_dispatch`'s dispatcher, `systemd_user`'s action).
    pub action: Option<String>,
    pub about: About,
}

/// What a call is about, as far as a grant reaches.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum About {
    /// Every call of the tool (and action): what it acts on is not worth a question.
    Any,
    /// Files directly in this directory (written as shown, `~/notes/`), not below it.
    Directory(String),
    /// This one file or directory.
    Path(String),
    /// Addresses of this origin: scheme, host and port.
    Origin(String),
    /// This one named thing (a unit, a memory entry, a memory scope).
    Name(String),
    /// This command line, exactly, in this directory.
    Command { line: String, cwd: Option<String> },
    /// These arguments, exactly (a tool whose arguments only its server understands).
    Arguments(String),
}

impl Scope {
    /// The grant's choice, on every surface: `Allow write_file in ~/notes/ for this
    /// task (10 min)`.
    pub fn label(&self) -> String {
        format!("Allow {}", self.covers())
    }

    /// The label without its verb: `write_file in ~/notes/ for this task (10 min)`.
    pub fn covers(&self) -> String {
        let mut out = visible(&self.tool);
        if let Some(action) = &self.action {
            out.push(' ');
            out.push_str(&visible(action));
        }
        match &self.about {
            About::Any => {}
            About::Directory(dir) => out.push_str(&format!(" in {}", visible(dir))),
            About::Path(p) | About::Origin(p) | About::Name(p) => {
                out.push_str(&format!(" of {}", visible(p)));
            }
            About::Command { line, cwd } => {
                let line = visible(line);
                if line.chars().count() <= LABEL_COMMAND_CHARS {
                    out.push_str(&format!(" `{line}` (this exact command)"));
                } else {
                    out.push_str(" of this exact command");
                }
                if let Some(cwd) = cwd {
                    out.push_str(&format!(" in {}", visible(cwd)));
                }
            }
            About::Arguments(_) => out.push_str(" with these exact arguments"),
        }
        out.push_str(&format!(
            " for this task ({} min)",
            GRANT_FOR.as_secs().div_ceil(60)
        ));
        out
    }
}

/// Whether a request may leave a timed grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Grantable {
    /// It may, for calls of this scope.
    Within(Scope),
    /// It is always asked, so no answer to it covers another call; why.
    Never(String),
}

impl Grantable {
    /// The scope, when a grant may be given.
    pub fn scope(&self) -> Option<&Scope> {
        match self {
            Grantable::Within(scope) => Some(scope),
            Grantable::Never(_) => None,
        }
    }

    /// The grant's choice as every surface offers it; `None`: offer none.
    pub fn label(&self) -> Option<String> {
        self.scope().map(Scope::label)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(tool: &str, action: Option<&str>, about: About) -> Scope {
        Scope {
            tool: tool.into(),
            action: action.map(str::to_owned),
            about,
        }
    }

    #[test]
    fn the_label_says_what_the_grant_covers() {
        #[rustfmt::skip]
        let cases = [
            (scope("write_file", None, About::Directory("~/notes/".into())),
             "Allow write_file in ~/notes/ for this task (10 min)"),
            (scope("open", None, About::Origin("https://example.org".into())),
             "Allow open of https://example.org for this task (10 min)"),
            (scope("desktop_dispatch", Some("focus_window"), About::Any),
             "Allow desktop_dispatch focus_window for this task (10 min)"),
            (scope("systemd_user", Some("restart"), About::Name("pipewire.service".into())),
             "Allow systemd_user restart of pipewire.service for this task (10 min)"),
            (scope("shell", None, About::Command { line: "cargo test".into(), cwd: None }),
             "Allow shell `cargo test` (this exact command) for this task (10 min)"),
            (scope("shell", None, About::Command { line: "x".repeat(49), cwd: Some("~/src/".into()) }),
             "Allow shell of this exact command in ~/src/ for this task (10 min)"),
            (scope("notes__write", None, About::Arguments("{}".into())),
             "Allow notes__write with these exact arguments for this task (10 min)"),
        ];
        for (scope, label) in cases {
            assert_eq!(scope.label(), label);
        }
    }

    #[test]
    fn a_label_shows_escapes_not_what_they_would_do() {
        let s = scope(
            "write_file",
            None,
            About::Directory("~/a\nb\u{202E}/".into()),
        );
        assert_eq!(
            s.label(),
            "Allow write_file in ~/a\\nb\\u{202E}/ for this task (10 min)"
        );
    }

    #[test]
    fn a_request_never_granted_offers_no_label() {
        assert_eq!(Grantable::Never("runs outside".into()).label(), None);
    }
}
