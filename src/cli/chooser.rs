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

use super::client::{Failure, block_on, connect};
use super::{Exit, Out};
use crate::approval::chooser::{self, Choice};
use crate::dbus::proxy::Agent1Proxy;
use crate::store::TaskStatus;

/// One request waiting for an answer, as `GetTask` lists it.
#[derive(Debug, serde::Deserialize)]
struct Waiting {
    request_id: String,
    summary: String,
    #[serde(default)]
    reason: String,
    /// The timed grant's label; none from an older daemon, or for a request that is
    /// always asked: then no grant is offered.
    #[serde(default)]
    grant: Option<String>,
    /// The task's prompt (filled in here, not by the daemon).
    #[serde(skip)]
    prompt: String,
}

pub fn approve_dmenu(request: Option<&str>, out: &mut Out) -> anyhow::Result<Exit> {
    block_on(async {
        let (_conn, proxy) = match connect().await {
            Ok(v) => v,
            Err(f) => return report(f).await,
        };
        let mut waiting = match pending(&proxy).await {
            Ok(w) => w,
            Err(e) => return report(super::client::classify(e)).await,
        };
        if let Some(id) = request {
            waiting.retain(|w| w.request_id == id);
        }
        let chosen = match waiting.len() {
            0 => {
                let what = match request {
                    Some(id) => format!("request {id} no longer waits (answered or timed out)"),
                    None => "nothing waits for your answer".to_owned(),
                };
                return said(out, &what).await;
            }
            1 => waiting.swap_remove(0),
            _ => match pick_request(waiting).await? {
                Some(w) => w,
                None => return said(out, "nothing chosen: the requests still wait").await,
            },
        };
        answer(&proxy, &chosen, out).await
    })?
}

/// Every pending request of every running task, oldest task first.
async fn pending(proxy: &Agent1Proxy<'_>) -> Result<Vec<Waiting>, crate::dbus::Error> {
    let mut all = Vec::new();
    for (id, _, status, _) in proxy.list_tasks().await? {
        if status.parse() != Ok(TaskStatus::Running) {
            continue;
        }
        // Ended between the two calls: nothing waits there.
        let Ok(json) = proxy.get_task(&id).await else {
            continue;
        };
        let task: serde_json::Value = serde_json::from_str(&json).unwrap_or_default();
        let prompt = task["prompt"].as_str().unwrap_or_default().to_owned();
        let list: Vec<Waiting> =
            serde_json::from_value(task["approvals"].clone()).unwrap_or_default();
        all.extend(list.into_iter().map(|mut w| {
            w.prompt.clone_from(&prompt);
            w
        }));
    }
    Ok(all)
}

/// Which request to answer, when several wait.
async fn pick_request(waiting: Vec<Waiting>) -> anyhow::Result<Option<Waiting>> {
    let lines: Vec<String> = waiting
        .iter()
        .map(|w| {
            let first = w.summary.lines().next().unwrap_or_default();
            format!(
                "{}  {}  ({})",
                w.request_id,
                crate::approval::terminal_safe(first),
                super::progress::title(&w.prompt)
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
    Ok(waiting.into_iter().find(|w| w.request_id == id))
}

/// Shows the request's choices and sends the one picked.
async fn answer(proxy: &Agent1Proxy<'_>, w: &Waiting, out: &mut Out) -> anyhow::Result<Exit> {
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
        Choice::Approve => proxy.respond(&w.request_id, true).await,
        Choice::Deny => proxy.respond(&w.request_id, false).await,
        Choice::GrantTask => {
            let secs = u32::try_from(crate::approval::GRANT_FOR.as_secs()).unwrap_or(600);
            proxy.grant(&w.request_id, secs).await
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
            crate::approval::terminal_safe(w.grant.as_deref().unwrap_or_default())
        ),
    };
    writeln!(out, "{line}")?;
    Ok(Exit::Completed)
}

async fn launcher(prompt: &str, lines: &[String]) -> anyhow::Result<Option<String>> {
    match crate::launcher::pick(&crate::launcher::Menu::for_client(), prompt, lines).await {
        Ok(picked) => Ok(picked),
        Err(e) => {
            let message = format!("approve --dmenu: {e}");
            if !std::io::stdout().is_terminal() {
                super::progress::error("familiar: approve", &message).await;
            }
            anyhow::bail!(message)
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
