//! The daemon supervisor (issue: the daemon). Not built yet.
