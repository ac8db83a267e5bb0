//! `familiar ask --notify`: one notification per task, from the key press to the
//! answer. It names the request (its first words), says what the task does now
//! ("reading the prompt 40 %", "running shell: du -sh ~", "waiting for your answer",
//! "thinking"), is updated in place (`replaces_id`) at most twice a second, and is
//! replaced by the answer, or by the failure and what to do, when the task ends. The
//! result expires after the daemon's `[notifications] result_timeout`; its `default`
//! action (a click) shows the whole answer in the launcher. A task that changed files
//! outside its workspace says so in one more line, with an **Undo** action ([`undo`]).
//! Errors before a task exists are notifications too ([`failure`]).
//!
//! Invariant: every text shown is the model's or the call's made visible and escaped
//! for the server ([`Capabilities::body`]); a notification that cannot be shown is a
//! warning on stderr, once, never a failed command.

use std::io::Write;
use std::time::{Duration, Instant};

use familiar_protocol::task::TaskStatus;
use zbus::Connection;

use crate::dbus::notifications::{
    ACTION_DEFAULT, Capabilities, NotificationsProxy, Shown, Signal, Signals, show,
};

mod undo;

use undo::ACTION_UNDO;
pub(super) use undo::Undo;

/// At most one update per this, so a fast task does not flicker and a busy one does
/// not flood the server.
pub(super) const MIN_UPDATE: Duration = Duration::from_millis(500);
/// Characters of the answer in the result notification; a click shows the rest.
const RESULT_CHARS: usize = 400;
/// How long a result stays when the daemon does not say (`result_timeout`'s default).
pub(super) const DEFAULT_RESULT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a note stays.
const NOTE_FOR: Duration = Duration::from_secs(5);
/// Characters of a line in the launcher showing a whole answer.
const WRAP: usize = 90;

/// The request's first words, and what a task does now: the protocol crate's words,
/// the same in every client.
pub(super) use familiar_protocol::display::{doing, title};

/// A task's notification while `ask --notify` follows it.
pub(super) struct Progress {
    conn: Connection,
    caps: Capabilities,
    id: u32,
    title: String,
    /// Shown above what the task does (what `--context` took), unless empty.
    header: String,
    shown: String,
    /// A newer text, waiting for [`MIN_UPDATE`] to pass.
    pending: Option<String>,
    last: Instant,
}

impl Progress {
    /// Puts up the task's notification, `header` above what the task does; `None`
    /// (after one warning) when no server shows it.
    pub(super) async fn start(prompt: &str, header: &str) -> Option<Progress> {
        let started = async {
            let conn = Connection::session().await?;
            let proxy = NotificationsProxy::new(&conn).await?;
            let caps = Capabilities::read(&proxy).await;
            let title = title(prompt);
            let text = "thinking".to_owned();
            let body = caps.body(&with_header(header, &text));
            let id = show(&proxy, &progress_shown(0, &title, &body)).await?;
            Ok::<_, zbus::Error>(Progress {
                conn,
                caps,
                id,
                title,
                header: header.to_owned(),
                shown: text,
                pending: None,
                last: Instant::now(),
            })
        };
        match started.await {
            Ok(p) => Some(p),
            Err(e) => {
                warn(&format!("cannot show a notification: {e}"));
                None
            }
        }
    }

    /// Takes what the task does now; shown at once, or when [`Progress::due`].
    pub(super) async fn update(&mut self, text: String) {
        if text == self.shown || self.pending.as_ref() == Some(&text) {
            return;
        }
        self.pending = Some(text);
        if self.last.elapsed() >= MIN_UPDATE {
            self.flush().await;
        }
    }

    /// When the pending text is to be shown.
    pub(super) fn due(&self) -> Option<tokio::time::Instant> {
        self.pending
            .as_ref()
            .map(|_| tokio::time::Instant::from_std(self.last + MIN_UPDATE))
    }

    pub(super) async fn flush(&mut self) {
        let Some(text) = self.pending.take() else {
            return;
        };
        let body = self.caps.body(&with_header(&self.header, &text));
        let shown = async {
            let proxy = NotificationsProxy::new(&self.conn).await?;
            show(&proxy, &progress_shown(self.id, &self.title, &body)).await
        };
        match shown.await {
            Ok(id) => self.id = id,
            Err(e) => tracing::debug!("progress notification: {e}"),
        }
        self.shown = text;
        self.last = Instant::now();
    }

    /// Replaces the progress by the result (same id). With `wait`, stays until the
    /// notification is closed or expires, shows the whole answer when clicked, and
    /// undoes the task when its Undo is invoked (`undo`: the task has one).
    pub(super) async fn finish(
        self,
        status: TaskStatus,
        result: &str,
        expire: Duration,
        wait: bool,
        undo: Option<&Undo>,
    ) -> std::io::Result<()> {
        let done = async {
            let proxy = NotificationsProxy::new(&self.conn).await?;
            let mut signals = crate::dbus::notifications::signals(&self.conn).await?;
            let (summary, mut body, more) = result_texts(&self.title, status, result);
            // Nothing waits for a button the server cannot show.
            let button = wait && self.caps.actions;
            if let Some(u) = undo {
                body = format!("{body}\n{}", u.line(button));
            }
            let body = self.caps.body(&body);
            let mut actions: Vec<&str> = Vec::new();
            if more || status != TaskStatus::Completed {
                actions.extend([ACTION_DEFAULT, "Show all"]);
            }
            if button && undo.is_some() {
                actions.extend([ACTION_UNDO, "Undo"]);
            }
            let id = show(
                &proxy,
                &result_shown(self.id, &summary, &body, &actions, expire),
            )
            .await?;
            if wait && !actions.is_empty() {
                let answer = Answer {
                    id,
                    summary: &summary,
                    result,
                    undo,
                };
                wait_for_click(&proxy, &mut signals, expire, &answer).await?;
            }
            Ok::<_, zbus::Error>(())
        };
        if let Err(e) = done.await {
            warn(&format!("cannot show the answer as a notification: {e}"));
        }
        Ok(())
    }
}

impl Progress {
    /// The daemon refused the request or could not be reached: the notification says
    /// so and what to do, in place of the progress.
    pub(super) async fn refused(self, message: &str) {
        show_failure(Some(&self.conn), self.id, &not_asked(&self.title), message).await;
    }

    /// The task ended with nothing to show (skipped): the progress goes.
    pub(super) async fn close(self) {
        let closed = async {
            let proxy = NotificationsProxy::new(&self.conn).await?;
            proxy.close_notification(self.id).await
        };
        if let Err(e) = closed.await {
            tracing::debug!("closing the progress notification: {e}");
        }
    }

    /// The result when the progress could not be shown (no server then): tried once
    /// more, without waiting for a click.
    pub(super) async fn result_only(
        prompt: &str,
        status: TaskStatus,
        result: &str,
        expire: Duration,
    ) {
        if let Some(p) = Progress::start(prompt, "").await
            && let Err(e) = p.finish(status, result, expire, false, None).await
        {
            tracing::debug!("result notification: {e}");
        }
    }
}

/// Resolves at `due`, never when there is nothing due.
pub(super) async fn until(due: Option<tokio::time::Instant>) {
    match due {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

fn not_asked(title: &str) -> String {
    format!("{title}: not asked")
}

/// `text` under `header`, or alone when there is none.
fn with_header(header: &str, text: &str) -> String {
    match header {
        "" => text.to_owned(),
        h => format!("{h}\n{text}"),
    }
}

fn progress_shown<'a>(replaces: u32, title: &'a str, body: &'a str) -> Shown<'a> {
    Shown {
        replaces,
        icon: "system-run",
        summary: title,
        body,
        actions: &[],
        urgency: 1,
        resident: false,
        // Never expires while the task runs: the result replaces it.
        expire_ms: 0,
    }
}

fn result_shown<'a>(
    replaces: u32,
    summary: &'a str,
    body: &'a str,
    actions: &'a [&'a str],
    expire: Duration,
) -> Shown<'a> {
    Shown {
        replaces,
        icon: "",
        summary,
        body,
        actions,
        urgency: 1,
        resident: false,
        expire_ms: i32::try_from(expire.as_millis()).unwrap_or(i32::MAX),
    }
}

/// The result's summary and body, and whether the body was cut.
fn result_texts(title: &str, status: TaskStatus, result: &str) -> (String, String, bool) {
    let summary = match status {
        TaskStatus::Completed => title.to_owned(),
        other => format!("{title}: {other}"),
    };
    let text = familiar_protocol::display::terminal_safe(result.trim());
    let shown: String = text.chars().take(RESULT_CHARS).collect();
    let more = shown.len() < text.len();
    let mut body = if more { format!("{shown}…") } else { shown };
    if body.is_empty() {
        body = "(no answer: the model ended without any text)".to_owned();
    }
    if status != TaskStatus::Completed {
        body.push_str("\nclick for the whole message; `familiar tasks` and `familiar doctor` help");
    }
    (summary, body, more)
}

/// The answer as shown: its id, its summary, the whole answer, the task's undo.
struct Answer<'a> {
    id: u32,
    summary: &'a str,
    result: &'a str,
    undo: Option<&'a Undo>,
}

/// Waits for the result to be closed or to expire; a click shows the whole answer, its
/// Undo undoes the task and the outcome replaces the answer.
async fn wait_for_click(
    proxy: &NotificationsProxy<'_>,
    signals: &mut Signals,
    expire: Duration,
    answer: &Answer<'_>,
) -> zbus::Result<()> {
    // A server that never says it closed the notification must not keep us forever.
    let deadline = (!expire.is_zero()).then(|| tokio::time::Instant::now() + expire + MIN_UPDATE);
    let id = answer.id;
    loop {
        let signal = tokio::select! {
            s = signals.recv() => s,
            () = sleep_until(deadline) => return Ok(()),
        };
        match signal {
            None => return Ok(()),
            Some(Signal::Closed { id: of, .. }) if of == id => return Ok(()),
            Some(Signal::Action { id: of, key }) if of == id && key == ACTION_DEFAULT => {
                show_whole(proxy, answer.summary, answer.result).await?;
                return Ok(());
            }
            Some(Signal::Action { id: of, key }) if of == id && key == ACTION_UNDO => {
                let Some(undo) = answer.undo else { continue };
                let outcome = undo.run().await;
                let caps = Capabilities::read(proxy).await;
                let body = caps.body(&familiar_protocol::display::terminal_safe(&outcome));
                let n = result_shown(id, answer.summary, &body, &[], expire);
                show(proxy, &n).await?;
                return Ok(());
            }
            Some(_) => {}
        }
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// The whole answer, one line per wrapped line, in the launcher; where no launcher
/// runs, as a notification that stays until dismissed.
async fn show_whole(
    proxy: &NotificationsProxy<'_>,
    summary: &str,
    result: &str,
) -> zbus::Result<()> {
    let text = familiar_protocol::display::terminal_safe(result.trim());
    let lines: Vec<String> = text.lines().flat_map(|l| wrap(l, WRAP)).collect();
    match crate::launcher::pick(&crate::launcher::Menu::for_client(), "answer> ", &lines).await {
        Ok(_) => Ok(()),
        Err(e) => {
            tracing::debug!("no launcher for the whole answer: {e}");
            let caps = Capabilities::read(proxy).await;
            let body = caps.body(&text);
            show(proxy, &result_shown(0, summary, &body, &[], Duration::ZERO))
                .await
                .map(|_| ())
        }
    }
}

/// `line` cut into pieces of at most `width` characters, at spaces where it can.
fn wrap(line: &str, width: usize) -> Vec<String> {
    let mut out = vec![String::new()];
    for word in line.split(' ') {
        let Some(last) = out.last_mut() else { break };
        let len = last.chars().count();
        if len > 0 && len + 1 + word.chars().count() > width {
            out.push(word.to_owned());
        } else {
            if len > 0 {
                last.push(' ');
            }
            last.push_str(word);
        }
    }
    out
}

/// A failure before any task exists (the daemon cannot be reached, refused the
/// request, no launcher), as a notification saying what to do. It is also on stderr
/// (the caller's).
pub(super) async fn failure(prompt: Option<&str>, message: &str) {
    let summary = match prompt {
        Some(p) => not_asked(&title(p)),
        None => "familiar: not asked".to_owned(),
    };
    show_failure(None, 0, &summary, message).await;
}

/// A warning the person must see (the daemon runs with an older config.toml).
pub(super) async fn warning(message: &str) {
    error("familiar: warning", message).await;
}

/// An error, on screen until dismissed.
pub(super) async fn error(summary: &str, message: &str) {
    show_failure(None, 0, summary, message).await;
}

/// A short note that goes by itself (5 s).
pub(super) async fn note(summary: &str, message: &str) {
    let shown = async {
        let conn = Connection::session().await?;
        let proxy = NotificationsProxy::new(&conn).await?;
        let caps = Capabilities::read(&proxy).await;
        let body = caps.body(message);
        show(&proxy, &result_shown(0, summary, &body, &[], NOTE_FOR)).await
    };
    if let Err(e) = shown.await {
        warn(&format!("cannot show a notification: {e}"));
    }
}

async fn show_failure(conn: Option<&Connection>, replaces: u32, summary: &str, message: &str) {
    let shown = async {
        let conn = match conn {
            Some(c) => c.clone(),
            None => Connection::session().await?,
        };
        let proxy = NotificationsProxy::new(&conn).await?;
        let caps = Capabilities::read(&proxy).await;
        let body = caps.body(&familiar_protocol::display::terminal_safe(message));
        let n = Shown {
            replaces,
            icon: "dialog-error",
            summary,
            body: &body,
            actions: &[],
            urgency: 2,
            resident: false,
            // Stays until read: it says what to do.
            expire_ms: 0,
        };
        show(&proxy, &n).await
    };
    if let Err(e) = shown.await {
        warn(&format!("cannot show a notification: {e}"));
    }
}

fn warn(message: &str) {
    // stderr gone (a closed log): nothing else to tell.
    writeln!(std::io::stderr().lock(), "familiar: warning: {message}").ok();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_answer_is_cut_and_a_failure_says_what_to_do() {
        let long = "word ".repeat(200);
        let (summary, body, more) = result_texts("familiar: “q”", TaskStatus::Completed, &long);
        assert_eq!(summary, "familiar: “q”");
        assert!(more && body.ends_with('…'), "{body}");
        let (summary, body, _) = result_texts("familiar: “q”", TaskStatus::Failed, "no model");
        assert_eq!(summary, "familiar: “q”: failed");
        assert!(body.starts_with("no model\nclick"), "{body}");
    }

    #[test]
    fn wrapping_keeps_every_word() {
        assert_eq!(wrap("aa bb cc", 5), ["aa bb", "cc"]);
        assert_eq!(wrap("", 5), [""]);
    }
}
