//! `[warm]`: which souls' prefixes the daemon sends to their local model server ahead of
//! the first request (after it starts, after a reload, after the server lost its
//! cache), and when the machine allows it. Raw ([`WarmToml`]) and effective
//! ([`WarmConfig`]) types, as for the rest of config.toml.

use familiar_protocol::ids::SoulId;
use serde::{Deserialize, Serialize};

/// On battery, warming waits for at least this charge.
pub const DEFAULT_WARM_MIN_BATTERY: u8 = 50;

/// `[warm]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WarmToml {
    /// `true`: warm every listed soul; `false`: none. Unset: those whose provider is
    /// on this machine or the local network (a hosted API bills the tokens).
    pub enabled: Option<bool>,
    /// The souls to warm; default the default soul.
    pub souls: Option<Vec<String>>,
    /// On battery, warm only above this percent (0 to 100).
    pub min_battery: Option<u8>,
    /// Whether to warm over a metered connection too.
    pub metered: Option<bool>,
}

/// `[warm]`, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WarmConfig {
    /// `None`: by the provider's address (on for loopback and LAN servers).
    pub enabled: Option<bool>,
    pub souls: Vec<SoulId>,
    pub min_battery: u8,
    pub metered: bool,
}

impl WarmConfig {
    /// Whether a soul whose provider is at `base_url` is warmed.
    pub fn applies_to(&self, base_url: &str) -> bool {
        self.enabled
            .unwrap_or_else(|| super::is_local_url(base_url))
    }
}

/// The effective `[warm]`; `default_soul` when it lists no souls. An error names the key.
pub(super) fn resolve(
    raw: WarmToml,
    default_soul: &SoulId,
) -> Result<WarmConfig, (String, String)> {
    let souls = match raw.souls {
        None => vec![default_soul.clone()],
        Some(list) => list
            .into_iter()
            .map(|s| SoulId::new(s).map_err(|e| ("warm.souls".to_owned(), e.to_string())))
            .collect::<Result<_, _>>()?,
    };
    let min_battery = raw.min_battery.unwrap_or(DEFAULT_WARM_MIN_BATTERY);
    if min_battery > 100 {
        return Err((
            "warm.min_battery".to_owned(),
            "must be a percentage, 0 to 100".to_owned(),
        ));
    }
    Ok(WarmConfig {
        enabled: raw.enabled,
        souls,
        min_battery,
        metered: raw.metered.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_the_default_soul_on_local_servers_only() {
        let soul = SoulId::new("safe_assistant").unwrap();
        let w = resolve(WarmToml::default(), &soul).unwrap();
        assert_eq!(w.souls, std::slice::from_ref(&soul));
        assert!(w.applies_to("http://127.0.0.1:8080/v1"));
        assert!(w.applies_to("http://192.168.1.20:11434/v1"));
        assert!(!w.applies_to("https://api.openai.com/v1"));
        let off = WarmToml {
            enabled: Some(false),
            ..WarmToml::default()
        };
        assert!(
            !resolve(off, &soul)
                .unwrap()
                .applies_to("http://127.0.0.1:8080/v1")
        );
        let bad = WarmToml {
            min_battery: Some(101),
            ..WarmToml::default()
        };
        assert!(resolve(bad, &soul).is_err());
    }
}
