//! Commands that run in this process without the daemon: souls, policy check,
//! snapshot, sessions, completions.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context as _;

use super::output::Table;
use super::{Exit, Out, SessionsAction, SoulsAction};
use crate::config::{Config, ProcessEnv};
use crate::policy::{self, Call, Decision, PathContext, Policy};
use crate::soul::{Soul, SoulOrigin, SoulSet};
use crate::store::Store;

/// The config, the policy in force and every soul.
struct Loaded {
    config: Config,
    policy: Policy,
    souls: SoulSet,
}

fn load_config(path: &Option<PathBuf>) -> anyhow::Result<Config> {
    Ok(Config::load(path.as_deref(), &ProcessEnv)?)
}

fn load_all(path: &Option<PathBuf>) -> anyhow::Result<Loaded> {
    let config = load_config(path)?;
    let policy = policy::load(&config.policy, &config.paths)?;
    let souls = SoulSet::load(&config.paths, &policy)?;
    for err in &souls.errors {
        tracing::warn!("skipping soul file: {err}");
    }
    Ok(Loaded {
        config,
        policy,
        souls,
    })
}

pub fn souls(
    config: &Option<PathBuf>,
    action: Option<SoulsAction>,
    json: bool,
    out: &mut Out,
) -> anyhow::Result<Exit> {
    match action {
        None | Some(SoulsAction::List) => {
            let l = load_all(config)?;
            if json {
                for soul in l.souls.souls.values() {
                    out.json_line(&soul_summary(&l.config, soul))?;
                }
                return Ok(Exit::Completed);
            }
            let mut table =
                Table::new(["ID", "ITERS", "MODEL", "FROM", "DESCRIPTION"]).right_aligned(1);
            for soul in l.souls.souls.values() {
                let from = match &soul.origin {
                    SoulOrigin::BuiltIn => "built-in".to_owned(),
                    SoulOrigin::File(path) => path.display().to_string(),
                };
                table.row([
                    soul.id.as_str(),
                    &soul.max_iterations.to_string(),
                    &model_of(&l.config, soul),
                    &from,
                    &soul.description,
                ]);
            }
            out.table(table, "")?;
            Ok(Exit::Completed)
        }
        Some(SoulsAction::Show { id }) => {
            let l = load_all(config)?;
            let soul = l.souls.get(&id)?;
            if json {
                out.json_pretty(soul)?;
                return Ok(Exit::Completed);
            }
            show_soul(&l, soul, out)?;
            Ok(Exit::Completed)
        }
        Some(SoulsAction::Copy { id }) => super::soul_copy::copy(config, &id, out),
        Some(SoulsAction::Validate { file }) => {
            let config = load_config(config)?;
            let policy = policy::load(&config.policy, &config.paths)?;
            let soul = crate::soul::load_file(&file, &config.paths.home, Some(&policy))?;
            let src = std::fs::read_to_string(&file).ok();
            let errors = crate::soul::config_errors(
                &soul,
                &file.display().to_string(),
                src.as_deref(),
                &config,
            );
            if !errors.is_empty() {
                let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
                anyhow::bail!("{}", all.join("\n"));
            }
            writeln!(
                out,
                "{}: ok: soul `{}`, {} tools, {} iterations, valid under policy `{}`",
                file.display(),
                soul.id,
                soul.grant.tools.len(),
                soul.max_iterations,
                policy.name
            )?;
            Ok(Exit::Completed)
        }
    }
}

fn model_of(config: &Config, soul: &Soul) -> String {
    config
        .model_for(soul.provider.as_deref(), soul.model.as_deref())
        .unwrap_or("?")
        .to_owned()
}

fn soul_summary(config: &Config, soul: &Soul) -> serde_json::Value {
    serde_json::json!({
        "id": soul.id,
        "description": soul.description,
        "model": model_of(config, soul),
        "max_iterations": soul.max_iterations,
        "origin": soul.origin,
    })
}

fn show_soul(l: &Loaded, soul: &Soul, out: &mut Out) -> anyhow::Result<()> {
    let origin = match &soul.origin {
        SoulOrigin::BuiltIn => "built-in".to_owned(),
        SoulOrigin::File(p) => p.display().to_string(),
    };
    let provider = soul
        .provider
        .as_deref()
        .unwrap_or(&l.config.default_provider);
    writeln!(out, "{} — {}", soul.id, soul.description)?;
    writeln!(out, "  from:        {origin}")?;
    writeln!(
        out,
        "  model:       {} (provider `{provider}`)",
        model_of(&l.config, soul)
    )?;
    writeln!(
        out,
        "  budgets:     {} iterations, {} tokens, {} wall clock",
        soul.max_iterations,
        soul.max_tokens,
        humantime::format_duration(soul.max_wall_clock)
    )?;
    let modes = soul.effective_modes(&l.policy);
    writeln!(
        out,
        "  tools (mode in force under policy `{}`):",
        l.policy.name
    )?;
    let mut table = Table::new(["TOOL", "TIER", "MODE"]);
    for tool in &soul.grant.tools {
        if let Some(info) = crate::catalog::info(tool) {
            table.row([tool, info.tier.as_str(), &modes.get(info.tier).to_string()]);
        }
    }
    out.table(table, "    ")?;
    let list = |v: &[PathBuf]| {
        if v.is_empty() {
            "(none)".to_owned()
        } else {
            v.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    writeln!(out, "  sandbox read:  {}", list(&soul.sandbox.read))?;
    writeln!(
        out,
        "  sandbox write: {} + the task workspace",
        list(&soul.sandbox.write)
    )?;
    if !soul.sandbox.startup.is_empty() {
        writeln!(out, "  named closed:  {}", list(&soul.sandbox.startup))?;
    }
    let closed = crate::policy::closed::Closed::from_env(&l.config.paths.home);
    writeln!(
        out,
        "  closed:        {}: never written unless named in [sandbox] startup",
        closed.describe()
    )?;
    writeln!(
        out,
        "  network:       {}{}",
        if soul.sandbox.network {
            "allowed"
        } else {
            "denied"
        },
        if soul.sandbox.require {
            "; requires full Landlock enforcement"
        } else {
            ""
        }
    )?;
    let rl = &soul.rate_limits;
    let rate = |r: Option<crate::policy::RateSpec>| r.map_or("-".to_owned(), |r| r.to_string());
    writeln!(
        out,
        "  rate limits:   tools {}, llm {}{}",
        rate(rl.tool_calls),
        rate(rl.llm_calls),
        rl.tools
            .iter()
            .map(|(t, r)| format!(", {t} {r}"))
            .collect::<String>()
    )?;
    writeln!(out, "\nprompt:\n{}", soul.prompt.trim_end())?;
    Ok(())
}

pub fn policy_check(
    config: &Option<PathBuf>,
    soul: Option<String>,
    tool: &str,
    args_json: &str,
    json: bool,
    out: &mut Out,
) -> anyhow::Result<Exit> {
    let l = load_all(config)?;
    let soul_id = soul.unwrap_or_else(|| l.config.default_soul.to_string());
    let soul = l.souls.get(&soul_id)?;
    let args: serde_json::Value = serde_json::from_str(args_json)
        .with_context(|| format!("ARGS_JSON is not valid JSON: {args_json}"))?;
    anyhow::ensure!(
        args.is_object(),
        "ARGS_JSON must be a JSON object, like '{{\"path\": \"~/notes.txt\"}}'"
    );
    let info = crate::catalog::info(tool).with_context(|| {
        format!(
            "unknown tool `{tool}` (known: {})",
            crate::catalog::names().collect::<Vec<_>>().join(", ")
        )
    })?;
    // Checked like a real call's: a key the tool does not take is no call at all.
    super::call_args::check(tool, &args)?;
    let tier = crate::catalog::tier_for_call(info, &args);
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let ctx = PathContext {
        home: &l.config.paths.home,
        cwd: &cwd,
    };
    let call = Call {
        tool,
        tier,
        args: &args,
    };
    let verdict = policy::decide(&soul.id, &soul.grant, &l.policy, &call, &ctx);
    let closed = closed_refusal(&l.config.paths.home, &cwd, soul, tier, &args);
    if json {
        out.json_pretty(&verdict)?;
    } else {
        writeln!(out, "{verdict}")?;
        if let Some(refusal) = &closed {
            writeln!(out, "{refusal}")?;
        }
    }
    if closed.is_some() {
        return Ok(Exit::Failed);
    }
    Ok(match verdict.decision {
        Decision::Allow => Exit::Completed,
        Decision::Ask { .. } | Decision::Deny { .. } => Exit::Failed,
    })
}

/// Why the sandbox refuses a write-tier call's `path` however the policy decides: it
/// lies in a closed place the soul does not name (`policy::closed`).
fn closed_refusal(
    home: &std::path::Path,
    cwd: &std::path::Path,
    soul: &Soul,
    tier: familiar_protocol::tier::Tier,
    args: &serde_json::Value,
) -> Option<String> {
    if tier != familiar_protocol::tier::Tier::Write {
        return None;
    }
    let path = crate::config::expand_home(std::path::Path::new(args.get("path")?.as_str()?), home);
    let path = cwd.join(path);
    crate::policy::closed::Closed::from_env(home).refuses_write(
        &path,
        &soul.sandbox.write,
        &soul.sandbox.startup,
    )
}

pub fn snapshot(config: &Option<PathBuf>, json: bool, out: &mut Out) -> anyhow::Result<Exit> {
    // The config is loaded only to report its errors the same way every command does.
    load_config(config)?;
    let mut snapshotter =
        crate::snapshot::Snapshotter::new().context("cannot read the system state")?;
    // CPU % needs two samples some time apart, as with top(1).
    snapshotter.take(None);
    std::thread::sleep(sysinfo::MINIMUM_CPU_UPDATE_INTERVAL);
    let snap = snapshotter.take(None);
    if json {
        out.json_line(&snap)?;
    } else {
        writeln!(out, "{}", snap.to_prompt_text().trim_end())?;
    }
    Ok(Exit::Completed)
}

pub fn sessions(
    config: &Option<PathBuf>,
    action: Option<SessionsAction>,
    json: bool,
    out: &mut Out,
) -> anyhow::Result<Exit> {
    let config = load_config(config)?;
    let store = Store::open(&config.paths.data_dir).with_context(|| {
        format!(
            "cannot open the data dir {}",
            config.paths.data_dir.display()
        )
    })?;
    match action {
        None => {
            let sessions = store.list_sessions()?;
            if json {
                for s in &sessions {
                    out.json_line(s)?;
                }
                return Ok(Exit::Completed);
            }
            if sessions.is_empty() {
                writeln!(
                    out,
                    "no sessions yet in {}",
                    config.paths.data_dir.display()
                )?;
                return Ok(Exit::Completed);
            }
            let mut table = Table::new(["ID", "SOUL", "UPDATED", "TITLE"]);
            for s in &sessions {
                table.row([
                    s.id.as_str(),
                    s.soul.as_str(),
                    &format_time(s.updated_at),
                    &familiar_protocol::display::visible(&s.title),
                ]);
            }
            out.table(table, "")?;
            Ok(Exit::Completed)
        }
        Some(SessionsAction::Show { id, no_reminders }) => {
            let id = familiar_protocol::ids::SessionId::new(id)?;
            let ctx = store.load_context(&id)?.with_context(|| {
                format!("no session `{id}` in {}", config.paths.data_dir.display())
            })?;
            if json {
                out.json_pretty(&ctx)?;
                return Ok(Exit::Completed);
            }
            show_session(&ctx, &store, !no_reminders, out)?;
            Ok(Exit::Completed)
        }
        Some(SessionsAction::Rm { ids }) => super::prune::rm(&store, &ids, out),
        Some(SessionsAction::Prune {
            older_than,
            dry_run,
        }) => super::prune::prune(&store, older_than, dry_run, out),
    }
}

fn format_time(unix: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix);
    humantime::format_rfc3339_seconds(t)
        .to_string()
        .replace('T', " ")
        .trim_end_matches('Z')
        .to_owned()
}

fn show_session(
    ctx: &crate::store::Context,
    store: &Store,
    reminders: bool,
    out: &mut Out,
) -> anyhow::Result<()> {
    writeln!(out, "session {} (soul {})", ctx.session_id, ctx.soul)?;
    writeln!(
        out,
        "  created {}, updated {}",
        ctx.created_at, ctx.updated_at
    )?;
    writeln!(out, "  usage: {}", describe_usage(&ctx.usage))?;
    writeln!(
        out,
        "  workspace: {}",
        store.workspace_dir(&ctx.session_id).display()
    )?;
    if let Some(summary) = &ctx.summary {
        let summary = familiar_protocol::display::terminal_safe(summary);
        writeln!(out, "\nsummary:\n  {}", summary.replace('\n', "\n  "))?;
    }
    if !ctx.facts.is_empty() {
        writeln!(out, "\nfacts:")?;
        for f in &ctx.facts {
            writeln!(out, "  - {}", familiar_protocol::display::visible(f))?;
        }
    }
    writeln!(out, "\ntasks:")?;
    for t in &ctx.tasks {
        writeln!(
            out,
            "  {} [{}] {}",
            t.task_id,
            t.status.as_str(),
            first_line(&t.prompt, 70)
        )?;
        for step in &t.plan.steps {
            writeln!(
                out,
                "      - [{}] {}",
                step.status.as_str(),
                first_line(&step.description, 66)
            )?;
        }
        if t.usage != familiar_protocol::task::Usage::default() {
            writeln!(out, "    usage: {}", describe_usage(&t.usage))?;
        }
        if let Some(result) = &t.result {
            writeln!(out, "    result: {}", first_line(result, 70))?;
        }
    }
    writeln!(out, "\nhistory ({} messages):", ctx.history.len())?;
    for m in &ctx.history {
        let who = match m.role {
            crate::llm::Role::User => "user",
            crate::llm::Role::Assistant => "assistant",
        };
        for block in &m.content {
            if let Some(line) = history_line(block, reminders) {
                writeln!(out, "  {who:>9}: {line}")?;
            }
        }
    }
    Ok(())
}

/// Characters of a tool result's or a steering message's preview.
const PREVIEW_CHARS: usize = 100;

/// One history block as `sessions show` lists it; `None` for a reminder left out.
fn history_line(block: &crate::llm::ContentBlock, reminders: bool) -> Option<String> {
    use crate::llm::ContentBlock;
    Some(match block {
        // A message typed while the task ran: its words, not the marker line the model
        // reads before them.
        ContentBlock::Text { text } => match crate::agent::steering::message_of(text) {
            Some(message) => format!("(steering) {}", preview(message, PREVIEW_CHARS)),
            None => first_line(text, 90),
        },
        ContentBlock::Reminder { .. } if !reminders => return None,
        ContentBlock::Reminder { text } => {
            format!("(system reminder, {} characters)", text.chars().count())
        }
        ContentBlock::Thinking { .. } => "(thinking)".to_owned(),
        ContentBlock::Image {
            width,
            height,
            path,
            ..
        } => format!("(image {width}x{height}: {})", path.display()),
        ContentBlock::ToolUse { name, input, .. } => {
            format!("→ {name} {}", first_line(&input.to_string(), 80))
        }
        ContentBlock::ToolResult {
            content, is_error, ..
        } => format!(
            "← {}{}",
            if *is_error { "error: " } else { "" },
            preview(&tool_output_body(content), PREVIEW_CHARS)
        ),
    })
}

/// A tool result's output without its `<tool_output …>` wrapper; JSON (what most
/// tools return, pretty-printed, so its first line was a lone `{`) compacted.
fn tool_output_body(content: &str) -> String {
    let body = match content.split_once('\n') {
        Some((head, rest)) if head.starts_with("<tool_output") => {
            rest.strip_suffix("</tool_output>").unwrap_or(rest)
        }
        Some(_) | None => content,
    };
    match serde_json::from_str::<serde_json::Value>(body) {
        Ok(json) => json.to_string(),
        Err(_) => body.to_owned(),
    }
}

/// `s` on one line (runs of white space, line ends among them, become one space), cut
/// to `max` characters with an ellipsis, its escapes shown, not obeyed.
fn preview(s: &str, max: usize) -> String {
    let joined = s.split_whitespace().collect::<Vec<_>>().join(" ");
    let line = familiar_protocol::display::visible(&joined);
    if line.chars().count() > max {
        let cut: String = line.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    } else {
        line
    }
}

/// `N input + M output tokens`, and what the prompt cache did when it did anything.
fn describe_usage(u: &familiar_protocol::task::Usage) -> String {
    let mut s = format!(
        "{} input + {} output tokens",
        u.input_tokens, u.output_tokens
    );
    if u.cache_read_tokens > 0 || u.cache_write_tokens > 0 {
        s.push_str(&format!(
            " (prompt cache: {} read, {} written)",
            u.cache_read_tokens, u.cache_write_tokens
        ));
    }
    s
}

/// The first line of `s`, cut to `max` characters with an ellipsis; what a model or a
/// tool wrote, so its escapes are shown, not obeyed by the terminal.
fn first_line(s: &str, max: usize) -> String {
    let line = familiar_protocol::display::visible(s.lines().next().unwrap_or(""));
    if line.chars().count() > max {
        let cut: String = line.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    } else {
        line.to_owned()
    }
}

pub fn completions(shell: clap_complete::Shell, out: &mut Out) -> anyhow::Result<()> {
    use clap::CommandFactory;
    let mut cmd = super::Cli::command();
    clap_complete::generate(shell, &mut cmd, "familiar", out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Regression: `sessions show` printed what a model or tool wrote with its escapes raw.
    #[test]
    fn a_shown_line_carries_no_escape_to_the_terminal() {
        assert_eq!(first_line("a\x1b[2Kb\u{202E}\nc", 90), r"a\x1b[2Kb\u{202E}");
        assert_eq!(first_line("abcdef", 4), "abc…");
    }

    // Regression: a steering block showed only its marker line, a tool result only `{`.
    #[test]
    fn steering_shows_its_words_and_a_tool_result_a_preview() {
        use crate::llm::ContentBlock;
        let steer = ContentBlock::Text {
            text: crate::agent::steering::as_text("use the\nsecond disk \x1b[2J"),
        };
        assert_eq!(
            history_line(&steer, false).unwrap(),
            r"(steering) use the second disk \x1b[2J"
        );
        let result = ContentBlock::ToolResult {
            tool_use_id: familiar_protocol::ids::CallId::new("c1").unwrap(),
            content: "<tool_output tool=\"shell\" status=\"ok\">\n{\n  \"exit_code\": 0,\n  \"stdout\": \"hello\\n\"\n}\n</tool_output>".into(),
            is_error: false,
        };
        assert_eq!(
            history_line(&result, false).unwrap(),
            r#"← {"exit_code":0,"stdout":"hello\\n"}"#
        );
        let long = ContentBlock::ToolResult {
            tool_use_id: familiar_protocol::ids::CallId::new("c2").unwrap(),
            content: format!("line one\n{}", "x".repeat(300)),
            is_error: true,
        };
        let line = history_line(&long, false).unwrap();
        assert!(line.starts_with("← error: line one xxx"), "{line}");
        assert!(line.ends_with('…'), "{line}");
    }
}
