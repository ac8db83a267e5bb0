//! The screen tools. Anywhere: the portal path's own work, a 2560x1440 PNG of the
//! whole screen decoded, scaled to the default `max_edge` and encoded again
//! (`tools::screen::fit`). In a live desktop session (run inside one: it reads
//! `SWAYSOCK` or `HYPRLAND_INSTANCE_SIGNATURE`, `WAYLAND_DISPLAY` and the session bus
//! from the environment): `screenshot` of the focused window at the default
//! `max_edge` (grim, the PNG saved) and `ui_read` of the focused window (AT-SPI walk
//! and rendering); outside a session it says so. Prints medians and p95 over the
//! runs. BENCHMARKS.md records the numbers with the dialog it was run against.

// A benchmark reports on stdout, and a failed capture is a failed run.
#![allow(clippy::print_stdout, clippy::expect_used)]

use std::time::Instant;

use familiar::config::screen::DEFAULT_MAX_EDGE;
use familiar::tools::desktop::locate_from_env;
use familiar::tools::screen::{ScreenPlace, Screenshot, Target, fit, shoot};
use familiar::tools::ui::Ui;
use tokio_util::sync::CancellationToken;

const RUNS: usize = 21;

fn stats(mut ms: Vec<f64>) -> (f64, f64) {
    ms.sort_by(f64::total_cmp);
    let p95 = ms[(ms.len() * 95 / 100).min(ms.len() - 1)];
    (ms[ms.len() / 2], p95)
}

/// The portal's whole screen made to fit, as `screenshot` does after the portal answered.
fn portal_fit() {
    let screen = fit::test_png(2560, 1440);
    let mut runs = Vec::new();
    let mut out = None;
    for _ in 0..RUNS {
        let t = Instant::now();
        out = Some(fit::fit(&screen, None, DEFAULT_MAX_EDGE).expect("fit"));
        runs.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let out = out.expect("a run");
    let (median, p95) = stats(runs);
    println!(
        "| portal path: 2560x1440 PNG ({} bytes) → decoded, scaled (Lanczos3), encoded {}x{} | {median:.1} / {p95:.1} ms | {} bytes |",
        screen.len(),
        out.width,
        out.height,
        out.png.len()
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    portal_fit();
    if locate_from_env()().is_none() {
        println!("screen bench: no compositor in the environment; run it inside a desktop session");
        return;
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    let place = ScreenPlace {
        dir: dir.path().to_owned(),
        max_edge: DEFAULT_MAX_EDGE,
    };
    let cancel = CancellationToken::new();
    let mut shots = Vec::new();
    let mut bytes = 0;
    let mut size = (0, 0);
    for _ in 0..RUNS {
        let t = Instant::now();
        let out = shoot(&Screenshot::session(), Target::Window, &place, &cancel)
            .await
            .expect("screenshot");
        shots.push(t.elapsed().as_secs_f64() * 1000.0);
        let image = out.image.expect("an image");
        bytes = std::fs::metadata(&image.path).map_or(0, |m| m.len());
        size = (image.width, image.height);
    }
    let (median, p95) = stats(shots);
    println!(
        "| screenshot of the focused window → saved PNG ({}x{}, max_edge {DEFAULT_MAX_EDGE}) | {median:.1} / {p95:.1} ms | {bytes} bytes |",
        size.0, size.1
    );

    let ui = Ui::session();
    // The window may show before its app registered on the accessibility bus.
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    while ui.read().await.map_or(true, |t| t.lines().count() < 2) {
        assert!(
            Instant::now() < deadline,
            "ui_read: the focused window shows no controls"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let mut reads = Vec::new();
    let mut text = String::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        text = ui.read().await.expect("ui_read");
        reads.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let (median, p95) = stats(reads);
    let controls = text.lines().count().saturating_sub(1);
    println!(
        "| ui_read of the focused window ({controls} controls) | {median:.1} / {p95:.1} ms | {} chars ≈ {} tokens |",
        text.chars().count(),
        text.chars().count().div_ceil(4)
    );
}
