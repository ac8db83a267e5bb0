//! The audit trail of one tool call: how its decision was reached, as a [`Trail`] that
//! travels with the call and is rendered once, into the `reason` of its audit line
//! (`… [soul_tools=pass, tier_mode=ask, sandbox=full (landlock abi 6), approval=approved]`).
//!
//! The call gate makes it (the policy's verdict and the sandbox's enforcement, or the
//! reason a call never reached the policy), the dispatcher adds the person's answer to an
//! ask, and the audit hook renders it with [`Trail::reason`]. Nothing else spells it.

use std::fmt;

use familiar_sandbox::status::{Enforcement, EnforcementStatus};

use crate::policy::{Outcome, StepName, Verdict};

/// How one call was decided, for its audit line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trail {
    pub judgement: Judgement,
    /// The person's answer, for a call that was asked.
    pub approval: Option<Approval>,
    /// For a tool audited in full (`Tool::audited_in_full`: `type_text`), the call as
    /// its approval showed it (every character visible), and what came of it once run.
    pub call: Option<String>,
    pub result: Option<String>,
}

/// Who judged the call, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// The policy, step by step, for a call that runs in `sandbox` (the Landlock `abi`
    /// in use, when there is one).
    Policy {
        steps: Vec<(StepName, Outcome)>,
        sandbox: EnforcementStatus,
        abi: Option<u8>,
    },
    /// Nobody: no tool of the task has the call's name (`tool=unknown`).
    UnknownTool,
    /// Nobody: the call's arguments are not a JSON object (`arguments=deny`).
    InvalidArguments,
    /// Lost with the call's task, which crashed before it reported (rendered empty).
    Lost,
}

/// A person's answer to an asked call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approval {
    Approved,
    Refused,
}

impl Approval {
    pub fn as_str(self) -> &'static str {
        match self {
            Approval::Approved => "approved",
            Approval::Refused => "refused",
        }
    }
}

impl Trail {
    /// The trail of a call the policy judged `verdict` (its steps, in order) and that
    /// runs under `enforcement`.
    pub fn judged(verdict: &Verdict, enforcement: &Enforcement) -> Trail {
        Trail::from(Judgement::Policy {
            steps: verdict.steps.iter().map(|s| (s.name, s.outcome)).collect(),
            sandbox: enforcement.status,
            abi: enforcement.abi,
        })
    }

    /// The `reason` of the call's audit line: `why` (a refusal's reason) when there is
    /// one, then the trail in brackets.
    pub fn reason(&self, why: Option<&str>) -> String {
        let mut out = match why {
            Some(why) => format!("{why} [{self}]"),
            None => format!("[{self}]"),
        };
        if let Some(call) = &self.call {
            out.push_str(&format!(" call: {call}"));
        }
        if let Some(result) = &self.result {
            out.push_str(&format!(
                " => {}",
                familiar_protocol::display::visible(result)
            ));
        }
        out
    }
}

impl From<Judgement> for Trail {
    fn from(judgement: Judgement) -> Trail {
        Trail {
            judgement,
            approval: None,
            call: None,
            result: None,
        }
    }
}

impl fmt::Display for Trail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.judgement {
            Judgement::Policy {
                steps,
                sandbox,
                abi,
            } => {
                for (name, outcome) in steps {
                    write!(f, "{}={}, ", name.as_str(), outcome.as_str())?;
                }
                write!(f, "sandbox={}", sandbox.as_str())?;
                if let Some(abi) = abi {
                    write!(f, " (landlock abi {abi})")?;
                }
            }
            Judgement::UnknownTool => f.write_str("tool=unknown")?,
            Judgement::InvalidArguments => f.write_str("arguments=deny")?,
            Judgement::Lost => {}
        }
        match self.approval {
            Some(a) => write!(f, ", approval={}", a.as_str()),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Decision, Step};

    fn verdict(steps: &[(StepName, Outcome)]) -> Verdict {
        Verdict {
            decision: Decision::Allow,
            steps: steps
                .iter()
                .map(|&(name, outcome)| Step {
                    name,
                    outcome,
                    detail: "not in the trail".into(),
                })
                .collect(),
        }
    }

    /// The steps of a shell call the default policy asks about.
    const ASKED: &[(StepName, Outcome)] = &[
        (StepName::SoulTools, Outcome::Pass),
        (StepName::BlockedPatterns, Outcome::Pass),
        (StepName::ProtectedPaths, Outcome::Pass),
        (StepName::TierMode, Outcome::Ask),
        (StepName::ShellAnalysis, Outcome::Pass),
        (StepName::AskPatterns, Outcome::Pass),
    ];

    fn enforcement(status: EnforcementStatus, abi: Option<u8>) -> Enforcement {
        Enforcement {
            abi,
            status,
            ..familiar_sandbox::status::probe()
        }
    }

    #[test]
    fn a_judged_call_shows_each_step_then_the_sandbox_and_its_abi() {
        let full = enforcement(EnforcementStatus::Full, Some(6));
        assert_eq!(
            Trail::judged(&verdict(ASKED), &full).to_string(),
            "soul_tools=pass, blocked_patterns=pass, protected_paths=pass, tier_mode=ask, \
             shell_analysis=pass, ask_patterns=pass, sandbox=full (landlock abi 6)"
        );
        let partial = enforcement(EnforcementStatus::Partial, Some(3));
        assert_eq!(
            Trail::judged(&verdict(&ASKED[..1]), &partial).to_string(),
            "soul_tools=pass, sandbox=partial (landlock abi 3)"
        );
    }

    #[test]
    fn without_landlock_the_sandbox_has_no_abi() {
        let none = enforcement(EnforcementStatus::None, None);
        assert_eq!(
            Trail::judged(&verdict(&ASKED[..1]), &none).to_string(),
            "soul_tools=pass, sandbox=none"
        );
    }

    #[test]
    fn the_answer_to_an_ask_comes_last() {
        let full = enforcement(EnforcementStatus::Full, Some(6));
        let mut trail = Trail::judged(&verdict(&ASKED[..4]), &full);
        trail.approval = Some(Approval::Approved);
        assert_eq!(
            trail.to_string(),
            "soul_tools=pass, blocked_patterns=pass, protected_paths=pass, tier_mode=ask, \
             sandbox=full (landlock abi 6), approval=approved"
        );
        trail.approval = Some(Approval::Refused);
        assert!(
            trail
                .to_string()
                .ends_with(" (landlock abi 6), approval=refused")
        );
    }

    #[test]
    fn a_call_audited_in_full_ends_with_what_was_shown_and_what_came_of_it() {
        let full = enforcement(EnforcementStatus::Full, Some(6));
        let mut trail = Trail::judged(&verdict(&ASKED[..1]), &full);
        trail.approval = Some(Approval::Approved);
        trail.call = Some("type_text into foot \"~\"\n  text (2 characters): \"a\\n\"".into());
        trail.result = Some("typed 2 characters\u{1b}[2K".into());
        assert_eq!(
            trail.reason(None),
            "[soul_tools=pass, sandbox=full (landlock abi 6), approval=approved] \
             call: type_text into foot \"~\"\n  text (2 characters): \"a\\n\" \
             => typed 2 characters\\x1b[2K"
        );
    }

    #[test]
    fn a_call_refused_before_the_policy_names_why_alone() {
        assert_eq!(
            Trail::from(Judgement::UnknownTool).to_string(),
            "tool=unknown"
        );
        assert_eq!(
            Trail::from(Judgement::InvalidArguments).to_string(),
            "arguments=deny"
        );
        assert_eq!(Trail::from(Judgement::Lost).to_string(), "");
    }

    #[test]
    fn the_audit_reason_is_why_then_the_trail_in_brackets() {
        let unknown = Trail::from(Judgement::UnknownTool);
        assert_eq!(
            unknown.reason(Some("unknown tool `nope`")),
            "unknown tool `nope` [tool=unknown]"
        );
        assert_eq!(unknown.reason(None), "[tool=unknown]");
        assert_eq!(Trail::from(Judgement::Lost).reason(None), "[]");
    }
}
