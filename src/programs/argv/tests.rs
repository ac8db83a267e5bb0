use std::os::unix::fs::PermissionsExt;

use serde_json::json;

use super::*;

fn words(command: &str) -> Result<Vec<String>, ArgvError> {
    Argv::from_words(command).map(|a| std::iter::once(a.program).chain(a.args).collect())
}

#[test]
fn plain_words_split_and_quotes_hold_a_space() {
    assert_eq!(words("foot -e htop").unwrap(), ["foot", "-e", "htop"]);
    assert_eq!(
        words("  foot  -e 'htop -d 5' \"a b\"c ").unwrap(),
        ["foot", "-e", "htop -d 5", "a bc"]
    );
    assert_eq!(
        words("firefox 'https://example.org/?q=a'").unwrap()[1],
        "https://example.org/?q=a"
    );
}

/// See: issue 39 (`a && b`, `a | sh`, `$(…)` reached the compositor's shell).
#[test]
fn shell_syntax_is_refused_naming_what_was_found() {
    let cases = [
        ("foot && touch x", "`&&`"),
        ("foot || touch x", "`||`"),
        ("foot | sh", "`|`"),
        ("foot; touch x", "`;`"),
        ("foot & touch x", "`&`"),
        ("foot $(touch x)", "`$`"),
        ("foot \"$HOME\"", "`$` inside double quotes"),
        ("foot `touch x`", "a backtick"),
        ("foot > x", "a redirection"),
        ("foot < x", "a redirection"),
        ("ls *.txt", "a glob"),
        ("foot 'unclosed", "a quote that does not close"),
        ("foot\ntouch x", "a newline"),
        ("foot (x)", "a parenthesis"),
        ("foot {a,b}", "a brace"),
        ("foot a\\ b", "a backslash"),
        ("vim ~/notes", "a leading `~`"),
    ];
    for (command, what) in cases {
        let err = Argv::from_words(command).unwrap_err();
        assert!(
            matches!(&err, ArgvError::ShellSyntax { what: w, .. } if w.contains(what)),
            "{command:?}: {err}"
        );
        assert!(
            err.to_string().contains("give `program` and `args`"),
            "{err}"
        );
    }
    assert_eq!(Argv::from_words("  "), Err(ArgvError::NoProgram));
}

#[test]
fn a_call_gives_program_and_args_or_the_older_command() {
    let argv = Argv::from_call(&json!({"program": "foot", "args": ["-e", "it's a b"]})).unwrap();
    assert_eq!(argv.program, "foot");
    assert_eq!(argv.args, ["-e", "it's a b"]);
    // Each word is passed on whole: shell syntax in a word is just text.
    let argv = Argv::from_call(&json!({"program": "echo", "args": ["a && b; $(x)"]})).unwrap();
    assert_eq!(argv.args, ["a && b; $(x)"]);
    assert_eq!(
        Argv::from_call(&json!({"command": "foot -e htop"})).unwrap(),
        Argv::new("foot", vec!["-e".into(), "htop".into()]).unwrap()
    );
    assert_eq!(
        Argv::from_call(&json!({"program": "foot", "args": "-e htop"})),
        Err(ArgvError::BadArgs)
    );
    assert_eq!(
        Argv::from_call(&json!({"program": "foot", "args": [1]})),
        Err(ArgvError::BadArgs)
    );
    assert_eq!(Argv::from_call(&json!({})), Err(ArgvError::NoProgram));
    assert_eq!(
        Argv::new("foot", vec!["a\nb".into()]),
        Err(ArgvError::Control)
    );
    assert_eq!(
        Argv::new("foot", vec!["x".repeat(MAX_BYTES)]),
        Err(ArgvError::TooLong)
    );
}

const HOSTILE: &[&str] = &[
    "plain",
    "a b",
    "it's",
    "'",
    "\\",
    "a\\'b",
    "ends\\",
    "$HOME $(touch x) `touch x`",
    "a;b,c",
    "\"q\"",
    "",
    "*",
    "~",
    "[x] {a,b} !x #c",
    "é ✓",
];

/// The quoted line, run by a real `sh -c` as Hyprland and sway do, gives back every
/// word whole.
#[test]
fn sh_reads_each_quoted_word_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("x");
    let line = std::iter::once("printf '%s\\0'".to_owned())
        .chain(HOSTILE.iter().map(|w| quote(w)))
        .collect::<Vec<_>>()
        .join(" ");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(&line)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let got: Vec<&str> = std::str::from_utf8(&out.stdout)
        .unwrap()
        .split_terminator('\0')
        .collect();
    assert_eq!(got, HOSTILE);
    assert!(!marker.exists());
}

/// sway's reading of a command (`argsep`, `split_args` in sway's common/stringop.c):
/// a backslash escapes the next character everywhere, `"` and `'` toggle quoting.
/// Returns the positions of `;` and `,` it would split the command at.
fn sway_separators(command: &str) -> Vec<usize> {
    let (mut in_string, mut in_char, mut escaped) = (false, false, false);
    let mut found = Vec::new();
    for (i, c) in command.char_indices() {
        match c {
            '"' if !in_char && !escaped => in_string = !in_string,
            '\'' if !in_string && !escaped => in_char = !in_char,
            '\\' => {
                escaped = !escaped;
                continue;
            }
            ';' | ',' if !in_string && !in_char && !escaped => found.push(i),
            _ => {}
        }
        escaped = false;
    }
    found
}

#[test]
fn sway_finds_no_command_separator_in_a_quoted_word() {
    for word in HOSTILE {
        let quoted = quote(word);
        assert_eq!(
            sway_separators(&quoted),
            Vec::<usize>::new(),
            "{word:?} as {quoted}"
        );
        // Nor in the next word: the quotes close where the shell closes them.
        let two = format!("{quoted} ';'");
        assert_eq!(sway_separators(&two), Vec::<usize>::new(), "{two}");
    }
    // What the old `'\''` form would have let through.
    assert_eq!(sway_separators("'a\\' ';exec x'"), [6]);
}

fn executable(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_name_is_found_on_the_system_path_only() {
    let sh = resolve("sh", None).unwrap();
    assert!(
        super::super::SYSTEM_PATH
            .split(':')
            .any(|d| sh.starts_with(d)),
        "{}",
        sh.display()
    );
    assert_eq!(
        resolve("familiar-no-such-program", None),
        Err(ArgvError::NotFound("familiar-no-such-program".into()))
    );
    assert_eq!(
        resolve("bin/foot", None),
        Err(ArgvError::Relative("bin/foot".into()))
    );
}

#[test]
fn an_absolute_path_runs_only_outside_home() {
    let home = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let planted = home.path().join(".local/bin/foot");
    executable(&planted);
    let installed = elsewhere.path().join("foot");
    executable(&installed);
    let p = |p: &Path| p.display().to_string();
    assert_eq!(
        resolve(&p(&planted), Some(home.path())),
        Err(ArgvError::UnderHome(p(&planted)))
    );
    // A link from outside into home is home's file.
    let link = elsewhere.path().join("link");
    std::os::unix::fs::symlink(&planted, &link).unwrap();
    assert_eq!(
        resolve(&p(&link), Some(home.path())),
        Err(ArgvError::UnderHome(p(&link)))
    );
    assert_eq!(
        resolve(&p(&installed), Some(home.path())).unwrap(),
        std::fs::canonicalize(&installed).unwrap()
    );
    let data = elsewhere.path().join("data");
    std::fs::write(&data, "x").unwrap();
    assert_eq!(
        resolve(&p(&data), None),
        Err(ArgvError::NotExecutable(p(&data)))
    );
}

#[test]
fn the_sh_line_execs_the_resolved_program_with_every_word_quoted() {
    let r = Resolved {
        program: "/usr/bin/foot".into(),
        args: vec!["-e".into(), "it's".into()],
    };
    assert_eq!(sh_line(&r), "exec '/usr/bin/foot' '-e' 'it'\"'\"'s'");
    assert_eq!(r.display(), "/usr/bin/foot -e 'it'\\''s'");
}
