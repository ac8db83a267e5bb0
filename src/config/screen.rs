//! `[screen]`: how the screen reaches a model (`max_edge`, the longest side of a
//! screenshot in pixels), and where a provider's model runs ([`Destination`]), which a
//! soul's `screen` setting weighs before pixels or accessibility text leave a tool.
//!
//! Invariant: only a loopback address or a unix socket is [`Destination::Local`];
//! anything else, the local network included, is hosted: a soul that keeps the screen
//! local keeps it on this machine.

use serde::{Deserialize, Serialize};

/// The longest side of a screenshot sent to a model, in pixels: vision models scale
/// larger images down themselves (Anthropic to 1568, OpenAI to 2048 then 768 short
/// side) and bill the tokens of what was sent.
pub const DEFAULT_MAX_EDGE: u32 = 1280;
/// The smallest `max_edge` accepted: below it a window's text is unreadable.
const MIN_MAX_EDGE: u32 = 200;
const MAX_MAX_EDGE: u32 = 8192;

/// `[screen]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScreenToml {
    pub max_edge: Option<u32>,
}

/// `[screen]`, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ScreenConfig {
    pub max_edge: u32,
}

impl Default for ScreenConfig {
    fn default() -> Self {
        ScreenConfig {
            max_edge: DEFAULT_MAX_EDGE,
        }
    }
}

/// The effective `[screen]`; an error names the key.
pub(super) fn resolve(raw: ScreenToml) -> Result<ScreenConfig, (String, String)> {
    let max_edge = raw.max_edge.unwrap_or(DEFAULT_MAX_EDGE);
    if !(MIN_MAX_EDGE..=MAX_MAX_EDGE).contains(&max_edge) {
        return Err((
            "screen.max_edge".to_owned(),
            format!("{max_edge} is outside {MIN_MAX_EDGE}..={MAX_MAX_EDGE}"),
        ));
    }
    Ok(ScreenConfig { max_edge })
}

/// Where a provider's requests go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// This machine: a loopback address, `localhost` or a unix socket.
    Local,
    /// Anywhere else; the host, as an approval names it.
    Hosted(String),
}

impl Destination {
    /// Where `base_url` points.
    pub fn of(base_url: &str) -> Destination {
        if base_url.starts_with("unix:") || base_url.starts_with("http+unix:") {
            return Destination::Local;
        }
        let rest = base_url.split_once("://").map_or(base_url, |(_, r)| r);
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let host = match host_port.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default(),
            None => host_port.split(':').next().unwrap_or_default(),
        }
        .to_ascii_lowercase();
        let local = match host.parse::<std::net::IpAddr>() {
            Ok(ip) => ip.is_loopback(),
            Err(_) => host == "localhost" || host.ends_with(".localhost"),
        };
        if local {
            Destination::Local
        } else {
            Destination::Hosted(host)
        }
    }

    /// The farther of two: hosted wins (a fallback provider receives the history).
    pub fn farther(self, other: Destination) -> Destination {
        match (self, other) {
            (Destination::Local, d) => d,
            (d @ Destination::Hosted(_), _) => d,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_machine_is_local() {
        for url in [
            "http://127.0.0.1:8080/v1",
            "http://localhost:11434",
            "http://[::1]:8080",
            "http://llama.localhost/v1",
            "unix:/run/user/1000/llama.sock",
        ] {
            assert_eq!(Destination::of(url), Destination::Local, "{url}");
        }
        for (url, host) in [
            ("https://api.anthropic.com", "api.anthropic.com"),
            ("http://192.168.1.20:8080/v1", "192.168.1.20"),
            ("http://gpu-box:11434", "gpu-box"),
            ("https://user@openrouter.ai/api/v1", "openrouter.ai"),
        ] {
            assert_eq!(
                Destination::of(url),
                Destination::Hosted(host.to_owned()),
                "{url}"
            );
        }
    }

    #[test]
    fn max_edge_is_bounded() {
        assert_eq!(resolve(ScreenToml::default()).unwrap().max_edge, 1280);
        assert_eq!(
            resolve(ScreenToml {
                max_edge: Some(800)
            })
            .unwrap()
            .max_edge,
            800
        );
        let (key, message) = resolve(ScreenToml { max_edge: Some(50) }).unwrap_err();
        assert_eq!(key, "screen.max_edge");
        assert!(message.contains("outside"), "{message}");
    }
}
