//! `familiar run`: one task in this process, no daemon. Approvals are asked on the
//! terminal (denied when there is none); Ctrl-C cancels cleanly (the partial context is
//! saved and tool processes are stopped).
//!
//! Human output: the model's text on stdout (so `familiar run … > answer.md` keeps only
//! the answer), tool lines and the final status line on stderr. `--json`: every event
//! as one JSON object per line on stdout.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use super::typed::TypedLines;
use super::{Exit, Out, RunArgs};
use crate::agent::choice::{Choice, choose};
use crate::agent::events::{Delivery, Event, EventBus, EventPayload};
use crate::agent::steering::Steering;
use crate::agent::{Runtime, RuntimeError, TaskError, TaskSpec, run_task};
use crate::approval::TtyFrontend;
use crate::config::{Config, ProcessEnv};
use crate::ids::{SessionId, TaskId};
use crate::policy;
use crate::soul::SoulSet;
use crate::store::{Outcome, TaskStatus};

/// The exit code for a finish status (DESIGN §2).
pub fn exit_for(status: TaskStatus) -> Exit {
    match status.outcome() {
        Outcome::Completed => Exit::Completed,
        Outcome::Limit => Exit::Limit,
        Outcome::Cancelled | Outcome::Failed | Outcome::Unfinished => Exit::Failed,
    }
}

/// The terminal's approval prompt; lines typed while the task runs that no prompt
/// takes steer it (not with `--json`, whose reader is a program).
fn tty_frontend(steering: &Steering, json: bool) -> TtyFrontend {
    let tty = TtyFrontend::detect();
    if json {
        return tty;
    }
    let inbox = steering.clone();
    let typed = TypedLines::start(move |line| {
        let said = match inbox.push(line) {
            Ok(()) => "  ↳ noted: your message joins the task at its next step".to_owned(),
            Err(e) => format!("  ↳ not sent: {e}"),
        };
        // The message's fate is in the events too; a closed stderr changes nothing.
        writeln!(std::io::stderr().lock(), "{said}").ok();
    });
    match typed {
        Some(lines) => tty.with_lines(Arc::new(move || lines.next_line())),
        None => tty,
    }
}

/// The prompt from the arguments, or stdin for `-` (or no argument with piped stdin).
pub fn read_prompt(words: &[String]) -> anyhow::Result<String> {
    let from_stdin = words == ["-"] || (words.is_empty() && !std::io::stdin().is_terminal());
    let prompt = if from_stdin {
        let mut s = String::new();
        std::io::stdin()
            .take(1 << 20)
            .read_to_string(&mut s)
            .context("cannot read the prompt from stdin")?;
        s
    } else {
        words.join(" ")
    };
    let prompt = prompt.trim().to_owned();
    anyhow::ensure!(
        !prompt.is_empty(),
        "the prompt is empty: give it as an argument, or `-` to read stdin"
    );
    Ok(prompt)
}

/// A workspace given on the command line: an existing directory, made absolute.
pub fn resolve_workspace(dir: &std::path::Path) -> anyhow::Result<PathBuf> {
    let abs = std::fs::canonicalize(dir)
        .with_context(|| format!("workspace {} does not exist", dir.display()))?;
    anyhow::ensure!(
        abs.is_dir(),
        "workspace {} is not a directory",
        abs.display()
    );
    Ok(abs)
}

pub fn run(config: &Option<PathBuf>, args: RunArgs, out: Out) -> anyhow::Result<Exit> {
    let config = Arc::new(Config::load(config.as_deref(), &ProcessEnv)?);
    let policy = Arc::new(policy::load(&config.policy, &config.paths)?);
    let souls = Arc::new(SoulSet::load(&config.paths, &policy)?);
    for err in &souls.errors {
        tracing::warn!("skipping soul file: {err}");
    }
    let prompt = read_prompt(&args.task.prompt)?;
    let workspace = args
        .task
        .workspace
        .as_deref()
        .map(resolve_workspace)
        .transpose()?;

    let data_dir = config.paths.data_dir.clone();
    let rt = match Runtime::from_config(Arc::clone(&config), policy, Arc::clone(&souls)) {
        Ok(rt) => rt,
        // A data dir that cannot be written (full, read-only) fails the task; it is not
        // a usage error (exit 2 said "fix your command line" to someone with a full disk).
        Err(RuntimeError::Store(e)) => return task_failed(e),
        Err(e) => {
            return Err(e)
                .with_context(|| format!("cannot set up the task in {}", data_dir.display()));
        }
    };
    let session = match (&args.task.session, args.continue_latest) {
        (Some(s), _) => Some(SessionId::new(s)?),
        (None, true) => Some(
            rt.store
                .list_sessions()?
                .into_iter()
                .next()
                .map(|s| s.id)
                .with_context(|| {
                    format!(
                        "--continue: there is no session yet in {}",
                        data_dir.display()
                    )
                })?,
        ),
        (None, false) => None,
    };
    let soul = choose(
        &souls,
        &config,
        &rt.store,
        &Choice {
            soul: args.task.soul.as_deref(),
            session: session.as_ref(),
            provider: args.task.provider.as_deref(),
            model: args.task.model.as_deref(),
        },
    )?;
    let steering = Steering::new();
    rt.approvals
        .add_frontend(Arc::new(tty_frontend(&steering, args.task.json)));
    let rt = Arc::new(rt);
    let spec = TaskSpec {
        task_id: TaskId::generate(),
        soul,
        prompt,
        session,
        workspace,
        origin: "cli".into(),
        max_iterations: None,
        parent: None,
        steering,
    };

    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let json = args.task.json;
    let ephemeral = args.ephemeral;
    tokio.block_on(async move {
        let mut bus = EventBus::new();
        let rx = bus.subscribe(Delivery::Lossless);
        let printer = tokio::spawn(print_events(rx, out, json));
        let cancel = CancellationToken::new();
        let on_ctrl_c = cancel.clone();
        let interrupted = Arc::new(AtomicBool::new(false));
        let saw_ctrl_c = Arc::clone(&interrupted);
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                saw_ctrl_c.store(true, Ordering::SeqCst);
                tracing::warn!("cancelling (Ctrl-C again to quit at once)");
                on_ctrl_c.cancel();
            }
            // A second Ctrl-C means "now": the context was saved at the last step.
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(Exit::Interrupted as i32);
            }
        });
        let outcome = run_task(Arc::clone(&rt), spec, bus, cancel).await;
        // The bus was moved into the task and dropped with it: the printer ends.
        printer.await.context("the output printer failed")??;
        if ephemeral && let Ok(o) = &outcome {
            rt.store
                .remove_session(&o.session_id)
                .with_context(|| format!("cannot remove the ephemeral session {}", o.session_id))?;
        }
        match outcome {
            Ok(_) if interrupted.load(Ordering::SeqCst) => Ok(Exit::Interrupted),
            Ok(o) => Ok(exit_for(o.status)),
            Err(TaskError::Store(crate::store::StoreError::SessionBusy(id))) => {
                anyhow::bail!(
                    "session {id} is busy: a task is already running in it (here or in the daemon)"
                )
            }
            // The task ran and could not go on (its data could not be saved, the sandbox
            // could not start): a failed task, exit 1.
            Err(TaskError::Store(e)) => task_failed(e),
            Err(e @ TaskError::Sandbox(_)) => task_failed(e),
            // `--session` named a session that does not exist: the command line is wrong.
            Err(e @ TaskError::UnknownSession(_)) => Err(e.into()),
        }
    })
}

/// Reports a task that could not run to the end: its error on stderr, exit 1.
fn task_failed(e: impl std::fmt::Display) -> anyhow::Result<Exit> {
    super::client::Failure {
        exit: Exit::Failed,
        message: format!("the task failed: {e}"),
    }
    .report()
}

/// Prints a task's events as `familiar run` and `familiar ask` show them. Events of
/// delegated sub-tasks (another task id than the first event's) go to stderr,
/// indented under the parent; only the parent's answer goes to stdout.
pub async fn print_events(
    mut rx: tokio::sync::mpsc::Receiver<Arc<Event>>,
    mut out: Out,
    json: bool,
) -> anyhow::Result<()> {
    let mut at_line_start = true;
    let mut top: Option<crate::ids::TaskId> = None;
    while let Some(event) = rx.recv().await {
        if json {
            out.json_line(&*event)?;
            out.flush()?;
            continue;
        }
        let top = top.get_or_insert_with(|| event.task_id.clone());
        if event.task_id != *top {
            if !at_line_start {
                writeln!(out)?;
                out.flush()?;
                at_line_start = true;
            }
            print_child_event(&event, &mut std::io::stderr().lock())?;
            continue;
        }
        let mut err = std::io::stderr().lock();
        match &event.payload {
            EventPayload::TextDelta { text } => {
                write!(out, "{text}")?;
                out.flush()?;
                at_line_start = text.ends_with('\n');
            }
            EventPayload::ToolCallStarted {
                tool,
                args,
                decision,
                reason,
                ..
            } => {
                if !at_line_start {
                    writeln!(out)?;
                    out.flush()?;
                    at_line_start = true;
                }
                let what = crate::agent::plan::describe_call(tool, args);
                match reason {
                    Some(r) if decision != "allow" => writeln!(err, "→ {what} [{decision}: {r}]")?,
                    Some(_) | None => writeln!(err, "→ {what}")?,
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
                let mark = if *ok { "✓" } else { "✗" };
                let waited = approval_wait_ms
                    .map(|w| format!(", after {:.1}s waiting for approval", w as f64 / 1000.0))
                    .unwrap_or_default();
                writeln!(err, "  {mark} {tool} ({duration_ms} ms{waited}) {preview}")?;
            }
            EventPayload::ApprovalResolved { approved, .. } => {
                writeln!(
                    err,
                    "  {}",
                    if *approved {
                        "approved"
                    } else {
                        "not approved"
                    }
                )?;
            }
            EventPayload::Retry {
                attempt,
                delay_ms,
                reason,
            } => {
                writeln!(
                    err,
                    "  model call failed ({reason}); retry {attempt} in {:.1}s",
                    *delay_ms as f64 / 1000.0
                )?;
            }
            EventPayload::ModelFallback { from, to, .. } => {
                writeln!(err, "  switching model: {from} → {to}")?
            }
            EventPayload::RateLimited { scope, limit, .. } => {
                writeln!(err, "  rate limited: {limit} {scope}")?
            }
            EventPayload::LoopWarning { .. } => {
                writeln!(err, "  the model is repeating itself; steering it")?
            }
            EventPayload::Compaction { mode, .. } => writeln!(err, "  context compacted ({mode})")?,
            EventPayload::SteeringReceived { message } => writeln!(
                err,
                "  ↳ your message joined the task: {}",
                one_line(message)
            )?,
            EventPayload::TaskFinished {
                status,
                result,
                usage,
                iterations,
                pending_steering,
            } => {
                if !at_line_start {
                    writeln!(out)?;
                    out.flush()?;
                }
                if *pending_steering > 0 {
                    writeln!(
                        err,
                        "  {pending_steering} message(s) arrived after the last step: they open the session's next task"
                    )?;
                }
                if *status != TaskStatus::Completed {
                    writeln!(err, "{result}")?;
                }
                writeln!(
                    err,
                    "— {status} after {iterations} step{}, {} tokens (session {})",
                    if *iterations == 1 { "" } else { "s" },
                    usage.total(),
                    event.session_id
                )?;
            }
            EventPayload::SubagentStarted {
                child_task_id,
                soul,
                ..
            } => writeln!(err, "  ┌ {soul} (task {child_task_id})")?,
            EventPayload::SubagentFinished {
                soul,
                status,
                usage,
                iterations,
                ..
            } => writeln!(
                err,
                "  └ {soul}: {status} after {iterations} step{}, {} tokens",
                if *iterations == 1 { "" } else { "s" },
                usage.total()
            )?,
            EventPayload::TaskStarted { .. }
            | EventPayload::IterationStarted { .. }
            | EventPayload::ApprovalRequested { .. }
            | EventPayload::PlanUpdated { .. } => {}
        }
    }
    out.flush()?;
    Ok(())
}

/// One event of a delegated sub-task, indented under its parent's lines.
fn print_child_event(event: &Event, err: &mut impl Write) -> std::io::Result<()> {
    const BAR: &str = "  │ ";
    match &event.payload {
        EventPayload::ToolCallStarted {
            tool,
            args,
            decision,
            reason,
            ..
        } => {
            let what = crate::agent::plan::describe_call(tool, args);
            match reason {
                Some(r) if decision != "allow" => writeln!(err, "{BAR}→ {what} [{decision}: {r}]"),
                Some(_) | None => writeln!(err, "{BAR}→ {what}"),
            }
        }
        EventPayload::ToolCallFinished {
            tool,
            ok,
            preview,
            duration_ms,
            ..
        } => {
            let mark = if *ok { "✓" } else { "✗" };
            writeln!(err, "{BAR}  {mark} {tool} ({duration_ms} ms) {preview}")
        }
        EventPayload::ApprovalResolved { approved, .. } => writeln!(
            err,
            "{BAR}  {}",
            if *approved {
                "approved"
            } else {
                "not approved"
            }
        ),
        EventPayload::RateLimited { scope, limit, .. } => {
            writeln!(err, "{BAR}  rate limited: {limit} {scope}")
        }
        EventPayload::TaskFinished { status, result, .. } => {
            if *status != TaskStatus::Completed {
                writeln!(err, "{BAR}{}", result.replace('\n', &format!("\n{BAR}")))?;
            }
            Ok(())
        }
        EventPayload::TaskStarted { .. }
        | EventPayload::IterationStarted { .. }
        | EventPayload::TextDelta { .. }
        | EventPayload::ApprovalRequested { .. }
        | EventPayload::PlanUpdated { .. }
        | EventPayload::Compaction { .. }
        | EventPayload::Retry { .. }
        | EventPayload::ModelFallback { .. }
        | EventPayload::LoopWarning { .. }
        | EventPayload::SteeringReceived { .. }
        | EventPayload::SubagentStarted { .. }
        | EventPayload::SubagentFinished { .. } => Ok(()),
    }
}

/// The first line of `text`, marked when there was more.
fn one_line(text: &str) -> String {
    match text.split_once('\n') {
        Some((first, _)) => format!("{first} …"),
        None => text.to_owned(),
    }
}
