//! The screen rule of the call gate: where what a tool sees of the screen may go.
//!
//! A soul's `screen` ([`ScreenPrivacy`]) weighs each call of a tool whose result shows
//! the screen ([`crate::catalog::shows_screen`]: `screenshot`'s pixels, `ui_read`'s
//! controls and their text) against where the task's model runs ([`Destination`]: the
//! farther of its provider and that provider's fallback, which would receive the same
//! history). Invariants: with `off` the screen tools (and `ui_act`) are neither offered
//! nor run; with `local` nothing of the screen is sent off this machine (a hosted model
//! gets a refusal that says why); with `hosted` a hosted model gets it only after the
//! person approved that very call, whatever the policy's mode for the read tier, the
//! question one sentence naming what and where ("send a screenshot of the window
//! firefox (…) to api.anthropic.com?", worded by the dispatcher from the tool's
//! description and the `sends_to` host this rule gives it). A screenshot for a model without `vision` is
//! refused with a text that says so, before anything is captured.

use crate::agent::calls::dispatch::Disposition;
use crate::config::Config;
use crate::config::screen::Destination;
use crate::policy::{Outcome, StepName, Verdict};
use crate::soul::{ScreenPrivacy, Soul};
use crate::store::AuditDecision;

/// A task's screen rule, made when it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::agent) struct ScreenRoute {
    privacy: ScreenPrivacy,
    destination: Destination,
    /// The provider's name, for the refusals.
    provider: String,
    vision: bool,
}

impl ScreenRoute {
    /// The rule for a task of `soul` under `config` (an unknown provider: hosted and
    /// blind, the strictest reading).
    pub(in crate::agent) fn new(soul: &Soul, config: &Config) -> ScreenRoute {
        let Ok(provider) = config.provider(soul.provider.as_deref()) else {
            return ScreenRoute {
                privacy: soul.screen,
                destination: Destination::Hosted("an unknown provider".to_owned()),
                provider: soul.provider.clone().unwrap_or_default(),
                vision: false,
            };
        };
        let mut destination = Destination::of(&provider.base_url);
        if let Some(fallback) = provider.fallback_provider.as_deref() {
            let far = config
                .provider(Some(fallback))
                .map(|f| Destination::of(&f.base_url))
                .unwrap_or_else(|_| Destination::Hosted(fallback.to_owned()));
            destination = destination.farther(far);
        }
        ScreenRoute::with(soul.screen, destination, &provider.name, provider.vision)
    }

    pub(in crate::agent) fn with(
        privacy: ScreenPrivacy,
        destination: Destination,
        provider: &str,
        vision: bool,
    ) -> ScreenRoute {
        ScreenRoute {
            privacy,
            destination,
            provider: provider.to_owned(),
            vision,
        }
    }

    /// Whether the tool `name` is offered at all.
    pub(in crate::agent) fn offers(&self, name: &str) -> bool {
        self.privacy != ScreenPrivacy::Off || !touches_screen(name)
    }

    /// `disposition` (the policy's and the sandbox rule's) with the screen rule applied.
    pub(in crate::agent) fn dispose(
        &self,
        name: &str,
        verdict: &mut Verdict,
        disposition: Disposition,
    ) -> Disposition {
        if !touches_screen(name) || matches!(disposition, Disposition::Refuse { .. }) {
            return disposition;
        }
        let refuse = |verdict: &mut Verdict, reason: String| {
            verdict.record(StepName::Screen, Outcome::Deny, reason.clone());
            Disposition::Refuse {
                decision: AuditDecision::Denied,
                reason,
            }
        };
        if self.privacy == ScreenPrivacy::Off {
            return refuse(
                verdict,
                "refused: this soul does not see the screen (screen = \"off\")".to_owned(),
            );
        }
        if name == "screenshot" && !self.vision {
            return refuse(
                verdict,
                format!(
                    "the model of provider `{}` does not take images, so no screenshot was taken (if it does, set vision = true in [providers.{}]); ui_read gives the focused window's controls as text",
                    self.provider, self.provider
                ),
            );
        }
        let Some(what) = crate::catalog::shows_screen(name) else {
            return disposition;
        };
        let Destination::Hosted(host) = &self.destination else {
            return disposition;
        };
        match self.privacy {
            ScreenPrivacy::Off | ScreenPrivacy::Local => refuse(
                verdict,
                format!(
                    "refused: this soul keeps the screen on this machine (screen = \"local\") and its model runs at {host}; a soul with screen = \"hosted\" may send it there, each time asked"
                ),
            ),
            ScreenPrivacy::Hosted => {
                let sends = format!("it sends {what} to {host}");
                verdict.record(StepName::Screen, Outcome::Ask, sends.clone());
                Disposition::Ask {
                    reason: match disposition {
                        Disposition::Ask { reason, .. } => format!("{sends}; {reason}"),
                        Disposition::Run | Disposition::Refuse { .. } => {
                            format!("{sends}: it is always asked")
                        }
                    },
                    // Pixels or screen text for a hosted model: each send is its own
                    // question.
                    grant: crate::approval::Grantable::Never(sends),
                    sends_to: Some(host.clone()),
                }
            }
        }
    }
}

/// The tools the soul's `screen` governs: those that show the screen, and `ui_act`,
/// which acts on what `ui_read` showed.
fn touches_screen(name: &str) -> bool {
    crate::catalog::shows_screen(name).is_some() || name == "ui_act"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Decision;

    fn verdict() -> Verdict {
        Verdict {
            decision: Decision::Allow,
            steps: Vec::new(),
        }
    }

    fn hosted() -> Destination {
        Destination::Hosted("api.anthropic.com".to_owned())
    }

    fn reason(d: &Disposition) -> String {
        match d {
            Disposition::Run => "run".to_owned(),
            Disposition::Ask { reason, .. } | Disposition::Refuse { reason, .. } => reason.clone(),
        }
    }

    #[test]
    fn a_local_soul_sends_the_screen_to_a_local_model_only() {
        let local = ScreenRoute::with(ScreenPrivacy::Local, Destination::Local, "llama", true);
        let d = local.dispose("screenshot", &mut verdict(), Disposition::Run);
        assert!(matches!(d, Disposition::Run), "{d:?}");
        let far = ScreenRoute::with(ScreenPrivacy::Local, hosted(), "claude", true);
        for tool in ["screenshot", "ui_read"] {
            let d = far.dispose(tool, &mut verdict(), Disposition::Run);
            assert!(matches!(d, Disposition::Refuse { .. }), "{d:?}");
            assert!(
                reason(&d).contains("runs at api.anthropic.com"),
                "{}",
                reason(&d)
            );
        }
        // ui_act shows nothing of the screen: the policy decides it.
        let d = far.dispose(
            "ui_act",
            &mut verdict(),
            Disposition::Ask {
                reason: "execute".into(),
                grant: crate::approval::Grantable::Never("a test".into()),
                sends_to: None,
            },
        );
        assert!(matches!(d, Disposition::Ask { .. }), "{d:?}");
    }

    #[test]
    fn a_hosted_soul_is_asked_each_time_naming_where() {
        let route = ScreenRoute::with(ScreenPrivacy::Hosted, hosted(), "claude", true);
        let mut v = verdict();
        let d = route.dispose("screenshot", &mut v, Disposition::Run);
        assert_eq!(
            reason(&d),
            "it sends a screenshot to api.anthropic.com: it is always asked"
        );
        let Disposition::Ask { sends_to, .. } = &d else {
            panic!("{d:?}");
        };
        assert_eq!(sends_to.as_deref(), Some("api.anthropic.com"));
        assert_eq!(v.steps.last().map(|s| s.name), Some(StepName::Screen));
    }

    #[test]
    fn off_hides_and_refuses_and_a_blind_model_gets_text() {
        let off = ScreenRoute::with(ScreenPrivacy::Off, Destination::Local, "llama", true);
        assert!(!off.offers("screenshot") && !off.offers("ui_read") && !off.offers("ui_act"));
        assert!(off.offers("read_file"));
        let d = off.dispose("ui_act", &mut verdict(), Disposition::Run);
        assert!(matches!(d, Disposition::Refuse { .. }), "{d:?}");
        let blind = ScreenRoute::with(ScreenPrivacy::Local, Destination::Local, "llama", false);
        let d = blind.dispose("screenshot", &mut verdict(), Disposition::Run);
        assert!(
            reason(&d).contains("does not take images"),
            "{}",
            reason(&d)
        );
        let d = blind.dispose("ui_read", &mut verdict(), Disposition::Run);
        assert!(matches!(d, Disposition::Run), "{d:?}");
    }
}
