//! Approval requests as desktop notifications that any server can answer: buttons
//! where the server draws them (GNOME, KDE, swaync: Approve, Deny, the task's timed
//! grant when the request has a scope, labelled with it), and on every server a `default` action, the click, that opens the choices
//! in the user's launcher (mako, dunst and fnott draw no buttons).
//!
//! Invariant: only our notification's signals answer its request: an action answers
//! as it says; a click opens the chooser and only a choice picked there answers (a
//! chooser dismissed puts the notification back); the user dismissing the
//! notification denies at once (fail closed, no silent wait for the timeout); a close
//! the server or familiar made (expired, withdrawn) answers nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use familiar_protocol::display::LONG_VALUE_BYTES;
use familiar_protocol::display::chooser::{GRANT_FOR, parse};
use familiar_protocol::ids::RequestId;
use tokio_util::sync::CancellationToken;
use zbus::Connection;

use super::{Answer, ApprovalBroker, ApprovalRequest, Frontend, chooser};
use crate::dbus::notifications::{
    self, ACTION_DEFAULT, CLOSED_DISMISSED, Capabilities, NotificationsProxy, Shown, Signal,
    Signals, show,
};
use crate::launcher::{CurrentMenu, Menu};

/// Action keys on approval notifications.
pub const ACTION_APPROVE: &str = "approve";
pub const ACTION_DENY: &str = "deny";
/// The timed grant: this task's calls of the request's scope for [`GRANT_FOR`]
/// (offered only when the request has one; the broker refuses it otherwise).
pub const ACTION_ALLOW_FOR: &str = "allow-10min";

/// Who answered, as the `approval_resolved` event says it.
const BY_ACTION: &str = "notification";
const BY_CHOOSER: &str = "notification chooser";
const BY_DISMISS: &str = "notification dismissed";

/// The answer an action key stands for, on request `r`: the timed grant only where
/// it was offered (a server that invokes it anyway answers nothing, and the request
/// still waits for an answer it can take).
pub fn answer_for(r: &ApprovalRequest, action_key: &str) -> Option<Answer> {
    match action_key {
        ACTION_APPROVE => Some(Answer::Approve),
        ACTION_DENY => Some(Answer::Deny),
        ACTION_ALLOW_FOR => r.grant.scope().map(|_| Answer::ApproveFor(GRANT_FOR)),
        _ => None,
    }
}

/// Shows approval requests as notifications with actions.
pub struct NotificationFrontend {
    conn: Connection,
    /// The menu a click opens, as config.toml says it when the request comes.
    menu: CurrentMenu,
    /// Requests on screen: withdrawing one stops its watcher, which closes it.
    shown: Arc<Mutex<HashMap<RequestId, CancellationToken>>>,
}

impl NotificationFrontend {
    pub fn new(conn: Connection, menu: CurrentMenu) -> NotificationFrontend {
        NotificationFrontend {
            conn,
            menu,
            shown: Arc::new(Mutex::new(HashMap::new())),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Frontend for NotificationFrontend {
    fn present(&self, request: &ApprovalRequest, broker: &ApprovalBroker) -> bool {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let stop = CancellationToken::new();
        lock(&self.shown).insert(request.request_id.clone(), stop.clone());
        let menu = (self.menu)();
        let (conn, request, broker, shown) = (
            self.conn.clone(),
            request.clone(),
            broker.clone(),
            Arc::clone(&self.shown),
        );
        handle.spawn(async move {
            if let Err(e) = watch(&conn, &request, &broker, &stop, &menu).await {
                tracing::info!(request_id = %request.request_id, "no approval notification: {e}");
            }
            lock(&shown).remove(&request.request_id);
        });
        // Whether a notification server answers is known only later; when none does,
        // the other frontends or the timeout decide.
        true
    }

    fn withdraw(&self, request_id: &RequestId) {
        if let Some(stop) = lock(&self.shown).remove(request_id) {
            stop.cancel();
        }
    }
}

/// Characters of the call's first line, and of the reason, in the first lines.
const FIRST_LINE_CHARS: usize = 72;

/// The notification's text. Its first lines fit mako's default box (300 × 100 px:
/// five lines of about 36 characters, the summary included): what will run (the
/// call's first line, cut at [`FIRST_LINE_CHARS`]), why it asks (the policy's
/// conclusion), how to answer. Then, when cut, the whole call and reason as every
/// approval surface shows them.
fn texts(r: &ApprovalRequest, caps: Capabilities, note: Option<&str>) -> (String, String) {
    let tool = familiar_protocol::display::visible(&r.tool);
    let summary = format!("familiar: allow {tool}?");
    let first = r.summary.lines().next().unwrap_or_default();
    let reason = familiar_protocol::display::visible(&r.reason);
    let how = if caps.actions {
        "click: choose · dismiss: deny"
    } else {
        "familiar approve --dmenu · dismiss: deny"
    };
    let mut body = format!("{}\nwhy: {}\n{how}", cut(first), cut(short_reason(&reason)));
    if let Some(note) = note {
        body = format!("{note}\n{body}");
    }
    if review_only(r) {
        body.push_str(&format!(
            "\nthe call is longer than a notification shows ({} bytes): Review opens all of it",
            r.summary.len()
        ));
    } else if first.chars().count() > FIRST_LINE_CHARS {
        body.push_str(&format!(
            "\nthe whole call ({} tier):\n{}",
            r.tier, r.summary
        ));
    } else {
        for line in r.summary.lines().skip(1) {
            body.push('\n');
            body.push_str(line);
        }
    }
    if short_reason(&reason) != reason {
        body.push_str(&format!("\nwhy asking: {reason}"));
    }
    (summary, caps.body(&body))
}

/// Whether the call is longer than a notification shows ([`LONG_VALUE_BYTES`], what
/// every surface used to show of one argument), or cut even in the chooser: then the
/// notification offers Review (the chooser, with every character) and Deny, never
/// Approve.
pub(super) fn review_only(r: &ApprovalRequest) -> bool {
    r.summary.len() > LONG_VALUE_BYTES || familiar_protocol::display::is_cut(&r.summary)
}

/// `s`, cut at [`FIRST_LINE_CHARS`] with `…`.
fn cut(s: &str) -> String {
    if s.chars().count() <= FIRST_LINE_CHARS {
        return s.to_owned();
    }
    let head: String = s.chars().take(FIRST_LINE_CHARS).collect();
    format!("{head}…")
}

/// The policy's reasons read "`write_file` is a write tool: policy `default` asks
/// before write tools run"; the notification's first lines name the tool already, so
/// a long one keeps its conclusion.
fn short_reason(reason: &str) -> &str {
    match reason.split_once(": ") {
        Some((_, conclusion)) if reason.chars().count() > 48 && !conclusion.is_empty() => {
            conclusion
        }
        _ => reason,
    }
}

/// Shows the request (replacing `replaces` when not 0); returns the id.
async fn present(
    proxy: &NotificationsProxy<'_>,
    r: &ApprovalRequest,
    caps: Capabilities,
    replaces: u32,
    note: Option<&str>,
) -> zbus::Result<u32> {
    let (summary, body) = texts(r, caps, note);
    let actions = actions(r);
    let actions: Vec<&str> = actions.iter().map(String::as_str).collect();
    let shown = Shown {
        replaces,
        icon: "dialog-question",
        summary: &summary,
        body: &body,
        actions: &actions,
        urgency: 2,
        resident: true,
        expire_ms: 0,
    };
    show(proxy, &shown).await
}

/// The notification's actions, keys and labels alternating: the choices, the timed
/// grant only for a request that has a scope (labelled with it), and for what the
/// notification cannot show whole only Review and Deny.
fn actions(r: &ApprovalRequest) -> Vec<String> {
    // What the notification cannot show whole is not approved from it.
    if review_only(r) {
        return [ACTION_DEFAULT, "Review…", ACTION_DENY, "Deny"]
            .map(str::to_owned)
            .to_vec();
    }
    let mut all = [
        ACTION_DEFAULT,
        "Choose…",
        ACTION_APPROVE,
        "Approve",
        ACTION_DENY,
        "Deny",
    ]
    .map(str::to_owned)
    .to_vec();
    if let Some(grant) = r.grant.label() {
        all.extend([ACTION_ALLOW_FOR.to_owned(), grant]);
    }
    all
}

/// Shows one request and waits for an action, a dismissal, or `stop`.
async fn watch(
    conn: &Connection,
    r: &ApprovalRequest,
    broker: &ApprovalBroker,
    stop: &CancellationToken,
    menu: &Menu,
) -> zbus::Result<()> {
    let proxy = NotificationsProxy::new(conn).await?;
    // Subscribe before showing, so a fast click is not missed.
    let mut signals = notifications::signals(conn).await?;
    let caps = Capabilities::read(&proxy).await;
    let mut id = present(&proxy, r, caps, 0, None).await?;
    loop {
        let signal = tokio::select! {
            biased;
            () = stop.cancelled() => {
                // Answered elsewhere or timed out: take the question down.
                close(&proxy, id).await;
                return Ok(());
            }
            s = signals.recv() => match s {
                Some(s) => s,
                None => return Ok(()),
            },
        };
        match signal {
            Signal::Action { id: of, key } if of == id && key == ACTION_DEFAULT => {
                // A click. mako closes the notification (as dismissed) right after
                // this: that close is not a denial, the chooser is the answer.
                let note = match choose(r, stop, &mut signals, menu).await {
                    Chosen::Answered(answer) => {
                        respond(broker, r, answer, BY_CHOOSER);
                        close(&proxy, id).await;
                        return Ok(());
                    }
                    Chosen::Stopped => {
                        close(&proxy, id).await;
                        return Ok(());
                    }
                    Chosen::Nothing => None,
                    Chosen::Failed(why) => Some(why),
                };
                // Put the question back (the server may have taken it down).
                id = present(&proxy, r, caps, id, note.as_deref()).await?;
            }
            Signal::Action { id: of, key } if of == id => {
                let Some(answer) = answer_for(r, &key) else {
                    continue;
                };
                respond(broker, r, answer, BY_ACTION);
                // It is `resident`: the server keeps it, buttons live, after an action;
                // answered, it goes.
                close(&proxy, id).await;
                return Ok(());
            }
            Signal::Closed { id: of, reason } if of == id => {
                if reason == CLOSED_DISMISSED {
                    // Dismissed: a denial, now, rather than a silent wait.
                    respond(broker, r, Answer::Deny, BY_DISMISS);
                }
                return Ok(());
            }
            Signal::Action { .. } | Signal::Closed { .. } => {}
        }
    }
}

/// What the chooser came to.
enum Chosen {
    Answered(Answer),
    /// Dismissed, or a line that is no choice: the request still waits.
    Nothing,
    /// The request was answered elsewhere meanwhile.
    Stopped,
    /// No launcher could be run: what to tell the person.
    Failed(String),
}

/// Opens the chooser for `r`; signals that arrive meanwhile are for the notification
/// the click took down, and are dropped.
async fn choose(
    r: &ApprovalRequest,
    stop: &CancellationToken,
    signals: &mut Signals,
    menu: &Menu,
) -> Chosen {
    let grant = r.grant.label();
    let lines = familiar_protocol::display::chooser::menu(&r.summary, &r.reason, grant.as_deref());
    let picked = tokio::select! {
        () = stop.cancelled() => return Chosen::Stopped,
        p = crate::launcher::pick(menu, "approve> ", &lines) => p,
    };
    signals.clear();
    match picked {
        Ok(Some(line)) => match parse(&line, &r.summary, grant.as_deref()) {
            Some(choice) => Chosen::Answered(chooser::answer(choice)),
            None => Chosen::Nothing,
        },
        Ok(None) => Chosen::Nothing,
        Err(e) => {
            tracing::warn!(request_id = %r.request_id, "approval chooser: {e}");
            Chosen::Failed(format!(
                "the launcher did not open ({e}); answer with the buttons, `familiar approve --dmenu` or `familiar approve {}`",
                r.request_id
            ))
        }
    }
}

fn respond(broker: &ApprovalBroker, r: &ApprovalRequest, answer: Answer, by: &str) {
    if let Err(e) = broker.respond(&r.request_id, answer, by) {
        tracing::debug!("notification answer came too late: {e}");
    }
}

async fn close(proxy: &NotificationsProxy<'_>, id: u32) {
    if let Err(e) = proxy.close_notification(id).await {
        tracing::debug!("closing notification {id}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use familiar_protocol::display::chooser::Choice;
    use familiar_protocol::ids::{SessionId, SoulId, TaskId};
    use familiar_protocol::tier::Tier;

    use super::*;

    fn request(summary: &str) -> ApprovalRequest {
        ApprovalRequest {
            request_id: RequestId::generate(),
            task_id: TaskId::generate(),
            session_id: SessionId::generate(),
            soul: SoulId::new("s").unwrap(),
            tool: "shell".into(),
            tier: Tier::Execute,
            args: serde_json::json!({}),
            summary: summary.into(),
            reason: "policy asks".into(),
            grant: crate::approval::Grantable::Within(crate::approval::Scope {
                tool: "shell".into(),
                action: None,
                about: crate::approval::About::Any,
            }),
        }
    }

    const PLAIN: Capabilities = Capabilities {
        markup: false,
        actions: true,
    };

    #[test]
    fn what_runs_why_and_how_come_first() {
        let (summary, body) = texts(&request("shell: du -sh ~\n  cwd: /tmp"), PLAIN, None);
        assert_eq!(summary, "familiar: allow shell?");
        assert_eq!(
            body,
            "shell: du -sh ~\nwhy: policy asks\nclick: choose · dismiss: deny\n  cwd: /tmp"
        );
        let mut long = request("shell: ls");
        long.reason =
            "`shell` is an execute tool: policy `default` asks before execute tools run".into();
        let (_, body) = texts(&long, PLAIN, None);
        assert_eq!(
            body,
            "shell: ls\nwhy: policy `default` asks before execute tools run\nclick: choose · dismiss: deny\nwhy asking: `shell` is an execute tool: policy `default` asks before execute tools run"
        );
    }

    #[test]
    fn a_long_first_line_is_cut_up_front_and_shown_whole_below() {
        let call = format!("shell: {}", "x".repeat(100));
        let (_, body) = texts(&request(&call), PLAIN, None);
        let lines: Vec<&str> = body.lines().collect();
        assert_eq!(lines[0].chars().count(), FIRST_LINE_CHARS + 1, "{body}");
        assert!(lines[0].ends_with('…'));
        assert_eq!(lines[1], "why: policy asks");
        assert_eq!(lines.last(), Some(&call.as_str()));
    }

    /// Regression: a 2,245-byte command was shown as head + "[709 bytes not shown …]" +
    /// tail on every surface, and the hidden `; touch marker ;` ran once approved. Every
    /// surface now has the whole text, or offers no approval: the notification Review
    /// (the chooser), the chooser and the terminal every character.
    #[test]
    fn a_long_call_hides_nothing_and_is_not_approved_from_a_notification() {
        let pad = "echo harmless-looking-output-line ".repeat(30);
        let command = format!("{pad}; touch marker ; {pad}");
        assert_eq!(command.len(), 2_057);
        let command = format!("{command}{}", " ".repeat(2_245 - command.len()));
        let args = serde_json::json!({ "command": command });
        let capped = crate::approval::describe_call("shell", &args);
        assert!(!capped.contains("touch marker"), "the old rendering hid it");

        let mut r = request(&crate::approval::render::describe_call_whole(
            "shell", &args,
        ));
        r.args = args;
        assert!(r.summary.contains("; touch marker ;"));
        assert!(!familiar_protocol::display::is_cut(&r.summary));
        // The notification: Review and Deny, never Approve.
        assert!(review_only(&r));
        let (_, body) = texts(&r, PLAIN, None);
        assert!(body.contains("Review opens all of it"), "{body}");
        // The chooser: every character, on lines a launcher shows whole.
        let menu = familiar_protocol::display::chooser::menu(
            &r.summary,
            &r.reason,
            r.grant.label().as_deref(),
        );
        let shown: String = menu.iter().filter_map(|l| l.strip_prefix("│ ")).collect();
        assert!(shown.contains("; touch marker ;"));
        assert!(menu.iter().all(|l| l.chars().count() <= 102), "{menu:?}");
        assert_eq!(parse("Approve", &r.summary, None), Some(Choice::Approve));
        // The terminal: the whole text.
        assert!(crate::approval::prompt_text(&r).contains("; touch marker ;"));

        // Past what any surface shows whole: cut, and approved from none.
        let huge = serde_json::json!({ "command": "x".repeat(familiar_protocol::display::REVIEW_MAX_BYTES + 1) });
        let cut = request(&crate::approval::render::describe_call_whole(
            "shell", &huge,
        ));
        assert!(familiar_protocol::display::is_cut(&cut.summary));
        assert!(review_only(&cut));
        assert_eq!(parse("Approve", &cut.summary, None), None);
        assert!(
            !familiar_protocol::display::chooser::menu(&cut.summary, "r", None)
                .contains(&"Approve".to_owned())
        );
        assert_eq!(
            actions(&cut),
            ["default", "Review…", "deny", "Deny"],
            "no grant either"
        );
    }

    // Regression (issue 39): the notification offered "Allow … for this task" on every
    // request; it offers the grant only with its scope, in the scope's words.
    #[test]
    fn the_grant_button_is_the_scopes_or_none() {
        let mut r = request("shell: ls");
        assert_eq!(
            actions(&r),
            [
                "default",
                "Choose…",
                "approve",
                "Approve",
                "deny",
                "Deny",
                "allow-10min",
                "Allow shell for this task (10 min)"
            ]
        );
        assert_eq!(
            answer_for(&r, ACTION_ALLOW_FOR),
            Some(Answer::ApproveFor(GRANT_FOR))
        );
        r.grant = crate::approval::Grantable::Never("system_critical".into());
        assert_eq!(
            actions(&r),
            ["default", "Choose…", "approve", "Approve", "deny", "Deny"]
        );
        assert_eq!(answer_for(&r, ACTION_ALLOW_FOR), None);
    }
}
