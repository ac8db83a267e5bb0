//! The agent loop (issue: the agent loop). Not built yet.
