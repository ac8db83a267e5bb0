//! Word-level knowledge of the shell: wrappers that run another command, shells,
//! interpreters, terminals, dangerous variables and git settings, and the canonical
//! spelling of operands.
//!
//! Invariant: each table errs towards seeing more commands, never fewer: a word that
//! might be a wrapper is stripped, a setting that might run code is reported.

use super::State;
use crate::policy::paths::home_vars_to_tilde;

/// A redirection operator as the subjects show it (`&>` writes like `>`).
pub(super) fn op_for_subject(op: &str) -> &'static str {
    match op {
        ">>" | "&>>" => ">>",
        _ => ">",
    }
}

pub(super) fn is_fd(s: &str) -> bool {
    s == "-" || (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
}

/// Words before the program that the shell treats as syntax.
pub(super) const RESERVED: &[&str] = &[
    "{", "}", "!", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "esac",
    "function", "[[", "]]",
];

pub(super) const SHELLS: &[&str] = &[
    "sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "tcsh", "csh", "yash",
];

/// Assignments that change what code a command runs.
pub(super) const INJECTION_VARS: &[&str] = &[
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
    "BASH_ENV",
    "ENV",
    "PATH",
    "PROMPT_COMMAND",
    "PAGER",
    "GIT_PAGER",
    "EDITOR",
    "VISUAL",
    "GIT_EDITOR",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_EXTERNAL_DIFF",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "PYTHONSTARTUP",
    "PYTHONPATH",
    "PERL5OPT",
    "RUBYOPT",
    "NODE_OPTIONS",
];

/// Terminal emulators, which run the command they are given.
pub(super) const TERMINALS: &[&str] = &[
    "kitty",
    "alacritty",
    "foot",
    "footclient",
    "xterm",
    "uxterm",
    "urxvt",
    "st",
    "wezterm",
    "konsole",
    "gnome-terminal",
    "kgx",
    "xfce4-terminal",
    "terminator",
    "tilix",
    "ghostty",
];

/// Programs whose single-dash words are whole options (`find -name`), not clusters.
pub(super) const LONG_SINGLE_DASH: &[&str] = &[
    "find", "java", "ffmpeg", "ffprobe", "magick", "convert", "gcc", "cc", "clang", "xterm", "dd",
    "iptables", "ip",
];

pub(super) fn is_interpreter(program: &str) -> bool {
    !interpreter_family(program).is_empty()
}

/// `python3.12` → `python`; "" when `program` is no interpreter.
pub(super) fn interpreter_family(program: &str) -> &'static str {
    let base = program.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    match base {
        "python" | "pypy" => "python",
        "perl" => "perl",
        "ruby" | "irb" => "ruby",
        "node" | "nodejs" | "deno" | "bun" => "node",
        "php" => "php",
        "lua" | "luajit" => "lua",
        "tclsh" | "wish" | "Rscript" | "osascript" | "pwsh" => "other",
        _ => "",
    }
}

pub(super) fn dangerous_git_setting(key: &str, value: &str) -> bool {
    let key = key.to_ascii_lowercase();
    matches!(
        key.as_str(),
        "core.pager"
            | "core.sshcommand"
            | "core.editor"
            | "core.fsmonitor"
            | "core.hookspath"
            | "core.gitproxy"
            | "core.askpass"
            | "credential.helper"
            | "diff.external"
            | "sequence.editor"
            | "gpg.program"
            | "gpg.ssh.program"
            | "uploadpack.packobjectshook"
            | "protocol.ext.allow"
    ) || key.starts_with("pager.")
        || (key.starts_with("alias.") && value.trim_start().starts_with('!'))
        || (key.starts_with("filter.")
            && (key.ends_with(".clean") || key.ends_with(".smudge") || key.ends_with(".process")))
        || (key.starts_with("diff.") && key.ends_with(".textconv"))
        || (key.starts_with("merge.") && key.ends_with(".driver"))
}

/// `\rm` → `rm`, `/usr/bin/rm` → `rm`.
pub(super) fn program_name(word: &str) -> String {
    let w = word.trim_start_matches('\\');
    w.rsplit('/').next().unwrap_or(w).to_owned()
}

pub(super) fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

/// The value of `-c VALUE`, `-cVALUE` or `--command=VALUE`.
pub(super) fn option_value(argv: &[String], names: &[&str]) -> Option<String> {
    for (i, a) in argv.iter().enumerate() {
        for n in names {
            if a == n {
                return argv.get(i + 1).cloned();
            }
            if let Some(v) = a.strip_prefix(&format!("{n}=")) {
                return Some(v.to_owned());
            }
        }
    }
    None
}

/// A program that runs the command given in its arguments.
pub(super) struct Wrapper {
    /// Short options that take a value.
    short_arg: &'static str,
    /// Long options that take a value (without `--`).
    long_arg: &'static [&'static str],
    /// Positional arguments before the command (`timeout DURATION`).
    positional: usize,
    /// `NAME=value` words may precede the command (`env`).
    assignments: bool,
}

/// `sudo`'s long options that take a value.
const SUDO_LONG_ARGS: &[&str] = &[
    "user",
    "group",
    "prompt",
    "close-from",
    "chdir",
    "role",
    "type",
    "host",
    "other-user",
    "command-timeout",
];

/// `run0`'s long options that take a value.
const RUN0_LONG_ARGS: &[&str] = &[
    "user",
    "group",
    "chdir",
    "property",
    "description",
    "slice",
    "nice",
    "setenv",
    "unit",
    "machine",
];

/// `xargs`'s long options that take a value.
const XARGS_LONG_ARGS: &[&str] = &[
    "arg-file",
    "delimiter",
    "eof",
    "replace",
    "max-lines",
    "max-args",
    "max-procs",
    "max-chars",
    "process-slot-var",
];

/// `systemd-run`'s long options that take a value.
const SYSTEMD_RUN_LONG_ARGS: &[&str] = &[
    "unit",
    "property",
    "description",
    "slice",
    "setenv",
    "working-directory",
    "uid",
    "gid",
    "nice",
    "on-active",
    "on-boot",
    "on-startup",
    "on-unit-active",
    "on-unit-inactive",
    "on-calendar",
    "service-type",
    "host",
    "machine",
];

pub(super) fn wrapper(program: &str) -> Option<Wrapper> {
    let w = |short_arg, long_arg, positional, assignments| {
        Some(Wrapper {
            short_arg,
            long_arg,
            positional,
            assignments,
        })
    };
    match program {
        "sudo" => w("ugpCDrtTU", SUDO_LONG_ARGS, 0, true),
        "doas" => w("uC", &[], 0, false),
        "pkexec" => w("", &["user"], 0, false),
        "run0" => w("uGD", RUN0_LONG_ARGS, 0, false),
        "env" => w("uCS", &["unset", "chdir", "split-string"], 0, true),
        "nice" => w("n", &["adjustment"], 0, false),
        "ionice" => w(
            "cnpPu",
            &["class", "classdata", "pid", "pgid", "uid"],
            0,
            false,
        ),
        "nohup" | "setsid" | "command" | "builtin" | "busybox" | "unbuffer" | "torsocks"
        | "proxychains" | "proxychains4" | "catchsegv" | "chronic" => w("", &[], 0, false),
        "time" => w("fo", &["format", "output"], 0, false),
        "exec" => w("a", &[], 0, false),
        "timeout" => w("sk", &["signal", "kill-after"], 1, false),
        "stdbuf" => w("ioe", &["input", "output", "error"], 0, false),
        "xargs" => w("adEeIiLlnPs", XARGS_LONG_ARGS, 0, false),
        "uwsm" | "app2unit" => w("sStaN", &[], 1, false),
        "flock" => w("wEc", &["timeout", "conflict-exit-code"], 1, false),
        "systemd-run" => w("upEHMd", SYSTEMD_RUN_LONG_ARGS, 0, false),
        _ => None,
    }
}

impl Wrapper {
    /// Where the wrapped command starts in `argv` (may be `argv.len()`: no command).
    pub(super) fn skip(&self, argv: &[String], state: &mut State) -> usize {
        let mut i = 1;
        while i < argv.len() {
            let a = argv[i].as_str();
            if a == "--" {
                i += 1;
                break;
            }
            if self.assignments && is_assignment(a) {
                state.check_assignment(a);
                i += 1;
                continue;
            }
            if let Some(long) = a.strip_prefix("--") {
                let takes_value = !long.contains('=') && self.long_arg.contains(&long);
                i += if takes_value { 2 } else { 1 };
                continue;
            }
            if a.starts_with('-') && a.len() > 1 {
                let cluster: Vec<char> = a[1..].chars().collect();
                let mut consumed = 1;
                for (k, c) in cluster.iter().enumerate() {
                    if self.short_arg.contains(*c) {
                        if *c == 'S' {
                            state
                                .out
                                .opaque("`env -S` splits a string into a command at run time");
                        }
                        // The value is the rest of the cluster, or the next word.
                        if k + 1 == cluster.len() {
                            consumed = 2;
                        }
                        break;
                    }
                }
                i += consumed;
                continue;
            }
            break;
        }
        i += self.positional;
        if self.positional > 0 && argv.get(i).is_some_and(|a| a == "--") {
            i += 1;
        }
        i.min(argv.len())
    }
}

/// Operands as the patterns see them: `$HOME`/the home directory as `~`, paths
/// without `.`, `..`, `//` or a trailing `/`.
pub(super) fn normalize_operand(word: &str, home: &str) -> String {
    let mut w = home_vars_to_tilde(word);
    if !home.is_empty()
        && home != "/"
        && let Some(rest) = w.strip_prefix(home)
        && (rest.is_empty() || rest.starts_with('/'))
    {
        w = format!("~{rest}");
    }
    if !(w.starts_with('/') || w == "~" || w.starts_with("~/")) {
        return w;
    }
    let (root, rest) = match w.strip_prefix('~') {
        Some(rest) => ("~", rest.to_owned()),
        None => ("", w.clone()),
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in rest.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    match (root, parts.is_empty()) {
        ("~", true) => "~".to_owned(),
        ("~", false) => format!("~/{}", parts.join("/")),
        (_, true) => "/".to_owned(),
        (_, false) => format!("/{}", parts.join("/")),
    }
}

/// `a{b,c}d` → `abd`, `acd` (first group, recursively); other words unchanged.
pub(super) fn expand_braces(word: &str) -> Vec<String> {
    let Some(open) = word.find('{') else {
        return vec![word.to_owned()];
    };
    let Some(close_rel) = word[open..].find('}') else {
        return vec![word.to_owned()];
    };
    let close = open + close_rel;
    let inner = &word[open + 1..close];
    if !inner.contains(',') {
        return vec![word.to_owned()];
    }
    let (pre, post) = (&word[..open], &word[close + 1..]);
    inner
        .split(',')
        .flat_map(|alt| expand_braces(&format!("{pre}{alt}{post}")))
        .take(64)
        .collect()
}
