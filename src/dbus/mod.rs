//! The buses familiar talks on. Its own contract (`dev.familiar.Agent1`: names, the
//! typed error, shared limits, the client proxy) is the `familiar-protocol` crate,
//! re-exported here under the names the product has always used; beside it, the
//! desktop-notification proxy ([`notifications`]), the systemd user manager
//! ([`systemd`]) and logind, UPower and NetworkManager ([`desktop`]). The service
//! object that implements the contract lives in `daemon::service`.
//!
//! This module never imports the daemon: cli, tools and daemon import it, one way.

pub mod desktop;
pub mod notifications;
pub mod systemd;

pub use familiar_protocol::{
    ContextSource, ERROR_PREFIX, Error, INTERFACE, LIST_PROMPT_CHARS, MAX_CONTEXT_BYTES,
    MAX_GRANT_SECS, MAX_ORIGIN_CHARS, MAX_PROMPT_BYTES, MAX_STEER_BYTES, NAME, PATH, SubmitOptions,
    proxy,
};
