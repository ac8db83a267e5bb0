//! A skipped test shows in `cargo test`'s own output (tests/common/skip.rs): this test
//! binary runs itself on one test that skips and reads what a person would see.

use crate::common::skip;

/// Skips when asked to by the test below, else passes at once.
#[test]
fn skip_probe() {
    if std::env::var_os("FAMILIAR_TEST_SKIP_PROBE").is_some() {
        skip::skip("the probe's reason");
    }
}

// Regression (issue 42 §5): `cargo test` hid its 17 skipped tests: "skipped: …" was
// eprintln!'d, which libtest shows only with --nocapture.
#[test]
fn a_skip_shows_without_nocapture_and_is_counted_at_the_end() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "suite::skips::skip_probe"])
        .env("FAMILIAR_TEST_SKIP_PROBE", "1")
        .env_remove("FAMILIAR_TEST_STRICT")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("1 passed"), "{stdout}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines,
        [
            "skipped: suite::skips::skip_probe: the probe's reason",
            "1 test skipped: suite::skips::skip_probe",
        ],
        "{stderr}"
    );
}
