//! `notify`: one desktop notification through `org.freedesktop.Notifications`, shown
//! as app "familiar".
//!
//! The invariant: what the model writes is shown as text, never interpreted: control
//! characters are stripped (newlines kept in the body), summary and body are capped,
//! and when the server renders markup in bodies the body is escaped, so a model
//! cannot put links or images (which may load local files) into a notification. The
//! tool is hidden when no notification server owns, or can be activated for, the name.

use std::collections::HashMap;

use familiar_protocol::display::escape_markup;
use futures::FutureExt;
use serde_json::{Value, json};

use super::bus::{Bus, Presence, clean_text};
use super::util::{object_schema, str_arg};
use super::{Tool, ToolContext, ToolError, ToolFuture};
use crate::catalog::{self, ToolInfo};
use crate::dbus::notifications::NotificationsProxy;

/// The notification server's bus name.
pub const SERVICE: &str = "org.freedesktop.Notifications";
/// Most characters of a summary (servers show one line).
pub const MAX_SUMMARY: usize = 200;
/// Most characters of a body.
pub const MAX_BODY: usize = 2000;
/// `expire_timeout` -1: the server's default.
const SERVER_DEFAULT_TIMEOUT: i32 = -1;

pub struct Notify {
    presence: Presence,
}

impl Notify {
    /// The notification server on `bus`.
    pub fn new(bus: Bus) -> Notify {
        Notify {
            presence: Presence::new(bus, SERVICE),
        }
    }

    /// The notification server of the session bus.
    pub fn session() -> Notify {
        Notify::new(Bus::Session)
    }
}

impl Tool for Notify {
    fn info(&self) -> &'static ToolInfo {
        &catalog::NOTIFY
    }

    fn description(&self) -> &'static str {
        "Show a desktop notification to the user: a one-line `summary` and an optional \
         plain-text `body`. Use it for results the user should see even when not looking \
         at familiar."
    }

    fn schema(&self) -> Value {
        object_schema(
            json!({
                "summary": {"type": "string", "description": format!("one line, at most {MAX_SUMMARY} characters")},
                "body": {"type": "string", "description": format!("plain text, at most {MAX_BODY} characters")}
            }),
            &["summary"],
        )
    }

    fn available(&self) -> bool {
        self.presence.check()
    }

    fn execute(&self, args: Value, ctx: ToolContext) -> ToolFuture {
        let bus = self.presence.bus().clone();
        async move {
            let summary = clean_text(str_arg(&args, "summary")?, MAX_SUMMARY, false);
            if summary.is_empty() {
                return Err(ToolError::model("`summary` is empty"));
            }
            let body = match args.get("body") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(b)) => clean_text(b, MAX_BODY, true),
                Some(other) => {
                    return Err(ToolError::model(format!(
                        "`body` must be a string, got {other}"
                    )));
                }
            };
            let show = async {
                let unreachable =
                    |e| ToolError::model(format!("no notification server is reachable: {e}"));
                let conn = bus.connect().await.map_err(unreachable)?;
                let proxy = NotificationsProxy::new(&conn).await.map_err(unreachable)?;
                let failed = |e| ToolError::model(format!("the notification failed: {e}"));
                let caps = proxy.get_capabilities().await.map_err(failed)?;
                let body = if caps.iter().any(|c| c == "body-markup") {
                    escape_markup(&body)
                } else {
                    body
                };
                proxy
                    .notify(
                        "familiar",
                        0,
                        "",
                        &summary,
                        &body,
                        &[],
                        HashMap::new(),
                        SERVER_DEFAULT_TIMEOUT,
                    )
                    .await
                    .map_err(failed)
            };
            let id = tokio::select! {
                () = ctx.cancel.cancelled() => return Err(ToolError::model("cancelled")),
                id = show => id?,
            };
            Ok(format!("notification shown (id {id})"))
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_is_escaped() {
        assert_eq!(
            escape_markup("<a href=\"x\">1 & 2</a>"),
            "&lt;a href=\"x\"&gt;1 &amp; 2&lt;/a&gt;"
        );
    }
}
