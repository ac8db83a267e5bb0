//! The menu `ask --dmenu` and `approve --dmenu` open: only config.toml's `[desktop]
//! menu` or an installed one from the system's `PATH`, never one planted where a soul
//! could write (issue 39: a `fuzzel` in `~/.local/bin` approved a request, unconfined).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::cli::familiar;
use super::*;

/// Every known menu in `dir`, each leaving `marker` and printing a choice that would
/// answer.
fn plant(dir: &Path, marker: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for name in ["fuzzel", "wofi", "rofi", "bemenu"] {
        let path = dir.join(name);
        let script = format!("#!/bin/sh\ntouch '{}'\necho Approve\n", marker.display());
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// See: issue 39.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_menu_planted_on_path_or_in_local_bin_never_runs() {
    let f = Fixture::new(vec![]).await;
    let home = f.harness.home.path();
    let marker = home.join("planted-menu-ran");
    let on_path = tempfile::tempdir().unwrap();
    plant(on_path.path(), &marker);
    plant(&home.join(".local/bin"), &marker);
    let path = format!(
        "{}:{}:{}",
        on_path.path().display(),
        home.join(".local/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let legacy = on_path.path().join("fuzzel").display().to_string();
    let env = [("PATH", path.as_str()), ("FAMILIAR_DMENU", legacy.as_str())];
    for args in [
        &["ask", "--dmenu", "--detach", "--soul", "test"][..],
        &["approve", "--dmenu"][..],
    ] {
        let out = familiar(&f.harness.home, &f.bus, args, &env).await;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!marker.exists(), "{args:?} ran a planted menu: {stderr}");
        // Nothing was typed: no task, whatever menu (if any) the system has.
        assert!(f.proxy.list_tasks().await.unwrap().is_empty(), "{args:?}");
        if args[0] == "ask" {
            assert!(
                stderr.contains("FAMILIAR_DMENU is set but no longer read"),
                "{stderr}"
            );
        }
    }
    // Named in config.toml, a menu under home is refused when the file loads.
    f.harness.home.write_config(
        "config.toml",
        &format!(
            "[desktop]\nmenu = \"{}\"\n",
            home.join(".local/bin/fuzzel").display()
        ),
    );
    let out = familiar(
        &f.harness.home,
        &f.bus,
        &["ask", "--dmenu", "--detach"],
        &env,
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(stderr.contains("desktop.menu"), "{stderr}");
    assert!(!marker.exists(), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_lists_the_menu_and_where_it_was_found() {
    let home = crate::common::TestHome::new();
    home.write_config("config.toml", "[desktop]\nmenu = \"sh -c 'echo x'\"\n");
    let bus = TestBus::start();
    let out = familiar(
        &home,
        &bus,
        &["doctor", "--json"],
        &[("FAMILIAR_DMENU", "x")],
    )
    .await;
    let menu = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|c| c["check"] == "menu")
        .expect("a menu check");
    let sh = familiar::programs::find("sh").unwrap();
    assert_eq!(menu["status"], "ok", "{menu}");
    let detail = menu["detail"].as_str().unwrap();
    assert!(
        detail.starts_with(&format!("{} (config.toml [desktop] menu)", sh.display()))
            && detail.contains("FAMILIAR_DMENU is set and not read"),
        "{detail}"
    );
}

// Regression (issue 42 §5): an ID that does not wait exited 0 under `approve --dmenu`
// and 2 under `approve ID`; an unknown request is 2 for both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_dmenu_with_a_request_that_does_not_wait_exits_2() {
    let f = Fixture::new(vec![]).await;
    let out = familiar(
        &f.harness.home,
        &f.bus,
        &["approve", "--dmenu", "r-000000000000"],
        &[],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("request r-000000000000 does not wait"),
        "{stderr}"
    );
    let out = familiar(&f.harness.home, &f.bus, &["approve", "r-000000000000"], &[]).await;
    assert_eq!(out.status.code(), Some(2));
}
