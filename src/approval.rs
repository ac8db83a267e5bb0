//! The approval broker (issue: the agent loop). Not built yet.
