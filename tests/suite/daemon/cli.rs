//! The client commands against the daemon on a private bus.
