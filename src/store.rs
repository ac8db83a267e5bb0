//! Session store.
