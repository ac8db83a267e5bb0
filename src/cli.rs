//! The command line: clap definitions and the commands that run in this process.
