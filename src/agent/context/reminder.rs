//! System reminders: everything that changes from one iteration to the next (the
//! machine, the task's progress and budget), as a short `<system-reminder>` block the
//! loop appends to the newest message of the request.
//!
//! The system prompt stays byte-identical for the whole task, and a reminder, once sent,
//! stays in the history exactly as it was sent, so every request repeats the previous
//! one up to its new tail and the server's prompt cache holds (llama.cpp, Ollama, vLLM,
//! Anthropic). [`build`] is pure: the loop gathers its inputs under a deadline (a slow
//! snapshot is skipped, not waited for) and passes what it got.
//!
//! The first reminder of a task carries what is the task's own, which the system
//! prompt leaves out so it stays the same for every task of a soul ([`Place`]: the
//! session and its workspace), and a glance at the machine
//! ([`Snapshot::to_brief_text`]: every new task re-reads this reminder, so it is a few
//! lines; the tools have the whole picture); later ones only what moved
//! ([`crate::snapshot::changes`]), the plan's progress and the budget left. The text is
//! capped at [`MAX_CHARS`] (first) and [`MAX_CHANGE_CHARS`] (later) characters.

use std::path::Path;
use std::time::Duration;

use familiar_protocol::task::{Plan, StepStatus};

use crate::snapshot::{self, Snapshot};

/// Opens every reminder; the loop, the store and `sessions show` recognise reminders by
/// it.
pub const OPEN: &str = "<system-reminder>";
pub const CLOSE: &str = "</system-reminder>";
/// Longest first reminder: the glance at the machine ([`snapshot::BRIEF_TEXT_MAX_CHARS`])
/// plus the task lines.
pub const MAX_CHARS: usize = snapshot::BRIEF_TEXT_MAX_CHARS + 1_000;
/// Longest later reminder.
pub const MAX_CHANGE_CHARS: usize = 1_500;

/// What the task has used of its limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// The model call this reminder goes with (1-based).
    pub iteration: u32,
    pub max_iterations: u32,
    pub tokens_used: u64,
    pub max_tokens: u64,
    pub elapsed: Duration,
    pub max_wall_clock: Duration,
    /// The limits are the soul's, which the system prompt states: a first reminder
    /// leaves them out (a sub-task's smaller share is said there).
    pub stated: bool,
}

/// The machine as far as the loop could see it this iteration.
#[derive(Debug, Clone, Copy)]
pub enum Environment<'a> {
    /// The snapshot taken now; `previous` is the one the last reminder was built from
    /// (`None` on a task's first reminder: the environment goes in whole).
    Fresh {
        previous: Option<&'a Snapshot>,
        current: &'a Snapshot,
    },
    /// The snapshot did not come in time and was skipped.
    Skipped,
}

/// Where the task runs: its session's workspace (named after the session). It stays out
/// of the system prompt (whose bytes every task of a soul shares) and goes in the task's
/// first reminder, which the history keeps as sent.
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    pub workspace: &'a Path,
}

/// Everything one reminder is built from.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// The task's place, on its first reminder only.
    pub place: Option<Place<'a>>,
    pub environment: Environment<'a>,
    pub plan: &'a Plan,
    pub budget: Budget,
    /// Loop notes for the model (a loop warning, "your answer was cut off"): they go
    /// in the same block, first.
    pub notes: &'a [String],
}

/// The reminder text, `<system-reminder>` … `</system-reminder>`, within the cap.
pub fn build(inputs: &Inputs<'_>) -> String {
    let first = matches!(
        inputs.environment,
        Environment::Fresh { previous: None, .. }
    );
    let cap = if first { MAX_CHARS } else { MAX_CHANGE_CHARS };
    let mut body = String::with_capacity(1024);
    if let Some(place) = inputs.place {
        body.push_str(&place_lines(&place));
    }
    for note in inputs.notes {
        body.push_str(note.trim_end());
        body.push('\n');
    }
    match inputs.environment {
        Environment::Fresh {
            previous: None,
            current,
        } => {
            body.push_str("Environment now:\n");
            body.push_str(current.to_brief_text().trim_end());
            body.push('\n');
        }
        Environment::Fresh {
            previous: Some(prev),
            current,
        } => {
            let changes = snapshot::changes(prev, current);
            if !changes.is_empty() {
                body.push_str("Changed since the last step:\n");
                for c in changes {
                    body.push_str("- ");
                    body.push_str(&c);
                    body.push('\n');
                }
            }
        }
        Environment::Skipped => {
            body.push_str("Environment: not refreshed this step (the snapshot was slow).\n");
        }
    }
    let mut tail = budget_line(&inputs.budget);
    if let Some(p) = progress_line(inputs.plan) {
        tail.push_str(&p);
    }
    wrap(&body, &tail, cap)
}

fn place_lines(p: &Place<'_>) -> String {
    // The workspace's name is the session's id: one line says both.
    format!("Workspace: {}\n", p.workspace.display())
}

fn budget_line(b: &Budget) -> String {
    // Whole seconds: the model needs the order of magnitude, not the milliseconds.
    let secs = |d: Duration| humantime::format_duration(Duration::from_secs(d.as_secs()));
    if b.iteration <= 1 {
        // Nothing used yet: the limits alone, and only when the system prompt's are not
        // the task's (every new task re-reads this reminder).
        if b.stated {
            return String::new();
        }
        return format!(
            "Budget: {} steps, {} tokens, {}.\n",
            b.max_iterations,
            b.max_tokens,
            secs(b.max_wall_clock)
        );
    }
    format!(
        "Budget: step {} of {}; tokens {} of {}; time {} of {}.\n",
        b.iteration,
        b.max_iterations,
        b.tokens_used,
        b.max_tokens,
        secs(b.elapsed),
        secs(b.max_wall_clock)
    )
}

fn progress_line(plan: &Plan) -> Option<String> {
    if plan.steps.is_empty() {
        return None;
    }
    let count = |want: StepStatus| plan.steps.iter().filter(|s| s.status == want).count();
    Some(format!(
        "Progress: {} tool calls so far, {} succeeded, {} failed.\n",
        plan.steps.len(),
        count(StepStatus::Completed),
        count(StepStatus::Failed)
    ))
}

/// `head` and `tail` in the reminder block, `head` cut (at a line when possible) so the
/// whole block has at most `cap` characters: the budget in `tail` always gets through.
fn wrap(head: &str, tail: &str, cap: usize) -> String {
    const CUT: &str = "[…]\n";
    let frame = OPEN.len() + CLOSE.len() + 2 + tail.chars().count();
    let room = cap.saturating_sub(frame);
    let head = if head.chars().count() <= room {
        head.to_owned()
    } else {
        let keep = room.saturating_sub(CUT.chars().count());
        let mut cut: String = head.chars().take(keep).collect();
        if let Some(nl) = cut.rfind('\n') {
            cut.truncate(nl + 1);
        }
        cut.push_str(CUT);
        cut
    };
    format!("{OPEN}\n{head}{tail}{CLOSE}")
}

/// Whether a text block is a reminder (for `sessions show`, compaction and the store).
pub fn is_reminder(text: &str) -> bool {
    text.starts_with(OPEN) && text.trim_end().ends_with(CLOSE)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use familiar_protocol::task::PlanStep;

    use super::*;
    use crate::snapshot::{DiskInfo, Memory, ProcessInfo, Processes};

    const GIB: u64 = 1024 * 1024 * 1024;

    fn snap() -> Snapshot {
        Snapshot {
            taken_at: "2026-11-02T10:15:00Z".into(),
            hostname: Some("box".into()),
            kernel: Some("6.12".into()),
            uptime_secs: Some(3600),
            load_average: None,
            memory: Memory {
                total: 16 * GIB,
                used: 4 * GIB,
                available: 12 * GIB,
                swap_total: 0,
                swap_used: 0,
            },
            processes: Processes {
                count: 3,
                cpu_measured: true,
                top_cpu: vec![ProcessInfo {
                    pid: 1,
                    name: "init".into(),
                    user: None,
                    cpu_percent: 0.0,
                    rss_bytes: 0,
                }],
                top_memory: vec![],
            },
            disks: vec![DiskInfo {
                mount_point: PathBuf::from("/"),
                fs: "ext4".into(),
                total: 100 * GIB,
                available: 50 * GIB,
            }],
            battery: None,
            workspace: None,
            desktop: None,
            hyprland: None,
        }
    }

    fn budget(iteration: u32) -> Budget {
        Budget {
            iteration,
            max_iterations: 20,
            tokens_used: 1234,
            max_tokens: 200_000,
            elapsed: Duration::from_millis(65_400),
            max_wall_clock: Duration::from_secs(600),
            stated: false,
        }
    }

    fn plan(steps: &[StepStatus]) -> Plan {
        Plan {
            goal: "g".into(),
            steps: steps
                .iter()
                .map(|s| PlanStep {
                    description: "d".into(),
                    status: *s,
                    output: None,
                })
                .collect(),
        }
    }

    #[test]
    fn first_reminder_carries_the_whole_environment() {
        let s = snap();
        let workspace = PathBuf::from("/home/u/.local/share/familiar/workspaces/s-20261102-abcd");
        let text = build(&Inputs {
            place: Some(Place {
                workspace: &workspace,
            }),
            environment: Environment::Fresh {
                previous: None,
                current: &s,
            },
            plan: &plan(&[]),
            budget: budget(1),
            notes: &[],
        });
        assert!(is_reminder(&text), "{text}");
        assert!(
            text.starts_with(
                "<system-reminder>\nWorkspace: \
                 /home/u/.local/share/familiar/workspaces/s-20261102-abcd\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "Environment now:\ntime: 2026-11-02T10:15Z\nmemory: 4.0G used of 16.0G\n"
            ),
            "{text}"
        );
        assert!(text.contains("Budget: 20 steps, 200000 tokens, 10m.\n"));
        assert!(!text.contains("Progress"));
        // The soul's own limits are in the system prompt: the first reminder leaves them out.
        let stated = build(&Inputs {
            place: None,
            environment: Environment::Skipped,
            plan: &plan(&[]),
            budget: Budget {
                stated: true,
                ..budget(1)
            },
            notes: &[],
        });
        assert!(!stated.contains("Budget"), "{stated}");
    }

    #[test]
    fn later_reminders_carry_only_what_changed() {
        let a = snap();
        let quiet = build(&Inputs {
            place: None,
            environment: Environment::Fresh {
                previous: Some(&a),
                current: &a,
            },
            plan: &plan(&[StepStatus::Completed, StepStatus::Failed]),
            budget: budget(2),
            notes: &[],
        });
        assert_eq!(
            quiet,
            "<system-reminder>\nBudget: step 2 of 20; tokens 1234 of 200000; time 1m 5s of \
             10m.\nProgress: 2 tool calls so far, 1 succeeded, 1 failed.\n</system-reminder>"
        );
        let mut b = snap();
        b.memory.used = 15 * GIB;
        let moved = build(&Inputs {
            place: None,
            environment: Environment::Fresh {
                previous: Some(&a),
                current: &b,
            },
            plan: &plan(&[]),
            budget: budget(3),
            notes: &["You seem to repeat the same call.".to_owned()],
        });
        assert!(
            moved.starts_with(
                "<system-reminder>\nYou seem to repeat the same call.\nChanged since the last step:\n- memory: 94% used (was 25%)"
            ),
            "{moved}"
        );
        let skipped = build(&Inputs {
            place: None,
            environment: Environment::Skipped,
            plan: &plan(&[]),
            budget: budget(4),
            notes: &[],
        });
        assert!(skipped.contains("not refreshed"), "{skipped}");
    }

    #[test]
    fn reminders_are_capped() {
        let a = snap();
        let notes = vec!["x".repeat(10_000)];
        let text = build(&Inputs {
            place: None,
            environment: Environment::Fresh {
                previous: Some(&a),
                current: &a,
            },
            plan: &plan(&[]),
            budget: budget(2),
            notes: &notes,
        });
        assert!(text.chars().count() <= MAX_CHANGE_CHARS, "{}", text.len());
        assert!(text.contains("[…]\nBudget: step 2"), "{text}");
        assert!(is_reminder(&text));
    }
}
