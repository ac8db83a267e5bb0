//! A soul's `screen` against a hosted model, the whole loop: the model's server listens
//! on this machine's network address (not loopback, so familiar counts it as hosted
//! and names it as the host), the screenshot comes from the fake portal on a private
//! bus. `screen = "hosted"`: the person is asked one sentence naming what and where;
//! approved, the image reaches the server in the provider's wire format in the turn
//! after the call; denied, nothing is captured and no pixels are sent. `screen =
//! "local"`: refused with the reason, nothing asked, nothing captured.

use std::sync::{Arc, Mutex};

use familiar::approval::{Answer, ApprovalBroker, ApprovalRequest, Frontend};
use familiar::tools::Registry;
use familiar::tools::bus::Bus;
use familiar::tools::screen::Screenshot;
use familiar_protocol::ids::RequestId;
use familiar_protocol::task::TaskStatus;

use super::screen_sway::{call_reply, done_reply, png_size, sent_image};
use crate::common::bus::TestBus;
use crate::common::fake_portal::FakePortal;
use crate::common::harness::*;

/// Answers every question with `answer`, keeping each question's summary.
pub(super) struct Person {
    answer: Answer,
    asked: Mutex<Vec<String>>,
}

impl Person {
    pub(super) fn new(answer: Answer) -> Arc<Person> {
        Arc::new(Person {
            answer,
            asked: Mutex::new(Vec::new()),
        })
    }

    pub(super) fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

/// The host a hosted harness's model is at, as an approval names it.
pub(super) fn host_of(h: &Harness) -> String {
    h.server
        .base
        .trim_start_matches("http://")
        .split(':')
        .next()
        .unwrap()
        .to_owned()
}

impl Frontend for Person {
    fn present(&self, request: &ApprovalRequest, broker: &ApprovalBroker) -> bool {
        self.asked.lock().unwrap().push(request.summary.clone());
        broker
            .respond(&request.request_id, self.answer, "test")
            .unwrap();
        true
    }

    fn withdraw(&self, _request_id: &RequestId) {}
}

struct Setup {
    h: Harness,
    bus: TestBus,
    portal: FakePortal,
    _pictures: tempfile::TempDir,
    person: Arc<Person>,
    host: String,
}

fn provider(kind: &str) -> String {
    let kind_line = match kind {
        "anthropic" => "kind = \"anthropic\"\n",
        _ => "",
    };
    format!("{kind_line}api_key_env = \"HOME\"\nvision = true\n[screen]\nmax_edge = 400\n")
}

/// A hosted model of `kind` scripted to call `screenshot` once, a GNOME session's
/// portal, and a person who answers `answer`.
async fn setup(kind: &str, answer: Answer) -> Option<Setup> {
    let h = Harness::builder(vec![call_reply(kind), done_reply(kind)])
        .provider(&provider(kind))
        .policy(OPEN_POLICY)
        .hosted()
        .await?;
    let host = host_of(&h);
    let bus = TestBus::start();
    let pictures = tempfile::tempdir().unwrap();
    let portal = FakePortal::start(&bus.address, pictures.path().to_owned()).await;
    let person = Person::new(answer);
    h.approvals
        .add_frontend(Arc::clone(&person) as Arc<dyn Frontend>);
    Some(Setup {
        h,
        bus,
        portal,
        _pictures: pictures,
        person,
        host,
    })
}

impl Setup {
    async fn run(&self, screen: &str) -> familiar::agent::TaskOutcome {
        let tool = Screenshot {
            locate: Arc::new(|| None),
            portal: Bus::Address(self.bus.address.clone()),
            desktop: Some("GNOME".to_owned()),
        };
        let rt = self.h.runtime(Registry::with(vec![Arc::new(tool)]));
        let soul = self.h.soul(&format!(
            "tools = [\"screenshot\"]\nscreen = \"{screen}\"\n"
        ));
        let (out, _) = self
            .h
            .run(rt, self.h.spec(soul, "what is on my screen?", None))
            .await;
        out
    }

    fn asked(&self) -> Vec<String> {
        self.person.asked()
    }

    /// The second request's body, as sent.
    fn second_request(&self) -> String {
        let reqs = self.h.server.requests();
        assert_eq!(reqs.len(), 2);
        reqs[1].body.to_string()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approved_the_screenshot_reaches_the_hosted_model_in_its_wire_format() {
    for kind in ["anthropic", "openai"] {
        let Some(s) = setup(kind, Answer::Approve).await else {
            return;
        };
        let out = s.run("hosted").await;
        assert_eq!(out.status, TaskStatus::Completed, "{kind}: {}", out.result);
        assert_eq!(
            s.asked(),
            [format!(
                "send a screenshot of the whole screen (the desktop's portal gives the whole screen and the focused window's place is not known) to {}?",
                s.host
            )],
            "{kind}"
        );
        let reqs = s.h.server.requests();
        assert_eq!(reqs.len(), 2, "{kind}");
        let image = sent_image(kind, &reqs[1].body);
        assert_eq!(png_size(&image), (400, 225), "{kind}");
        assert_eq!(s.portal.calls().len(), 1, "{kind}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_nothing_is_captured_and_no_pixels_are_sent() {
    for kind in ["anthropic", "openai"] {
        let Some(s) = setup(kind, Answer::Deny).await else {
            return;
        };
        let out = s.run("hosted").await;
        assert_eq!(out.status, TaskStatus::Completed, "{kind}: {}", out.result);
        assert_eq!(s.asked().len(), 1, "{kind}");
        let body = s.second_request();
        for pixels in ["image_url", "\"image\"", "base64"] {
            assert!(!body.contains(pixels), "{kind}: {pixels} in {body}");
        }
        assert!(s.portal.calls().is_empty(), "{kind}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_soul_refuses_a_hosted_model_without_asking() {
    let Some(s) = setup("openai", Answer::Approve).await else {
        return;
    };
    let out = s.run("local").await;
    assert_eq!(out.status, TaskStatus::Completed, "{}", out.result);
    assert!(s.asked().is_empty());
    let text = tool_messages(&s.h.server, 1)[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text.contains("keeps the screen on this machine") && text.contains(&s.host),
        "{text}"
    );
    assert!(!s.second_request().contains("image_url"));
    assert!(s.portal.calls().is_empty());
}
