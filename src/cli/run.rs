//! `familiar run`: one task in this process, no daemon. Approvals are asked on the
//! terminal (denied when there is none); Ctrl-C cancels cleanly (the partial context is
//! saved and tool processes are stopped).
//! Output as cli/printer.rs shows events.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use familiar_protocol::ids::{SessionId, TaskId};
use tokio_util::sync::CancellationToken;

use super::printer::{exit_for, print_events};
use super::prompt::{read_prompt, resolve_workspace};
use super::typed::TypedLines;
use super::{Exit, Out, RunArgs};
use crate::agent::choice::{Choice, choose};
use crate::agent::events::{Delivery, EventBus};
use crate::agent::steering::Steering;
use crate::agent::{Runtime, RuntimeError, TaskError, TaskSpec, run_task};
use crate::approval::TtyFrontend;
use crate::config::{Config, ProcessEnv};
use crate::policy;
use crate::soul::SoulSet;

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
        Some(lines) => tty.with_lines(Arc::new(move || {
            let question = lines.open();
            Box::new(move || question.answer())
        })),
        None => tty,
    }
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
    let session = session_to_continue(&args, &rt)?;
    let soul = choose(
        &souls,
        &config,
        &rt.services.store,
        &Choice {
            soul: args.task.soul.as_deref(),
            session: session.as_ref(),
            provider: args.task.provider.as_deref(),
            model: args.task.model.as_deref(),
        },
    )?;
    let steering = Steering::new();
    rt.services
        .approvals
        .add_frontend(Arc::new(tty_frontend(&steering, args.task.json)));
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
        when: args.task.when.clone(),
    };

    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    tokio.block_on(drive(Arc::new(rt), spec, out, &args))
}

/// The session `--session` names, or with `--continue` the latest one.
fn session_to_continue(args: &RunArgs, rt: &Runtime) -> anyhow::Result<Option<SessionId>> {
    if let Some(s) = &args.task.session {
        return Ok(Some(SessionId::new(s)?));
    }
    if !args.continue_latest {
        return Ok(None);
    }
    let latest = rt
        .services
        .store
        .list_sessions()?
        .into_iter()
        .next()
        .map(|s| s.id);
    let latest = latest.with_context(|| {
        format!(
            "--continue: there is no session yet in {}",
            rt.settings.config.paths.data_dir.display()
        )
    })?;
    Ok(Some(latest))
}

/// Runs the task with its events printed; Ctrl-C cancels it, a second one exits at once.
async fn drive(rt: Arc<Runtime>, spec: TaskSpec, out: Out, args: &RunArgs) -> anyhow::Result<Exit> {
    let mut bus = EventBus::new();
    let rx = bus.subscribe(Delivery::Lossless);
    let printer = tokio::spawn(print_events(rx, out, args.task.json, args.ephemeral));
    let cancel = CancellationToken::new();
    let on_ctrl_c = cancel.clone();
    let interrupted = Arc::new(AtomicBool::new(false));
    let saw_ctrl_c = Arc::clone(&interrupted);
    let cancelling = super::follow::cancelling_line(spec.task_id.as_str(), !args.ephemeral);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            saw_ctrl_c.store(true, Ordering::SeqCst);
            // The same plain line as `ask`'s; not being able to print it changes nothing.
            writeln!(std::io::stderr().lock(), "{cancelling}").ok();
            on_ctrl_c.cancel();
        }
        // A second Ctrl-C means "now": the context was saved at the last step.
        if tokio::signal::ctrl_c().await.is_ok() {
            std::process::exit(Exit::Interrupted as i32);
        }
    });
    if let (Some(when), Some(wait)) = (&args.task.when, args.task.wait) {
        super::when::wait_for(when, wait, &cancel).await;
        // Ctrl-C while waiting: nothing ran, so nothing is reported as skipped.
        if cancel.is_cancelled() {
            rt.settings.mcp.shutdown().await;
            return Ok(Exit::Interrupted);
        }
    }
    let outcome = run_task(Arc::clone(&rt), spec, bus, cancel).await;
    // The MCP servers the task started end with the run.
    rt.settings.mcp.shutdown().await;
    // The bus was moved into the task and dropped with it: the printer ends.
    printer.await.context("the output printer failed")??;
    if args.ephemeral
        && let Ok(o) = &outcome
    {
        rt.services
            .store
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
}

/// Reports a task that could not run to the end: its error on stderr, exit 1.
fn task_failed(e: impl std::fmt::Display) -> anyhow::Result<Exit> {
    super::client::Failure {
        exit: Exit::Failed,
        message: format!("the task failed: {e}"),
    }
    .report()
}
