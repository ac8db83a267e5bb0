//! Tests that need a program this machine may lack (secret-tool, sway, a user manager):
//! on a developer's machine they skip with "skipped: X not installed" and pass; under
//! `FAMILIAR_TEST_STRICT=1` (what `.ci/run` sets) a skip is a failure, so CI never
//! skips silently. README's "Run the tests" lists the packages per distribution.
//!
//! A skip shows in `cargo test`'s own output, without `--nocapture`: its line goes to
//! the process's stderr directly (libtest captures only `print!`/`eprint!`), and when
//! the test binary exits a last line counts and names the skipped tests.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{Mutex, Once};

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
    let name = test_name(std::panic::Location::caller());
    // Not `eprintln!`: libtest captures that and shows it only with --nocapture.
    let mut err = std::io::stderr().lock();
    if let Err(e) = writeln!(err, "skipped: {name}: {reason}") {
        panic!("cannot write to stderr: {e}");
    }
    SKIPPED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(name);
    static COUNT_AT_EXIT: Once = Once::new();
    // libtest prints its summary and returns from main: only an atexit hook runs after.
    #[allow(unsafe_code)]
    COUNT_AT_EXIT.call_once(|| {
        // SAFETY: `count_at_exit` is a plain `extern "C" fn()` that lives as long as
        // the process; registering it has no other effect.
        let registered = unsafe { libc::atexit(count_at_exit) };
        assert_eq!(registered, 0, "atexit refused the skip count");
    });
}

/// The tests that skipped so far, for the line at exit.
static SKIPPED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The skipping test's name: libtest names each test's thread after it. A skip from
/// another thread (a runtime's worker) is named by where it was called.
fn test_name(caller: &std::panic::Location<'_>) -> String {
    match std::thread::current().name() {
        Some(name) if name != "main" && !name.starts_with("tokio-") => name.to_owned(),
        Some(_) | None => format!("{}:{}", caller.file(), caller.line()),
    }
}

/// Runs when the test binary exits, after libtest's summary: "N tests skipped: …".
extern "C" fn count_at_exit() {
    let skipped = SKIPPED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if skipped.is_empty() {
        return;
    }
    let mut names = skipped.clone();
    names.sort();
    let noun = if names.len() == 1 { "test" } else { "tests" };
    match writeln!(
        std::io::stderr().lock(),
        "{} {noun} skipped: {}",
        names.len(),
        names.join(", ")
    ) {
        // Nothing is left to tell of a failed write this late.
        Ok(()) | Err(_) => {}
    }
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
