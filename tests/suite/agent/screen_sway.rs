//! `screenshot` against a real headless sway with a real window (`foot`): grim's image
//! of the focused window, scaled to `[screen] max_edge`, reaches the loopback model in
//! each provider's wire format in the turn after the call (OpenAI-compatible: a user
//! message with an `image_url` data URL after the tool message; Anthropic: an `image`
//! block inside the `tool_result`; Ollama: `images` on a user message); a provider
//! without `vision` gets a text that says so, and nothing is captured.

use std::sync::Arc;

use base64::Engine as _;
use familiar::compositor::{Compositor, Sway};
use familiar::tools::Registry;
use familiar::tools::screen::Screenshot;
use familiar_protocol::task::TaskStatus;
use serde_json::{Value, json};

use crate::common::harness::*;
use crate::common::llm_server::*;
use crate::common::skip;
use crate::common::sway::{Desktop, Options};

const MAX_EDGE: u32 = 400;

/// A session with a foot window that has the focus, and the size its screenshot must
/// have: the window's rect scaled so its longest side is `MAX_EDGE`.
fn desktop_with_a_window() -> Option<Desktop> {
    skip::program("foot", "foot")?;
    let mut sway = Desktop::start(&Options::default())?;
    sway.spawn_client("foot", &["-e", "sleep", "600"]);
    sway.wait_for_window("foot");
    Some(sway)
}

/// The size the focused window's screenshot should have, from where sway says it is
/// now. Asked after the screenshot: a new window's place can still change after it
/// first shows (its title bar comes with a later layout), and the screenshot is of
/// the settled window.
fn expected_size(sway: &Desktop) -> (u32, u32) {
    let compositor = Compositor::Sway(Sway::at(sway.swaysock()));
    let rect = compositor
        .focused_window()
        .unwrap()
        .expect("foot has the focus")
        .rect
        .expect("sway says where it is");
    let scale = (f64::from(MAX_EDGE) / f64::from(rect.width.max(rect.height))).min(1.0);
    let size = |v: u32| (f64::from(v) * scale).round() as u32;
    (size(rect.width), size(rect.height))
}

fn tools(sway: &Desktop) -> Registry {
    let socket = sway.swaysock().to_owned();
    Registry::with(vec![Arc::new(Screenshot::grim(Arc::new(move || {
        Some(Compositor::Sway(Sway::at(&socket)))
    })))])
}

/// The PNG's size from a base64 body.
pub(super) fn png_size(b64: &str) -> (u32, u32) {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("base64");
    familiar::tools::screen::png::size(&bytes).expect("a PNG")
}

/// The first request's tool call, in `kind`'s wire format.
pub(super) fn call_reply(kind: &str) -> Reply {
    match kind {
        "anthropic" => Reply::sse(sse(vec![
            an_message_start(100),
            an_tool(0, "c1", "screenshot", "{}"),
            an_message_delta("tool_use", 10),
            an_message_stop(),
        ])),
        "ollama" => Reply::ndjson(ndjson(vec![
            ol_tool_call("screenshot", json!({})),
            ol_done("stop", 100, 10),
        ])),
        _ => tools_reply(&[("c1", "screenshot", json!({}))]),
    }
}

pub(super) fn done_reply(kind: &str) -> Reply {
    match kind {
        "anthropic" => Reply::sse(sse(vec![
            an_message_start(100),
            an_text(0, "a terminal"),
            an_block_stop(0),
            an_message_delta("end_turn", 10),
            an_message_stop(),
        ])),
        "ollama" => Reply::ndjson(ndjson(vec![
            ol_text("a terminal"),
            ol_done("stop", 100, 10),
        ])),
        _ => text_reply("a terminal"),
    }
}

/// The image of the second request, as `kind` sends it: its base64.
pub(super) fn sent_image(kind: &str, body: &Value) -> String {
    let messages = body["messages"].as_array().unwrap();
    match kind {
        "anthropic" => {
            let result = messages
                .iter()
                .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
                .find(|b| b["type"] == "tool_result")
                .expect("a tool_result");
            let image = result["content"]
                .as_array()
                .and_then(|c| c.iter().find(|b| b["type"] == "image"))
                .expect("an image block inside the tool_result");
            assert_eq!(image["source"]["media_type"], "image/png");
            image["source"]["data"].as_str().unwrap().to_owned()
        }
        "ollama" => {
            let at = messages.iter().position(|m| m["role"] == "tool").unwrap();
            let user = &messages[at + 1];
            assert_eq!(user["role"], "user");
            user["images"][0].as_str().unwrap().to_owned()
        }
        _ => {
            let at = messages.iter().position(|m| m["role"] == "tool").unwrap();
            let tool = messages[at]["content"].as_str().unwrap();
            assert!(tool.contains("follows in the next user message"), "{tool}");
            let user = &messages[at + 1];
            assert_eq!(user["role"], "user");
            let url = user["content"]
                .as_array()
                .unwrap()
                .iter()
                .find_map(|p| p["image_url"]["url"].as_str())
                .expect("an image_url part");
            url.strip_prefix("data:image/png;base64,")
                .expect("a PNG data URL")
                .to_owned()
        }
    }
}

fn provider(kind: &str, vision: bool) -> String {
    let kind_line = match kind {
        "anthropic" => "kind = \"anthropic\"\napi_key_env = \"HOME\"\n",
        "ollama" => "kind = \"ollama\"\ncontext_window = 8192\n",
        _ => "",
    };
    format!("{kind_line}vision = {vision}\n[screen]\nmax_edge = {MAX_EDGE}\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_screenshot_of_the_focused_window_reaches_each_provider_as_an_image() {
    let Some(sway) = desktop_with_a_window() else {
        return;
    };
    for kind in ["openai", "anthropic", "ollama"] {
        let h = Harness::builder(vec![call_reply(kind), done_reply(kind)])
            .provider(&provider(kind, true))
            .policy(OPEN_POLICY)
            .build()
            .await;
        let rt = h.runtime(tools(&sway));
        let soul = h.soul("tools = [\"screenshot\"]\n");
        let (out, _) = h.run(rt, h.spec(soul, "what is on my screen?", None)).await;
        assert_eq!(out.status, TaskStatus::Completed, "{kind}: {}", out.result);
        let reqs = h.server.requests();
        assert_eq!(reqs.len(), 2, "{kind}");
        let image = sent_image(kind, &reqs[1].body);
        let (w, h_) = png_size(&image);
        let expected = expected_size(&sway);
        // grim rounds a scaled side its own way: within a pixel of the exact size.
        assert!(
            w.abs_diff(expected.0) <= 1 && h_.abs_diff(expected.1) <= 1 && w.max(h_) == MAX_EDGE,
            "{kind}: {w}x{h_}, expected {expected:?}"
        );
        // Stored once, by reference: the history holds a path, not the pixels.
        let context = std::fs::read_dir(h.config.paths.data_dir.join("context"))
            .unwrap()
            .filter_map(Result::ok)
            .find(|e| e.path().extension().is_some_and(|x| x == "json"))
            .map(|e| std::fs::read_to_string(e.path()).unwrap())
            .expect("the session's context");
        assert!(
            !context.contains(&image[..64]),
            "{kind}: the pixels are in the history"
        );
        assert!(
            context.contains("\"type\": \"image\"") || context.contains("\"type\":\"image\""),
            "{kind}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_without_vision_is_told_so_and_nothing_is_captured() {
    let Some(sway) = desktop_with_a_window() else {
        return;
    };
    let h = Harness::builder(vec![call_reply("openai"), done_reply("openai")])
        .provider(&provider("openai", false))
        .policy(OPEN_POLICY)
        .build()
        .await;
    let rt = h.runtime(tools(&sway));
    let soul = h.soul("tools = [\"screenshot\"]\n");
    let (out, _) = h.run(rt, h.spec(soul, "what is on my screen?", None)).await;
    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);
    let tool = tool_messages(&h.server, 1);
    let text = tool[0]["content"].as_str().unwrap();
    assert!(text.contains("does not take images"), "{text}");
    assert!(text.contains("ui_read"), "{text}");
    let body = h.server.requests()[1].body.to_string();
    assert!(!body.contains("image_url"), "{body}");
    assert!(!h.config.paths.data_dir.join("screens").exists());
}
