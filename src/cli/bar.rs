//! `familiar bar [--plain]`: a status-bar module. One line per change: waybar's
//! custom-module JSON (`text`, `alt`, `tooltip`, `class`, `percentage`), or with
//! `--plain` the text alone (i3blocks, yambar, a script). States: `off` (no daemon),
//! `idle`, `working` (how many tasks), `asking` (an approval waits), `failed` (the last
//! task failed; until the next task starts). The tooltip lists the running tasks and
//! what each does now, and the last finished task that can be undone (`GetTask`'s
//! `undoable`, asked once when a task finishes): `↶ undo: familiar undo t-…`.
//!
//! waybar renders Pango markup in `text` and `tooltip`: both are markup-escaped
//! (`&`, `<`, `>`, as a notification's body is), so a prompt's `<span size="1">` shows
//! as written and cannot hide or restyle what the bar says.
//!
//! Invariant: driven by the bus only. It never polls and never starts the daemon (no
//! method call while nothing owns the name): it wakes for the daemon's signals, of the
//! kinds that change what it shows (no `text_delta`), and for the name's owner
//! changing, and prints only when its line changes. It never exits for want of a bus
//! (a bar module that exits leaves its slot empty): without one it shows `off` with the
//! cause and waits for the bus to appear ([`super::bus_wait`]), then goes on.

use std::io::Write;

use familiar_protocol::board::Board;
use familiar_protocol::display::{escape_markup, terminal_safe, visible};
use familiar_protocol::events::EventPayload;
use familiar_protocol::proxy::Agent1Proxy;
use familiar_protocol::task::{Outcome, TaskStatus};
use futures::StreamExt;
use futures::stream::{BoxStream, select_all};
use zbus::Connection;

use super::bus_wait::BusWait;
use super::client::classify;
use super::{Exit, Out};

/// The event kinds that change what the bar shows.
const KINDS: &[&str] = &[
    "task_started",
    "tool_call_started",
    "tool_call_finished",
    "approval_requested",
    "approval_resolved",
    "model_progress",
    "subagent_started",
];

/// What the bar knows.
#[derive(Debug, Default)]
struct State {
    up: bool,
    /// The daemon's tasks: which run (sub-tasks are not counted: their parent is),
    /// what each does, which approvals wait.
    board: Board,
    /// The last task's failure, until the next task starts.
    failed: Option<String>,
    /// The last finished task that can be undone, and what it changed.
    undo: Option<(String, String)>,
    percentage: u64,
    /// Why there is no session bus, while there is none.
    no_bus: Option<String>,
}

/// What a wake-up brought.
enum Update {
    Owner(bool),
    Event(String, String, String),
    Finished(String, String, String),
}

/// How following the daemon ended.
enum Stop {
    /// The bar's reader is gone: nothing more to do.
    Output(std::io::Error),
    /// The bus went away or refused what the bar asked.
    Bus(zbus::Error),
}

impl From<zbus::Error> for Stop {
    fn from(e: zbus::Error) -> Stop {
        Stop::Bus(e)
    }
}

impl From<zbus::fdo::Error> for Stop {
    fn from(e: zbus::fdo::Error) -> Stop {
        Stop::Bus(e.into())
    }
}

pub fn bar(plain: bool, out: &mut Out) -> anyhow::Result<Exit> {
    super::client::block_on(async {
        let address = super::bus_wait::address();
        let mut last = String::new();
        loop {
            // Watching before connecting: a bus that appears in between still wakes it.
            let mut wait = BusWait::new(&address);
            let why = match Connection::session().await {
                Ok(conn) => match follow(&conn, plain, &mut last, out).await {
                    Ok(()) => "the session bus went away".to_owned(),
                    Err(Stop::Output(e)) => return Err(e.into()),
                    Err(Stop::Bus(e)) => classify(e).message,
                },
                Err(e) => format!("no session bus at {address} ({e})"),
            };
            tracing::debug!("familiar bar: {why}");
            let off = State {
                no_bus: Some(why),
                ..State::default()
            };
            show(&render(&off, plain), &mut last, out).map_err(anyhow::Error::from)?;
            wait.changed().await;
        }
    })?
}

/// Prints `line` when it is not the last one printed.
fn show(line: &str, last: &mut String, out: &mut Out) -> std::io::Result<()> {
    if line != last {
        writeln!(out, "{line}")?;
        out.flush()?;
        line.clone_into(last);
    }
    Ok(())
}

async fn follow(
    conn: &Connection,
    plain: bool,
    last: &mut String,
    out: &mut Out,
) -> Result<(), Stop> {
    let dbus = zbus::fdo::DBusProxy::new(conn).await?;
    let proxy = Agent1Proxy::new(conn).await?;
    let mut updates = subscribe(&dbus, &proxy).await?;
    let mut state = State::default();
    let name = zbus::names::BusName::try_from(familiar_protocol::NAME)?;
    if dbus.name_has_owner(name).await? {
        load(&proxy, &mut state).await;
    }
    loop {
        show(&render(&state, plain), last, out).map_err(Stop::Output)?;
        let Some(update) = updates.next().await else {
            return Ok(());
        };
        match update {
            Update::Owner(true) => load(&proxy, &mut state).await,
            Update::Owner(false) => state = State::default(),
            Update::Event(task, kind, payload) => event(&mut state, &task, &kind, &payload),
            Update::Finished(task, status, result) => {
                let top = state
                    .board
                    .get(&task)
                    .is_some_and(|c| c.top_level() && c.unfinished());
                finished(&mut state, &task, &status, &result);
                if top && let Some(changes) = undoable(&proxy, &task).await {
                    state.undo = Some((task, changes));
                }
            }
        }
    }
}

/// Every stream the bar wakes for, merged; subscribed before the state is read.
async fn subscribe(
    dbus: &zbus::fdo::DBusProxy<'_>,
    proxy: &Agent1Proxy<'static>,
) -> zbus::Result<BoxStream<'static, Update>> {
    let mut streams: Vec<BoxStream<'static, Update>> = Vec::new();
    let owner = dbus
        .receive_name_owner_changed_with_args(&[(0, familiar_protocol::NAME)])
        .await?;
    streams.push(
        owner
            .filter_map(|s| async move {
                let a = s.args().ok()?;
                Some(Update::Owner(a.new_owner().is_some()))
            })
            .boxed(),
    );
    for kind in KINDS {
        let events = proxy.receive_task_event_with_args(&[(1, kind)]).await?;
        streams.push(
            events
                .filter_map(|s| async move {
                    let a = s.args().ok()?;
                    Some(Update::Event(a.task_id, a.kind, a.payload_json))
                })
                .boxed(),
        );
    }
    let finished = proxy.receive_task_finished().await?;
    streams.push(
        finished
            .filter_map(|s| async move {
                let a = s.args().ok()?;
                Some(Update::Finished(a.task_id, a.status, a.result))
            })
            .boxed(),
    );
    Ok(select_all(streams).boxed())
}

/// The daemon's tasks and pending approvals now (it just appeared, or the bar started).
async fn load(proxy: &Agent1Proxy<'_>, state: &mut State) {
    *state = State {
        up: true,
        ..State::default()
    };
    let Ok(board) = Board::load(proxy).await else {
        return;
    };
    // The newest finished task, if it can be undone.
    let newest = board.tasks().filter(|c| !c.unfinished()).last();
    if let Some(card) = newest
        && card.top_level()
        && let Some(changes) = &card.undo
    {
        state.undo = Some((card.id.clone(), changes.clone()));
    }
    state.board = board;
}

/// What a top-level task changed outside its workspace, when it can be undone.
async fn undoable(proxy: &Agent1Proxy<'_>, task: &str) -> Option<String> {
    let v = proxy.get_task(task).await.ok()?;
    match v.parent_task {
        None => v.undo().map(str::to_owned),
        Some(_) => None,
    }
}

fn event(state: &mut State, task: &str, kind: &str, payload: &str) {
    state.up = true;
    let Ok(p) = EventPayload::from_signal(kind, payload) else {
        return;
    };
    match &p {
        EventPayload::TaskStarted { .. } if state.board.get(task).is_none_or(|c| c.top_level()) => {
            state.failed = None;
        }
        EventPayload::ModelProgress {
            processed, total, ..
        } if *total > 0 => state.percentage = processed.saturating_mul(100) / total,
        _ => {}
    }
    state.board.event(task, &p);
}

fn finished(state: &mut State, task: &str, status: &str, result: &str) {
    let Some(card) = state
        .board
        .get(task)
        .filter(|c| c.top_level() && c.unfinished())
    else {
        state.board.finished(task, status, result);
        return;
    };
    let title = card.title();
    state.board.finished(task, status, result);
    state.percentage = 0;
    let failed = status
        .parse::<TaskStatus>()
        .is_ok_and(|s| matches!(s.outcome(), Outcome::Failed | Outcome::Limit));
    if failed {
        let first = result.lines().next().unwrap_or_default();
        state.failed = Some(format!("{title}: {}", terminal_safe(first)));
    }
}

/// The state as one line: waybar's JSON, or the text alone.
fn render(state: &State, plain: bool) -> String {
    // By id, as the line always listed them.
    let mut running: Vec<_> = state.board.running().collect();
    running.sort_by(|a, b| a.id.cmp(&b.id));
    let n = running.len();
    let asking = state.board.waiting().count();
    let (alt, text) = if state.no_bus.is_some() && plain {
        ("off", "off (no session bus)".to_owned())
    } else if !state.up {
        ("off", "off".to_owned())
    } else if asking > 0 {
        ("asking", format!("asking ({asking})"))
    } else if n > 0 {
        ("working", format!("working ({n})"))
    } else if state.failed.is_some() {
        ("failed", "failed".to_owned())
    } else {
        ("idle", "idle".to_owned())
    };
    if plain {
        return format!("familiar: {text}");
    }
    let mut tooltip: Vec<String> = running
        .iter()
        .map(|c| format!("{} {}: {}", c.id, c.title(), c.doing))
        .collect();
    if asking > 0 {
        tooltip.push("click to answer: familiar approve --dmenu".to_owned());
    }
    if let Some(f) = &state.failed {
        tooltip.push(format!("last task failed: {f}"));
    }
    if let Some(why) = &state.no_bus {
        tooltip.push(format!(
            "{why}: waiting for it; familiar starts when asked once it is there"
        ));
    }
    if tooltip.is_empty() {
        tooltip.push(match alt {
            "off" => "familiar is not running (it starts when asked)".to_owned(),
            _ => "familiar: nothing running".to_owned(),
        });
    }
    if let Some((id, changes)) = state.undo.as_ref().filter(|_| state.up) {
        let changes = visible(changes);
        tooltip.push(format!("↶ undo: familiar undo {id} ({changes})"));
    }
    let percentage = if n > 0 { state.percentage } else { 0 };
    serde_json::json!({
        "text": escape_markup(&text),
        "alt": alt,
        "tooltip": escape_markup(&tooltip.join("\n")),
        "class": alt,
        "percentage": percentage,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up() -> State {
        State {
            up: true,
            ..State::default()
        }
    }

    #[test]
    fn a_task_then_a_question_then_idle() {
        let mut s = up();
        assert_eq!(render(&s, true), "familiar: idle");
        event(
            &mut s,
            "t-1",
            "task_started",
            r#"{"soul":"s","prompt":"how full is my disk","origin":"cli","model":"m","workspace":"/w","max_iterations":5,"sandbox":{}}"#,
        );
        let line: serde_json::Value = serde_json::from_str(&render(&s, false)).unwrap();
        assert_eq!(line["alt"], "working");
        assert_eq!(line["text"], "working (1)");
        assert_eq!(
            line["tooltip"],
            "t-1 familiar: “how full is my disk”: thinking"
        );
        event(
            &mut s,
            "t-1",
            "approval_requested",
            r#"{"request_id":"r-1","call_id":"c","tool":"shell","summary":"shell: du","tier":"execute","reason":"r"}"#,
        );
        assert_eq!(render(&s, true), "familiar: asking (1)");
        event(
            &mut s,
            "t-1",
            "approval_resolved",
            r#"{"request_id":"r-1","call_id":"c","approved":false,"outcome":{"outcome":"denied"}}"#,
        );
        finished(&mut s, "t-1", "failed", "no model\nmore");
        let line: serde_json::Value = serde_json::from_str(&render(&s, false)).unwrap();
        assert_eq!(line["class"], "failed");
        assert_eq!(
            line["tooltip"],
            "last task failed: familiar: “how full is my disk”: no model"
        );
    }

    // Regression (issue 39): `<span size="1">hidden</span>` in a prompt reached waybar's
    // tooltip as markup, hiding text; it is shown as written.
    #[test]
    fn a_prompts_markup_is_escaped_in_waybars_line() {
        let mut s = up();
        event(
            &mut s,
            "t-1",
            "task_started",
            r#"{"soul":"s","prompt":"a & b <span size=\"1\">hidden</span>","origin":"cli","model":"m","workspace":"/w","max_iterations":5,"sandbox":{}}"#,
        );
        finished(&mut s, "t-1", "failed", "<b>x</b> & y");
        let line: serde_json::Value = serde_json::from_str(&render(&s, false)).unwrap();
        let tooltip = line["tooltip"].as_str().unwrap();
        assert_eq!(
            tooltip,
            "last task failed: familiar: “a &amp; b &lt;span size=\"1\"&gt;hidden&lt;/span&gt;”: &lt;b&gt;x&lt;/b&gt; &amp; y"
        );
        assert!(
            !tooltip.contains('<') && !tooltip.contains('>'),
            "{tooltip}"
        );
        assert_eq!(line["text"], "failed");
    }

    #[test]
    fn the_last_undoable_task_is_a_tooltip_line() {
        let s = State {
            undo: Some(("t-7".to_owned(), "changed 1 file, trashed 2".to_owned())),
            ..up()
        };
        let line: serde_json::Value = serde_json::from_str(&render(&s, false)).unwrap();
        assert_eq!(
            line["tooltip"],
            "familiar: nothing running\n↶ undo: familiar undo t-7 (changed 1 file, trashed 2)"
        );
        assert_eq!(line["alt"], "idle");
    }

    #[test]
    fn no_daemon_is_off() {
        assert_eq!(render(&State::default(), true), "familiar: off");
        let no_bus = State {
            no_bus: Some("no session bus at unix:path=/x/bus (refused)".to_owned()),
            ..State::default()
        };
        assert_eq!(render(&no_bus, true), "familiar: off (no session bus)");
    }
}
