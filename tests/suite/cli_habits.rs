//! The command line's manners, with the binary: `--json` where docs/cli.md shows it,
//! no colour into a pipe, `status` without a daemon, the man page, dynamic
//! completions of soul and session names.

use crate::common::TestHome;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn json_goes_after_show_too() {
    let home = TestHome::new();
    let out = home
        .familiar()
        .args(["souls", "show", "safe_assistant", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let soul: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(soul["id"], "safe_assistant");
    // `sessions show ID --json` parses (and names the missing session).
    let out = home
        .familiar()
        .args(["sessions", "show", "s-000000000000", "--json"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(!err.contains("unexpected argument"), "{err}");
    assert!(err.contains("no session `s-000000000000`"), "{err}");
}

#[test]
fn logs_into_a_pipe_or_on_a_dumb_terminal_have_no_colour() {
    let home = TestHome::new();
    // A broken soul file: `run` logs a warning about it before it fails on the
    // unknown provider (nothing reaches a model).
    home.write_config("souls/broken.toml", "prompt = [\n");
    for term in ["xterm-256color", "dumb"] {
        let out = home
            .familiar()
            .env("TERM", term)
            .args(["run", "--provider", "nope", "hi"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = text(&out.stderr);
        assert!(err.contains("skipping soul file"), "{err}");
        assert!(!err.contains('\u{1b}'), "colour escapes in {err:?}");
    }
}

#[test]
fn status_without_a_daemon_prints_the_local_facts() {
    let home = TestHome::new();
    let config = home.write_config(
        "config.toml",
        "default_provider = \"local\"\n[providers.local]\nmodel = \"some-model\"\n",
    );
    let out = home
        .familiar()
        .env("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/bus")
        .arg("status")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let said = text(&out.stdout);
    assert!(said.contains(env!("CARGO_PKG_VERSION")), "{said}");
    assert!(said.contains(&config.display().to_string()), "{said}");
    assert!(said.contains("provider: local, model some-model"), "{said}");
    assert!(said.contains("landlock (this kernel): "), "{said}");
    assert!(said.contains("daemon: not running"), "{said}");
    // The bus error names its cause first.
    let err = text(&out.stderr);
    assert!(err.starts_with("familiar: no session bus ("), "{err}");

    let out = home
        .familiar()
        .env("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/bus")
        .args(["status", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["daemon"]["running"], false);
    assert_eq!(v["model"], "some-model");
}

#[test]
fn the_man_page_is_roff_naming_every_command() {
    let out = TestHome::new().familiar().arg("man").output().unwrap();
    assert!(out.status.success());
    let page = text(&out.stdout);
    assert!(page.contains(".TH familiar 1"), "{page}");
    for cmd in ["daemon", "run", "ask", "sessions", "setup"] {
        assert!(page.contains(cmd), "{cmd} missing");
    }
}

#[test]
fn completions_offer_soul_and_session_names() {
    let home = TestHome::new();
    let out = home
        .familiar()
        .env("COMPLETE", "fish")
        .args(["--", "familiar", "run", "--soul", ""])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let offered = text(&out.stdout);
    assert!(offered.contains("safe_assistant\t"), "{offered}");
    assert!(offered.contains("system_admin\t"), "{offered}");

    // A session on disk is offered for --session.
    let ctx = home.data_dir().join("context");
    std::fs::create_dir_all(&ctx).unwrap();
    let id = "s-0123456789ab";
    std::fs::write(
        ctx.join(format!("{id}.json")),
        serde_json::json!({
            "version": 1, "session_id": id, "soul": "safe_assistant",
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
            "title": "a title to show"
        })
        .to_string(),
    )
    .unwrap();
    let out = home
        .familiar()
        .env("COMPLETE", "fish")
        .args(["--", "familiar", "sessions", "show", ""])
        .output()
        .unwrap();
    let offered = text(&out.stdout);
    assert!(
        offered.contains(&format!("{id}\ta title to show")),
        "{offered}"
    );
}

#[test]
fn setup_uninstall_removes_what_setup_installed_and_a_dev_build_is_named() {
    let home = TestHome::new();
    let units = home.path().join(".local/share/systemd/user");
    let out = home.familiar().arg("setup").output().unwrap();
    // No user manager here: the systemctl steps fail, so setup exits 1, files written.
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(units.join("familiar.service").is_file());
    assert!(
        text(&out.stderr).contains("is a development build"),
        "{}",
        text(&out.stderr)
    );
    let out = home
        .familiar()
        .args(["setup", "--uninstall", "--dry-run"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        units.join("familiar.service").is_file(),
        "dry run removed files"
    );
    let out = home
        .familiar()
        .args(["setup", "--uninstall"])
        .output()
        .unwrap();
    let said = text(&out.stdout);
    assert!(said.contains("removed: "), "{said}");
    // Regression (issue 42 §5): without a user manager the systemctl steps fail and
    // uninstall exited 1 where setup (with a bus that activates) exits 0; the files
    // are gone, nothing can start the daemon: done.
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("No systemd user manager answered"), "{said}");
    for f in [
        "familiar.service",
        "familiar-maintenance.service",
        "familiar-maintenance.timer",
    ] {
        assert!(!units.join(f).exists(), "{f} left");
    }
    assert!(
        !home
            .path()
            .join(".local/share/dbus-1/services/dev.familiar.Agent1.service")
            .exists()
    );
    // Regression: a second uninstall ran systemctl on units it no longer
    // knew and exited 1.
    let again = home
        .familiar()
        .args(["setup", "--uninstall"])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stdout));
    assert!(text(&again.stdout).contains("nothing to remove"));
}
