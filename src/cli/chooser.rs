//! `familiar approve --dmenu [ID]`: the approval chooser as a command, for a
//! keybinding or a bar's click. It lists every pending request in the launcher (with
//! one pending, or an ID given, it goes straight to that request's choices), shows the
//! whole call as every approval surface renders it, and answers with the choice:
//! Deny, Approve, or the task's timed grant when the request offers one (`GetTask`'s
//! `grant`: its label, `null` for a request that is always asked).
//!
//! Invariant: only a choice line answers; a dismissed menu or any other line leaves
//! the request waiting, and says so.

use std::io::{IsTerminal, Write};

use familiar_protocol::board::Board;
use familiar_protocol::display::chooser::{self, Choice, GRANT_FOR};
use familiar_protocol::display::{terminal_safe, title};
use familiar_protocol::query::PendingApproval;

use crate::launcher::LauncherError;

use super::client::{Failure, block_on, connect, menu_exit};
use super::{Exit, Out};

/// A menu that did not open, already shown on screen under a keybinding.
#[derive(Debug, thiserror::Error)]
#[error("approve --dmenu: {0}")]
struct MenuFailed(LauncherError);

/// One request waiting for an answer, as `GetTask` lists it (its `grant`: none from an
/// older daemon, or for a request that is always asked: then no grant is offered),
/// with its task's prompt.
#[derive(Debug)]
struct Waiting {
    request: PendingApproval,
    prompt: String,
}

pub fn approve_dmenu(request: Option<&str>, out: &mut Out) -> anyhow::Result<Exit> {
    let chose = block_on(choose(request, out))?;
    match chose.map_err(|e| e.downcast::<MenuFailed>()) {
        Ok(exit) => Ok(exit),
        // Exits as for `ask --dmenu`: 1 for a menu that cannot open, 2 for none.
        Err(Ok(m)) => Failure {
            exit: menu_exit(&m.0),
            message: m.to_string(),
        }
        .report(),
        Err(Err(e)) => Err(e),
    }
}

async fn choose(request: Option<&str>, out: &mut Out) -> anyhow::Result<Exit> {
    let (_conn, proxy) = match connect().await {
        Ok(v) => v,
        Err(f) => return report(f).await,
    };
    let mut waiting = match pending(&proxy).await {
        Ok(w) => w,
        Err(e) => return report(super::client::classify(e)).await,
    };
    if let Some(id) = request {
        waiting.retain(|w| w.request.request_id == id);
    }
    let chosen = match (waiting.len(), request) {
        // An unknown request, as for `approve ID` (exit 2).
        (0, Some(id)) => {
            return report(Failure {
                exit: Exit::Usage,
                message: format!("request {id} does not wait (answered, timed out or unknown)"),
            })
            .await;
        }
        (0, None) => return said(out, "nothing waits for your answer").await,
        (1, _) => waiting.swap_remove(0),
        _ => match pick_request(waiting).await? {
            Some(w) => w,
            None => return said(out, "nothing chosen: the requests still wait").await,
        },
    };
    answer(&proxy, &chosen, out).await
}

/// Every pending request of every running task, oldest task first.
async fn pending(
    proxy: &familiar_protocol::proxy::Agent1Proxy<'_>,
) -> Result<Vec<Waiting>, familiar_protocol::Error> {
    let board = Board::load(proxy).await?;
    Ok(board
        .waiting()
        .map(|(task, request)| Waiting {
            request: request.clone(),
            prompt: task.prompt.clone(),
        })
        .collect())
}

/// Which request to answer, when several wait.
async fn pick_request(waiting: Vec<Waiting>) -> anyhow::Result<Option<Waiting>> {
    let lines: Vec<String> = waiting
        .iter()
        .map(|w| {
            let first = w.request.summary.lines().next().unwrap_or_default();
            format!(
                "{}  {}  ({})",
                w.request.request_id,
                terminal_safe(first),
                title(&w.prompt)
            )
        })
        .collect();
    let Some(line) = launcher("approve which? ", &lines).await? else {
        return Ok(None);
    };
    let id = line
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned();
    Ok(waiting
        .into_iter()
        .find(|w| w.request.request_id.as_str() == id))
}

/// Shows the request's choices and sends the one picked.
async fn answer(
    proxy: &familiar_protocol::proxy::Agent1Proxy<'_>,
    w: &Waiting,
    out: &mut Out,
) -> anyhow::Result<Exit> {
    let w = &w.request;
    let menu = chooser::menu(&w.summary, &w.reason, w.grant.as_deref());
    let Some(line) = launcher("approve> ", &menu).await? else {
        return said(
            out,
            &format!("nothing chosen: request {} still waits", w.request_id),
        )
        .await;
    };
    let Some(choice) = chooser::parse(&line, &w.summary, w.grant.as_deref()) else {
        return said(
            out,
            &format!("nothing chosen: request {} still waits", w.request_id),
        )
        .await;
    };
    let sent = match choice {
        Choice::Approve => proxy.respond(w.request_id.as_str(), true).await,
        Choice::Deny => proxy.respond(w.request_id.as_str(), false).await,
        Choice::GrantTask => {
            let secs = u32::try_from(GRANT_FOR.as_secs()).unwrap_or(600);
            proxy.grant(w.request_id.as_str(), secs).await
        }
    };
    if let Err(e) = sent {
        return report(super::client::classify(e)).await;
    }
    let line = match choice {
        Choice::Approve => format!("approved request {}: the call runs", w.request_id),
        Choice::Deny => format!(
            "denied request {}: the call does not run and the task is told",
            w.request_id
        ),
        Choice::GrantTask => format!(
            "approved request {}: {}",
            w.request_id,
            terminal_safe(w.grant.as_deref().unwrap_or_default())
        ),
    };
    writeln!(out, "{line}")?;
    Ok(Exit::Completed)
}

async fn launcher(prompt: &str, lines: &[String]) -> anyhow::Result<Option<String>> {
    match crate::launcher::pick(&crate::launcher::Menu::for_client(), prompt, lines).await {
        Ok(picked) => Ok(picked),
        Err(e) => {
            let failed = MenuFailed(e);
            if !std::io::stdout().is_terminal() {
                super::progress::error("familiar: approve", &failed.to_string()).await;
            }
            Err(failed.into())
        }
    }
}

/// A line for whoever ran it; under a keybinding (no terminal) a short notification.
async fn said(out: &mut Out, line: &str) -> anyhow::Result<Exit> {
    writeln!(out, "{line}")?;
    if !std::io::stdout().is_terminal() {
        super::progress::note("familiar", line).await;
    }
    Ok(Exit::Completed)
}

/// A failure on stderr, and under a keybinding on screen.
async fn report(f: Failure) -> anyhow::Result<Exit> {
    if !std::io::stdout().is_terminal() {
        super::progress::error("familiar: approve", &f.message).await;
    }
    f.report()
}
