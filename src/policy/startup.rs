//! The files and directories that make something run outside any sandbox later: at
//! the next login, shell, git command or URL opened. One list, here.
//!
//! The sandbox carves every entry out of each soul's writable trees (the kernel
//! refuses a write, `sandbox::spec::write_protected`), unless the soul names the exact
//! path in `[sandbox] startup`; a `write_file` or `edit_file` of one is asked whatever
//! the tier's mode, in words that say what the file does. So is one of a `.git/hooks`
//! or `.git/config` anywhere (`core.fsmonitor`, `core.hooksPath` and aliases run at the
//! user's next git command in that repository); those are not carved out, since
//! carving a workspace's `.git` would close the workspace's root to new files.

use std::path::{Path, PathBuf};

/// What a startup entry runs, and when: the words an approval shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runs {
    /// Units, environment and autostart read by the user manager and the session.
    Login,
    /// A shell's startup files.
    Shell,
    /// Git's configuration and hooks.
    Git,
    /// Which program opens a file or URL.
    Url,
    /// ssh's configuration and the keys allowed in.
    Ssh,
    /// A compositor's or bar's configuration, whose `exec` lines it runs.
    Desktop,
}

impl Runs {
    pub fn words(self) -> &'static str {
        match self {
            Runs::Login => "this file runs programs at your next login",
            Runs::Shell => "this file runs programs in every shell you open",
            Runs::Git => "this file runs programs at your next git command",
            Runs::Url => "this file decides which program opens your files and URLs",
            Runs::Ssh => "this file decides what runs and who gets in over ssh",
            Runs::Desktop => "this file runs programs when your desktop starts or reloads",
        }
    }
}

/// Entries under the home directory (a directory covers everything beneath it).
const HOME: &[(&str, Runs)] = &[
    // Every user unit directory `systemd-analyze --user unit-paths` names under home.
    (".config/systemd/user", Runs::Login),
    (".config/systemd/user.control", Runs::Login),
    (".local/share/systemd/user", Runs::Login),
    (
        ".local/share/flatpak/exports/share/systemd/user",
        Runs::Login,
    ),
    (".local/share/dbus-1/services", Runs::Login),
    (".config/environment.d", Runs::Login),
    (".config/autostart", Runs::Login),
    (".pam_environment", Runs::Login),
    (".xprofile", Runs::Login),
    (".xinitrc", Runs::Login),
    (".xsession", Runs::Login),
    (".profile", Runs::Shell),
    (".bash_profile", Runs::Shell),
    (".bash_login", Runs::Shell),
    (".bashrc", Runs::Shell),
    (".bash_logout", Runs::Shell),
    (".zshenv", Runs::Shell),
    (".zprofile", Runs::Shell),
    (".zshrc", Runs::Shell),
    (".zlogin", Runs::Shell),
    (".zlogout", Runs::Shell),
    (".config/fish", Runs::Shell),
    (".gitconfig", Runs::Git),
    (".config/git/config", Runs::Git),
    (".config/mimeapps.list", Runs::Url),
    (".local/share/applications", Runs::Url),
    (".ssh/authorized_keys", Runs::Ssh),
    (".ssh/config", Runs::Ssh),
    (".config/hypr", Runs::Desktop),
    (".config/sway", Runs::Desktop),
    (".config/niri", Runs::Desktop),
    (".config/waybar", Runs::Desktop),
];

/// Every startup entry of `home`, as absolute paths.
pub fn paths(home: &Path) -> Vec<PathBuf> {
    HOME.iter().map(|(rel, _)| home.join(rel)).collect()
}

/// What `path` (absolute, normalised) runs, if it is or lies beneath a startup entry
/// of `home` or a `.git/hooks` or `.git/config` anywhere.
pub fn runs(path: &Path, home: &Path) -> Option<Runs> {
    if let Some((_, runs)) = HOME
        .iter()
        .find(|(rel, _)| path.starts_with(home.join(rel)))
    {
        return Some(*runs);
    }
    let components: Vec<_> = path.components().collect();
    components
        .windows(2)
        .any(|w| {
            w[0].as_os_str() == ".git"
                && matches!(w[1].as_os_str().to_str(), Some("hooks" | "config"))
        })
        .then_some(Runs::Git)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_and_what_they_run() {
        let home = Path::new("/home/u");
        assert_eq!(runs(Path::new("/home/u/.bashrc"), home), Some(Runs::Shell));
        assert_eq!(
            runs(
                Path::new("/home/u/.config/systemd/user.control/x.service"),
                home
            ),
            Some(Runs::Login)
        );
        assert_eq!(
            runs(Path::new("/home/u/src/app/.git/hooks/pre-commit"), home),
            Some(Runs::Git)
        );
        assert_eq!(
            runs(Path::new("/home/u/.git/config"), home),
            Some(Runs::Git)
        );
        assert_eq!(runs(Path::new("/home/u/.bashrc.bak"), home), None);
        assert_eq!(runs(Path::new("/home/u/notes/.gitignore"), home), None);
        assert_eq!(runs(Path::new("/home/u/.config/gitk"), home), None);
    }

    /// Regression: `system_admin` wrote `environment.d`, autostart and git's config with
    /// an approval that showed only a path; a write of a startup file is asked, in
    /// words that say what it runs, even where the tier allows writes.
    #[test]
    fn a_write_of_a_startup_file_is_asked_saying_what_it_runs() {
        use serde_json::json;

        use crate::policy::tests::{ALL_TOOLS, ALLOW_ALL, Want, grant, kind, world};
        use crate::policy::verdict::Decision;

        let w = world();
        let full = grant(ALL_TOOLS, ALLOW_ALL);
        for (tool, path, words) in [
            ("write_file", "~/.bashrc", "every shell you open"),
            (
                "edit_file",
                "~/.config/environment.d/x.conf",
                "your next login",
            ),
            (
                "write_file",
                "src/app/.git/hooks/pre-commit",
                "your next git command",
            ),
            (
                "write_file",
                "~/.config/mimeapps.list",
                "opens your files and URLs",
            ),
        ] {
            let args = json!({"path": path, "content": "x", "old": "a", "new": "b"});
            let v = w.decide_with(&full, &w.open, tool, &args);
            match &v.decision {
                Decision::Ask { reason } => assert!(reason.contains(words), "{path}: {reason}"),
                other => panic!("{path}: {other:?}"),
            }
        }
        let v = w.decide_with(
            &full,
            &w.open,
            "write_file",
            &json!({"path": "~/notes.txt", "content": "x"}),
        );
        assert_eq!(kind(&v.decision), Want::Allow);
    }
}
