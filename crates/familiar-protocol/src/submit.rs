//! `Submit`'s options: the `a{sv}` a client sends and the daemon reads, as one type.
//!
//! Invariant: [`SubmitOptions::to_dict`] writes only what [`SubmitOptions::from_dict`]
//! accepts, and `from_dict` checks every key for its type and value, refusing an unknown
//! key or a wrong type with an `InvalidArgument` that names the key. What needs the
//! daemon's machine is the daemon's to check after it: that the workspace exists, and
//! what the `when` conditions mean (their grammar lives with the probes that read them).
//!
//! `context` carries text the client read at the key press (the primary selection, the
//! clipboard, the focused window), not names of things for the daemon to read: the
//! client runs in the user's graphical session (it has `WAYLAND_DISPLAY`; the daemon
//! under systemd may not), and a daemon that read the clipboard on request would hand
//! it to any caller on the bus, a soul's sandboxed tool among them.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use zbus::zvariant::{OwnedVariant, Variant};

use crate::ids::SessionId;
use crate::{Error, MAX_ORIGIN_CHARS};

/// What `Submit` takes besides the soul and the prompt. Every field is optional; an
/// absent one is the daemon's default (a new session, origin `dbus`, the session's
/// scratch workspace, the soul's iterations, provider and model, no conditions).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubmitOptions {
    /// Continue this session (under its soul).
    pub session: Option<SessionId>,
    /// Who asks: `cli`, `hyprland`, `timer`, … (1 to [`MAX_ORIGIN_CHARS`] characters).
    pub origin: Option<String>,
    /// The task's writable workspace: an absolute path to an existing directory. A
    /// path that is not UTF-8 cannot cross the bus: it is sent with U+FFFD in place of
    /// the bytes that are not, and refused as a directory that does not exist.
    pub workspace: Option<PathBuf>,
    /// At most this many iterations (at least 1; the soul's own cap still holds).
    pub max_iterations: Option<u32>,
    /// A provider table of the daemon's config.toml, this task only.
    pub provider: Option<String>,
    /// A model of that provider, this task only.
    pub model: Option<String>,
    /// Run only when these hold (`ac,battery>30,idle>5m`: docs/cli.md); the daemon
    /// parses them.
    pub when: Option<String>,
    /// What the user pointed at, read by the client once at the key press: each
    /// source at most once, its text at most [`MAX_CONTEXT_BYTES`]. Empty: none.
    pub context: BTreeMap<ContextSource, String>,
}

/// Longest text one `context` source may carry (a longer one is cut by the client,
/// with a note saying so, before it is sent).
pub const MAX_CONTEXT_BYTES: usize = 16 * 1024;

/// Where a `context` text was read, in the order the request shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ContextSource {
    /// The primary selection: the text selected last, anywhere.
    Selection,
    /// The clipboard's text (never an offer a password manager marks as secret).
    Clipboard,
    /// The focused window's app, title and workspace.
    Window,
}

impl ContextSource {
    /// Every source.
    pub const ALL: [ContextSource; 3] = [
        ContextSource::Selection,
        ContextSource::Clipboard,
        ContextSource::Window,
    ];

    /// The word on the command line and the key in the `context` option.
    pub fn as_str(self) -> &'static str {
        match self {
            ContextSource::Selection => "selection",
            ContextSource::Clipboard => "clipboard",
            ContextSource::Window => "window",
        }
    }

    /// How the request and the progress bubble name it.
    pub fn describe(self) -> &'static str {
        match self {
            ContextSource::Selection => "primary selection",
            ContextSource::Clipboard => "clipboard",
            ContextSource::Window => "focused window",
        }
    }
}

/// A `context` source that is none of [`ContextSource::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is no context source; one of selection, clipboard, window")]
pub struct UnknownContextSource(pub String);

impl std::str::FromStr for ContextSource {
    type Err = UnknownContextSource;

    fn from_str(s: &str) -> Result<ContextSource, UnknownContextSource> {
        ContextSource::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownContextSource(s.to_owned()))
    }
}

/// What `from_dict` says about a key it does not know.
const KNOWN_KEYS: &str = "session (s), origin (s), workspace (s), max_iterations (u), provider (s), model (s), when (s), context (a{ss})";

impl SubmitOptions {
    /// A session id for the `session` option, refused as the daemon refuses it.
    pub fn session_id(id: &str) -> Result<SessionId, Error> {
        SessionId::new(id).map_err(|e| Error::InvalidArgument(format!("option `session`: {e}")))
    }

    /// The `a{sv}` to pass to [`Agent1Proxy::submit`](crate::proxy::Agent1Proxy::submit):
    /// the fields that are set, each under its key.
    pub fn to_dict(&self) -> HashMap<&'static str, Variant<'_>> {
        let mut dict = HashMap::new();
        let strings = [
            ("session", self.session.as_ref().map(SessionId::as_str)),
            ("origin", self.origin.as_deref()),
            ("provider", self.provider.as_deref()),
            ("model", self.model.as_deref()),
            ("when", self.when.as_deref()),
        ];
        for (key, value) in strings {
            if let Some(v) = value {
                dict.insert(key, Variant::from(v));
            }
        }
        if let Some(w) = &self.workspace {
            dict.insert("workspace", Variant::from(w.to_string_lossy().into_owned()));
        }
        if let Some(n) = self.max_iterations {
            dict.insert("max_iterations", Variant::from(n));
        }
        if !self.context.is_empty() {
            let context: BTreeMap<&str, &str> = self
                .context
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            dict.insert("context", Variant::from(context));
        }
        dict
    }

    /// Reads `Submit`'s options: each key known, of its type, its value valid.
    pub fn from_dict(dict: HashMap<String, OwnedVariant>) -> Result<SubmitOptions, Error> {
        let mut o = SubmitOptions::default();
        for (key, value) in dict {
            match key.as_str() {
                "session" => o.session = Some(Self::session_id(&string_option(&key, value)?)?),
                "origin" => {
                    let s = string_option(&key, value)?;
                    if s.is_empty() || s.chars().count() > MAX_ORIGIN_CHARS {
                        return Err(Error::InvalidArgument(format!(
                            "option `origin` must be 1 to {MAX_ORIGIN_CHARS} characters (cli, hyprland, timer, …)"
                        )));
                    }
                    o.origin = Some(s);
                }
                "workspace" => {
                    let s = string_option(&key, value)?;
                    let path = PathBuf::from(&s);
                    if !path.is_absolute() {
                        return Err(Error::InvalidArgument(format!(
                            "option `workspace` must be an absolute path, got `{s}`"
                        )));
                    }
                    o.workspace = Some(path);
                }
                "max_iterations" => {
                    let n = u32::try_from(value).map_err(|_| wrong_type(&key, "u (uint32)"))?;
                    if n == 0 {
                        return Err(Error::InvalidArgument(
                            "option `max_iterations` must be at least 1".to_owned(),
                        ));
                    }
                    o.max_iterations = Some(n);
                }
                "provider" => o.provider = Some(string_option(&key, value)?),
                "model" => o.model = Some(string_option(&key, value)?),
                "when" => o.when = Some(string_option(&key, value)?),
                "context" => o.context = context_option(value)?,
                other => {
                    return Err(Error::InvalidArgument(format!(
                        "unknown option `{other}`; Submit takes {KNOWN_KEYS}"
                    )));
                }
            }
        }
        Ok(o)
    }
}

fn string_option(key: &str, value: OwnedVariant) -> Result<String, Error> {
    String::try_from(value).map_err(|_| wrong_type(key, "s (string)"))
}

/// The `context` option: each key a [`ContextSource`], each text within
/// [`MAX_CONTEXT_BYTES`].
fn context_option(value: OwnedVariant) -> Result<BTreeMap<ContextSource, String>, Error> {
    let raw = BTreeMap::<String, String>::try_from(value)
        .map_err(|_| wrong_type("context", "a{ss} (source → text)"))?;
    let mut context = BTreeMap::new();
    for (key, text) in raw {
        let source = key
            .parse::<ContextSource>()
            .map_err(|e| Error::InvalidArgument(format!("option `context`: {e}")))?;
        if text.len() > MAX_CONTEXT_BYTES {
            return Err(Error::InvalidArgument(format!(
                "option `context`: the {} is {} bytes, more than {MAX_CONTEXT_BYTES}",
                source.describe(),
                text.len()
            )));
        }
        context.insert(source, text);
    }
    Ok(context)
}

fn wrong_type(key: &str, want: &str) -> Error {
    Error::InvalidArgument(format!("option `{key}` must be of type {want}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the daemon receives for `dict`, as it crosses the bus.
    fn received(dict: HashMap<&str, Variant<'_>>) -> HashMap<String, OwnedVariant> {
        dict.into_iter()
            .map(|(k, v)| (k.to_owned(), OwnedVariant::try_from(v).unwrap()))
            .collect()
    }

    fn refusal(dict: HashMap<&str, Variant<'_>>) -> String {
        match SubmitOptions::from_dict(received(dict)) {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("not refused as an invalid argument: {other:?}"),
        }
    }

    #[test]
    fn every_field_round_trips() {
        let all = SubmitOptions {
            session: Some(SessionId::new("s-1").unwrap()),
            origin: Some("hyprland".into()),
            workspace: Some(PathBuf::from("/tmp/w")),
            max_iterations: Some(3),
            provider: Some("local".into()),
            model: Some("qwen".into()),
            when: Some("ac,battery>30".into()),
            context: BTreeMap::from([
                (ContextSource::Selection, "a </context> b".to_owned()),
                (ContextSource::Window, "app: foot".to_owned()),
            ]),
        };
        for o in [all, SubmitOptions::default()] {
            assert_eq!(SubmitOptions::from_dict(received(o.to_dict())).unwrap(), o);
        }
    }

    #[test]
    fn only_set_fields_are_sent() {
        let o = SubmitOptions {
            origin: Some("cli".into()),
            ..SubmitOptions::default()
        };
        assert_eq!(
            o.to_dict(),
            HashMap::from([("origin", Variant::from("cli"))])
        );
    }

    #[test]
    fn refusals_name_the_key() {
        let one = |k: &'static str, v: Variant<'static>| HashMap::from([(k, v)]);
        let cases = [
            (
                one("workspace", Variant::from("rel/dir")),
                "option `workspace` must be an absolute path, got `rel/dir`",
            ),
            (
                one("workspace", Variant::from(7u32)),
                "option `workspace` must be of type s (string)",
            ),
            (
                one("max_iterations", Variant::from("ten")),
                "option `max_iterations` must be of type u (uint32)",
            ),
            (
                one("max_iterations", Variant::from(0u32)),
                "option `max_iterations` must be at least 1",
            ),
            (
                one("origin", Variant::from("")),
                "option `origin` must be 1 to 64 characters (cli, hyprland, timer, …)",
            ),
            (
                one("colour", Variant::from("blue")),
                "unknown option `colour`; Submit takes session (s), origin (s), workspace (s), max_iterations (u), provider (s), model (s), when (s), context (a{ss})",
            ),
            (
                one("context", Variant::from(BTreeMap::from([("screen", "x")]))),
                "option `context`: `screen` is no context source; one of selection, clipboard, window",
            ),
            (
                one("context", Variant::from("selection")),
                "option `context` must be of type a{ss} (source → text)",
            ),
            (
                one(
                    "context",
                    Variant::from(BTreeMap::from([(
                        "clipboard",
                        "x".repeat(MAX_CONTEXT_BYTES + 1),
                    )])),
                ),
                "option `context`: the clipboard is 16385 bytes, more than 16384",
            ),
        ];
        for (dict, want) in cases {
            assert_eq!(refusal(dict), want);
        }
        assert!(
            refusal(one("session", Variant::from("../../etc")))
                .starts_with("option `session`: session id `../../etc`")
        );
    }
}
