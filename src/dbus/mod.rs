//! The D-Bus service and client (issue: the daemon). Not built yet.
