//! Path normalisation and the protected-path test.
//!
//! Invariant: a path a tool names is compared with the protected entries in every form
//! that could reach the same file: as written with `~`/`$HOME` expanded, relative paths
//! made absolute against the task's cwd and `..` resolved lexically, *and* with the
//! symlinks of its longest existing ancestor resolved (a symlink anywhere in the path
//! to `~/.ssh` is caught; a tail that does not exist yet is kept). Glob characters in
//! a component match protected names the way the shell would expand them.
//! The kernel (Landlock) is the real boundary; this check lets the model hear why.

use std::path::{Component, Path, PathBuf};

use familiar_sandbox::glob::{glob_match, has_glob};

/// Where relative paths in a call are resolved.
#[derive(Debug, Clone, Copy)]
pub struct PathContext<'a> {
    pub home: &'a Path,
    /// The task workspace: relative paths are relative to it.
    pub cwd: &'a Path,
}

/// Environment variables a command may use in a path, assumed at their XDG defaults
/// (the daemon's own values may differ from the shell's; guessing the default is
/// still better than ignoring the path).
const HOME_VARS: &[(&str, &str)] = &[
    ("${HOME}", "~"),
    ("$HOME", "~"),
    ("${XDG_CONFIG_HOME}", "~/.config"),
    ("$XDG_CONFIG_HOME", "~/.config"),
    ("${XDG_DATA_HOME}", "~/.local/share"),
    ("$XDG_DATA_HOME", "~/.local/share"),
    ("${XDG_STATE_HOME}", "~/.local/state"),
    ("$XDG_STATE_HOME", "~/.local/state"),
];

/// `$HOME/x` → `~/x` (and the XDG variables); other words unchanged.
pub fn home_vars_to_tilde(word: &str) -> String {
    for (var, tilde) in HOME_VARS {
        if let Some(rest) = word.strip_prefix(var)
            && (rest.is_empty() || rest.starts_with('/'))
        {
            return format!("{tilde}{rest}");
        }
    }
    word.to_owned()
}

/// `~`, `~/x`, `$HOME/x` expanded; relative paths joined to `ctx.cwd`; `.` and `..`
/// resolved lexically. No file system access.
pub fn lexical(path: &str, ctx: &PathContext) -> PathBuf {
    let word = home_vars_to_tilde(path);
    let expanded = if word == "~" {
        ctx.home.to_owned()
    } else if let Some(rest) = word.strip_prefix("~/") {
        ctx.home.join(rest)
    } else {
        let p = Path::new(&word);
        if p.is_absolute() {
            p.to_owned()
        } else {
            Path::new("/").join(ctx.cwd).join(p)
        }
    };
    lexical_normalize(&Path::new("/").join(expanded))
}

/// `.` dropped, `..` pops (never above the root), trailing separators gone.
pub fn lexical_normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Prefix(p) => out.push(p.as_os_str()),
            Component::RootDir => out.push("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                // `/..` is `/`; a relative path keeps a leading `..` (nothing to pop).
                let at_top = out.parent().is_none() || out.ends_with("..");
                if !at_top {
                    out.pop();
                } else if !path.has_root() {
                    out.push("..");
                }
            }
            Component::Normal(n) => out.push(n),
        }
    }
    out
}

/// [`lexical`], then the longest existing ancestor canonicalised (symlinks resolved),
/// the non-existent rest appended.
pub fn normalize(path: &str, ctx: &PathContext) -> PathBuf {
    resolve(&lexical(path, ctx))
}

/// `path` with its longest existing prefix canonicalised (a glob component that names
/// nothing stays as written). The sandbox plan resolves protected paths and closed
/// places the same way.
pub fn resolve(path: &Path) -> PathBuf {
    let mut tail: Vec<&std::ffi::OsStr> = Vec::new();
    let mut cur = path;
    loop {
        if let Ok(real) = std::fs::canonicalize(cur) {
            let mut out = real;
            for c in tail.iter().rev() {
                out.push(c);
            }
            return out;
        }
        match (cur.parent(), cur.file_name()) {
            (Some(parent), Some(name)) => {
                tail.push(name);
                cur = parent;
            }
            _ => return path.to_owned(),
        }
    }
}

/// How long a protected entry's resolved form is reused. Resolving ~80 entries costs a
/// few thousand `readlink`s (0.2 ms) per checked path; a symlink planted under a
/// protected name is seen within this long, and the kernel's rules (built from the
/// policy at each tool call) do not depend on this cache at all.
const RESOLVED_TTL: std::time::Duration = std::time::Duration::from_secs(1);

fn resolved_entry(entry: &Path) -> PathBuf {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    use std::time::Instant;

    static CACHE: OnceLock<Mutex<HashMap<PathBuf, (Instant, PathBuf)>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some((at, real)) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(entry)
        && at.elapsed() < RESOLVED_TTL
    {
        return real.clone();
    }
    let real = resolve(entry);
    let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    match cache.get_mut(entry) {
        // Refreshed in place: the entry keeps the memory it was first given. New
        // strings every second, made while tasks run, would end up spread over the
        // heap and keep its pages from going back to the kernel after a busy spell.
        Some((at, old)) => {
            *at = Instant::now();
            if *old != real {
                old.clone_from(&real);
            }
        }
        None => {
            cache.insert(entry.to_owned(), (Instant::now(), real.clone()));
        }
    }
    real
}

/// The protected entry `path` falls under, if any.
pub fn protected_entry<'p>(
    path: &str,
    ctx: &PathContext,
    protected: &'p [PathBuf],
) -> Option<&'p Path> {
    let lex = lexical(path, ctx);
    let real = resolve(&lex);
    protected.iter().map(PathBuf::as_path).find(|entry| {
        let entry_real = resolved_entry(entry);
        [&lex, &real]
            .iter()
            .any(|candidate| is_under(candidate, entry) || is_under(candidate, &entry_real))
    })
}

/// `candidate` equals `entry` or lies under it; glob components of `candidate` match
/// the corresponding component of `entry` as the shell would expand them.
fn is_under(candidate: &Path, entry: &Path) -> bool {
    let mut cand = candidate.components();
    for e in entry.components() {
        let Some(c) = cand.next() else {
            return false;
        };
        if c == e {
            continue;
        }
        let (Some(c), Some(e)) = (c.as_os_str().to_str(), e.as_os_str().to_str()) else {
            return false;
        };
        if !(has_glob(c) && glob_match(c, e)) {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ctx<'a>(home: &'a Path, cwd: &'a Path) -> PathContext<'a> {
        PathContext { home, cwd }
    }

    #[test]
    fn lexical_expands_home_forms_and_resolves_dots() {
        let c = ctx(Path::new("/home/u"), Path::new("/work/ws"));
        for (input, want) in [
            ("~", "/home/u"),
            ("~/.ssh/../.gnupg", "/home/u/.gnupg"),
            ("$HOME/.ssh", "/home/u/.ssh"),
            ("${HOME}/.ssh/", "/home/u/.ssh"),
            ("$XDG_CONFIG_HOME/familiar", "/home/u/.config/familiar"),
            ("a/./b", "/work/ws/a/b"),
            ("../../../../etc/shadow", "/etc/shadow"),
            ("/..", "/"),
            ("", "/work/ws"),
            ("~user/x", "/work/ws/~user/x"),
        ] {
            assert_eq!(lexical(input, &c), PathBuf::from(want), "{input}");
        }
    }

    #[test]
    fn symlink_into_a_protected_dir_is_resolved() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::create_dir(&secret).unwrap();
        std::os::unix::fs::symlink(&secret, dir.path().join("innocent")).unwrap();
        let real_secret = std::fs::canonicalize(&secret).unwrap();
        let c = ctx(Path::new("/home/u"), dir.path());
        assert_eq!(
            normalize("innocent/new/file", &c),
            real_secret.join("new/file")
        );
        let protected = vec![secret.clone()];
        assert!(protected_entry("innocent/key", &c, &protected).is_some());
        assert!(protected_entry("other/key", &c, &protected).is_none());
    }

    /// Regression: the recursive matcher took exponential time on many stars (found by
    /// the tool_args and shell_policy fuzzers); this finishes at once now.
    #[test]
    fn many_stars_do_not_backtrack_exponentially() {
        let pattern = format!("{}p*x", "*".repeat(54));
        assert!(!glob_match(
            &pattern,
            "shadow-with-a-long-name-but-no-ending-letter"
        ));
        assert!(glob_match(&pattern, "pax"));
        let c = ctx(Path::new("/home/u"), Path::new("/work/ws"));
        let protected = vec![PathBuf::from("/etc/shadow")];
        let path = format!("/etc/{}p*x", "*".repeat(54));
        assert!(protected_entry(&path, &c, &protected).is_none());
    }

    #[test]
    fn globs_match_like_the_shell() {
        assert!(glob_match("*", "shadow"));
        assert!(!glob_match("*", ".ssh"));
        assert!(glob_match(".*", ".ssh"));
        assert!(glob_match(".s?h", ".ssh"));
        assert!(glob_match(".[rs]sh", ".ssh"));
        assert!(!glob_match(".[!s]sh", ".ssh"));
        assert!(glob_match("sh*ow", "shadow"));
        assert!(!glob_match("x*", "shadow"));
        let protected = vec![PathBuf::from("/home/u/.ssh"), PathBuf::from("/etc/shadow")];
        let c = ctx(Path::new("/home/u"), Path::new("/tmp"));
        assert!(protected_entry("~/.ssh/*", &c, &protected).is_some());
        assert!(protected_entry("~/.s*/id_rsa", &c, &protected).is_some());
        assert!(protected_entry("/etc/sha*", &c, &protected).is_some());
        assert!(protected_entry("/etc/*", &c, &protected).is_some());
        assert!(protected_entry("~/*", &c, &protected).is_none());
        assert!(protected_entry("~", &c, &protected).is_none());
    }

    proptest! {
        #[test]
        fn normalize_has_no_dot_dot_and_is_idempotent(
            parts in proptest::collection::vec(
                prop_oneof![
                    Just("..".to_owned()), Just(".".to_owned()), Just("~".to_owned()),
                    Just("$HOME".to_owned()), Just("".to_owned()), Just("tmp".to_owned()),
                    "[a-z.*]{1,6}",
                ],
                0..8,
            ),
        ) {
            let path = parts.join("/");
            let home = Path::new("/home/u");
            let c = ctx(home, Path::new("/tmp/ws"));
            let once = normalize(&path, &c);
            prop_assert!(once.is_absolute());
            prop_assert!(!once.components().any(|c| c == Component::ParentDir), "{once:?}");
            let again = normalize(&once.to_string_lossy(), &c);
            prop_assert_eq!(once, again);
        }
    }
}
