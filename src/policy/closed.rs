//! The places familiar keeps closed to every tool's writes unless a soul names the
//! exact path: where a program, a setting or a hook can be planted that runs outside
//! any sandbox later. A boundary, not a sample.
//!
//! A list of start-up file names always misses one (issue 33's list did: `~/.vimrc`,
//! `~/.cargo/config.toml`, python's `usercustomize.py`, `~/.local/bin/*`, …), so the
//! boundary is drawn by place instead:
//! - every hidden entry of the home directory (`~/.*`, so no new one can be made
//!   either: the home itself gets no new entries at all),
//! - `$XDG_CONFIG_HOME` (default `~/.config`) and `$XDG_DATA_HOME` (default
//!   `~/.local/share`, except a data directory beneath it that a soul names in
//!   `write`),
//! - `~/.local/bin`, `~/.local/lib`, `~/.cargo`, `~/bin`, and every directory of the
//!   `PATH` that lies under the home.
//!
//! The places are resolved from the real `XDG_*` and `PATH` variables, not hard-coded.
//! The sandbox carves them out of every writable tree ([`crate::sandbox::spec`]); the
//! named list of [`super::startup`] is carved as well and still gives an approval its
//! words ("this file runs programs at your next login").
//!
//! The invariant: a soul's writable tree that lies inside a closed place is never
//! granted unless it is named in `[sandbox] startup` ([`Closed::admits`]), or is a data
//! directory beneath `$XDG_DATA_HOME` outside the named list.

use std::path::{Path, PathBuf};

use super::paths::resolve;
use super::startup;

/// Why a place is closed: the words `familiar souls show` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// A hidden entry of the home directory (dotfiles, `~/.cache`, `~/.local`, …).
    Hidden,
    /// `$XDG_CONFIG_HOME`: every program's settings.
    Config,
    /// `$XDG_DATA_HOME`: desktop entries, services, plugins, editor packages.
    Data,
    /// A directory of programs the user runs by name.
    Programs,
    /// Libraries loaded into the user's programs.
    Libraries,
    /// Rust's toolchain home: its binaries and its `config.toml` run at the next build.
    Cargo,
}

impl Why {
    pub fn words(self) -> &'static str {
        match self {
            Why::Hidden => "hidden entries of your home: start-up files and settings",
            Why::Config => "every program's settings ($XDG_CONFIG_HOME)",
            Why::Data => "desktop entries, services and plugins ($XDG_DATA_HOME)",
            Why::Programs => "programs you run by name (on your PATH)",
            Why::Libraries => "libraries your programs load",
            Why::Cargo => "cargo's binaries and configuration",
        }
    }
}

/// One closed place: a path (the hidden entries are the glob `HOME/.*`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub path: PathBuf,
    pub why: Why,
}

/// Every closed place of one home, resolved from one environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed {
    home: PathBuf,
    data_home: PathBuf,
    places: Vec<Place>,
}

/// The file name of the glob that stands for every hidden entry of the home.
pub const HIDDEN: &str = ".*";

impl Closed {
    /// The closed places of `home`, from this process's `XDG_CONFIG_HOME`,
    /// `XDG_DATA_HOME` and `PATH`.
    pub fn from_env(home: &Path) -> Closed {
        let var = |name| std::env::var_os(name).map(PathBuf::from);
        let path = std::env::var_os("PATH").unwrap_or_default();
        Closed::new(
            home,
            var("XDG_CONFIG_HOME"),
            var("XDG_DATA_HOME"),
            std::env::split_paths(&path),
        )
    }

    /// The closed places of `home` with the given variables (`None` or a relative path:
    /// the XDG default, as the XDG base directory specification says).
    pub fn new(
        home: &Path,
        config_home: Option<PathBuf>,
        data_home: Option<PathBuf>,
        path: impl IntoIterator<Item = PathBuf>,
    ) -> Closed {
        let absolute = |p: Option<PathBuf>, default: &str| {
            p.filter(|p| p.is_absolute())
                .unwrap_or_else(|| home.join(default))
        };
        let config_home = absolute(config_home, ".config");
        let data_home = absolute(data_home, ".local/share");
        let mut places = vec![
            Place {
                path: home.join(HIDDEN),
                why: Why::Hidden,
            },
            Place {
                path: config_home,
                why: Why::Config,
            },
            Place {
                path: data_home.clone(),
                why: Why::Data,
            },
        ];
        for (rel, why) in [
            (".local/bin", Why::Programs),
            ("bin", Why::Programs),
            (".local/lib", Why::Libraries),
            (".cargo", Why::Cargo),
        ] {
            places.push(Place {
                path: home.join(rel),
                why,
            });
        }
        for dir in path {
            if dir.is_absolute() && dir.starts_with(home) && dir != home {
                places.push(Place {
                    path: dir,
                    why: Why::Programs,
                });
            }
        }
        let mut seen = Vec::new();
        places.retain(|p| {
            let new = !seen.contains(&p.path);
            seen.push(p.path.clone());
            new
        });
        Closed {
            home: home.to_owned(),
            data_home,
            places,
        }
    }

    /// These places with symlinks resolved (each path's longest existing prefix
    /// canonicalised): what a tree's real path is compared with.
    pub fn resolved(&self) -> Closed {
        Closed {
            home: resolve(&self.home),
            data_home: resolve(&self.data_home),
            places: self
                .places
                .iter()
                .map(|p| Place {
                    path: resolve(&p.path),
                    why: p.why,
                })
                .collect(),
        }
    }

    /// [`Closed::admits`] of `root` as written and of where it really leads: a symlink
    /// or `..` into a closed place admits no more than the place's own name would.
    pub fn admits_really(&self, root: &Path, startup_named: &[PathBuf]) -> bool {
        if !self.admits(root, startup_named) {
            return false;
        }
        let real_named: Vec<PathBuf> = startup_named.iter().map(|p| resolve(p)).collect();
        self.resolved().admits(&resolve(root), &real_named)
    }

    /// The closed places, broadest reasons first.
    pub fn places(&self) -> &[Place] {
        &self.places
    }

    /// Everything the sandbox carves out of a writable tree that is not inside it: the
    /// places, then the named start-up entries of [`startup`].
    pub fn carved(&self) -> Vec<PathBuf> {
        self.places
            .iter()
            .map(|p| p.path.clone())
            .chain(startup::paths(&self.home))
            .collect()
    }

    /// The places in one line, `~` for the home: what `familiar souls show` prints.
    pub fn describe(&self) -> String {
        let home = |p: &Path| match p.strip_prefix(&self.home) {
            Ok(rest) => format!("~/{}", rest.display()),
            Err(_) => p.display().to_string(),
        };
        self.places
            .iter()
            .map(|p| match p.why {
                Why::Hidden => format!("{} (every hidden entry)", home(&p.path)),
                Why::Data => format!("{} (but data directories named in write)", home(&p.path)),
                Why::Config | Why::Programs | Why::Libraries | Why::Cargo => home(&p.path),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Why the kernel refuses a write of `path` (absolute) by tools of a soul with
    /// writable trees `write` and `[sandbox] startup` paths `startup`, if it does
    /// because of a closed place: for `familiar policy check`.
    pub fn refuses_write(
        &self,
        path: &Path,
        write: &[PathBuf],
        startup: &[PathBuf],
    ) -> Option<String> {
        let place = self.place_of(path).map(|p| p.why.words()).or_else(|| {
            startup::runs(path, &self.home).map(|_| "a start-up file familiar names")
        })?;
        let granted = startup.iter().any(|s| path.starts_with(s))
            || write.iter().any(|w| {
                path.starts_with(w) && self.admits(w, startup) && self.place_of(w).is_some()
            });
        (!granted).then(|| {
            format!(
                "the sandbox refuses this write whatever the policy says: `{}` is in a place familiar keeps closed ({place}); a soul names the exact path in `[sandbox] startup` to allow it",
                path.display()
            )
        })
    }

    /// The place `path` (absolute, normalised) lies in, if any.
    pub fn place_of(&self, path: &Path) -> Option<&Place> {
        self.places.iter().find(|p| self.within(path, &p.path))
    }

    /// Whether a soul's writable tree `root` may be granted: it lies in no closed place,
    /// or it is named in `startup` (the soul's `[sandbox] startup`), or it is a data
    /// directory beneath `$XDG_DATA_HOME` that no named start-up entry holds.
    pub fn admits(&self, root: &Path, startup_named: &[PathBuf]) -> bool {
        if startup_named.iter().any(|s| s == root) {
            return true;
        }
        let named = startup::paths(&self.home);
        if named.iter().any(|n| root.starts_with(n)) {
            return false;
        }
        self.places
            .iter()
            .filter(|p| self.within(root, &p.path))
            // A place that holds the data home (the hidden `~/.local`, the data home
            // itself) does not close a data directory beneath it.
            .all(|p| {
                root.starts_with(&self.data_home)
                    && root != self.data_home
                    && self.within(&self.data_home, &p.path)
            })
    }

    /// Why `path` may not be named in `[sandbox] startup`, if it may not: it lies in no
    /// closed place (then `write` is the key), or it names a whole place or more.
    pub fn refuses_as_startup(&self, path: &Path) -> Option<String> {
        let whole = self
            .places
            .iter()
            .find(|p| p.path.file_name() != Some(HIDDEN.as_ref()) && p.path.starts_with(path));
        if let Some(place) = whole {
            return Some(format!(
                "`{}` names all of `{}` ({}): name the files or directories within it that the soul needs",
                path.display(),
                place.path.display(),
                place.why.words()
            ));
        }
        if self.place_of(path).is_none() {
            return Some(format!(
                "`{}` is not in a place familiar keeps closed: list it in `write` instead",
                path.display()
            ));
        }
        None
    }

    /// `path` is `place` or lies beneath it; the hidden-entries glob matches any entry
    /// of the home whose name starts with a dot.
    fn within(&self, path: &Path, place: &Path) -> bool {
        if place.file_name() == Some(HIDDEN.as_ref()) && place.parent() == Some(&self.home) {
            return path
                .strip_prefix(&self.home)
                .ok()
                .and_then(|rest| rest.components().next())
                .is_some_and(|first| first.as_os_str().as_encoded_bytes().starts_with(b"."));
        }
        path.starts_with(place)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closed() -> Closed {
        Closed::new(
            Path::new("/home/u"),
            None,
            None,
            [
                PathBuf::from("/usr/bin"),
                PathBuf::from("/home/u/go/bin"),
                PathBuf::from("relative/bin"),
            ],
        )
    }

    #[test]
    fn places_come_from_the_variables_and_the_path() {
        let c = Closed::new(
            Path::new("/home/u"),
            Some("/data/cfg".into()),
            Some("relative".into()),
            [PathBuf::from("/home/u/go/bin")],
        );
        let paths: Vec<_> = c.places().iter().map(|p| p.path.clone()).collect();
        assert_eq!(
            paths,
            [
                "/home/u/.*",
                "/data/cfg",
                "/home/u/.local/share",
                "/home/u/.local/bin",
                "/home/u/bin",
                "/home/u/.local/lib",
                "/home/u/.cargo",
                "/home/u/go/bin",
            ]
            .map(PathBuf::from)
        );
    }

    #[test]
    fn hidden_entries_and_places_are_closed_visible_ones_are_not() {
        let c = closed();
        for p in [
            "/home/u/.vimrc",
            "/home/u/.cache/x",
            "/home/u/.config/i3/config",
            "/home/u/go/bin/tool",
            "/home/u/bin",
        ] {
            assert!(c.place_of(Path::new(p)).is_some(), "{p}");
        }
        for p in [
            "/home/u/Documents/a.txt",
            "/home/u/src/.git/hooks",
            "/etc/x",
        ] {
            assert!(c.place_of(Path::new(p)).is_none(), "{p}");
        }
    }

    #[test]
    fn a_writable_tree_inside_a_place_needs_its_exact_name() {
        let c = closed();
        let named = [PathBuf::from("/home/u/.config/foo/bar.toml")];
        let admits = |p: &str| c.admits(Path::new(p), &named);
        assert!(admits("/home/u/Documents"));
        assert!(admits("/home/u"));
        assert!(admits("/home/u/.config/foo/bar.toml"));
        assert!(!admits("/home/u/.config"));
        assert!(!admits("/home/u/.config/foo"));
        assert!(!admits("/home/u/.cache"));
        assert!(!admits("/home/u/.local/bin"));
        // A data directory is a soul's to name; the data home whole and the named
        // start-up entries in it are not.
        assert!(admits("/home/u/.local/share/notes"));
        assert!(!admits("/home/u/.local/share"));
        assert!(!admits("/home/u/.local/share/applications"));
        assert!(!admits("/home/u/.local/share/systemd/user/x.service"));
    }

    #[test]
    fn a_symlink_into_a_closed_place_is_judged_by_where_it_leads() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path().canonicalize().unwrap();
        std::fs::create_dir_all(home.join(".config/foo")).unwrap();
        std::fs::create_dir_all(home.join("Documents")).unwrap();
        std::os::unix::fs::symlink(home.join(".config"), home.join("cfg")).unwrap();
        let c = Closed::new(&home, None, None, []);
        assert!(c.admits(&home.join("cfg"), &[]), "lexically outside");
        assert!(!c.admits_really(&home.join("cfg"), &[]));
        assert!(!c.admits_really(&home.join("Documents/../.config"), &[]));
        assert!(c.admits_really(&home.join("Documents"), &[]));
        let named = [home.join("cfg/foo")];
        assert!(c.admits_really(&home.join("cfg/foo"), &named));
    }

    #[test]
    fn startup_names_a_path_in_a_place_never_a_place_whole() {
        let c = closed();
        for ok in [
            "/home/u/.bashrc",
            "/home/u/.cache",
            "/home/u/.config/foo/bar.toml",
            "/home/u/.local/bin/tool",
        ] {
            assert_eq!(c.refuses_as_startup(Path::new(ok)), None, "{ok}");
        }
        for (bad, words) in [
            ("/home/u", "names all of"),
            ("/home/u/Documents/x", "not in a place"),
            ("/etc/profile", "not in a place"),
            ("/home/u/.config", "names all of"),
            ("/home/u/.local", "names all of"),
            ("/home/u/go", "names all of"),
        ] {
            let got = c.refuses_as_startup(Path::new(bad)).unwrap_or_default();
            assert!(got.contains(words), "{bad}: {got}");
        }
    }
}
