//! Where the focused window is on the screen, in the compositor's logical pixels: what
//! `screenshot` captures for its `window` target.
//!
//! Hyprland (`activewindow`'s `at` and `size`, when they are a size) and sway
//! (`GET_TREE`'s `rect` of the focused container, its border included) say; niri's IPC
//! gives a window's size but not where it is on the output, so there the answer is
//! `None` and the caller says so.

use serde_json::Value;

use super::{Compositor, CompositorError};

/// A rectangle in logical pixels, the layout's coordinates (what `grim -g` takes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rect {
    pub x: i64,
    pub y: i64,
    pub width: u32,
    pub height: u32,
}

impl Rect {
    /// As `grim -g` takes it: `X,Y WxH`.
    pub fn grim(&self) -> String {
        format!("{},{} {}x{}", self.x, self.y, self.width, self.height)
    }
}

/// The focused window: its app and title (what an approval names) and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FocusedWindow {
    pub app_id: String,
    pub title: String,
    pub pid: Option<i64>,
    /// `None` where the compositor does not say (niri).
    pub rect: Option<Rect>,
}

impl Compositor {
    /// The focused window, `None` when no window has the focus.
    pub fn focused_window(&self) -> Result<Option<FocusedWindow>, CompositorError> {
        match self {
            Compositor::Hyprland(h) => {
                let v = h.request_json("j/activewindow")?;
                Ok(hyprland_window(&v))
            }
            Compositor::Sway(s) => {
                let tree = s.request(super::sway::GET_TREE, "")?;
                Ok(sway_focused(&tree))
            }
            Compositor::Niri(_) => Ok(self.desktop()?.focused_window.map(|w| FocusedWindow {
                app_id: w.app_id,
                title: w.title,
                pid: w.pid,
                rect: None,
            })),
        }
    }
}

fn int(v: Option<&Value>) -> Option<i64> {
    v.and_then(Value::as_i64)
}

/// `None` for Hyprland's `{}` (no window has the focus). A size that is no size (a
/// headless Hyprland 0.55.2 answered `[-12, -7]`) leaves the place unknown.
fn hyprland_window(v: &Value) -> Option<FocusedWindow> {
    v.get("address")?;
    let rect = (|| {
        let at = v.get("at")?.as_array()?;
        let size = v.get("size")?.as_array()?;
        Some(Rect {
            x: int(at.first())?,
            y: int(at.get(1))?,
            width: u32::try_from(int(size.first())?).ok().filter(|w| *w > 0)?,
            height: u32::try_from(int(size.get(1))?).ok().filter(|h| *h > 0)?,
        })
    })();
    Some(FocusedWindow {
        app_id: super::cut(v.get("class").and_then(Value::as_str).unwrap_or("")),
        title: super::cut(v.get("title").and_then(Value::as_str).unwrap_or("")),
        pid: int(v.get("pid")),
        rect,
    })
}

fn sway_focused(node: &Value) -> Option<FocusedWindow> {
    let leaf = ["nodes", "floating_nodes"]
        .iter()
        .filter_map(|k| node.get(*k).and_then(Value::as_array))
        .all(Vec::is_empty);
    if leaf && node.get("focused").and_then(Value::as_bool) == Some(true) {
        let r = node.get("rect")?;
        let rect = Rect {
            x: int(r.get("x"))?,
            y: int(r.get("y"))?,
            width: u32::try_from(int(r.get("width"))?).ok()?,
            height: u32::try_from(int(r.get("height"))?).ok()?,
        };
        let app_id = super::sway::app_id_of(node);
        return Some(FocusedWindow {
            app_id: super::cut(app_id),
            title: super::cut(node.get("name").and_then(Value::as_str).unwrap_or("")),
            pid: int(node.get("pid")),
            rect: Some(rect),
        });
    }
    ["nodes", "floating_nodes"]
        .iter()
        .filter_map(|k| node.get(*k).and_then(Value::as_array))
        .flatten()
        .find_map(sway_focused)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn sway_gives_the_focused_leafs_rect() {
        let tree = json!({"type": "root", "focused": false, "nodes": [
            {"type": "workspace", "name": "1", "focused": false, "nodes": [
                {"type": "con", "app_id": "foot", "name": "~", "pid": 7, "focused": false,
                 "rect": {"x": 0, "y": 0, "width": 400, "height": 600}, "nodes": []},
                {"type": "con", "app_id": "zenity", "name": "Question", "pid": 8, "focused": true,
                 "rect": {"x": 400, "y": 0, "width": 400, "height": 600}, "nodes": []}
            ]}
        ]});
        let w = sway_focused(&tree).unwrap();
        assert_eq!((w.app_id.as_str(), w.pid), ("zenity", Some(8)));
        assert_eq!(w.rect.unwrap().grim(), "400,0 400x600");
    }

    #[test]
    fn hyprland_gives_at_and_size() {
        let v = json!({"address": "0x1", "class": "firefox", "title": "Mozilla Firefox",
                       "pid": 9, "at": [10, 40], "size": [1200, 800]});
        let w = hyprland_window(&v).unwrap();
        assert_eq!(w.rect.unwrap().grim(), "10,40 1200x800");
        assert_eq!(hyprland_window(&json!({})), None);
    }

    /// The replies recorded from a real (headless) Hyprland 0.55.2.
    #[test]
    fn hyprlands_recorded_replies_give_the_window_and_no_false_size() {
        let recorded: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/hyprland-0.55.2/activewindow.json"
        ))
        .unwrap();
        let w = hyprland_window(&recorded).unwrap();
        assert_eq!((w.app_id.as_str(), w.pid), ("foot", Some(19244)));
        // It answered `size: [-12, -7]`: the place is unknown, not a wrapped-around one.
        assert_eq!(w.rect, None);
        let none: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/hyprland-0.55.2/activewindow-none-focused.json"
        ))
        .unwrap();
        assert_eq!(hyprland_window(&none), None);
    }
}
