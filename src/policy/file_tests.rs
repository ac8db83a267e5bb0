//! Policy files: parsing, inheritance from the built-in default, and located errors.

use super::*;

const HOME: &str = "/home/user";

fn parse(src: &str) -> Result<Policy, FileError> {
    Policy::from_toml("p.toml", src, Path::new(HOME))
}

fn builtin(name: &str) -> Policy {
    Policy::from_toml(
        &builtin_label(name),
        builtin_source(name).unwrap(),
        Path::new(HOME),
    )
    .unwrap()
}

#[test]
fn builtin_default_parses() {
    insta::assert_debug_snapshot!("builtin_default", builtin("default"));
}

#[test]
fn builtin_strict_parses() {
    insta::assert_debug_snapshot!("builtin_strict", builtin("strict"));
}

#[test]
fn every_builtin_name_has_a_source() {
    for name in builtin_names() {
        assert!(builtin_source(name).is_some(), "{name}");
    }
    assert_eq!(builtin_names().len(), BUILTINS.len());
}

#[test]
fn strict_keeps_every_protection_of_default() {
    let d = parse(builtin_source("default").unwrap()).unwrap();
    let s = parse(builtin_source("strict").unwrap()).unwrap();
    assert_eq!(s.protected_paths, d.protected_paths);
    assert_eq!(s.blocked, d.blocked);
    assert!(d.ask.iter().all(|r| s.ask.contains(r)));
    assert!(s.ask.len() > d.ask.len());
    for tier in super::super::Tier::ALL {
        assert!(s.tiers.get(tier) >= d.tiers.get(tier), "{tier}");
    }
}

#[test]
fn shipped_protected_paths_cover_the_secrets() {
    let d = parse(builtin_source("default").unwrap()).unwrap();
    for must in [
        "~/.ssh",
        "~/.gnupg",
        "~/.password-store",
        "~/.local/share/keyrings",
        "~/.pki",
        "~/.mozilla",
        "~/.librewolf",
        "~/.config/google-chrome",
        "~/.config/chromium",
        "~/.config/BraveSoftware",
        "~/.config/vivaldi",
        "~/.aws",
        "~/.kube/config",
        "~/.docker/config.json",
        "~/.netrc",
        "~/.git-credentials",
        "~/.config/gh/hosts.yml",
        "~/.config/familiar",
        "/etc/shadow",
        "/etc/gshadow",
        "/etc/sudoers",
        "/etc/sudoers.d",
    ] {
        let p = expand_home(Path::new(must), Path::new(HOME));
        assert!(d.protected_paths.contains(&p), "{must} missing");
    }
}

#[test]
fn missing_keys_keep_the_default_policy() {
    let p = parse("[tiers]\nexecute = \"allow\"\n").unwrap();
    let d = parse(builtin_source("default").unwrap()).unwrap();
    assert_eq!(p.name, "p");
    assert_eq!(p.tiers.execute, Mode::Allow);
    assert_eq!(p.tiers.write, Mode::Ask);
    assert_eq!(p.protected_paths, d.protected_paths);
    assert_eq!(p.blocked, d.blocked);
    assert_eq!(p.rate_limits, d.rate_limits);
    assert_eq!(p.approval_timeout, Duration::from_secs(120));
}

#[test]
fn empty_lists_drop_what_the_default_has() {
    let p = parse("protected_paths = []\nblocked = []\nask = []\n").unwrap();
    assert!(p.protected_paths.is_empty() && p.blocked.is_empty() && p.ask.is_empty());
}

#[test]
fn home_forms_expand_in_protected_paths() {
    let p =
        parse("protected_paths = [\"~/a/../b\", \"$HOME/c\", \"${HOME}/d/\", \"/e\"]\n").unwrap();
    let want: Vec<PathBuf> = ["/home/user/b", "/home/user/c", "/home/user/d", "/e"]
        .iter()
        .map(PathBuf::from)
        .collect();
    assert_eq!(p.protected_paths, want);
}

#[test]
fn malformed_policies_name_file_line_key_and_what_is_allowed() {
    let cases: &[(&str, &str)] = &[
        (
            "[tiers]\nread = \"maybe\"\n",
            "p.toml:2: key `tiers.read`: unknown variant `maybe`, expected one of `allow`, `ask`, `deny`",
        ),
        (
            "[tiers]\nexec = \"allow\"\n",
            "p.toml:2: key `tiers.exec`: unknown field `exec`, expected one of `read`, `write`, `execute`, `system_critical`",
        ),
        (
            "descripton = \"x\"\n",
            "p.toml:1: key `descripton`: unknown field `descripton`, expected one of `description`, `approval_timeout`, `tiers`, `rate_limits`, `protected_paths`, `blocked`, `ask`",
        ),
        (
            "\n[rate_limits]\ntool_calls = \"60 per minute\"\n",
            "p.toml:3: key `rate_limits.tool_calls`: invalid rate `60 per minute`: expected COUNT/UNIT like `30/min` (units: s, sec, min, h, hour, day)",
        ),
        (
            "[rate_limits]\nglobal_tool_calls = \"0/min\"\n",
            "p.toml:2: key `rate_limits.global_tool_calls`: invalid rate `0/min`",
        ),
        (
            "[rate_limits.tools]\nshel = \"5/min\"\n",
            "p.toml:2: key `rate_limits.tools.shel`: unknown tool `shel` (tools: read_file, list_dir,",
        ),
        (
            "approval_timeout = \"soon\"\n",
            "p.toml:1: key `approval_timeout`: invalid duration `soon`",
        ),
        (
            "approval_timeout = \"0s\"\n",
            "p.toml:1: key `approval_timeout`: must be longer than 0s",
        ),
        (
            "description = \"x\"\n\n[[blocked]]\npattern = '^rm (-rf'\nreason = \"x\"\n",
            "p.toml:4: key `blocked.pattern`: invalid regex `^rm (-rf`: unclosed group (regex syntax: https://docs.rs/regex)",
        ),
        (
            "[[ask]]\npattern = 'a'\nreason = \"  \"\n",
            "p.toml:2: key `ask.pattern`: needs a non-empty `reason`",
        ),
        (
            "[[ask]]\npattern = 'a'\nwhy = \"x\"\n",
            "p.toml:3: key `ask.why`: unknown field `why`, expected `pattern` or `reason`",
        ),
        (
            "protected_paths = [\n  \"~/.ssh\",\n  \"relative/dir\",\n]\n",
            "p.toml:3: key `protected_paths`: `relative/dir` must be an absolute path or start with `~/`",
        ),
        ("[tiers\n", "p.toml:1:"),
    ];
    for (src, want) in cases {
        let err = parse(src).unwrap_err().to_string();
        assert!(err.starts_with(want), "{src:?}\n got: {err}\nwant: {want}");
    }
}

#[test]
fn unknown_policy_lists_the_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths {
        config_dir: dir.path().join("cfg"),
        data_dir: dir.path().join("data"),
        home: PathBuf::from(HOME),
    };
    std::fs::create_dir_all(paths.policies_dir()).unwrap();
    std::fs::write(paths.policies_dir().join("mine.toml"), "").unwrap();
    let err = load("nope", &paths).unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "unknown policy `nope` (known: default, mine, strict; a policy of your own goes in {}/nope.toml)",
            paths.policies_dir().display()
        )
    );
    assert!(load("../x", &paths).is_err());
}

#[test]
fn user_file_overrides_the_builtin_and_own_files_stay_protected() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths {
        config_dir: dir.path().join("cfg"),
        data_dir: dir.path().join("data"),
        home: PathBuf::from(HOME),
    };
    std::fs::create_dir_all(paths.policies_dir()).unwrap();
    std::fs::write(
        paths.policies_dir().join("strict.toml"),
        "protected_paths = []\n[tiers]\nexecute = \"ask\"\n",
    )
    .unwrap();
    let p = load("strict", &paths).unwrap();
    assert_eq!(p.name, "strict");
    assert_eq!(p.tiers.execute, Mode::Ask);
    assert_eq!(
        p.protected_paths,
        vec![
            paths.config_dir.clone(),
            paths.data_dir.join("audit.jsonl"),
            paths.data_dir.join("context"),
            paths.data_dir.join("transcripts"),
            paths.data_dir.join("memory.json"),
        ]
    );
    let builtin = load("default", &paths).unwrap();
    assert_eq!(builtin.tiers.execute, Mode::Ask);
    assert!(builtin.protected_paths.contains(&paths.config_dir));
}

#[test]
fn bad_user_file_names_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths {
        config_dir: dir.path().join("cfg"),
        data_dir: dir.path().join("data"),
        home: PathBuf::from(HOME),
    };
    std::fs::create_dir_all(paths.policies_dir()).unwrap();
    let file = paths.policies_dir().join("mine.toml");
    std::fs::write(&file, "[tiers]\nwrite = \"yes\"\n").unwrap();
    let err = load("mine", &paths).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("{}:2: key `tiers.write`:", file.display())),
        "{err}"
    );
}

/// The built-in policies' patterns are compiled at their first match, not checked at
/// load: this is the check (see policy/pattern.rs).
#[test]
fn builtin_patterns_compile() {
    for name in builtin_names() {
        let p = builtin(name);
        for rule in p.blocked.iter().chain(&p.ask) {
            let source = rule.pattern.as_str();
            assert!(regex::Regex::new(source).is_ok(), "{name}: {source}");
        }
        assert!(!p.blocked.is_empty(), "{name}");
    }
}

/// A policy resolved on `base` without the per-home cache, so no other test can have
/// matched its patterns.
fn resolve_fresh(src: &str, builtin: bool, base: Option<&Policy>) -> Policy {
    let raw: PolicyToml = parse_toml("p.toml", src).unwrap();
    Source {
        file: "p.toml",
        src,
        home: Path::new(HOME),
        builtin,
    }
    .resolve("p", raw, base)
    .unwrap()
}

#[test]
fn builtin_patterns_compile_at_first_match_and_a_users_at_load() {
    let base = resolve_fresh(builtin_source("default").unwrap(), true, None);
    let compiled = |p: &Policy| {
        p.blocked
            .iter()
            .chain(&p.ask)
            .filter(|r| r.pattern.is_compiled())
            .count()
    };
    assert_eq!(compiled(&base), 0);
    let repeated = base.blocked[0].pattern.as_str();
    let src = format!(
        "[[blocked]]\npattern = '''{repeated}'''\nreason = \"repeated\"\n\n\
         [[blocked]]\npattern = '^mine( |$)'\nreason = \"new\"\n"
    );
    let user = resolve_fresh(&src, false, Some(&base));
    assert!(user.blocked[1].pattern.is_compiled());
    assert!(!user.blocked[0].pattern.is_compiled());
    assert!(user.blocked[0].pattern.is_match("rm -r /"));
    // One regex behind both: the base's is now compiled too, and only it.
    assert_eq!(compiled(&base), 1);
    let strict = resolve_fresh(builtin_source("strict").unwrap(), true, Some(&base));
    assert_eq!(compiled(&strict), 1);
}
