//! governor rate limiters (issue: the agent loop). Not built yet.
