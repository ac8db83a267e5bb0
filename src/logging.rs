//! tracing setup: journald when stderr is the journal, human-readable stderr otherwise.
