//! The decision for one tool call, and the audit trail of how it was reached.
//!
//! Invariant: the steps run in one fixed order (see [`decide`]) and the first deny
//! wins; an ask can only be raised, never lowered, by later steps. Every step taken is
//! recorded in [`Verdict::steps`], so the audit log and `familiar policy check` show
//! why, not just what.
//!
//! Here the order and what the steps share; the steps that can deny are in `deny.rs`,
//! those that can only ask in `ask.rs`.

mod ask;
mod deny;

use familiar_protocol::ids::SoulId;
use familiar_protocol::tier::{Mode, Tier};

use super::paths::PathContext;
use super::shell::{Analysis, analyze};
use super::subjects::{Call, argument_strings, command_of, subjects};
use super::verdict::{Decision, DenyRule, Outcome, Step, StepName, Verdict};
use super::{Grant, Policy};

/// Decides one call. Pure apart from resolving symlinks in the paths it names.
///
/// Order: soul allowlist → blocked patterns → protected paths (blocked
/// first: its reason says more) → tier mode
/// deny → (rate limits: applied afterwards by the agent loop, which records its own
/// [`StepName::RateLimit`] step with [`Verdict::record`]) → ask (tier mode, `[[ask]]`
/// patterns, opaque or unparseable shell) → allow.
///
/// `soul` names the grant's holder in the reasons.
pub fn decide(
    soul: &SoulId,
    grant: &Grant,
    policy: &Policy,
    call: &Call,
    ctx: &PathContext,
) -> Verdict {
    let command = command_of(call);
    let analysis = command
        .as_ref()
        .map(|(cmd, cwd)| analyze(cmd, ctx.home, cwd.as_deref()));
    // An MCP tool's arguments are the server's business: every string in them is
    // matched as a command line would be (its canonical forms, then as written).
    let arguments: Vec<(String, Vec<String>)> = match crate::catalog::mcp_parts(call.tool) {
        Some(_) => argument_strings(call.args)
            .into_iter()
            .map(|raw| {
                let forms = subjects(&raw, &analyze(&raw, ctx.home, None));
                (raw, forms)
            })
            .collect(),
        None => Vec::new(),
    };
    let subjects = match (&command, &analysis) {
        (Some((raw, _)), Some(a)) => subjects(raw, a),
        _ => arguments
            .iter()
            .flat_map(|(_, f)| f.iter().cloned())
            .collect(),
    };
    let mut judge = Judge {
        soul,
        grant,
        policy,
        call,
        ctx,
        shown: command.as_ref().map_or("", |(raw, _)| raw.as_str()),
        arguments: &arguments,
        analysis: analysis.as_ref(),
        subjects: &subjects,
        steps: Vec::new(),
    };
    let decision = match judge.deny_steps() {
        Err((rule, reason)) => Decision::Deny { rule, reason },
        Ok(mode) => match judge.ask_steps(mode) {
            Some(reason) => Decision::Ask { reason },
            None => Decision::Allow,
        },
    };
    Verdict {
        decision,
        steps: judge.steps,
    }
}

/// A deny: the rule and the reason.
type Denied = (DenyRule, String);

/// One call being judged: what it is, what it runs, and the steps taken so far. One
/// method per step of the contract.
struct Judge<'a> {
    soul: &'a SoulId,
    grant: &'a Grant,
    policy: &'a Policy,
    call: &'a Call<'a>,
    ctx: &'a PathContext<'a>,
    /// The command as the model wrote it (empty when the call runs none).
    shown: &'a str,
    /// An MCP call's string arguments, each with the forms it is matched as.
    arguments: &'a [(String, Vec<String>)],
    analysis: Option<&'a Analysis>,
    subjects: &'a [String],
    steps: Vec<Step>,
}

impl Judge<'_> {
    fn step(&mut self, name: StepName, outcome: Outcome, detail: String) {
        self.steps.push(Step {
            name,
            outcome,
            detail,
        });
    }

    /// The command as shown in a reason; for a call that runs none (an MCP tool), the
    /// argument whose form `subject` is.
    fn shown_or(&self, subject: &str) -> String {
        if !self.shown.is_empty() {
            return self.shown.to_owned();
        }
        self.arguments
            .iter()
            .find(|(_, forms)| forms.iter().any(|f| f == subject))
            .map_or_else(|| subject.to_owned(), |(raw, _)| raw.clone())
    }

    fn deny(&mut self, name: StepName, rule: DenyRule, reason: String) -> Denied {
        self.step(name, Outcome::Deny, reason.clone());
        (rule, reason)
    }

    /// The steps that can deny, in order; the tier's mode when none does.
    fn deny_steps(&mut self) -> Result<Mode, Denied> {
        self.soul_tools()?;
        self.blocked_patterns()?;
        self.protected_paths()?;
        self.tier_mode()
    }

    /// The steps that can only ask: the reason to ask, or `None` to allow.
    fn ask_steps(&mut self, mode: Mode) -> Option<String> {
        let mut ask = self.startup_file();
        if let Some(reason) = self.shell_analysis() {
            ask.get_or_insert(reason);
        }
        if let Some(reason) = self.ask_patterns() {
            ask.get_or_insert(reason);
        }
        if mode == Mode::Ask {
            let call = self.call;
            ask.get_or_insert(format!(
                "`{}` is {} {} tool: {} asks before {} tools run",
                call.tool,
                article(call.tier),
                call.tier,
                self.who(),
                call.tier
            ));
        }
        ask
    }

    /// Who sets the tier's mode: the soul where it is stricter than the policy.
    fn who(&self) -> String {
        let tier = self.call.tier;
        if self.grant.permissions.get(tier) > self.policy.tiers.get(tier) {
            format!("soul `{}`", self.soul)
        } else {
            format!("policy `{}`", self.policy.name)
        }
    }
}

fn article(tier: Tier) -> &'static str {
    match tier {
        Tier::Execute => "an",
        Tier::Read | Tier::Write | Tier::SystemCritical => "a",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::policy::tests::*;
    use crate::policy::*;

    #[test]
    fn benign_commands_stay_allowed_when_the_tier_allows_them() {
        #[rustfmt::skip]
        let cases: &[(&str, (&str, Value), Want)] = &[
            // Benign commands stay allowed when the tier allows them.
            ("open", sh("ls -la"), Allow),
            ("open", sh("df -h"), Allow),
            ("open", sh("git status"), Allow),
            ("open", sh("rm ./build/tmp.txt"), Allow),
            ("open", sh("cargo build 2>&1 | tail -n 20"), Allow),
            ("open", sh("find . -name '*.rs' -exec wc -l {} +"), Allow),
            // `echo "rm -rf /"` only prints text: its canonical form is `echo rm -rf /`
            // and every shipped pattern is anchored at the program, so quoted text is never
            // taken for a command. (A user pattern without `^` could still match the raw
            // line: that false positive is accepted, a deny is the safe side.)
            ("open", sh("echo \"rm -rf /\""), Allow),
            ("open", ("open", json!({"target": "https://example.com"})), Allow),
            ("open", sh("echo hi > out.txt && cat out.txt"), Allow),
            // `/*` could only reach a protected entry directly under `/`; the shipped
            // policies have none (`/root` is not listed: only root can read it, and sudo
            // is asked).
            ("open", sh("du -sh /* 2>/dev/null | sort -h"), Allow),
            ("open", sh("cat <<EOF | sh\nls\nEOF"), Ask),
            ("open", sh("ls /etc/*"), Deny(ProtectedPath)),
        ];
        check_table(cases);
    }

    #[test]
    fn soul_allowlist_and_soul_modes_tighten_only() {
        let w = world();
        let readonly = grant(&["read_file", "list_dir"], ALLOW_ALL);
        let v = w.decide_with(&readonly, &w.open, "shell", &json!({"command": "ls"}));
        assert_eq!(kind(&v.decision), Deny(NotInSoul));
        assert_eq!(
            v.decision.to_string(),
            "deny (not_in_soul): `shell` is not one of soul `tester`'s tools (it may use: read_file, list_dir)"
        );

        // A soul asks for less than the policy gives: the soul wins.
        let cautious = grant(
            ALL_TOOLS,
            TierModes {
                read: Mode::Ask,
                write: Mode::Deny,
                execute: Mode::Allow,
                system_critical: Mode::Allow,
            },
        );
        let read = w.decide_with(&cautious, &w.open, "read_file", &json!({"path": "a"}));
        assert_eq!(kind(&read.decision), Ask);
        let write = w.decide_with(&cautious, &w.open, "write_file", &json!({"path": "a"}));
        assert_eq!(
            write.decision.to_string(),
            "deny (tier_denied): `write_file` is a write tool and soul `tester` denies write tools"
        );
        // A soul asks for more than the policy gives: the policy wins.
        let shell = w.decide_with(&cautious, &w.default, "shell", &json!({"command": "ls"}));
        assert_eq!(
            shell.decision.to_string(),
            "ask: `shell` is an execute tool: policy `default` asks before execute tools run"
        );
        let power = w.decide_with(&cautious, &w.strict, "power", &json!({"action": "reboot"}));
        assert_eq!(kind(&power.decision), Deny(TierDenied));
    }

    #[test]
    fn a_deny_beats_an_ask_and_protected_beats_tier() {
        let w = world();
        let full = grant(ALL_TOOLS, ALLOW_ALL);
        // Opaque and blocked at once: blocked wins.
        let v = w.decide_with(
            &full,
            &w.open,
            "shell",
            &json!({"command": "echo $(rm -rf ~)"}),
        );
        assert_eq!(kind(&v.decision), Deny(BlockedPattern));
        // Protected under strict, where the tier alone would also deny: the path is named.
        let v = w.decide_with(
            &full,
            &w.strict,
            "shell",
            &json!({"command": "cat ~/.ssh/id_rsa"}),
        );
        assert_eq!(kind(&v.decision), Deny(ProtectedPath));
    }
}
