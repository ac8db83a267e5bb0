//! Commands that run other commands, followed: `bash -c '...'` and shells fed from
//! standard input, interpreters (`python -c`), `find -exec`, terminal emulators
//! (`kitty -e`) and git's aliases and dangerous settings.

use super::scan::Segment;
use super::words::*;
use super::{MAX_DEPTH, State};

impl State {
    /// `bash -c '...'` is followed; a shell with no script reads its program from
    /// standard input, which we cannot see.
    pub(super) fn shell_payload(
        &mut self,
        argv: &[String],
        reads_stdin: bool,
        seg: &Segment,
        depth: usize,
    ) {
        let mut i = 1;
        let mut inline = false;
        let mut from_stdin = false;
        while i < argv.len() {
            let a = &argv[i];
            if a == "--" {
                i += 1;
                break;
            }
            if a.starts_with("--") {
                i += 1;
                continue;
            }
            if a.starts_with(['-', '+']) && a.len() > 1 {
                inline |= a.starts_with('-') && a.contains('c');
                from_stdin |= a.starts_with('-') && a.contains('s');
                // `-o option` and `-O shopt` take a value.
                if a.ends_with('o') || a.ends_with('O') {
                    i += 1;
                }
                i += 1;
                continue;
            }
            break;
        }
        if inline {
            match argv.get(i) {
                Some(payload) => self.line(payload, depth + 1),
                None => self.out.opaque("`-c` without a command"),
            }
            return;
        }
        if from_stdin || i >= argv.len() || argv[i] == "-" {
            for body in &seg.heredocs {
                self.line(body, depth + 1);
            }
            if reads_stdin || from_stdin {
                self.out.opaque(
                    "a shell reads its commands from standard input (a pipe or here-document)",
                );
            } else {
                self.out
                    .opaque("an interactive shell reads commands we cannot see");
            }
        }
    }

    pub(super) fn interpreter(&mut self, program: &str, argv: &[String], reads_stdin: bool) {
        let inline_flags: &[&str] = match interpreter_family(program) {
            "python" => &["-c"],
            "perl" => &["-e", "-E"],
            "ruby" => &["-e"],
            "node" => &["-e", "-p", "--eval", "--print"],
            "php" => &["-r"],
            "lua" => &["-e"],
            _ => &[],
        };
        let inline = argv[1..].iter().any(|a| {
            inline_flags.contains(&a.as_str())
                || inline_flags
                    .iter()
                    .any(|f| f.len() == 2 && !a.starts_with("--") && a.starts_with(f))
                || (a.starts_with('-') && !a.starts_with("--") && a.len() > 2 && {
                    // `perl -pe`, `python3 -Sc`: the inline flag inside a cluster.
                    inline_flags
                        .iter()
                        .any(|f| f.len() == 2 && a[1..].contains(&f[1..]))
                })
        });
        if inline {
            self.out.opaque(format!(
                "`{program}` runs inline code that familiar cannot check"
            ));
            return;
        }
        let has_script = argv[1..].iter().any(|a| !a.starts_with('-') || a == "-m");
        let stdin_script = argv[1..].iter().any(|a| a == "-");
        if stdin_script || (!has_script && reads_stdin) {
            self.out
                .opaque(format!("`{program}` reads its program from standard input"));
        }
    }

    pub(super) fn find(&mut self, argv: &[String], depth: usize) {
        let mut i = 1;
        while i < argv.len() {
            let a = argv[i].as_str();
            if matches!(a, "-exec" | "-execdir" | "-ok" | "-okdir") {
                let end = argv[i + 1..]
                    .iter()
                    .position(|w| w == ";" || w == "+")
                    .map_or(argv.len(), |p| i + 1 + p);
                let sub = argv[i + 1..end].to_vec();
                self.sub_argv(sub, depth);
                i = end + 1;
                continue;
            }
            if a == "-delete" {
                self.out
                    .opaque("`find -delete` deletes every match: what it matches is only known when it runs");
            }
            i += 1;
        }
    }

    /// `kitty -e CMD`, `foot CMD`, `gnome-terminal -- CMD`: the command a terminal
    /// emulator is asked to run.
    pub(super) fn terminal(&mut self, program: &str, argv: &[String], depth: usize) {
        let marker = argv[1..]
            .iter()
            .position(|a| matches!(a.as_str(), "-e" | "-x" | "--execute" | "--command" | "--"))
            .map(|p| p + 2);
        let bare_command = matches!(program, "kitty" | "foot" | "footclient" | "ghostty");
        let start = marker.or_else(|| {
            bare_command
                .then(|| {
                    argv[1..]
                        .iter()
                        .position(|a| !a.starts_with('-'))
                        .map(|p| p + 1)
                })
                .flatten()
        });
        let Some(start) = start.filter(|s| *s < argv.len()) else {
            return;
        };
        let rest = argv[start..].to_vec();
        match rest.as_slice() {
            [one] if one.contains(' ') => self.line(one, depth + 1),
            _ => self.sub_argv(rest, depth),
        }
    }

    pub(super) fn sub_argv(&mut self, argv: Vec<String>, depth: usize) {
        if depth >= MAX_DEPTH {
            self.out
                .opaque("commands nested deeper than familiar looks (bash -c, $(...))");
            return;
        }
        let seg = Segment::default();
        self.simple(argv, &seg, depth + 1);
    }

    pub(super) fn git(&mut self, argv: &[String]) {
        let mut settings: Vec<&str> = Vec::new();
        let mut i = 1;
        while i < argv.len() {
            let a = argv[i].as_str();
            if (a == "-c" || a == "--config-env") && i + 1 < argv.len() {
                settings.push(&argv[i + 1]);
                i += 2;
                continue;
            }
            if let Some(v) = a.strip_prefix("-c").filter(|v| v.contains('=')) {
                settings.push(v);
            }
            if let Some(v) = a.strip_prefix("--config-env=") {
                settings.push(v);
            }
            if a == "config" {
                // `git config KEY VALUE` persists what `-c` would set once.
                let rest: Vec<&String> = argv[i + 1..]
                    .iter()
                    .filter(|w| !w.starts_with('-'))
                    .collect();
                if let [key, value, ..] = rest.as_slice()
                    && dangerous_git_setting(key, value)
                {
                    self.out.opaque(format!(
                        "`git config {key}` makes git run an arbitrary command later"
                    ));
                }
                break;
            }
            if !a.starts_with('-') {
                break;
            }
            i += 1;
        }
        for s in settings {
            let (key, value) = s.split_once('=').unwrap_or((s, ""));
            if dangerous_git_setting(key, value) {
                self.out.opaque(format!(
                    "`git -c {key}=...` makes git run an arbitrary command"
                ));
            }
        }
    }
}
