//! The decision for one tool call, and the audit trail of how it was reached.
//!
//! Invariant: the steps run in the contract's order (DESIGN §4) and the first deny
//! wins; an ask can only be raised, never lowered, by later steps. Every step taken is
//! recorded in [`Verdict::steps`], so the audit log and `familiar policy check` show
//! why, not just what.

use std::fmt;

use serde::Serialize;

use super::paths::{PathContext, protected_entry};
use super::shell::{Analysis, analyze};
use super::{Grant, Mode, Policy, Tier};
use crate::ids::SoulId;

/// One tool call as the model asked for it.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub tool: &'a str,
    /// From [`crate::catalog::tier_for_call`].
    pub tier: Tier,
    pub args: &'a serde_json::Value,
}

/// What happens to the call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    Allow,
    /// Needs approval; `reason` is shown to the person asked.
    Ask {
        reason: String,
    },
    Deny {
        rule: DenyRule,
        reason: String,
    },
}

/// Which rule denied a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DenyRule {
    NotInSoul,
    ProtectedPath,
    BlockedPattern,
    TierDenied,
}

impl DenyRule {
    pub fn as_str(self) -> &'static str {
        match self {
            DenyRule::NotInSoul => "not_in_soul",
            DenyRule::ProtectedPath => "protected_path",
            DenyRule::BlockedPattern => "blocked_pattern",
            DenyRule::TierDenied => "tier_denied",
        }
    }
}

/// The name of one step of the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepName {
    SoulTools,
    ProtectedPaths,
    BlockedPatterns,
    TierMode,
    /// Recorded by the agent loop, which owns the limiters (not by [`decide`]).
    RateLimit,
    AskPatterns,
    ShellAnalysis,
    /// Recorded by the approval broker when it answers an ask.
    Approval,
}

impl StepName {
    pub fn as_str(self) -> &'static str {
        match self {
            StepName::SoulTools => "soul_tools",
            StepName::ProtectedPaths => "protected_paths",
            StepName::BlockedPatterns => "blocked_patterns",
            StepName::TierMode => "tier_mode",
            StepName::RateLimit => "rate_limit",
            StepName::AskPatterns => "ask_patterns",
            StepName::ShellAnalysis => "shell_analysis",
            StepName::Approval => "approval",
        }
    }
}

/// How one step came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Pass,
    Ask,
    Deny,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Ask => "ask",
            Outcome::Deny => "deny",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    pub name: StepName,
    pub outcome: Outcome,
    pub detail: String,
}

/// The decision and the steps that led to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    #[serde(flatten)]
    pub decision: Decision,
    pub steps: Vec<Step>,
}

impl Verdict {
    /// Appends a step decided elsewhere (rate limit, approval) to the trail.
    pub fn record(&mut self, name: StepName, outcome: Outcome, detail: impl Into<String>) {
        self.steps.push(Step {
            name,
            outcome,
            detail: detail.into(),
        });
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Allow => f.write_str("allow"),
            Decision::Ask { reason } => write!(f, "ask: {reason}"),
            Decision::Deny { rule, reason } => write!(f, "deny ({}): {reason}", rule.as_str()),
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.decision)?;
        for s in &self.steps {
            write!(
                f,
                "\n  {:<16} {:<4} {}",
                s.name.as_str(),
                s.outcome.as_str(),
                s.detail
            )?;
        }
        Ok(())
    }
}

/// Decides one call. Pure apart from resolving symlinks in the paths it names.
///
/// Order (DESIGN §4): soul allowlist → blocked patterns → protected paths (blocked
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
        let mut ask = self.shell_analysis();
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

    fn soul_tools(&mut self) -> Result<(), Denied> {
        let (tool, soul) = (self.call.tool, self.soul);
        if !self.grant.allows_tool(tool) {
            let reason = format!(
                "`{tool}` is not one of soul `{soul}`'s tools (it may use: {})",
                self.grant.tools.join(", ")
            );
            return Err(self.deny(StepName::SoulTools, DenyRule::NotInSoul, reason));
        }
        self.step(
            StepName::SoulTools,
            Outcome::Pass,
            format!("`{tool}` is in soul `{soul}`'s tools"),
        );
        Ok(())
    }

    fn blocked_patterns(&mut self) -> Result<(), Denied> {
        let policy = self.policy;
        if let Some((rule, subject)) = first_match(&policy.blocked, self.subjects) {
            let shown = self.shown_or(&subject);
            let reason = format!(
                "`{}`{} is blocked by policy `{}`: {}",
                abbreviate(&shown),
                seen_as(&shown, subject),
                policy.name,
                rule.reason
            );
            return Err(self.deny(StepName::BlockedPatterns, DenyRule::BlockedPattern, reason));
        }
        let detail = if self.subjects.is_empty() {
            "no command to match".to_owned()
        } else {
            format!("{} blocked pattern(s), none matched", policy.blocked.len())
        };
        self.step(StepName::BlockedPatterns, Outcome::Pass, detail);
        Ok(())
    }

    fn protected_paths(&mut self) -> Result<(), Denied> {
        let mut paths = named_paths(self.call);
        if let Some(a) = self.analysis {
            paths.extend(a.paths.iter().cloned());
        }
        for p in &paths {
            if let Some(entry) = protected_entry(p, self.ctx, &self.policy.protected_paths) {
                let reason = format!(
                    "`{p}` is protected by policy `{}` (under `{}`): no tool may read or write it",
                    self.policy.name,
                    entry.display()
                );
                return Err(self.deny(StepName::ProtectedPaths, DenyRule::ProtectedPath, reason));
            }
        }
        let detail = match paths.len() {
            0 => "no paths named".to_owned(),
            n => format!("{n} path(s) checked"),
        };
        self.step(StepName::ProtectedPaths, Outcome::Pass, detail);
        Ok(())
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

    fn tier_mode(&mut self) -> Result<Mode, Denied> {
        let (tool, tier) = (self.call.tool, self.call.tier);
        let mode = self.grant.effective_modes(self.policy).get(tier);
        let who = self.who();
        match mode {
            Mode::Deny => {
                let reason = format!(
                    "`{tool}` is {} {tier} tool and {who} denies {tier} tools",
                    article(tier)
                );
                return Err(self.deny(StepName::TierMode, DenyRule::TierDenied, reason));
            }
            Mode::Ask => self.step(
                StepName::TierMode,
                Outcome::Ask,
                format!("{who} asks before {tier} tools"),
            ),
            Mode::Allow => self.step(
                StepName::TierMode,
                Outcome::Pass,
                format!("{who} allows {tier} tools"),
            ),
        }
        // Rate limits come next in the contract's order; the agent loop owns the
        // limiters and applies them to a verdict that is not a deny.
        Ok(mode)
    }

    /// A command that cannot be parsed or hides what it runs is asked about.
    fn shell_analysis(&mut self) -> Option<String> {
        let a = self.analysis?;
        let mut ask = None;
        if let Some(e) = &a.error {
            let reason = format!(
                "the command could not be parsed ({e}), so it cannot be checked before it runs"
            );
            self.step(StepName::ShellAnalysis, Outcome::Ask, reason.clone());
            ask = Some(reason);
        }
        for why in &a.opaque {
            self.step(StepName::ShellAnalysis, Outcome::Ask, why.clone());
        }
        if let Some(why) = a.opaque.first() {
            ask.get_or_insert(format!(
                "`{}` cannot be fully checked before it runs: {why}",
                abbreviate(self.shown)
            ));
        }
        if a.error.is_none() && a.opaque.is_empty() {
            let detail = format!("{} simple command(s), nothing opaque", a.subjects.len());
            self.step(StepName::ShellAnalysis, Outcome::Pass, detail);
        }
        ask
    }

    fn ask_patterns(&mut self) -> Option<String> {
        let policy = self.policy;
        match first_match(&policy.ask, self.subjects) {
            Some((rule, subject)) => {
                let shown = self.shown_or(&subject);
                let reason = format!(
                    "`{}`{} needs approval under policy `{}`: {}",
                    abbreviate(&shown),
                    seen_as(&shown, subject),
                    policy.name,
                    rule.reason
                );
                self.step(StepName::AskPatterns, Outcome::Ask, reason.clone());
                Some(reason)
            }
            None if self.subjects.is_empty() => None,
            None => {
                let detail = format!("{} ask pattern(s), none matched", policy.ask.len());
                self.step(StepName::AskPatterns, Outcome::Pass, detail);
                None
            }
        }
    }
}

fn article(tier: Tier) -> &'static str {
    match tier {
        Tier::Execute => "an",
        Tier::Read | Tier::Write | Tier::SystemCritical => "a",
    }
}

/// The command line a call runs, and the `cwd` it starts in, if the tool runs one.
fn command_of(call: &Call) -> Option<(String, Option<String>)> {
    let str_arg = |k: &str| call.args.get(k).and_then(|v| v.as_str());
    match call.tool {
        "shell" => Some((
            str_arg("command").unwrap_or_default().to_owned(),
            str_arg("cwd").map(str::to_owned),
        )),
        "hypr_dispatch" => match str_arg("dispatcher") {
            Some("exec" | "execr" | "exec-once") => {
                let args = str_arg("args").unwrap_or_default().trim_start();
                // `[workspace 2 silent] cmd`: window rules come before the command.
                let cmd = match args.strip_prefix('[').and_then(|r| r.split_once(']')) {
                    Some((_, cmd)) => cmd,
                    None => args,
                };
                Some((cmd.to_owned(), None))
            }
            _ => None,
        },
        "systemd_user" => {
            let action = str_arg("action").unwrap_or_default();
            let unit = str_arg("unit").unwrap_or_default();
            Some((
                shell_words::join(
                    ["systemctl", "--user", action, unit]
                        .iter()
                        .filter(|s| !s.is_empty()),
                ),
                None,
            ))
        }
        _ => None,
    }
}

/// The paths a call names directly in its arguments.
fn named_paths(call: &Call) -> Vec<String> {
    let str_arg = |k: &str| call.args.get(k).and_then(|v| v.as_str());
    let key = match call.tool {
        "read_file" | "list_dir" | "search_files" | "disk_usage" | "write_file" | "edit_file" => {
            "path"
        }
        "shell" => "cwd",
        "open" => "target",
        name if crate::catalog::mcp_parts(name).is_some() => {
            // Which argument is a path is the server's to say, in prose: every string
            // that is written as one is checked.
            return argument_strings(call.args)
                .iter()
                .filter_map(|s| as_path(s))
                .collect();
        }
        _ => return Vec::new(),
    };
    let Some(value) = str_arg(key) else {
        return Vec::new();
    };
    if call.tool == "open" {
        if let Some(rest) = value.strip_prefix("file://") {
            // file://host/path: only the local host is a path on this machine.
            let path = rest.strip_prefix("localhost").unwrap_or(rest);
            return vec![percent_decode(path)];
        }
        if value.contains("://") || value.starts_with("mailto:") {
            return Vec::new();
        }
    }
    vec![value.to_owned()]
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = s.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// At most this many strings of an MCP call's arguments are matched one by one; the
/// rest are matched joined together (see [`argument_strings`]).
const MAX_ARGUMENT_STRINGS: usize = 256;

/// Every string value in `args` (not the keys), depth first, in document order; past
/// [`MAX_ARGUMENT_STRINGS`] the rest are joined into one last string so nothing goes
/// unmatched.
fn argument_strings(args: &serde_json::Value) -> Vec<String> {
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::String(s) => out.push(s.clone()),
            serde_json::Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
            serde_json::Value::Object(map) => map.values().for_each(|i| walk(i, out)),
            serde_json::Value::Null | serde_json::Value::Bool(_) | serde_json::Value::Number(_) => {
            }
        }
    }
    let mut out = Vec::new();
    walk(args, &mut out);
    if out.len() > MAX_ARGUMENT_STRINGS {
        let rest = out.split_off(MAX_ARGUMENT_STRINGS - 1).join(" ");
        out.push(rest);
    }
    out
}

/// The path an argument names, if it is written as one: absolute, home-relative or
/// explicitly relative (`./`, `../`), or a local `file://` URL.
fn as_path(s: &str) -> Option<String> {
    let s = s.trim();
    if let Some(rest) = s.strip_prefix("file://") {
        let path = rest.strip_prefix("localhost").unwrap_or(rest);
        return path.starts_with('/').then(|| percent_decode(path));
    }
    let is_path = s.starts_with('/')
        || s == "~"
        || s.starts_with("~/")
        || s.starts_with("./")
        || s.starts_with("../");
    is_path.then(|| s.to_owned())
}

/// What patterns are matched against: the canonical forms, then the raw line.
fn subjects(raw: &str, a: &Analysis) -> Vec<String> {
    let mut out = a.subjects.clone();
    out.push(raw.to_owned());
    out
}

fn first_match<'p>(
    rules: &'p [super::PatternRule],
    subjects: &[String],
) -> Option<(&'p super::PatternRule, String)> {
    rules.iter().find_map(|r| {
        subjects
            .iter()
            .find(|s| r.pattern.is_match(s))
            .map(|s| (r, s.clone()))
    })
}

fn seen_as(raw: &str, subject: String) -> String {
    if raw.trim() == subject {
        String::new()
    } else {
        format!(" (runs `{}`)", abbreviate(&subject))
    }
}

/// Long commands shortened for messages (the audit log keeps the full arguments).
fn abbreviate(s: &str) -> String {
    const MAX: usize = 120;
    let s = s.trim();
    if s.chars().count() <= MAX {
        return s.to_owned();
    }
    let head: String = s.chars().take(MAX).collect();
    format!("{head}…")
}
