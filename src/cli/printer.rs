//! A task's events as `familiar run` and `familiar ask` show them, and the exit code
//! its finish maps to: 0 completed or skipped, 4 a limit reached, 1 anything else.
//!
//! Human output: the model's text on stdout (so `… > answer.md` keeps only the
//! answer), tool lines and the status line on stderr. Events of delegated sub-tasks
//! (another task id than the first event's) go to stderr, indented under the parent.
//! `--json`: every event as one JSON object per line on stdout.

use std::io::{IsTerminal as _, Write};
use std::sync::Arc;

use familiar_protocol::display::{terminal_safe, visible};
use familiar_protocol::events::{CallDecision, Event, EventPayload};
use familiar_protocol::ids::TaskId;
use familiar_protocol::task::{Outcome, TaskStatus};

use super::waiting::{Waiting, thousands};
use super::{Exit, Out};

/// The prefix of a delegated sub-task's lines.
const CHILD_BAR: &str = "  │ ";

/// The exit code for a finish status: a limit (iterations, tokens, wall clock) is 4,
/// a failed, denied or cancelled task 1.
pub fn exit_for(status: TaskStatus) -> Exit {
    match status.outcome() {
        // A skipped task did what was asked: nothing, because its conditions did not hold.
        Outcome::Completed | Outcome::Skipped => Exit::Completed,
        Outcome::Limit => Exit::Limit,
        Outcome::Cancelled | Outcome::Failed | Outcome::Unfinished => Exit::Failed,
    }
}

/// Prints the events from `rx` until it closes. `ephemeral`: the session is removed
/// once the task ends (`run --ephemeral`), so its finish does not name it.
pub async fn print_events(
    mut rx: tokio::sync::mpsc::Receiver<Arc<Event>>,
    out: Out,
    json: bool,
    ephemeral: bool,
) -> anyhow::Result<()> {
    let mut printer = Printer {
        out,
        at_line_start: true,
        top: None,
        answered: false,
        waiting: None,
        terminal: std::io::stderr().is_terminal(),
        live: false,
    };
    loop {
        let due = if json { None } else { printer.due() };
        let mut event = tokio::select! {
            event = rx.recv() => match event {
                Some(event) => event,
                None => break,
            },
            () = until(due) => {
                printer.tick()?;
                continue;
            }
        };
        if ephemeral
            && let EventPayload::TaskFinished { session_kept, .. } =
                &mut Arc::make_mut(&mut event).payload
        {
            *session_kept = false;
        }
        if json {
            printer.out.json_line(&*event)?;
            printer.out.flush()?;
        } else {
            printer.print(&event)?;
        }
    }
    printer.erase_live()?;
    printer.out.flush()?;
    Ok(())
}

/// Sleeps until `due`, or forever.
async fn until(due: Option<tokio::time::Instant>) {
    match due {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

struct Printer {
    out: Out,
    /// Whether stdout's last text ended a line (tool lines on stderr start after it).
    at_line_start: bool,
    /// The followed task: the first event's.
    top: Option<TaskId>,
    /// Whether any of the followed task's text was printed.
    answered: bool,
    /// The followed task's model call that has not answered yet.
    waiting: Option<Waiting>,
    /// Whether stderr is a terminal: the waiting line is then redrawn in place.
    terminal: bool,
    /// Whether the waiting line is drawn on the terminal (no newline after it).
    live: bool,
}

impl Printer {
    fn print(&mut self, event: &Event) -> anyhow::Result<()> {
        // Whatever is printed next goes where the live line was.
        self.erase_live()?;
        self.print_event(event)?;
        if self.terminal && self.waiting.as_ref().is_some_and(Waiting::shown) {
            self.draw_live()?;
        }
        Ok(())
    }

    fn print_event(&mut self, event: &Event) -> anyhow::Result<()> {
        let top = self.top.get_or_insert_with(|| event.task_id.clone());
        if event.task_id != *top {
            self.end_text_line()?;
            print_child_event(event, &mut std::io::stderr().lock())?;
            return Ok(());
        }
        self.follow_wait(&event.payload);
        let mut err = std::io::stderr().lock();
        match &event.payload {
            EventPayload::TextDelta { text } => {
                // The model's text may not drive the terminal (colours that hide the
                // approval prompt that follows, a cleared line): escapes made visible.
                write!(self.out, "{}", terminal_safe(text))?;
                self.out.flush()?;
                self.at_line_start = text.ends_with('\n');
                self.answered |= !text.trim().is_empty();
            }
            EventPayload::ToolCallStarted { .. } => {
                self.end_text_line()?;
                write_tool_line(&event.payload, "", &mut err)?;
            }
            EventPayload::TaskFinished {
                status,
                result,
                usage,
                iterations,
                pending_steering,
                session_kept,
            } => {
                self.end_text_line()?;
                if *pending_steering > 0 {
                    writeln!(
                        err,
                        "  {pending_steering} message(s) arrived after the last step: they open the session's next task"
                    )?;
                }
                if *status != TaskStatus::Completed {
                    writeln!(err, "{}", terminal_safe(result))?;
                } else if !self.answered {
                    // Else the status line alone: a person cannot tell "nothing to
                    // say" from output gone missing.
                    writeln!(err, "(no answer: the model ended without any text)")?;
                }
                // A session that is not kept is not named: no later command finds it.
                let session = if *session_kept {
                    format!("session {}", event.session_id)
                } else {
                    "no session kept".to_owned()
                };
                writeln!(
                    err,
                    "— {status} after {}, {} tokens ({session})",
                    steps(*iterations),
                    usage.total(),
                )?;
            }
            // On a terminal the live line shows it, with the time.
            EventPayload::ModelProgress { .. } if self.terminal => {}
            payload => {
                if !write_tool_line(payload, "", &mut err)?
                    && let Some(line) = status_line(payload)
                {
                    // A prefill report comes between two requests' answers: start it
                    // on a line of its own.
                    self.end_text_line()?;
                    writeln!(err, "  {line}")?;
                }
            }
        }
        Ok(())
    }

    /// Starts, updates or ends the wait for the model's answer.
    fn follow_wait(&mut self, payload: &EventPayload) {
        let now = tokio::time::Instant::now();
        match payload {
            EventPayload::IterationStarted { .. } => self.waiting = Some(Waiting::new(now)),
            EventPayload::ModelProgress {
                processed, total, ..
            } => self
                .waiting
                .get_or_insert_with(|| Waiting::new(now))
                .report(*processed, *total, now),
            // The model answers, or the call failed, or something else is under way.
            EventPayload::TextDelta { .. }
            | EventPayload::ToolCallStarted { .. }
            | EventPayload::ApprovalRequested { .. }
            | EventPayload::Retry { .. }
            | EventPayload::ModelFallback { .. }
            | EventPayload::DegenerateOutput { .. }
            | EventPayload::SubagentStarted { .. }
            | EventPayload::TaskFinished { .. } => self.waiting = None,
            EventPayload::TaskStarted { .. }
            | EventPayload::ToolCallFinished { .. }
            | EventPayload::ApprovalResolved { .. }
            | EventPayload::PlanUpdated { .. }
            | EventPayload::RateLimited { .. }
            | EventPayload::LoopWarning { .. }
            | EventPayload::Compaction { .. }
            | EventPayload::SteeringReceived { .. }
            | EventPayload::SubagentFinished { .. } => {}
        }
    }

    /// When the waiting line is next due, if a call waits.
    fn due(&self) -> Option<tokio::time::Instant> {
        let w = self.waiting.as_ref()?;
        // On a pipe only a wait the server reports on is repeated.
        (self.terminal || w.reported()).then(|| w.next_tick(self.terminal))
    }

    /// The waiting line, again, with the time: in place on a terminal, else a line.
    fn tick(&mut self) -> anyhow::Result<()> {
        if self.terminal {
            self.erase_live()?;
            return self.draw_live();
        }
        let Some(w) = self.waiting.as_mut() else {
            return Ok(());
        };
        let line = w.line(tokio::time::Instant::now());
        w.ticked();
        self.end_text_line()?;
        writeln!(std::io::stderr().lock(), "  {line}")?;
        Ok(())
    }

    fn draw_live(&mut self) -> anyhow::Result<()> {
        let Some(w) = &self.waiting else {
            return Ok(());
        };
        let line = w.line(tokio::time::Instant::now());
        self.end_text_line()?;
        let mut err = std::io::stderr().lock();
        write!(err, "  {line}")?;
        err.flush()?;
        self.live = true;
        Ok(())
    }

    /// Clears the live line, leaving the cursor at the start of its line.
    fn erase_live(&mut self) -> std::io::Result<()> {
        if self.live {
            let mut err = std::io::stderr().lock();
            write!(err, "\r\x1b[K")?;
            err.flush()?;
            self.live = false;
        }
        Ok(())
    }

    /// Ends the model's unfinished line on stdout before a line on stderr.
    fn end_text_line(&mut self) -> std::io::Result<()> {
        if !self.at_line_start {
            writeln!(self.out)?;
            self.out.flush()?;
            self.at_line_start = true;
        }
        Ok(())
    }
}

/// Writes the line of a tool call's start, finish or approval, after `prefix`;
/// false when `payload` is none of these.
fn write_tool_line(
    payload: &EventPayload,
    prefix: &str,
    err: &mut impl Write,
) -> std::io::Result<bool> {
    match payload {
        EventPayload::ToolCallStarted {
            tool,
            args,
            decision,
            reason,
            ..
        } => {
            let what = tool_line(&crate::approval::describe_call(tool, args));
            match reason {
                Some(r) if *decision != CallDecision::Allow => {
                    writeln!(err, "{prefix}→ {what} [{decision}: {r}]")?
                }
                Some(_) | None => writeln!(err, "{prefix}→ {what}")?,
            }
        }
        EventPayload::ToolCallFinished {
            tool,
            ok,
            preview,
            duration_ms,
            approval_wait_ms,
            ..
        } => {
            let (ok, preview) = outcome(tool, *ok, preview);
            let mark = if ok { "✓" } else { "✗" };
            let waited = approval_wait_ms
                .map(|w| format!(", after {:.1}s waiting for approval", w as f64 / 1000.0))
                .unwrap_or_default();
            writeln!(
                err,
                "{prefix}  {mark} {} ({duration_ms} ms{waited}) {}",
                visible(tool),
                visible(&preview)
            )?;
        }
        EventPayload::ApprovalResolved { approved, .. } => {
            let answer = if *approved {
                "approved"
            } else {
                "not approved"
            };
            writeln!(err, "{prefix}  {answer}")?;
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// Whether a finished call succeeded, and its preview as shown. The shell tool runs
/// a command whose non-zero exit the model reads as output (so the call itself is
/// `ok`), but a person reads `exit 127` as a failure: it is marked so, and the
/// output's section markers give way to the text.
fn outcome(tool: &str, ok: bool, preview: &str) -> (bool, String) {
    let Some(rest) = preview
        .strip_prefix("exit ")
        .filter(|_| tool == "shell" && ok)
    else {
        return (ok, preview.to_owned());
    };
    let (code, rest) = rest.split_once(' ').unwrap_or((rest, ""));
    let Ok(code) = code.parse::<i32>() else {
        return (ok, preview.to_owned());
    };
    let text = rest
        .replace("--- stdout: empty ---", "")
        .replace("--- stderr: empty ---", "")
        .replace("--- stdout ---", "")
        .replace("--- stderr ---", "stderr:");
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let shown = if text.is_empty() {
        format!("exit {code}")
    } else {
        format!("exit {code}: {text}")
    };
    (code == 0, shown)
}

/// The one status line (without indent) an event of the followed task shows, if any.
fn status_line(payload: &EventPayload) -> Option<String> {
    let line = match payload {
        EventPayload::Retry {
            attempt,
            delay_ms,
            reason,
        } => format!(
            "model call failed ({reason}); retry {attempt} in {:.1}s",
            *delay_ms as f64 / 1000.0
        ),
        EventPayload::ModelFallback { from, to, .. } => format!("switching model: {from} → {to}"),
        EventPayload::DegenerateOutput { repeats, .. } => {
            format!("the model repeated itself {repeats} times; its answer was cut")
        }
        EventPayload::ModelProgress {
            processed, total, ..
        } => format!(
            "reading the prompt: {} / {} tokens",
            thousands(*processed),
            thousands(*total)
        ),
        EventPayload::RateLimited { scope, limit, .. } => format!("rate limited: {limit} {scope}"),
        EventPayload::LoopWarning { .. } => "the model is repeating itself; steering it".to_owned(),
        EventPayload::Compaction { mode, .. } => format!("context compacted ({mode})"),
        EventPayload::SteeringReceived { message } => {
            format!("↳ your message joined the task: {}", one_line(message))
        }
        EventPayload::SubagentStarted {
            child_task_id,
            soul,
            ..
        } => format!("┌ {soul} (task {child_task_id})"),
        EventPayload::SubagentFinished {
            soul,
            status,
            usage,
            iterations,
            ..
        } => format!(
            "└ {soul}: {status} after {}, {} tokens",
            steps(*iterations),
            usage.total()
        ),
        // Limits the soul asked for that do not all hold as asked: said once, up front.
        EventPayload::TaskStarted {
            resources: Some(r), ..
        } if r.get("note").is_some_and(|n| n.is_string()) => {
            format!(
                "resource limits: {}",
                r["note"].as_str().unwrap_or_default()
            )
        }
        EventPayload::TaskStarted { .. }
        | EventPayload::IterationStarted { .. }
        | EventPayload::TextDelta { .. }
        | EventPayload::ToolCallStarted { .. }
        | EventPayload::ToolCallFinished { .. }
        | EventPayload::ApprovalRequested { .. }
        | EventPayload::ApprovalResolved { .. }
        | EventPayload::PlanUpdated { .. }
        | EventPayload::TaskFinished { .. } => return None,
    };
    Some(line)
}

/// One event of a delegated sub-task, indented under its parent's lines: its tool
/// lines, its rate limits, and its error when it did not complete.
fn print_child_event(event: &Event, err: &mut impl Write) -> std::io::Result<()> {
    if write_tool_line(&event.payload, CHILD_BAR, err)? {
        return Ok(());
    }
    match &event.payload {
        EventPayload::RateLimited { scope, limit, .. } => {
            writeln!(err, "{CHILD_BAR}  rate limited: {limit} {scope}")
        }
        EventPayload::TaskFinished { status, result, .. } if *status != TaskStatus::Completed => {
            writeln!(
                err,
                "{CHILD_BAR}{}",
                terminal_safe(result).replace('\n', &format!("\n{CHILD_BAR}"))
            )
        }
        _ => Ok(()),
    }
}

/// Most characters of a tool line.
const TOOL_LINE_CHARS: usize = 160;

/// The first line of a call's description (its main argument, escapes visible),
/// cut to [`TOOL_LINE_CHARS`]; `…` when there was more.
fn tool_line(description: &str) -> String {
    let first = description.lines().next().unwrap_or_default();
    let more = description.contains('\n');
    if first.chars().count() > TOOL_LINE_CHARS {
        let cut: String = first.chars().take(TOOL_LINE_CHARS - 1).collect();
        format!("{cut}…")
    } else if more {
        format!("{first} …")
    } else {
        first.to_owned()
    }
}

/// "1 step", "3 steps".
fn steps(iterations: u32) -> String {
    format!(
        "{iterations} step{}",
        if iterations == 1 { "" } else { "s" }
    )
}

/// The first line of `text`, marked when there was more.
fn one_line(text: &str) -> String {
    match text.split_once('\n') {
        Some((first, _)) => format!("{first} …"),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shell_command_that_exits_non_zero_is_a_failure_with_its_code() {
        assert_eq!(
            outcome(
                "shell",
                true,
                "exit 127 --- stdout: empty --- --- stderr --- sh: 1: nosuch: not found"
            ),
            (
                false,
                "exit 127: stderr: sh: 1: nosuch: not found".to_owned()
            )
        );
        assert_eq!(
            outcome(
                "shell",
                true,
                "exit 0 --- stdout --- hi --- stderr: empty ---"
            ),
            (true, "exit 0: hi".to_owned())
        );
        assert_eq!(
            outcome(
                "shell",
                true,
                "exit 1 --- stdout: empty --- --- stderr: empty ---"
            ),
            (false, "exit 1".to_owned())
        );
        // Other tools, and a refused shell call, are shown as they came.
        assert_eq!(
            outcome("read_file", true, "exit 3 of the story"),
            (true, "exit 3 of the story".to_owned())
        );
        assert_eq!(
            outcome("shell", false, "denied: not in the soul's tools"),
            (false, "denied: not in the soul's tools".to_owned())
        );
    }

    #[test]
    fn a_prefill_shows_as_a_progress_line() {
        let p = EventPayload::ModelProgress {
            processed: 1024,
            total: 2471,
            cached: 0,
        };
        assert_eq!(
            status_line(&p).as_deref(),
            Some("reading the prompt: 1,024 / 2,471 tokens")
        );
    }
}
