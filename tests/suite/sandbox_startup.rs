//! Closed by default (`policy::closed`): whatever a soul's `write` says, the kernel
//! refuses its tools every hidden entry of the home, `$XDG_CONFIG_HOME`, the data home,
//! the user's program and library directories and `~/.cargo`, unless the soul names
//! the exact path in `[sandbox] startup`. Checked with a list of start-up files of our
//! own (shells, editors, desktops, language tools, systemd, flatpak, D-Bus services)
//! under the shipped `system_admin` and under `write = ["~"]`; ordinary work (a file in
//! `~/Documents`, the workspace, a named `~/.config/foo/bar.toml`) stays allowed.

use std::path::{Path, PathBuf};

use familiar::policy::{Policy, builtin_source};
use familiar::soul::{PromptSource, SoulOrigin, parse};

use crate::common::sandbox::{SandboxHome, assert_permission_denied, landlock_available, sh};

/// Files that make something run outside any sandbox later, relative to the home. Not
/// familiar's own list: the boundary must hold for names it never heard of.
const PLANTED: &[&str] = &[
    // Shells and terminals.
    ".bashrc",
    ".bash_aliases",
    ".profile",
    ".zshrc",
    ".zdotdir/.zshrc",
    ".config/fish/conf.d/x.fish",
    ".config/nushell/config.nu",
    ".tmux.conf",
    ".config/kitty/kitty.conf",
    ".inputrc",
    // Editors.
    ".vimrc",
    ".config/nvim/init.lua",
    ".local/share/nvim/site/plugin/x.lua",
    ".emacs.d/init.el",
    // Desktops and X.
    ".config/i3/config",
    ".config/hypr/hyprland.conf",
    ".config/river/init",
    ".config/labwc/environment",
    ".config/uwsm/env",
    ".config/plasma-workspace/env/x.sh",
    ".config/dconf/user",
    ".local/share/gnome-shell/extensions/x@y/extension.js",
    ".config/autostart/x.desktop",
    ".config/mimeapps.list",
    ".local/share/applications/x.desktop",
    ".xsessionrc",
    ".Xresources",
    ".mailcap",
    // systemd, the bus, flatpak.
    ".config/systemd/user.conf",
    ".config/systemd/user/x.service",
    ".config/environment.d/x.conf",
    ".local/share/systemd/user/x.service",
    ".local/share/dbus-1/services/org.example.X.service",
    ".local/share/flatpak/exports/share/dbus-1/services/org.example.X.service",
    ".local/share/flatpak/exports/share/applications/x.desktop",
    // Language tools and programs run by name.
    ".local/bin/ls",
    "bin/ls",
    ".cargo/bin/cargo-x",
    ".cargo/config.toml",
    ".local/lib/python3.11/site-packages/usercustomize.py",
    ".local/lib/python3.11/site-packages/x.pth",
    ".npmrc",
    ".gitconfig",
    ".config/git/config",
];

/// The shipped `system_admin`'s `[sandbox]` table, as the soul file has it.
fn system_admin_sandbox() -> String {
    let src = include_str!("../../souls/system_admin.toml");
    let table = src
        .split("\n[sandbox]\n")
        .nth(1)
        .expect("system_admin has a [sandbox] table");
    table.split("\n[").next().unwrap_or(table).to_owned()
}

/// Creates every planted file's directory (so a refusal is the kernel's, not a missing
/// directory) and half of the files themselves (an existing file is not overwritten
/// either).
fn prepare(h: &SandboxHome) -> Vec<PathBuf> {
    PLANTED
        .iter()
        .enumerate()
        .map(|(i, rel)| {
            let file = h.home.join(rel);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            if i % 2 == 0 {
                std::fs::write(&file, "original\n").unwrap();
            }
            file
        })
        .collect()
}

async fn assert_all_refused(h: &SandboxHome, sandbox: &str, files: &[PathBuf]) {
    let p = h.policy_with(sandbox);
    for file in files {
        let before = std::fs::read(file).ok();
        let out = sh(&p, &format!("echo planted > '{}'", file.display())).await;
        assert_permission_denied(&out, &format!("{sandbox}: {}", file.display()));
        assert_eq!(
            std::fs::read(file).ok(),
            before,
            "{} changed",
            file.display()
        );
    }
}

/// Regression (issue 39): after one approved shell call the shipped `system_admin`
/// wrote 21 of 31 common start-up files, and a soul with `write = ["~"]` 16 of 25.
#[tokio::test]
async fn start_up_files_familiar_never_named_are_refused_by_the_kernel() {
    if !landlock_available() {
        return;
    }
    assert!(PLANTED.len() >= 30);
    let h = SandboxHome::new();
    let files = prepare(&h);
    assert_all_refused(&h, &system_admin_sandbox(), &files).await;
    assert_all_refused(&h, "read = [\"~\"]\nwrite = [\"~\"]", &files).await;
    // A data directory a soul names is its own; the data home around it stays closed.
    let notes = "read = [\"~\"]\nwrite = [\"~/.local/share/notes\"]";
    std::fs::create_dir_all(h.home.join(".local/share/notes")).unwrap();
    assert_all_refused(&h, notes, &files).await;
}

#[tokio::test]
async fn the_home_gets_no_new_hidden_entry_whatever_the_command() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    let p = h.policy_with("read = [\"~\"]\nwrite = [\"~\"]");
    for script in [
        "echo x > ~/.evil",
        "mkdir ~/.evil",
        "ln -s /tmp ~/.evil",
        "mkfifo ~/.evil",
        "cp ~/notes.txt ~/.evil",
        "mv ~/notes.txt ~/.evil",
    ] {
        let out = sh(&p, script).await;
        assert_ne!(out.exit_code, Some(0), "{script}: {out:?}");
        assert!(!h.home.join(".evil").exists(), "{script} made ~/.evil");
    }
    assert!(h.home.join("notes.txt").exists());
}

#[tokio::test]
async fn ordinary_work_stays_allowed() {
    if !landlock_available() {
        return;
    }
    let h = SandboxHome::new();
    std::fs::create_dir_all(h.home.join("Documents")).unwrap();
    std::fs::create_dir_all(h.home.join(".config/foo")).unwrap();
    std::fs::write(h.home.join(".config/foo/bar.toml"), "a = 1\n").unwrap();
    std::fs::create_dir_all(h.home.join(".local/share/notes")).unwrap();
    let p = h.policy_with(
        "read = [\"~\"]\nwrite = [\"~\", \"~/.local/share/notes\"]\nstartup = [\"~/.config/foo/bar.toml\"]",
    );
    let home = h.home.display();
    let ws = h.workspace.display();
    for script in [
        format!("echo x > '{home}/Documents/report.txt'"),
        format!("mkdir -p '{home}/Documents/a/b' && echo x > '{home}/Documents/a/b/c'"),
        format!("echo x >> '{home}/notes.txt'"),
        format!("echo x > '{ws}/out.txt'"),
        format!("echo 'b = 2' >> '{home}/.config/foo/bar.toml'"),
        format!("echo x > '{home}/.local/share/notes/today.md'"),
    ] {
        let out = sh(&p, &script).await;
        assert_eq!(out.exit_code, Some(0), "{script}: {out:?}");
    }
    // The named file's neighbour is not named.
    let out = sh(&p, &format!("echo x > '{home}/.config/foo/other.toml'")).await;
    assert_permission_denied(&out, "a neighbour of a named file");
}

/// A soul file whose `write` names a closed place, or whose `startup` names a place
/// whole or a path that is not closed, is refused with its line and key.
#[test]
fn closed_places_in_a_soul_file_are_refused_with_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let policy =
        Policy::from_toml("default.toml", builtin_source("default").unwrap(), home).unwrap();
    for (sandbox, words) in [
        ("write = [\"~/.config\"]", "is closed"),
        ("write = [\"~/Documents\", \"~/.cache\"]", "is closed"),
        ("write = [\"~/.local/bin\"]", "is closed"),
        ("startup = [\"~/.config\"]", "names all of"),
        ("startup = [\"~/Documents/x\"]", "not in a place"),
    ] {
        let src = format!("description = \"t\"\nprompt = \"t\"\n[sandbox]\n{sandbox}\n");
        let err = parse(
            "t.toml",
            "t",
            &src,
            PromptSource::BuiltIn,
            home,
            Some(&policy),
            SoulOrigin::BuiltIn,
        )
        .err()
        .unwrap_or_else(|| panic!("{sandbox} was accepted"))
        .to_string();
        assert!(err.contains(words), "{sandbox}: {err}");
        assert!(err.contains("t.toml:4"), "{sandbox}: {err}");
    }
}

#[test]
fn the_shipped_souls_write_nothing_closed() {
    let dir = tempfile::tempdir().unwrap();
    let home: &Path = dir.path();
    let closed = familiar::policy::closed::Closed::new(home, None, None, []);
    for (id, src) in familiar::soul::BUILTIN_SOULS {
        let soul = parse(
            &format!("{id}.toml"),
            id,
            src,
            PromptSource::BuiltIn,
            home,
            None,
            SoulOrigin::BuiltIn,
        )
        .unwrap();
        for w in &soul.sandbox.write {
            assert!(closed.place_of(w).is_none(), "{id}: {}", w.display());
        }
    }
}
