//! What a task does, said in a few words for a person: the title of a request
//! (its first words) and what its latest event shows it doing. The same words in the
//! bar, the progress notification and any other client ([`crate::board`]).
//!
//! Invariant: every piece of untrusted text in them is made [`super::visible`].

use crate::events::{EventPayload, Resolution};

/// Words of the request in a title.
const SUMMARY_WORDS: usize = 6;
/// Characters of the request in a title.
const SUMMARY_CHARS: usize = 48;

/// The request's first words, for a summary: `familiar: "how full is my disk?"`.
pub fn title(prompt: &str) -> String {
    let words: Vec<&str> = prompt.split_whitespace().collect();
    let mut head = words
        .iter()
        .take(SUMMARY_WORDS)
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    let mut cut = words.len() > SUMMARY_WORDS;
    if head.chars().count() > SUMMARY_CHARS {
        head = head.chars().take(SUMMARY_CHARS).collect();
        cut = true;
    }
    let head = super::visible(&head);
    if cut {
        format!("familiar: “{head}…”")
    } else {
        format!("familiar: “{head}”")
    }
}

/// What a task is doing, said in a few words, after `payload`; `None` when the event
/// changes nothing a person needs to see.
pub fn doing(payload: &EventPayload) -> Option<String> {
    match payload {
        EventPayload::TaskStarted { .. }
        | EventPayload::IterationStarted { .. }
        | EventPayload::ToolCallFinished { .. }
        | EventPayload::SteeringReceived { .. }
        | EventPayload::Compaction { .. } => Some("thinking".to_owned()),
        EventPayload::TextDelta { .. } => Some("writing the answer".to_owned()),
        EventPayload::ModelProgress {
            processed, total, ..
        } if *total > 0 => Some(format!(
            "reading the prompt {} %",
            processed.saturating_mul(100) / total
        )),
        EventPayload::ToolCallStarted { tool, args, .. } => {
            let call = super::describe_call(tool, args);
            let first = call.lines().next().unwrap_or_default();
            Some(format!("running {}", shorten(first, 120)))
        }
        EventPayload::ApprovalRequested { summary, .. } => {
            let first = summary.lines().next().unwrap_or_default();
            Some(format!("waiting for your answer: {}", shorten(first, 120)))
        }
        EventPayload::ApprovalResolved { outcome, .. } => Some(match outcome {
            Resolution::Approved { .. } | Resolution::Granted => "approved; running it".to_owned(),
            Resolution::Denied { by } if by.contains("dismissed") => {
                "you dismissed the question: the call was denied".to_owned()
            }
            _ => "denied; thinking again".to_owned(),
        }),
        EventPayload::Retry { .. } | EventPayload::RateLimited { .. } => {
            Some("the model is busy; trying again".to_owned())
        }
        EventPayload::SubagentStarted { soul, .. } => Some(format!(
            "handing a part to {}",
            super::visible(soul.as_str())
        )),
        EventPayload::ModelProgress { .. }
        | EventPayload::PlanUpdated { .. }
        | EventPayload::DegenerateOutput { .. }
        | EventPayload::ModelFallback { .. }
        | EventPayload::LoopWarning { .. }
        | EventPayload::SubagentFinished { .. }
        | EventPayload::TaskFinished { .. } => None,
    }
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let head: String = s.chars().take(max).collect();
        format!("{head}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_title_names_the_requests_first_words() {
        assert_eq!(
            title("how full is my disk?"),
            "familiar: “how full is my disk?”"
        );
        assert_eq!(
            title("please tell me why the fan   spins so loudly today"),
            "familiar: “please tell me why the fan…”"
        );
        assert_eq!(title("a\u{1b}[2Kb"), "familiar: “a\\x1b[2Kb”");
    }

    #[test]
    fn what_the_task_does_is_said_in_a_few_words() {
        let progress = EventPayload::ModelProgress {
            processed: 400,
            total: 1000,
            cached: 0,
        };
        assert_eq!(doing(&progress).as_deref(), Some("reading the prompt 40 %"));
        let call = EventPayload::ToolCallStarted {
            call_id: crate::ids::CallId::new("c1").unwrap(),
            tool: "shell".into(),
            args: serde_json::json!({"command": "du -sh ~"}),
            tier: crate::tier::Tier::Execute,
            decision: crate::events::CallDecision::Ask,
            reason: None,
        };
        assert_eq!(doing(&call).as_deref(), Some("running shell: du -sh ~"));
    }
}
