//! The terminal's approval question (`familiar run`, an interactive `familiar ask`):
//! the call under a bar, so an argument's own text can never look like the end of the
//! question, and the answer read from the next line typed.
//!
//! Invariant: only `y` approves and only `a` grants, and `a` only where the request
//! offers a grant ([`super::Grantable`]); every other line, and no terminal, denies.

use std::io::{BufRead, Write};
use std::sync::Arc;

use familiar_protocol::display::chooser::GRANT_FOR;
use familiar_protocol::display::{REVIEW_MAX_BYTES, is_cut, terminal_safe, visible};
use familiar_protocol::ids::RequestId;

use super::{Answer, ApprovalBroker, ApprovalRequest, Frontend};

/// Asks on the controlling terminal (`familiar run`). When there is none, it declines
/// to present, so the broker denies.
pub struct TtyFrontend {
    interactive: bool,
    /// Where the answer is read from when not straight from the terminal.
    lines: Option<LineSource>,
}

/// The next line typed on the terminal, from a reader the caller shares with other
/// uses of the terminal (`familiar run` steers with the lines no question takes):
/// called before the prompt is printed, it claims the next line; the function it
/// returns waits for that line.
pub type LineSource = Arc<dyn Fn() -> Box<dyn FnOnce() -> Option<String> + Send> + Send + Sync>;

impl TtyFrontend {
    /// Interactive only when stdin is a terminal and /dev/tty can be opened.
    pub fn detect() -> Self {
        use std::io::IsTerminal;
        let interactive = std::io::stdin().is_terminal()
            && std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/tty")
                .is_ok();
        TtyFrontend {
            interactive,
            lines: None,
        }
    }

    /// Reads answers from `lines` instead of the terminal directly.
    pub fn with_lines(mut self, lines: LineSource) -> Self {
        self.lines = Some(lines);
        self
    }
}

impl Frontend for TtyFrontend {
    fn present(&self, request: &ApprovalRequest, broker: &ApprovalBroker) -> bool {
        if !self.interactive {
            return false;
        }
        let Ok(tty) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/tty")
        else {
            return false;
        };
        let request = request.clone();
        let broker = broker.clone();
        let lines = self.lines.clone();
        // A blocking read on its own thread: the loop keeps running (and can cancel) while
        // the person thinks. If the request resolves another way the thread's answer is
        // refused by `respond`, which is fine.
        std::thread::spawn(move || {
            let answer = prompt_tty(&tty, &request, lines.as_ref()).unwrap_or(Answer::Deny);
            broker.respond(&request.request_id, answer, "tty").ok();
        });
        true
    }

    fn withdraw(&self, _request_id: &RequestId) {}
}

fn prompt_tty(
    tty: &std::fs::File,
    r: &ApprovalRequest,
    lines: Option<&LineSource>,
) -> std::io::Result<Answer> {
    // Claimed before the prompt shows: an answer typed as soon as it appears is the
    // answer, never a steering message.
    let claimed = lines.map(|open| open());
    let mut w = tty;
    if is_cut(&r.summary) {
        // Past what any surface shows whole: what would be approved is not what is read.
        write!(w, "{}", prompt_text(r).trim_end_matches(|c| c != '\n'))?;
        writeln!(
            w,
            "└ denied: the call is longer than familiar shows ({} KiB), so it cannot be approved unread",
            REVIEW_MAX_BYTES / 1024
        )?;
        return Ok(Answer::Deny);
    }
    write!(w, "{}", prompt_text(r))?;
    w.flush()?;
    let line = match claimed {
        Some(answer) => answer().unwrap_or_default(),
        None => {
            let mut line = String::new();
            std::io::BufReader::new(tty).read_line(&mut line)?;
            line
        }
    };
    Ok(match line.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Answer::Approve,
        // Offered only with a scope; typed at a request without one, it is no answer
        // the prompt gave, so it denies like any other.
        "a" | "always" if r.grant.scope().is_some() => Answer::ApproveFor(GRANT_FOR),
        _ => Answer::Deny,
    })
}

/// The terminal's question: the summary's lines under a bar, so an argument's own
/// (escaped) text can never look like the end of the question.
pub fn prompt_text(r: &ApprovalRequest) -> String {
    let tool = visible(&r.tool);
    let grant = match r.grant.scope() {
        Some(scope) => format!(" / [a] allow {}", scope.covers()),
        None => String::new(),
    };
    format!(
        "\n┌ familiar asks to run {tool} ({} tier)\n│ {}\n│ why asking: {}\n└ allow? [y]es / [N]o{grant}: ",
        r.tier,
        terminal_safe(&r.summary).replace('\n', "\n│ "),
        visible(&r.reason),
    )
}

#[cfg(test)]
mod tests {
    use familiar_protocol::ids::{SessionId, SoulId, TaskId};
    use familiar_protocol::tier::Tier;

    use super::*;
    use crate::approval::{About, Grantable, Scope};

    #[test]
    fn the_terminal_offers_a_grant_only_with_its_scope() {
        let mut r = ApprovalRequest {
            request_id: RequestId::generate(),
            task_id: TaskId::generate(),
            session_id: SessionId::generate(),
            soul: SoulId::new("s").unwrap(),
            tool: "write_file".into(),
            tier: Tier::Write,
            args: serde_json::json!({"path": "~/notes/a"}),
            summary: "write_file: ~/notes/a".into(),
            reason: "write tier is `ask`".into(),
            grant: Grantable::Within(Scope {
                tool: "write_file".into(),
                action: None,
                about: About::Directory("~/notes/".into()),
            }),
        };
        assert!(
            prompt_text(&r).ends_with(
                "allow? [y]es / [N]o / [a] allow write_file in ~/notes/ for this task (10 min): "
            ),
            "{}",
            prompt_text(&r)
        );
        r.grant = Grantable::Never("system_critical".into());
        assert!(prompt_text(&r).ends_with("allow? [y]es / [N]o: "));
    }
}
