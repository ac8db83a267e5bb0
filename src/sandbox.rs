//! Landlock sandbox (issue: tools and sandbox). Not built yet.
