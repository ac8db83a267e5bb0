//! One window's controls as `ui_read` shows them: fetched node by node over AT-SPI,
//! compacted to the ones a person could read or act on, and rendered one line each
//! under an id that names the accessible (its application's bus name and object path,
//! hashed), so two reads of the same window give the same ids and `ui_act` can find
//! the control again.
//!
//! Invariants: the walk visits at most [`MAX_VISITED`] nodes and the text at most
//! [`MAX_CHARS`] characters (a note says what was left out); a password field's text
//! is never read (role `password text`: its value is shown as redacted); hidden
//! subtrees (no `showing` state) are skipped.

use futures::future::join4;
use sha2::{Digest, Sha256};
use zbus::Connection;

use super::atspi::{self, AccessibleProxy, ActionProxy, Node, TextProxy, ValueProxy};

/// Nodes visited at most in one window.
pub const MAX_VISITED: usize = 1500;
/// Characters of the rendered controls at most (about 1,500 tokens).
pub const MAX_CHARS: usize = 6000;
/// Characters of one control's text at most.
const MAX_VALUE_CHARS: usize = 200;
/// What a password field's value reads as.
pub const REDACTED: &str = "[redacted: a password field]";

/// AT-SPI state bits (`AtspiStateType`) this module reads.
pub mod state {
    pub const ACTIVE: u32 = 1;
    pub const CHECKED: u32 = 4;
    pub const DEFUNCT: u32 = 6;
    pub const EDITABLE: u32 = 7;
    pub const ENABLED: u32 = 8;
    pub const EXPANDED: u32 = 10;
    pub const FOCUSED: u32 = 12;
    pub const PRESSED: u32 = 20;
    pub const SELECTED: u32 = 23;
    pub const SHOWING: u32 = 25;
    pub const IS_DEFAULT: u32 = 39;
}

/// Roles that only hold other controls: walked through, not listed.
const CONTAINER_ROLES: &[&str] = &[
    "filler",
    "panel",
    "scroll pane",
    "viewport",
    "layered pane",
    "split pane",
    "redundant object",
    "unknown",
    "invalid",
];

/// Roles whose Text is their value (what was typed or shown), read up to
/// [`MAX_VALUE_CHARS`].
const TEXT_ROLES: &[&str] = &[
    "text",
    "entry",
    "spin button",
    "combo box",
    "terminal",
    "document text",
];

/// A state set: AT-SPI's two 32-bit words as one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct States(u64);

impl States {
    pub fn from_words(words: &[u32]) -> States {
        let low = u64::from(words.first().copied().unwrap_or(0));
        let high = u64::from(words.get(1).copied().unwrap_or(0));
        States(low | (high << 32))
    }

    pub fn with(bits: &[u32]) -> States {
        States(bits.iter().fold(0, |s, b| s | (1u64 << b)))
    }

    pub fn has(self, bit: u32) -> bool {
        self.0 & (1u64 << bit) != 0
    }
}

/// One accessible as read.
#[derive(Debug, Clone, PartialEq)]
pub struct Control {
    pub id: String,
    pub node: Node,
    pub role: String,
    pub name: String,
    /// Its text or value; [`REDACTED`] for a password field.
    pub value: Option<String>,
    pub states: States,
    pub actions: Vec<String>,
    pub editable: bool,
}

impl Control {
    /// Whether `ui_read` lists it: something to act on, to type in, or to read.
    pub fn listed(&self) -> bool {
        !self.actions.is_empty()
            || self.editable
            || self.value.is_some()
            || (!self.name.trim().is_empty() && !CONTAINER_ROLES.contains(&self.role.as_str()))
    }

    /// `role "name"`, as approvals and the rendering name it.
    pub fn label(&self) -> String {
        format!("{} {:?}", self.role, shorten(&self.name, 80))
    }
}

/// The id of a node: 8 hex digits of SHA-256 over its bus name and path.
pub fn id_of(node: &Node) -> String {
    let mut h = Sha256::new();
    h.update(node.bus.as_bytes());
    h.update([0]);
    h.update(node.path.as_str().as_bytes());
    h.finalize()[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn shorten(s: &str, max: usize) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        return flat;
    }
    let mut out: String = flat.chars().take(max).collect();
    out.push('…');
    out
}

/// Reads one node and its children's names.
pub async fn fetch(conn: &Connection, node: &Node) -> zbus::Result<(Control, Vec<Node>)> {
    let acc: AccessibleProxy<'_> = atspi::proxy(conn, node).await?;
    let (role, name, states, interfaces) = join4(
        acc.get_role_name(),
        acc.name(),
        acc.get_state(),
        acc.get_interfaces(),
    )
    .await;
    let (role, interfaces) = (role?, interfaces?);
    let states = States::from_words(&states?);
    let has = |i: &str| interfaces.iter().any(|x| x == i);
    let actions = if has("org.a11y.atspi.Action") {
        let action: ActionProxy<'_> = atspi::proxy(conn, node).await?;
        action
            .get_actions()
            .await
            // GTK names them as people read them ("Click"); matched without case.
            .map(|a| a.into_iter().map(|(n, _, _)| n.to_lowercase()).collect())
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let editable = has("org.a11y.atspi.EditableText") && states.has(state::EDITABLE);
    let value = if role == "password text" {
        Some(REDACTED.to_owned())
    } else if has("org.a11y.atspi.Text") && TEXT_ROLES.contains(&role.as_str()) {
        let text: TextProxy<'_> = atspi::proxy(conn, node).await?;
        let count = text
            .character_count()
            .await
            .unwrap_or(0)
            .clamp(0, MAX_VALUE_CHARS as i32 + 1);
        text.get_text(0, count)
            .await
            .ok()
            .map(|t| shorten(&t, MAX_VALUE_CHARS))
    } else if has("org.a11y.atspi.Value") {
        let value: ValueProxy<'_> = atspi::proxy(conn, node).await?;
        value.current_value().await.ok().map(|v| v.to_string())
    } else {
        None
    };
    let children = if states.has(state::SHOWING) || role == "application" {
        acc.get_children().await.unwrap_or_default()
    } else {
        Vec::new()
    };
    let control = Control {
        id: id_of(node),
        node: node.clone(),
        role,
        name: name.unwrap_or_default(),
        value,
        states,
        actions,
        editable,
    };
    Ok((control, children))
}

/// A window's controls, in reading order.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    pub window: Control,
    /// Every node read, listed or not (ui_act finds its id among them).
    pub controls: Vec<Control>,
    /// The walk stopped at [`MAX_VISITED`].
    pub cut: bool,
}

/// Walks the window at `root`, depth first.
pub async fn walk(conn: &Connection, root: &Node) -> zbus::Result<Window> {
    let (window, mut stack) = fetch(conn, root).await?;
    stack.reverse();
    let mut controls = Vec::new();
    let mut visited = 1;
    while let Some(node) = stack.pop() {
        if visited >= MAX_VISITED {
            return Ok(Window {
                window,
                controls,
                cut: true,
            });
        }
        visited += 1;
        // A node that vanished while we read (a closing popup) is skipped.
        let Ok((control, children)) = fetch(conn, &node).await else {
            continue;
        };
        if control.states.has(state::DEFUNCT) {
            continue;
        }
        stack.extend(children.into_iter().rev());
        controls.push(control);
    }
    Ok(Window {
        window,
        controls,
        cut: false,
    })
}

/// The states worth showing, in words.
fn states_text(s: States) -> Vec<&'static str> {
    let mut out = Vec::new();
    for (bit, word) in [
        (state::FOCUSED, "focused"),
        (state::CHECKED, "checked"),
        (state::SELECTED, "selected"),
        (state::PRESSED, "pressed"),
        (state::EXPANDED, "expanded"),
        (state::EDITABLE, "editable"),
        (state::IS_DEFAULT, "default"),
    ] {
        if s.has(bit) {
            out.push(word);
        }
    }
    if !s.has(state::ENABLED) {
        out.push("disabled");
    }
    out
}

/// One control's line: `[id] role "name" = "value" (states) actions: a, b`.
pub fn line(c: &Control) -> String {
    let mut out = format!("[{}] {}", c.id, c.label());
    if let Some(v) = &c.value {
        out.push_str(&format!(" = {v:?}"));
    }
    let states = states_text(c.states);
    if !states.is_empty() {
        out.push_str(&format!(" ({})", states.join(", ")));
    }
    if !c.actions.is_empty() {
        out.push_str(&format!(" actions: {}", c.actions.join(", ")));
    }
    if c.editable {
        out.push_str(if c.actions.is_empty() {
            " actions: set_text"
        } else {
            ", set_text"
        });
    }
    out
}

/// What `ui_read` returns: a header naming the app and window, then the listed
/// controls, at most [`MAX_CHARS`], with a note when anything was left out.
pub fn render(app: &str, pid: Option<u32>, w: &Window) -> String {
    let pid = pid.map_or(String::new(), |p| format!(", pid {p}"));
    let mut out = format!("app {app:?}{pid}; window: {}\n", w.window.label());
    let listed: Vec<&Control> = w.controls.iter().filter(|c| c.listed()).collect();
    let mut shown = 0;
    for c in &listed {
        let l = line(c);
        if out.len() + l.len() + 1 > MAX_CHARS {
            break;
        }
        out.push_str(&l);
        out.push('\n');
        shown += 1;
    }
    if shown < listed.len() {
        out.push_str(&format!(
            "(cut: {} more controls not shown)\n",
            listed.len() - shown
        ));
    }
    if w.cut {
        out.push_str(&format!(
            "(cut: the window has more than {MAX_VISITED} nodes; the rest were not read)\n"
        ));
    }
    if listed.is_empty() {
        out.push_str("(no controls: the window exposes nothing to the accessibility bus)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn control(path: &str, role: &str, name: &str) -> Control {
        let node = Node {
            bus: ":1.0".to_owned(),
            path: OwnedObjectPath::try_from(path).unwrap(),
        };
        Control {
            id: id_of(&node),
            node,
            role: role.to_owned(),
            name: name.to_owned(),
            value: None,
            states: States::with(&[state::ENABLED, state::SHOWING]),
            actions: Vec::new(),
            editable: false,
        }
    }

    use zbus::OwnedObjectPath;

    #[test]
    fn ids_are_stable_and_name_the_accessible() {
        let a = control("/org/a11y/atspi/accessible/8", "push button", "OK");
        let b = control("/org/a11y/atspi/accessible/8", "push button", "Renamed");
        let c = control("/org/a11y/atspi/accessible/9", "push button", "OK");
        assert_eq!(a.id, b.id);
        assert_ne!(a.id, c.id);
        assert_eq!(a.id.len(), 8);
    }

    #[test]
    fn the_rendering_lists_what_can_be_read_or_acted_on() {
        let mut ok = control("/p/1", "push button", "OK");
        ok.actions = vec!["click".to_owned()];
        ok.states = States::with(&[state::ENABLED, state::IS_DEFAULT]);
        let mut entry = control("/p/2", "text", "");
        entry.editable = true;
        entry.value = Some("Ada".to_owned());
        entry.actions = vec!["activate".to_owned()];
        let mut password = control("/p/3", "password text", "Password");
        password.value = Some(REDACTED.to_owned());
        let filler = control("/p/4", "filler", "");
        let mut off = control("/p/5", "push button", "Apply");
        off.states = States::default();
        let w = Window {
            window: control("/p/0", "dialog", "Add a new entry"),
            controls: vec![filler, ok.clone(), entry.clone(), password.clone(), off],
            cut: false,
        };
        let text = render("zenity", Some(42), &w);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "app \"zenity\", pid 42; window: dialog \"Add a new entry\""
        );
        assert_eq!(
            lines[1],
            format!("[{}] push button \"OK\" (default) actions: click", ok.id)
        );
        assert_eq!(
            lines[2],
            format!(
                "[{}] text \"\" = \"Ada\" actions: activate, set_text",
                entry.id
            )
        );
        assert_eq!(
            lines[3],
            format!(
                "[{}] password text \"Password\" = \"[redacted: a password field]\"",
                password.id
            )
        );
        assert!(
            lines[4].ends_with("push button \"Apply\" (disabled)"),
            "{}",
            lines[4]
        );
        assert_eq!(lines.len(), 5);
    }

    #[test]
    fn a_large_window_is_cut_with_a_note() {
        let controls: Vec<Control> = (0..500)
            .map(|i| {
                let mut c = control(
                    &format!("/p/{i}"),
                    "push button",
                    &format!("button number {i}"),
                );
                c.actions = vec!["click".to_owned()];
                c
            })
            .collect();
        let w = Window {
            window: control("/p/w", "frame", "big"),
            controls,
            cut: true,
        };
        let text = render("app", None, &w);
        assert!(text.len() <= MAX_CHARS + 200, "{}", text.len());
        assert!(text.contains("more controls not shown"), "{text}");
        assert!(text.contains("the rest were not read"), "{text}");
    }
}
