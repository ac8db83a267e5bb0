//! The compositor's screencopy through `grim` (Hyprland, sway, niri): the window's or
//! region's place from the compositor ([`crate::compositor::geometry`]) as `-g`, an
//! output as `-o`, and `-s` so grim renders the longest side at most `max_edge`.
//! grim is found on the system `PATH`, never the user's.

use std::path::PathBuf;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{MAX_IMAGE_BYTES, Target, what};
use crate::compositor::Compositor;
use crate::compositor::geometry::Rect;
use crate::tools::ToolError;

/// The longest a capture may take: grim on a 4K output takes well under a second.
const CAPTURE_TIMEOUT: Duration = Duration::from_secs(10);

/// grim's arguments for `target` (whose logical size is `size`, when known) scaled so
/// the longest side is at most `max_edge`; writes a PNG to stdout.
pub fn grim_args(
    target: &Target,
    rect: Option<Rect>,
    size: Option<(u32, u32)>,
    max_edge: u32,
) -> Vec<String> {
    let mut args = Vec::new();
    match (target, rect) {
        (Target::Output(Some(name)), _) => args.extend(["-o".to_owned(), name.clone()]),
        (Target::Output(None), _) => {}
        (Target::Window | Target::Region(_), Some(rect)) => {
            args.extend(["-g".to_owned(), rect.grim()])
        }
        (Target::Window | Target::Region(_), None) => {}
    }
    // Without -s grim renders at the greatest output scale: a HiDPI screen doubles.
    let scale = size.map_or(1.0, |(w, h)| {
        (f64::from(max_edge) / f64::from(w.max(h).max(1))).min(1.0)
    });
    args.extend([
        "-s".to_owned(),
        format!("{scale:.4}"),
        "-t".to_owned(),
        "png".to_owned(),
        "-".to_owned(),
    ]);
    args
}

/// What a capture will take: grim's arguments, the display, what they show in words.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub args: Vec<String>,
    pub display: PathBuf,
    pub what: String,
}

/// The plan for `target` in `c`'s session (blocking: it asks the compositor).
pub fn plan(c: &Compositor, target: &Target, max_edge: u32) -> Result<Plan, ToolError> {
    let failed = |e| ToolError::model(format!("{}: {e}", c.name()));
    let (rect, size) = match target {
        Target::Window => {
            let w = c
                .focused_window()
                .map_err(failed)?
                .ok_or_else(|| ToolError::model("no window has the focus"))?;
            let rect = w.rect.ok_or_else(|| {
                ToolError::model(format!(
                    "{} does not say where the focused window is: use target output",
                    c.name()
                ))
            })?;
            (Some(rect), Some((rect.width, rect.height)))
        }
        Target::Output(name) => {
            let desktop = c.desktop().map_err(failed)?;
            let output = desktop
                .outputs
                .iter()
                .find(|o| name.as_ref().map_or(o.focused, |n| &o.name == n));
            let Some(output) = output else {
                let names: Vec<&str> = desktop.outputs.iter().map(|o| o.name.as_str()).collect();
                return Err(ToolError::model(format!(
                    "no such output (outputs: {})",
                    names.join(", ")
                )));
            };
            (None, output.width.zip(output.height))
        }
        Target::Region(r) => (Some(*r), Some((r.width, r.height))),
    };
    let target = match target {
        Target::Output(None) => {
            // grim without -o captures every output: name the focused one.
            let name = c
                .desktop()
                .ok()
                .and_then(|d| d.outputs.into_iter().find(|o| o.focused).map(|o| o.name));
            Target::Output(name)
        }
        t @ (Target::Window | Target::Output(Some(_)) | Target::Region(_)) => t.clone(),
    };
    let env = std::env::var("WAYLAND_DISPLAY").ok();
    let display = crate::compositor::wayland::display(c, env.as_deref()).ok_or_else(|| {
        ToolError::model(format!(
            "no Wayland display beside {}'s socket {}",
            c.name(),
            c.socket().display()
        ))
    })?;
    Ok(Plan {
        args: grim_args(&target, rect, size, max_edge),
        display,
        what: what(Some(c), &target),
    })
}

/// Runs grim; its PNG.
pub async fn capture(plan: &Plan, cancel: &CancellationToken) -> Result<Vec<u8>, ToolError> {
    let grim = crate::programs::find("grim")
        .ok_or_else(|| ToolError::model("grim is not installed in the system's directories"))?;
    let child = tokio::process::Command::new(&grim)
        .args(&plan.args)
        .env("WAYLAND_DISPLAY", &plan.display)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ToolError::model(format!("cannot run {}: {e}", grim.display())))?;
    let out = tokio::select! {
        out = tokio::time::timeout(CAPTURE_TIMEOUT, child.wait_with_output()) => out
            .map_err(|_| ToolError::model("grim took too long"))?
            .map_err(|e| ToolError::model(format!("grim: {e}")))?,
        () = cancel.cancelled() => return Err(ToolError::model("cancelled: the task was stopped")),
    };
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(ToolError::model(format!("grim failed: {}", err.trim())));
    }
    if out.stdout.len() > MAX_IMAGE_BYTES {
        return Err(ToolError::model("grim's image is too large"));
    }
    Ok(out.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grim_scales_the_longest_side_to_max_edge() {
        let rect = Rect {
            x: 10,
            y: 20,
            width: 2560,
            height: 1440,
        };
        assert_eq!(
            grim_args(&Target::Window, Some(rect), Some((2560, 1440)), 1280),
            ["-g", "10,20 2560x1440", "-s", "0.5000", "-t", "png", "-"]
        );
        // Never scaled up: a small dialog stays at its logical size (not the HiDPI one).
        assert_eq!(
            grim_args(
                &Target::Output(Some("HEADLESS-1".into())),
                None,
                Some((800, 600)),
                1280
            ),
            ["-o", "HEADLESS-1", "-s", "1.0000", "-t", "png", "-"]
        );
    }
}
