//! Tests that need a program this machine may lack (secret-tool, sway, a user manager):
//! on a developer's machine they skip with "skipped: X not installed" and pass; under
//! `FAMILIAR_TEST_STRICT=1` (what `.ci/run` sets) a skip is a failure, so CI never
//! skips silently. README's "Run the tests" lists the packages per distribution.
#![allow(clippy::print_stderr)]

use std::path::PathBuf;

/// Whether every skip is a failure (`.ci/run` sets `FAMILIAR_TEST_STRICT=1`).
pub fn strict() -> bool {
    std::env::var("FAMILIAR_TEST_STRICT").as_deref() == Ok("1")
}

/// Says why the calling test does not run; under [`strict`] that is a failure.
#[track_caller]
pub fn skip(reason: &str) {
    assert!(
        !strict(),
        "FAMILIAR_TEST_STRICT=1, but a test would skip: {reason}"
    );
    eprintln!("skipped: {reason}");
}

/// The path of `program` on PATH, or `None` after [`skip`] naming the package that
/// brings it (Debian's name; README lists the others).
#[track_caller]
pub fn program(program: &str, package: &str) -> Option<PathBuf> {
    match which(program) {
        Some(path) => Some(path),
        None => {
            skip(&format!("{program} not installed (package {package})"));
            None
        }
    }
}

fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}
