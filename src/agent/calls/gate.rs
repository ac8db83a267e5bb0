//! The call gate: what every tool call and every model request passes before it runs.
//!
//! A tool call is decided on the loop the moment its block is complete, in a fixed
//! order ([`dispose`]): the policy's decision; a call the policy allows but that runs
//! outside the sandbox is always asked; an asked call carries what a timed grant of
//! it would cover, or that it takes none (`policy::grantable`); only a call that is not refused by then spends
//! the tool quotas (soul and policy, per session and per tool, then the daemon-wide
//! one), and a spent quota refuses it. The outcome is a [`Disposition`] for the
//! dispatcher and a [`Trail`] of the decision's steps for the audit log.
//!
//! A model request waits (cancellably) for the session's LLM quota instead of failing.
//!
//! A task's [`CallGate`] is made when it starts, with everything a decision reads: the
//! soul's grant, the policy, the limiters and the sessions whose quotas a call spends,
//! the sandbox's enforcement, and the tools it offers (built-ins and, once found, its
//! MCP tools with the ones that run outside the sandbox). It reports nothing itself
//! but the LLM quota's waits: the collector reports each call's decision.

use std::path::PathBuf;
use std::sync::Arc;

use familiar_protocol::events::{EventPayload, RateScope};
use familiar_protocol::ids::SessionId;
use familiar_protocol::tier::Tier;
use familiar_sandbox::status::Enforcement;
use tokio_util::sync::CancellationToken;

use crate::agent::calls::dispatch::Disposition;
use crate::agent::calls::mcp::McpTools;
use crate::agent::calls::screen::ScreenRoute;
use crate::agent::emitter::Emitter;
use crate::agent::runtime::Runtime;
use crate::agent::trail::Trail;
use crate::approval::Grantable;
use crate::llm::ToolDef;
use crate::mcp::McpHub;
use crate::policy::{self, Call, Decision, Outcome, PathContext, Policy, StepName, Verdict};
use crate::ratelimit::{RateLimited, RateLimiters};
use crate::soul::Soul;
use crate::store::AuditDecision;
use crate::tools::{Registry, Tool};

/// The disposition of a call the policy judged `verdict`, in the gate's order. What a
/// grant of it covers (`grant`) is only worked out for a call that is asked; the quota
/// is only spent (`spend_quota` called) for a call that is not refused already.
/// Returns the limit that refused the call, if one did.
pub(super) fn dispose(
    verdict: &mut Verdict,
    outside_sandbox: Option<&str>,
    grant: impl FnOnce() -> Grantable,
    screen: impl FnOnce(&mut Verdict, Disposition) -> Disposition,
    spend_quota: impl FnOnce() -> Result<(), RateLimited>,
) -> (Disposition, Option<RateLimited>) {
    let disposition = match &verdict.decision {
        Decision::Allow => match outside_sandbox {
            Some(why) => {
                verdict.record(StepName::ShellAnalysis, Outcome::Ask, why);
                Disposition::Ask {
                    reason: format!("{why}: it is always asked"),
                    grant: grant(),
                    sends_to: None,
                }
            }
            None => Disposition::Run,
        },
        Decision::Ask { reason } => Disposition::Ask {
            reason: reason.clone(),
            grant: grant(),
            sends_to: None,
        },
        Decision::Deny { reason, .. } => Disposition::Refuse {
            decision: AuditDecision::Denied,
            reason: reason.clone(),
        },
    };
    let disposition = screen(verdict, disposition);
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

/// The `rate_limited` event for a spent quota; `tool` is `None` for the LLM quota.
pub(super) fn rate_limited_event(limited: &RateLimited, tool: Option<&str>) -> EventPayload {
    EventPayload::RateLimited {
        scope: limited.scope,
        limit: limited.spec.to_string(),
        retry_after_ms: limited.retry_after.as_millis() as u64,
        tool: tool.map(str::to_owned),
    }
}

/// What one task's calls pass: the decision's inputs, made once when the task starts.
pub(in crate::agent) struct CallGate {
    /// Its id and grant are what the policy decides over.
    soul: Arc<Soul>,
    policy: Arc<Policy>,
    limiters: Arc<RateLimiters>,
    /// The sessions whose quotas a call spends, with their souls' limits: the task's
    /// own, then (for a delegated sub-task) each ancestor's, so a parent's limits count
    /// its sub-tasks' calls as its own.
    quota: Vec<(String, Arc<Soul>)>,
    enforcement: Enforcement,
    home: PathBuf,
    workspace: PathBuf,
    tools: Arc<Registry>,
    hub: Arc<McpHub>,
    /// The MCP tools its soul names, found before the first model call.
    mcp: McpTools,
    /// Where what its tools see of the screen may go.
    screen: ScreenRoute,
}

/// A call, decided.
pub(in crate::agent) struct Decided {
    pub(in crate::agent) tier: Tier,
    pub(in crate::agent) disposition: Disposition,
    /// The decision's steps and the sandbox, for the audit log.
    pub(in crate::agent) trail: Trail,
    /// The quota that refused it, if one did.
    pub(in crate::agent) limited: Option<RateLimited>,
}

impl CallGate {
    /// The gate of a task of `soul` in `session`; `ancestors` are a sub-task's parents'
    /// sessions and souls (empty for a task somebody submitted).
    pub(in crate::agent) fn new(
        rt: &Runtime,
        soul: Arc<Soul>,
        session: &SessionId,
        ancestors: &[(SessionId, Arc<Soul>)],
        workspace: PathBuf,
    ) -> CallGate {
        let mut quota = vec![(session.to_string(), Arc::clone(&soul))];
        quota.extend(
            ancestors
                .iter()
                .map(|(session, soul)| (session.to_string(), Arc::clone(soul))),
        );
        CallGate {
            screen: ScreenRoute::new(&soul, &rt.settings.config),
            soul,
            policy: Arc::clone(&rt.settings.policy),
            limiters: Arc::clone(&rt.services.limiters),
            quota,
            enforcement: rt.services.enforcement.clone(),
            home: rt.settings.config.paths.home.clone(),
            workspace,
            tools: Arc::clone(&rt.services.tools),
            hub: Arc::clone(&rt.settings.mcp),
            mcp: McpTools::default(),
        }
    }

    /// Adds the task's MCP tools (found once, before the first model call).
    pub(in crate::agent) fn offer_mcp(&mut self, mcp: McpTools) {
        self.mcp = mcp;
    }

    /// The tools this task offers: its soul's built-ins in the allowlist's order, then
    /// its MCP tools sorted by name.
    pub(in crate::agent) fn definitions(&self) -> Vec<ToolDef> {
        let mut defs = self.tools.definitions(&self.soul.grant.tools);
        defs.retain(|d| self.screen.offers(&d.name));
        defs.extend_from_slice(self.mcp.definitions());
        defs
    }

    /// The names of [`CallGate::definitions`], in the same order.
    pub(in crate::agent) fn tool_names(&self) -> Vec<String> {
        self.tools
            .offered(&self.soul.grant.tools)
            .iter()
            .map(|t| t.info().name)
            .filter(|name| self.screen.offers(name))
            .chain(self.mcp.names())
            .map(str::to_owned)
            .collect()
    }

    /// The implementation of a tool by name: a built-in, or one of the task's MCP tools.
    pub(in crate::agent) fn tool(&self, name: &str) -> Option<Arc<dyn Tool>> {
        match self.tools.get(name) {
            Some(t) => Some(Arc::clone(t)),
            None => self.mcp.tool(&self.hub, name),
        }
    }

    /// Why a call names no tool at all (a made-up name, a server config.toml lacks):
    /// `None` for a tool this task has, and for `SERVER__TOOL` of a configured server,
    /// whose refusal the policy explains (`not_in_soul`).
    pub(in crate::agent) fn unknown(&self, name: &str) -> Option<String> {
        let known_server = crate::catalog::mcp_parts(name)
            .is_some_and(|(server, _)| self.hub.config(server).is_some());
        if known_server || self.tool(name).is_some() {
            return None;
        }
        let offered = self.tool_names().join(", ");
        Some(format!(
            "unknown tool `{name}`: this task has no such tool (its tools: {offered})"
        ))
    }

    /// The tier of a call: the catalog's for a built-in (by its arguments), the
    /// server's for an MCP tool, `system_critical` for a name nobody offers.
    pub(in crate::agent) fn tier(&self, name: &str, args: &serde_json::Value) -> Tier {
        match crate::catalog::info(name) {
            Some(i) => crate::catalog::tier_for_call(i, args),
            None => self.mcp.tier(name).unwrap_or(Tier::SystemCritical),
        }
    }

    /// Decides one call: policy, then rate limits.
    pub(in crate::agent) fn decide(&self, name: &str, args: &serde_json::Value) -> Decided {
        let tier = self.tier(name, args);
        let ctx = PathContext {
            home: &self.home,
            cwd: &self.workspace,
        };
        let call = Call {
            tool: name,
            tier,
            args,
        };
        let mut verdict =
            policy::decide(&self.soul.id, &self.soul.grant, &self.policy, &call, &ctx);
        let outside = crate::catalog::runs_outside_sandbox(name, args)
            .or_else(|| self.mcp.outside_sandbox(name));
        let screen = &self.screen;
        let (disposition, limited) = dispose(
            &mut verdict,
            outside,
            || policy::grantable(&call, &ctx, outside),
            |v, d| screen.dispose(name, v, d),
            || self.check_tool_quota(name),
        );
        Decided {
            tier,
            disposition,
            trail: Trail::judged(&verdict, &self.enforcement),
            limited,
        }
    }

    fn check_tool_quota(&self, tool: &str) -> Result<(), RateLimited> {
        let keys: Vec<(String, String)> = self
            .quota
            .iter()
            .map(|(s, _)| (s.clone(), format!("{s}/{tool}")))
            .collect();
        let pol = &self.policy.rate_limits;
        let mut checks = Vec::new();
        for ((_, soul), (session, per_tool_key)) in self.quota.iter().zip(&keys) {
            for limits in [&soul.rate_limits, pol] {
                if let Some(spec) = limits.tool_calls {
                    checks.push((RateScope::SessionTools, session.as_str(), spec));
                }
                if let Some(spec) = limits.tools.get(tool) {
                    checks.push((RateScope::SessionTool, per_tool_key.as_str(), *spec));
                }
            }
        }
        if let Some(spec) = self.policy.global_tool_calls {
            checks.push((RateScope::GlobalTools, "global", spec));
        }
        self.limiters.check_all(checks)
    }

    /// Waits (cancellably) until the session may make another model request, reporting
    /// each wait; `false` when `cancel` stopped it first.
    pub(in crate::agent) async fn wait_for_llm_quota(
        &self,
        emitter: &mut Emitter,
        cancel: &CancellationToken,
    ) -> bool {
        let policy_llm = self.policy.rate_limits.llm_calls;
        let specs: Vec<(&str, crate::policy::RateSpec)> = self
            .quota
            .iter()
            .flat_map(|(session, soul)| {
                [soul.rate_limits.llm_calls, policy_llm]
                    .into_iter()
                    .flatten()
                    .map(move |spec| (session.as_str(), spec))
            })
            .collect();
        loop {
            let checks = specs
                .iter()
                .map(|(session, s)| (RateScope::SessionLlm, *session, *s));
            let Err(limited) = self.limiters.check_all(checks) else {
                return true;
            };
            emitter.emit(rate_limited_event(&limited, None)).await;
            tokio::select! {
                () = tokio::time::sleep(limited.retry_after) => {}
                () = cancel.cancelled() => return false,
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
            scope: RateScope::SessionTools,
            key: "s".into(),
            spec: RateSpec {
                count: NonZeroU32::MIN,
                per: Duration::from_secs(60),
            },
            retry_after: Duration::from_secs(30),
        })
    }

    fn no_grant() -> Grantable {
        Grantable::Never("a test".into())
    }

    fn same(_: &mut Verdict, d: Disposition) -> Disposition {
        d
    }

    fn untouched() -> Result<(), RateLimited> {
        panic!("the quota must not be spent")
    }

    #[test]
    fn an_allowed_call_inside_the_sandbox_runs() {
        let mut v = verdict(Decision::Allow);
        let (d, limited) = dispose(&mut v, None, no_grant, same, || Ok(()));
        assert!(matches!(d, Disposition::Run));
        assert!(limited.is_none());
        assert!(v.steps.is_empty());
    }

    #[test]
    fn an_allowed_call_outside_the_sandbox_is_always_asked() {
        let mut v = verdict(Decision::Allow);
        let (d, _) = dispose(
            &mut v,
            Some("it runs in the compositor"),
            no_grant,
            same,
            || Ok(()),
        );
        let Disposition::Ask { reason, .. } = d else {
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
        let (d, limited) = dispose(&mut v, Some("outside"), no_grant, same, untouched);
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
            let (d, limited) = dispose(&mut v, None, no_grant, same, spent);
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
        let (d, _) = dispose(&mut v, None, no_grant, same, || {
            spent_once = true;
            Ok(())
        });
        assert!(spent_once);
        assert!(matches!(d, Disposition::Ask { .. }));
    }
}
