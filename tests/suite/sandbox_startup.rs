//! The files that run programs later (`policy::startup`) stay closed to every soul's
//! writable trees, by the kernel, under the shipped `system_admin`'s trees: a unit in
//! `~/.config/systemd/user.control`, `environment.d`, autostart entries, a `.desktop`
//! file and `mimeapps.list`, fish's config, git's config, compositor and bar configs.
//! A soul that names one in `[sandbox] startup` may write it.

use std::path::Path;

use familiar::policy::startup;

use crate::common::sandbox::{SandboxHome, assert_permission_denied, landlock_available, sh};

/// `system_admin`'s `[sandbox]`, in the test's home.
const SYSTEM_ADMIN: &str =
    "read = [\"~\"]\nwrite = [\"~/.config\", \"~/.local/share\", \"~/.cache\"]";

/// Creates the directories of every entry under `.config` and `.local/share`
/// (so a refusal is the carving's, not a missing directory), and returns those entries.
fn entries_in_system_admins_trees(h: &SandboxHome) -> Vec<std::path::PathBuf> {
    let entries: Vec<_> = startup::paths(&h.home)
        .into_iter()
        .filter(|p| {
            p.starts_with(h.home.join(".config")) || p.starts_with(h.home.join(".local/share"))
        })
        .collect();
    for e in &entries {
        let file = target(e);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    }
    entries
}

/// A file under `entry` (itself when it is a file entry).
fn target(entry: &Path) -> std::path::PathBuf {
    if entry.ends_with("mimeapps.list") || entry.ends_with("git/config") {
        entry.to_owned()
    } else {
        entry.join("planted")
    }
}

/// Regression: the shipped `system_admin` wrote a unit into
/// `~/.config/systemd/user.control`, `~/.config/environment.d/*.conf`, autostart
/// entries, `mimeapps.list` and git's config; each runs something unconfined later.
#[tokio::test]
async fn startup_files_in_system_admins_trees_are_refused_by_the_kernel() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let entries = entries_in_system_admins_trees(&h);
    assert!(entries.len() >= 14, "{entries:?}");
    std::fs::create_dir_all(h.home.join(".config/app")).unwrap();
    let p = h.policy_with(SYSTEM_ADMIN);
    for entry in &entries {
        let file = target(entry);
        let script = format!(
            "mkdir -p '{0}' 2>/dev/null; echo x > '{1}'",
            entry.display(),
            file.display()
        );
        let out = sh(&p, &script).await;
        assert_permission_denied(&out, &file.display().to_string());
        assert!(!file.exists(), "{} was written", file.display());
    }
    // The rest of the trees stays writable.
    let out = sh(
        &p,
        &format!(
            "echo ok > '{}'",
            h.home.join(".config/app/settings").display()
        ),
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
}

#[tokio::test]
async fn a_soul_that_names_a_startup_file_may_write_it() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    std::fs::create_dir_all(h.home.join(".config/git")).unwrap();
    std::fs::write(h.home.join(".config/git/config"), "[user]\n").unwrap();
    let p = h.policy_with(&format!(
        "{SYSTEM_ADMIN}\nstartup = [\"~/.config/git/config\"]"
    ));
    let out = sh(
        &p,
        &format!(
            "echo '# ok' >> '{}'",
            h.home.join(".config/git/config").display()
        ),
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    // Its neighbour stays closed.
    std::fs::create_dir_all(h.home.join(".config/autostart")).unwrap();
    let out = sh(
        &p,
        &format!(
            "echo x > '{}'",
            h.home.join(".config/autostart/a.desktop").display()
        ),
    )
    .await;
    assert_permission_denied(&out, "autostart");
}
