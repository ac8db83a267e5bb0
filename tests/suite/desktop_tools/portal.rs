//! `screenshot` through the xdg-desktop-portal (GNOME, KDE: no compositor familiar
//! speaks to), against the fake portal on a private `dbus-daemon`: the whole screen
//! comes back scaled to `max_edge` and the portal's file is gone; a region is cut from
//! the screenshot's pixels; a cancelled, failed or URI-less answer is a clear text and
//! nothing is saved; a task stopped while the portal waits closes the Request.

use std::sync::Arc;

use familiar::tools::bus::Bus;
use familiar::tools::screen::Screenshot;
use familiar::tools::{Tool, ToolError, ToolOutput};
use serde_json::{Value, json};

use super::direct_ctx;
use crate::common::bus::TestBus;
use crate::common::fake_portal::{Answer, FakePortal};
use crate::common::harness::{Harness, OPEN_POLICY};

/// A GNOME session: no compositor familiar speaks to, the portal on `bus`.
fn gnome(bus: &TestBus) -> Screenshot {
    Screenshot {
        locate: Arc::new(|| None),
        portal: Bus::Address(bus.address.clone()),
        desktop: Some("GNOME".to_owned()),
    }
}

struct Setup {
    _bus: TestBus,
    portal: FakePortal,
    /// Where the portal writes (GNOME: ~/Pictures).
    pictures: tempfile::TempDir,
    h: Harness,
    tool: Screenshot,
}

async fn setup() -> Setup {
    let bus = TestBus::start();
    let pictures = tempfile::tempdir().unwrap();
    let portal = FakePortal::start(&bus.address, pictures.path().to_owned()).await;
    let h = Harness::builder(Vec::new())
        .policy(OPEN_POLICY)
        .build()
        .await;
    let tool = gnome(&bus);
    Setup {
        _bus: bus,
        portal,
        pictures,
        h,
        tool,
    }
}

impl Setup {
    async fn shoot(&self, args: Value) -> Result<ToolOutput, ToolError> {
        self.tool.run(args, direct_ctx(&self.h)).await
    }

    fn left_in_pictures(&self) -> Vec<String> {
        std::fs::read_dir(self.pictures.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    }

    fn saved(&self) -> usize {
        std::fs::read_dir(self.h.home.path().join("screens")).map_or(0, |d| d.count())
    }
}

#[tokio::test]
async fn the_whole_screen_comes_back_at_max_edge_and_the_portals_file_is_gone() {
    let s = setup().await;
    let probe = s.tool.clone();
    assert!(
        tokio::task::spawn_blocking(move || probe.available())
            .await
            .unwrap()
    );
    let out = s.shoot(json!({})).await.unwrap();
    let image = out.image.expect("an image");
    // 2560x1440 scaled so the longest side is direct_ctx's max_edge, 1280.
    assert_eq!((image.width, image.height), (1280, 720));
    let bytes = std::fs::read(&image.path).unwrap();
    assert_eq!(
        familiar::tools::screen::png::size(&bytes),
        Some((1280, 720))
    );
    assert!(out.text.contains("the whole screen"), "{}", out.text);
    assert_eq!(s.left_in_pictures(), Vec::<String>::new());
    let calls = s.portal.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].parent_window, "");
    assert_eq!(calls[0].options["interactive"], "Bool(false)");
    assert!(
        calls[0].options["handle_token"].contains("familiar_"),
        "{:?}",
        calls[0].options
    );
}

#[tokio::test]
async fn a_region_is_cut_from_the_screenshots_pixels_then_scaled() {
    let s = setup().await;
    let out = s
        .shoot(json!({"target": "region", "x": 100, "y": 40, "width": 2000, "height": 1000}))
        .await
        .unwrap();
    let image = out.image.expect("an image");
    assert_eq!((image.width, image.height), (1280, 640));
    // Partly outside the screen: what is inside.
    let out = s
        .shoot(json!({"target": "region", "x": 2000, "y": 1000, "width": 900, "height": 900}))
        .await
        .unwrap();
    let image = out.image.expect("an image");
    assert_eq!((image.width, image.height), (560, 440));
    assert_eq!(s.left_in_pictures(), Vec::<String>::new());
}

#[tokio::test]
async fn a_cancelled_failed_or_wrong_answer_is_a_clear_text_and_nothing_is_kept() {
    let s = setup().await;
    for (answer, says) in [
        (Answer::Cancelled, "cancelled on the desktop"),
        (Answer::Failed, "failed to take the screenshot (response 2)"),
        (Answer::NoUri, "has no uri"),
        (
            Answer::Uri("https://example.com/shot.png".to_owned()),
            "is no file:// URI",
        ),
        (
            Answer::Uri("file:///nonexistent/shot.png".to_owned()),
            "/nonexistent/shot.png",
        ),
    ] {
        s.portal.answer(answer.clone());
        let err = s.shoot(json!({})).await.unwrap_err();
        let ToolError::RespondToModel(text) = err else {
            panic!("{answer:?}: {err:?}");
        };
        assert!(text.contains(says), "{answer:?}: {text}");
    }
    // A file that is no PNG, made now: refused, and removed all the same.
    let junk = s.pictures.path().join("junk.png");
    s.portal
        .answer(Answer::Uri(format!("file://{}", junk.display())));
    std::fs::write(&junk, "not a png").unwrap();
    let err = s.shoot(json!({})).await.unwrap_err();
    assert!(err.to_string().contains("not a PNG image"), "{err}");
    assert_eq!(s.left_in_pictures(), Vec::<String>::new());
    assert_eq!(s.saved(), 0);
}

#[tokio::test]
async fn a_stopped_task_closes_the_portals_request() {
    let s = setup().await;
    s.portal.answer(Answer::Never);
    let ctx = direct_ctx(&s.h);
    let cancel = ctx.cancel.clone();
    let call = tokio::spawn(s.tool.run(json!({}), ctx));
    s.portal.wait_calls(1).await;
    cancel.cancel();
    let err = call.await.unwrap().unwrap_err();
    assert!(err.to_string().contains("the task was stopped"), "{err}");
    assert_eq!(s.portal.closed(), vec![s.portal.calls()[0].handle.clone()]);
}

#[tokio::test]
async fn without_a_portal_or_a_compositor_the_tool_is_not_offered() {
    let bus = TestBus::start();
    let tool = gnome(&bus);
    assert!(
        !tokio::task::spawn_blocking(move || tool.available())
            .await
            .unwrap()
    );
}
