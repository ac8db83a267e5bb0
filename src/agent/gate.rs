//! The call gate: what every tool call and every model request passes before it runs.
//!
//! A tool call is decided on the loop the moment its block is complete, in a fixed
//! order ([`dispose`]): the policy's decision; a call the policy allows but that runs
//! outside the sandbox is always asked; only a call that is not refused by then spends
//! the tool quotas (soul and policy, per session and per tool, then the daemon-wide
//! one), and a spent quota refuses it. The outcome is a [`Disposition`] for the
//! dispatcher and a trail of the decision's steps for the audit log.
//!
//! A model request waits (cancellably) for the session's LLM quota instead of failing.

use crate::agent::dispatch::Disposition;
use crate::agent::events::EventPayload;
use crate::agent::task::Task;
use crate::ids::CallId;
use crate::policy::{self, Call, Decision, Outcome, PathContext, StepName, Verdict};
use crate::ratelimit::{RateLimited, Scope};
use crate::sandbox::Enforcement;
use crate::store::{AuditDecision, TaskStatus};

/// The disposition of a call the policy judged `verdict`, in the gate's order. The
/// quota is only spent (`spend_quota` called) for a call that is not refused already.
/// Returns the limit that refused the call, if one did.
pub(super) fn dispose(
    verdict: &mut Verdict,
    outside_sandbox: Option<&str>,
    spend_quota: impl FnOnce() -> Result<(), RateLimited>,
) -> (Disposition, Option<RateLimited>) {
    let disposition = match &verdict.decision {
        Decision::Allow => match outside_sandbox {
            Some(why) => {
                verdict.record(StepName::ShellAnalysis, Outcome::Ask, why);
                Disposition::Ask {
                    reason: format!("{why}: it is always asked"),
                }
            }
            None => Disposition::Run,
        },
        Decision::Ask { reason } => Disposition::Ask {
            reason: reason.clone(),
        },
        Decision::Deny { reason, .. } => Disposition::Refuse {
            decision: AuditDecision::Denied,
            reason: reason.clone(),
        },
    };
    if matches!(disposition, Disposition::Refuse { .. }) {
        return (disposition, None);
    }
    match spend_quota() {
        Ok(()) => (disposition, None),
        Err(limited) => {
            verdict.record(StepName::RateLimit, Outcome::Deny, limited.to_string());
            let refused = Disposition::Refuse {
                decision: AuditDecision::RateLimited,
                reason: limited.to_string(),
            };
            (refused, Some(limited))
        }
    }
}

/// The decision's steps and the sandbox's enforcement, as the audit log records them:
/// `soul_tools=pass, tier_mode=ask, sandbox=full (landlock abi 6)`.
pub(super) fn trail(verdict: &Verdict, enforcement: &Enforcement) -> String {
    let mut trail = verdict
        .steps
        .iter()
        .map(|s| format!("{}={}", s.name.as_str(), s.outcome.as_str()))
        .collect::<Vec<_>>()
        .join(", ");
    trail.push_str(&format!(", sandbox={}", enforcement.status.as_str()));
    if let Some(abi) = enforcement.abi {
        trail.push_str(&format!(" (landlock abi {abi})"));
    }
    trail
}

/// The `rate_limited` event for a spent quota; `tool` is `None` for the LLM quota.
fn rate_limited_event(limited: &RateLimited, tool: Option<&str>) -> EventPayload {
    EventPayload::RateLimited {
        scope: limited.scope.as_str().to_owned(),
        limit: limited.spec.to_string(),
        retry_after_ms: limited.retry_after.as_millis() as u64,
        tool: tool.map(str::to_owned),
    }
}

impl Task {
    /// Decides one call: policy, then rate limits. Emits `rate_limited` when a quota
    /// refused it, then `tool_call_started`. Returns the disposition and the trail.
    pub(super) async fn decide_call(
        &mut self,
        id: &CallId,
        name: &str,
        args: &serde_json::Value,
    ) -> (Disposition, String) {
        let tier = self.tier_of(name, args);
        let ctx = PathContext {
            home: &self.rt.config.paths.home,
            cwd: &self.place.workspace,
        };
        let call = Call {
            tool: name,
            tier,
            args,
        };
        let mut verdict = policy::decide(
            &self.spec.soul.id,
            &self.spec.soul.grant,
            &self.rt.policy,
            &call,
            &ctx,
        );
        let outside = crate::catalog::runs_outside_sandbox(name, args)
            .or_else(|| self.mcp.outside_sandbox(name));
        let (disposition, limited) = dispose(&mut verdict, outside, || self.check_tool_quota(name));
        if let Some(limited) = limited {
            self.emit(rate_limited_event(&limited, Some(name))).await;
        }
        let (decision, reason) = match &disposition {
            Disposition::Run => ("allow", None),
            Disposition::Ask { reason } => ("ask", Some(reason.clone())),
            Disposition::Refuse { reason, .. } => ("deny", Some(reason.clone())),
        };
        self.emit(EventPayload::ToolCallStarted {
            call_id: id.to_string(),
            tool: name.to_owned(),
            args: args.clone(),
            tier: tier.to_string(),
            decision: decision.to_owned(),
            reason,
        })
        .await;
        (disposition, trail(&verdict, &self.rt.enforcement))
    }

    /// The sessions whose quotas a call of this task spends, with their souls' limits:
    /// its own, then (for a delegated sub-task) each ancestor's, so a parent's limits
    /// count its sub-tasks' calls as its own.
    fn quota_sessions(&self) -> Vec<(String, &crate::policy::RateLimits)> {
        let mut sessions = vec![(
            self.session.ctx.session_id.to_string(),
            &self.spec.soul.rate_limits,
        )];
        if let Some(p) = &self.spec.parent {
            for (session, soul) in &p.quota {
                sessions.push((session.to_string(), &soul.rate_limits));
            }
        }
        sessions
    }

    fn check_tool_quota(&self, tool: &str) -> Result<(), RateLimited> {
        let sessions = self.quota_sessions();
        let keys: Vec<(String, String)> = sessions
            .iter()
            .map(|(s, _)| (s.clone(), format!("{s}/{tool}")))
            .collect();
        let pol = &self.rt.policy.rate_limits;
        let mut checks = Vec::new();
        for ((_, soul), (session, per_tool_key)) in sessions.iter().zip(&keys) {
            for limits in [*soul, pol] {
                if let Some(spec) = limits.tool_calls {
                    checks.push((Scope::SessionTools, session.as_str(), spec));
                }
                if let Some(spec) = limits.tools.get(tool) {
                    checks.push((Scope::SessionTool, per_tool_key.as_str(), *spec));
                }
            }
        }
        if let Some(spec) = self.rt.policy.global_tool_calls {
            checks.push((Scope::GlobalTools, "global", spec));
        }
        self.rt.limiters.check_all(checks)
    }

    /// Waits (cancellably) until the session may make another model request; the
    /// finish status when the task was stopped while it waited.
    pub(super) async fn wait_for_llm_quota(&mut self) -> Result<(), (TaskStatus, String)> {
        let policy_llm = self.rt.policy.rate_limits.llm_calls;
        let specs: Vec<(String, crate::policy::RateSpec)> = self
            .quota_sessions()
            .into_iter()
            .flat_map(|(session, soul)| {
                [soul.llm_calls, policy_llm]
                    .into_iter()
                    .flatten()
                    .map(move |spec| (session.clone(), spec))
            })
            .collect();
        loop {
            let checks = specs
                .iter()
                .map(|(session, s)| (Scope::SessionLlm, session.as_str(), *s));
            let Err(limited) = self.rt.limiters.check_all(checks) else {
                return Ok(());
            };
            self.emit(rate_limited_event(&limited, None)).await;
            tokio::select! {
                () = tokio::time::sleep(limited.retry_after) => {}
                () = self.clock.cancel.cancelled() => return Err(self.cancelled_status()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;
    use std::time::Duration;

    use super::*;
    use crate::policy::{DenyRule, RateSpec};

    fn verdict(decision: Decision) -> Verdict {
        Verdict {
            decision,
            steps: Vec::new(),
        }
    }

    fn spent() -> Result<(), RateLimited> {
        Err(RateLimited {
            scope: Scope::SessionTools,
            key: "s".into(),
            spec: RateSpec {
                count: NonZeroU32::MIN,
                per: Duration::from_secs(60),
            },
            retry_after: Duration::from_secs(30),
        })
    }

    fn untouched() -> Result<(), RateLimited> {
        panic!("the quota must not be spent")
    }

    #[test]
    fn an_allowed_call_inside_the_sandbox_runs() {
        let mut v = verdict(Decision::Allow);
        let (d, limited) = dispose(&mut v, None, || Ok(()));
        assert!(matches!(d, Disposition::Run));
        assert!(limited.is_none());
        assert!(v.steps.is_empty());
    }

    #[test]
    fn an_allowed_call_outside_the_sandbox_is_always_asked() {
        let mut v = verdict(Decision::Allow);
        let (d, _) = dispose(&mut v, Some("it runs in the compositor"), || Ok(()));
        let Disposition::Ask { reason } = d else {
            panic!("expected Ask, got {d:?}");
        };
        assert_eq!(reason, "it runs in the compositor: it is always asked");
        assert_eq!(v.steps.len(), 1);
        assert_eq!(v.steps[0].name, StepName::ShellAnalysis);
        assert_eq!(v.steps[0].outcome, Outcome::Ask);
    }

    #[test]
    fn a_denied_call_is_refused_without_spending_quota() {
        let mut v = verdict(Decision::Deny {
            rule: DenyRule::ProtectedPath,
            reason: "~/.ssh is protected".into(),
        });
        // Even outside the sandbox: a deny is never turned into an ask.
        let (d, limited) = dispose(&mut v, Some("outside"), untouched);
        let Disposition::Refuse { decision, reason } = d else {
            panic!("expected Refuse, got {d:?}");
        };
        assert_eq!(decision, AuditDecision::Denied);
        assert_eq!(reason, "~/.ssh is protected");
        assert!(limited.is_none());
        assert!(v.steps.is_empty());
    }

    #[test]
    fn a_spent_quota_refuses_a_call_that_would_run_or_be_asked() {
        for decision in [
            Decision::Allow,
            Decision::Ask {
                reason: "write tier".into(),
            },
        ] {
            let mut v = verdict(decision);
            let (d, limited) = dispose(&mut v, None, spent);
            let Disposition::Refuse { decision, reason } = d else {
                panic!("expected Refuse, got {d:?}");
            };
            assert_eq!(decision, AuditDecision::RateLimited);
            let limited = limited.expect("the limit that refused the call");
            assert_eq!(reason, limited.to_string());
            let last = v.steps.last().expect("a rate limit step");
            assert_eq!(
                (last.name, last.outcome),
                (StepName::RateLimit, Outcome::Deny)
            );
        }
    }

    #[test]
    fn an_asked_call_spends_quota_before_anyone_is_asked() {
        let mut spent_once = false;
        let mut v = verdict(Decision::Ask {
            reason: "write tier".into(),
        });
        let (d, _) = dispose(&mut v, None, || {
            spent_once = true;
            Ok(())
        });
        assert!(spent_once);
        assert!(matches!(d, Disposition::Ask { .. }));
    }

    #[test]
    fn the_trail_names_every_step_and_the_sandbox() {
        let mut v = verdict(Decision::Allow);
        v.record(StepName::ShellAnalysis, Outcome::Ask, "x");
        let enforcement = Enforcement {
            abi: Some(6),
            ..crate::sandbox::probe()
        };
        let t = trail(&v, &enforcement);
        assert!(t.starts_with("shell_analysis=ask, sandbox="), "{t}");
        assert!(t.ends_with(" (landlock abi 6)"), "{t}");
    }
}
