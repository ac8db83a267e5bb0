//! Plan tracking: the task's goal and one step per tool call, with status and a short
//! output, and the progress they add up to.
//!
//! The goal is the prompt. A step starts `in_progress` when its call is decided, and
//! ends `completed` or `failed` (denied calls fail with the denial as output). Progress
//! is finished steps over all steps; a finished task is at 1.0 whatever its steps.

use std::collections::HashMap;

use familiar_protocol::ids::CallId;
use familiar_protocol::task::{Plan, PlanStep, StepStatus};

/// Output kept per step; the transcript has the rest.
pub const STEP_OUTPUT_CHARS: usize = 200;

#[derive(Debug, Clone, Default)]
pub struct PlanTracker {
    plan: Plan,
    by_call: HashMap<CallId, usize>,
    finished: bool,
}

impl PlanTracker {
    pub fn new(goal: &str) -> Self {
        PlanTracker {
            plan: Plan {
                goal: goal.to_owned(),
                steps: Vec::new(),
            },
            by_call: HashMap::new(),
            finished: false,
        }
    }

    /// A step for a tool call, described as `tool: key argument`.
    pub fn start(&mut self, call: &CallId, description: String) {
        self.by_call.insert(call.clone(), self.plan.steps.len());
        self.plan.steps.push(PlanStep {
            description,
            status: StepStatus::InProgress,
            output: None,
        });
    }

    pub fn finish(&mut self, call: &CallId, ok: bool, output: &str) {
        let Some(&i) = self.by_call.get(call) else {
            return;
        };
        if let Some(step) = self.plan.steps.get_mut(i) {
            step.status = if ok {
                StepStatus::Completed
            } else {
                StepStatus::Failed
            };
            step.output = Some(shorten(output, STEP_OUTPUT_CHARS));
        }
    }

    /// Steps still running when the task ends are skipped.
    pub fn close(&mut self) {
        for step in &mut self.plan.steps {
            if matches!(step.status, StepStatus::InProgress | StepStatus::Pending) {
                step.status = StepStatus::Skipped;
            }
        }
        self.finished = true;
    }

    pub fn progress(&self) -> f32 {
        if self.finished {
            return 1.0;
        }
        let total = self.plan.steps.len();
        if total == 0 {
            return 0.0;
        }
        let done = self
            .plan
            .steps
            .iter()
            .filter(|s| match s.status {
                StepStatus::Completed | StepStatus::Failed | StepStatus::Skipped => true,
                StepStatus::Pending | StepStatus::InProgress => false,
            })
            .count();
        done as f32 / total as f32
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }
}

/// The first line of `s`, at most `max` characters, with an ellipsis when cut.
pub fn shorten(s: &str, max: usize) -> String {
    let line = s.trim().lines().next().unwrap_or("");
    let more = s.trim().lines().nth(1).is_some();
    if line.chars().count() > max {
        let cut: String = line.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    } else if more {
        format!("{line} …")
    } else {
        line.to_owned()
    }
}

/// `tool: the argument that says what the call is about`.
pub fn describe_call(tool: &str, args: &serde_json::Value) -> String {
    let key = familiar_protocol::display::primary_argument(args).map(|v| match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    });
    match key {
        Some(k) => format!("{tool}: {}", shorten(&k, 120)),
        // An MCP tool's arguments are its own: shown as they are, shortened.
        None if crate::catalog::mcp_parts(tool).is_some() && !is_empty_object(args) => {
            format!("{tool}: {}", shorten(&args.to_string(), 120))
        }
        None => tool.to_owned(),
    }
}

fn is_empty_object(v: &serde_json::Value) -> bool {
    v.as_object().is_none_or(|m| m.is_empty())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn steps_track_calls_and_progress() {
        let mut p = PlanTracker::new("find big files");
        let (a, b) = (CallId::from_provider("a"), CallId::from_provider("b"));
        p.start(&a, describe_call("list_dir", &json!({"path": "~"})));
        p.start(
            &b,
            describe_call("read_file", &json!({"path": "/etc/fstab"})),
        );
        assert_eq!(p.progress(), 0.0);
        p.finish(&a, true, "~: 12 entries\ndir a\n");
        assert_eq!(p.progress(), 0.5);
        p.finish(&b, false, "denied: protected path");
        assert_eq!(p.progress(), 1.0);
        let steps = &p.plan().steps;
        assert_eq!(steps[0].description, "list_dir: ~");
        assert_eq!(steps[0].status, StepStatus::Completed);
        assert_eq!(steps[0].output.as_deref(), Some("~: 12 entries …"));
        assert_eq!(steps[1].status, StepStatus::Failed);
    }

    #[test]
    fn closing_skips_unfinished_steps_and_completes_progress() {
        let mut p = PlanTracker::new("g");
        p.start(&CallId::from_provider("a"), "shell: sleep 9".into());
        p.close();
        assert_eq!(p.plan().steps[0].status, StepStatus::Skipped);
        assert_eq!(p.progress(), 1.0);
    }
}
