//! Environment snapshot.
