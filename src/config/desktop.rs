//! `[desktop]`: the user's own desktop programs familiar runs, for now the menu
//! (`menu`: a dmenu-style command) that reads `ask --dmenu`'s prompt and offers an
//! approval's choices ([`crate::launcher`]). Raw ([`DesktopToml`]) and effective
//! ([`DesktopConfig`]) types, as for the rest of config.toml.
//!
//! Invariant: the menu command comes from config.toml only (its directory is a
//! protected path no soul may write), never from the environment, and its program is a
//! name (found later on the system `PATH`) or an absolute path outside the home
//! directory: a soul that may write under home cannot put a program there that the
//! daemon would run unconfined and whose printed "Approve" would answer.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// `[desktop]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DesktopToml {
    /// The menu's command line, its words split as a shell would (no shell runs it).
    pub menu: Option<String>,
}

/// `[desktop]`, resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DesktopConfig {
    /// The menu's words, its program first; `None`: the first of fuzzel, wofi, rofi,
    /// bemenu on the system `PATH`.
    pub menu: Option<Vec<String>>,
}

/// The effective `[desktop]`; an error names the key.
pub(super) fn resolve(raw: DesktopToml, home: &Path) -> Result<DesktopConfig, (String, String)> {
    let Some(menu) = raw.menu else {
        return Ok(DesktopConfig::default());
    };
    let invalid = |message: String| ("desktop.menu".to_owned(), message);
    let words = shell_words::split(&menu)
        .map_err(|e| invalid(format!("cannot split `{menu}` into words: {e}")))?;
    let Some(program) = words.first() else {
        return Err(invalid(
            "is empty: give a dmenu-style command, e.g. \"fuzzel --dmenu\"".to_owned(),
        ));
    };
    let path = Path::new(program);
    if program.contains('/') && !path.is_absolute() {
        return Err(invalid(format!(
            "`{program}` is a relative path: give a program's name (found in the system's directories) or its absolute path"
        )));
    }
    if path.is_absolute() && path.starts_with(home) {
        return Err(invalid(format!(
            "`{program}` is under the home directory, where a soul could replace it: install the menu system-wide, or give its absolute path outside home (docs/config.md)"
        )));
    }
    Ok(DesktopConfig { menu: Some(words) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn menu(s: &str) -> Result<DesktopConfig, (String, String)> {
        resolve(
            DesktopToml {
                menu: Some(s.to_owned()),
            },
            Path::new("/home/u"),
        )
    }

    #[test]
    fn a_menu_is_a_name_or_an_absolute_path_outside_home() {
        assert_eq!(
            menu("wofi --dmenu -p 'familiar >'").unwrap().menu.unwrap(),
            ["wofi", "--dmenu", "-p", "familiar >"]
        );
        assert!(menu("/opt/menus/fuzzel --dmenu").is_ok());
        for bad in [
            "",
            "/home/u/.local/bin/fuzzel --dmenu",
            "bin/fuzzel",
            "fuzzel 'x",
        ] {
            let (key, _) = menu(bad).unwrap_err();
            assert_eq!(key, "desktop.menu", "{bad}");
        }
        assert_eq!(
            resolve(DesktopToml::default(), Path::new("/home/u"))
                .unwrap()
                .menu,
            None
        );
    }
}
