//! The approval chooser's menu: one request's choices as the lines a launcher shows
//! (fuzzel, wofi, rofi, bemenu), and the answer a picked line stands for. The daemon
//! opens it when an approval notification is clicked (its `default` action); `familiar
//! approve --dmenu` opens it from a keybinding or a bar.
//!
//! Invariant: the call is shown as [`super::describe_call`] made it (the summary every
//! surface shows), each of its lines marked `│ ` so no argument can pass for a choice;
//! only the choice lines answer, and the first line, what Enter picks without a
//! thought, is Deny. The timed grant is offered only with the request's scope, in the
//! words of the daemon's label (`GetTask`'s `grant`), and only that line picks it.

use std::time::Duration;

/// How long a timed grant lasts.
pub const GRANT_FOR: Duration = Duration::from_secs(600);

/// A choice of the chooser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// The call does not run (`Respond(id, false)`).
    Deny,
    /// The call runs (`Respond(id, true)`).
    Approve,
    /// Approve, and this task's further calls of the request's scope for [`GRANT_FOR`].
    GrantTask,
}

const DENY: &str = "Deny";
/// The call's characters per menu line: launchers cut a longer line at their width.
const MENU_LINE_CHARS: usize = 100;
const APPROVE: &str = "Approve";

/// The menu for one request: the choices, then the whole call and why it is asked.
/// `summary` and `reason` are as the broker holds them: the summary already made
/// visible by `describe_call` (kept as it is, so it reads as on every other surface;
/// only a control character a client was sent raw is still escaped), the reason made
/// visible here. `grant` is the request's grant label (`GetTask`'s `grant`);
/// `None` offers no grant.
pub fn menu(summary: &str, reason: &str, grant: Option<&str>) -> Vec<String> {
    // A call shown cut cannot be approved from here: what is approved must be read.
    let mut lines = match super::is_cut(summary) {
        false => [DENY, APPROVE]
            .into_iter()
            .chain(grant)
            .map(super::terminal_safe)
            .collect(),
        true => vec![
            DENY.to_owned(),
            "│ longer than familiar shows: it can only be denied here".to_owned(),
        ],
    };
    // Every character of the call, on lines a launcher shows whole.
    for line in summary.lines() {
        let line = super::terminal_safe(line);
        let chars: Vec<char> = line.chars().collect();
        for chunk in chars.chunks(MENU_LINE_CHARS) {
            lines.push(format!("│ {}", chunk.iter().collect::<String>()));
        }
    }
    lines.push(format!("│ why asking: {}", super::visible(reason)));
    lines
}

/// The choice a picked line stands for; `None` for a line of the call or anything
/// else typed (no answer: the request still waits). `grant` as for [`menu`].
pub fn parse(line: &str, summary: &str, grant: Option<&str>) -> Option<Choice> {
    let line = line.trim();
    let cut = super::is_cut(summary);
    if line == DENY {
        Some(Choice::Deny)
    } else if cut {
        // Typed into the launcher, not offered: a cut call is never approved unread.
        None
    } else if line == APPROVE {
        Some(Choice::Approve)
    } else if grant.is_some_and(|g| line == super::terminal_safe(g).trim()) {
        Some(Choice::GrantTask)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_menu_offers_deny_first_then_the_whole_call() {
        let menu = menu(
            "shell: du -sh ~\n  cwd: /tmp",
            "execute tier is `ask`",
            Some(GRANT),
        );
        assert_eq!(
            menu,
            [
                "Deny",
                "Approve",
                GRANT,
                "│ shell: du -sh ~",
                "│   cwd: /tmp",
                "│ why asking: execute tier is `ask`",
            ]
        );
    }

    const GRANT: &str = "Allow shell `du -sh ~` (this exact command) for this task (10 min)";

    #[test]
    fn only_a_choice_line_answers() {
        let grant = Some(GRANT);
        assert_eq!(parse("Approve", "shell: x", grant), Some(Choice::Approve));
        assert_eq!(parse("Deny\n", "shell: x", grant), Some(Choice::Deny));
        assert_eq!(parse(GRANT, "shell: x", grant), Some(Choice::GrantTask));
        assert_eq!(parse("│ shell: du -sh ~", "shell: x", grant), None);
        assert_eq!(parse("approve please", "shell: x", grant), None);
    }

    // Regression (issue 39): every request offered "Allow … for this task", even one
    // that runs outside the sandbox; without a scope none is offered, and the old
    // label typed in answers nothing.
    #[test]
    fn a_request_always_asked_offers_no_grant() {
        assert_eq!(menu("open: https://x", "r", None)[..2], ["Deny", "Approve"]);
        assert!(menu("open: https://x", "r", None)[2].starts_with("│ "));
        assert_eq!(parse(GRANT, "open: https://x", None), None);
        assert_eq!(
            parse("Allow open for this task, 10 min", "open: x", None),
            None
        );
    }

    #[test]
    fn an_argument_cannot_pass_for_a_choice() {
        let menu = menu("shell: x\nApprove", "r", Some(GRANT));
        assert_eq!(menu.iter().filter(|l| *l == "Approve").count(), 1);
    }
}
