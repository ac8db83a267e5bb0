//! The buses familiar talks on, besides its own contract (`dev.familiar.Agent1`: names,
//! the typed error, shared limits, the client proxy), which is the `familiar-protocol`
//! crate and is imported by its own paths: the desktop-notification proxy
//! ([`notifications`]), the systemd user manager ([`systemd`]) and logind, UPower and
//! NetworkManager ([`desktop`]). The service object that implements the contract lives
//! in `daemon::service`.
//!
//! This module never imports the daemon: cli, tools and daemon import it, one way.

pub mod desktop;
pub mod notifications;
pub mod systemd;
