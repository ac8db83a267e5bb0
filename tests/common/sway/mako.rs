//! mako's side of the session: its notifications as `makoctl list` shows them, and
//! what its bindings do to one (invoke an action, dismiss, click).

use std::collections::BTreeMap;

use super::{Desktop, text};

/// One notification as mako lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    pub id: u32,
    pub app_name: String,
    pub summary: String,
    pub body: String,
    /// Action key → label.
    pub actions: BTreeMap<String, String>,
}

impl Desktop {
    /// mako's notifications now, newest first.
    pub fn notifications(&self) -> Vec<Notification> {
        let out = self.run("makoctl", &["list"]);
        assert!(out.status.success(), "makoctl list: {}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("makoctl's JSON");
        let field =
            |n: &serde_json::Value, k: &str| n[k]["data"].as_str().unwrap_or_default().to_owned();
        v["data"][0]
            .as_array()
            .into_iter()
            .flatten()
            .map(|n| Notification {
                id: n["id"]["data"].as_u64().unwrap_or_default() as u32,
                app_name: field(n, "app-name"),
                summary: field(n, "summary"),
                body: field(n, "body"),
                actions: n["actions"]["data"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                            .collect()
                    })
                    .unwrap_or_default(),
            })
            .collect()
    }

    /// Waits for a notification `what` holds for, and returns it.
    #[track_caller]
    pub fn wait_notification(&self, what: impl Fn(&Notification) -> bool) -> Notification {
        let mut seen = Vec::new();
        let found = self.wait_until(|| {
            seen = self.notifications();
            seen.iter().find(|n| what(n)).cloned()
        });
        found.unwrap_or_else(|| panic!("no such notification; shown: {seen:#?}"))
    }

    /// Invokes `action` of notification `id` (`makoctl invoke`): what a button does.
    pub fn invoke(&self, id: u32, action: &str) {
        let out = self.run("makoctl", &["invoke", "-n", &id.to_string(), action]);
        assert!(
            out.status.success(),
            "makoctl invoke: {}",
            text(&out.stderr)
        );
    }

    /// Dismisses notification `id` (a right click on mako, `makoctl dismiss`).
    pub fn dismiss(&self, id: u32) {
        let out = self.run("makoctl", &["dismiss", "-n", &id.to_string()]);
        assert!(
            out.status.success(),
            "makoctl dismiss: {}",
            text(&out.stderr)
        );
    }

    /// A left click on notification `id` as mako does it: its `default` action, then
    /// the notification closed as dismissed.
    pub fn click(&self, id: u32) {
        self.invoke(id, "default");
        self.dismiss(id);
    }
}
