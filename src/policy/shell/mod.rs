//! Shell command analysis: what a `shell` command line would actually run.
//!
//! A command line is split into simple commands (on `;`, `&&`, `||`, `|`, `&`,
//! newlines and subshell parentheses, respecting quotes), each tokenised with
//! shell-words, stripped of the wrappers that run another command (sudo, env, nice,
//! timeout, xargs, ...), followed into `bash -c '...'`, `find -exec ...`, `$(...)`,
//! backticks and here-documents fed to a shell, and written in a canonical form
//! (program basename, sorted exploded options, operands in order with `$HOME`, the
//! home directory and `..` normalised) that the policy's regexes are matched against.
//!
//! Invariant: whatever this module cannot see through is reported, never ignored.
//! Constructs whose effect is only known at run time (eval, `$(...)`, `| sh`, ...)
//! land in [`Analysis::opaque`]; text it cannot parse lands in [`Analysis::error`].
//! Either way the call is asked, never allowed. Analysis never panics.

use std::path::Path;

mod scan;
#[cfg(test)]
mod tests;
mod words;

use scan::{Segment, scan, split_redirects, tokenize};
use words::*;

/// How deep `bash -c`, `$(...)` and `find -exec` nest before we stop looking.
const MAX_DEPTH: usize = 8;

/// What one command line runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Analysis {
    /// Canonical simple commands, wrapper forms (`sudo -u root`) and redirections
    /// (`> /dev/sda`), deduplicated, in order: what `[[blocked]]`/`[[ask]]` see.
    pub subjects: Vec<String>,
    /// Words that name files (path-like operands, option values, redirection targets),
    /// with `$HOME` written as `~`; relative ones also joined to a `cd` target.
    pub paths: Vec<String>,
    /// Why the command cannot be fully checked before it runs.
    pub opaque: Vec<String>,
    /// Why (part of) the command could not be parsed.
    pub error: Option<String>,
}

impl Analysis {
    fn subject(&mut self, s: String) {
        if !s.is_empty() && !self.subjects.contains(&s) {
            self.subjects.push(s);
        }
    }

    fn path(&mut self, p: String) {
        if !self.paths.contains(&p) {
            self.paths.push(p);
        }
    }

    fn opaque(&mut self, why: impl Into<String>) {
        let why = why.into();
        if !self.opaque.contains(&why) {
            self.opaque.push(why);
        }
    }
}

/// Analyses `command`; `home` is rewritten to `~` in operands, `cwd` (the tool's `cwd`
/// argument, if any) seeds the `cd` tracking.
pub fn analyze(command: &str, home: &Path, cwd: Option<&str>) -> Analysis {
    let mut state = State {
        home: home.to_string_lossy().trim_end_matches('/').to_owned(),
        cwd: cwd.map(|c| normalize_operand(c, "")),
        out: Analysis::default(),
    };
    state.line(command, 0);
    state.out
}

struct State {
    home: String,
    /// The directory the last `cd` went to, as a canonical operand (`/`, `~/x`).
    cwd: Option<String>,
    out: Analysis,
}

impl State {
    fn line(&mut self, command: &str, depth: usize) {
        if depth > MAX_DEPTH {
            self.out
                .opaque("commands nested deeper than familiar looks (bash -c, $(...))");
            return;
        }
        let scan = scan(command);
        if let Some(e) = scan.error
            && self.out.error.is_none()
        {
            self.out.error = Some(e);
        }
        for why in scan.opaque {
            self.out.opaque(why);
        }
        for seg in scan.segments {
            let words = tokenize(&seg.text);
            self.simple(words, &seg, depth);
        }
        for payload in scan.nested {
            self.line(&payload, depth + 1);
        }
    }

    /// One simple command: wrappers stripped, canonical form recorded, nested commands
    /// followed.
    fn simple(&mut self, words: Vec<String>, seg: &Segment, depth: usize) {
        let (mut argv, redirects) = split_redirects(words);
        for (op, target) in &redirects {
            if matches!(op.as_str(), "<<" | "<<-" | "<<<") {
                continue;
            }
            if matches!(op.as_str(), ">&" | "<&") && is_fd(target) {
                continue;
            }
            let target = self.operand(target);
            self.path_word(&target);
            let shown = if op.starts_with('<') {
                "<"
            } else {
                op_for_subject(op)
            };
            self.out.subject(format!("{shown} {target}"));
        }
        let reads_stdin = seg.piped_in
            || !seg.heredocs.is_empty()
            || redirects.iter().any(|(op, _)| op.starts_with('<'));

        for w in &argv {
            self.path_word(&self.operand(w));
        }

        // Reserved words and assignments in front of the command.
        loop {
            let Some(first) = argv.first() else { return };
            if RESERVED.contains(&first.as_str()) {
                argv.remove(0);
            } else if is_assignment(first) {
                self.check_assignment(first);
                argv.remove(0);
            } else {
                break;
            }
        }

        // Wrappers that run another command.
        while let Some(w) = argv.first().and_then(|a| wrapper(&program_name(a))) {
            let start = w.skip(&argv, self);
            let wrapper_words = argv[..start.min(argv.len())].to_vec();
            self.out.subject(self.canonical(&wrapper_words));
            argv.drain(..start.min(argv.len()));
            while argv.first().is_some_and(|a| is_assignment(a)) {
                let a = argv.remove(0);
                self.check_assignment(&a);
            }
        }
        let Some(first) = argv.first() else { return };
        let program = program_name(first);

        if program.starts_with('$') || program.contains("$(") || program.contains('`') {
            self.out
                .opaque("the program to run is computed at run time (`$VAR` or `$(...)`)");
        }
        self.out.subject(self.canonical(&argv));
        self.cd_joined(&program, &argv);

        match program.as_str() {
            "eval" => self.out.opaque("`eval` runs text built at run time"),
            "source" | "." => self
                .out
                .opaque("`source` runs a script's commands in this shell"),
            "cd" | "pushd" => self.track_cd(&argv),
            _ if SHELLS.contains(&program.as_str()) => {
                self.shell_payload(&argv, reads_stdin, seg, depth);
            }
            _ if is_interpreter(&program) => self.interpreter(&program, &argv, reads_stdin),
            "su" | "runuser" => {
                if let Some(payload) = option_value(&argv, &["-c", "--command"]) {
                    self.line(&payload, depth + 1);
                }
            }
            "watch" => {
                let operands: Vec<&String> =
                    argv[1..].iter().filter(|a| !a.starts_with('-')).collect();
                if let Some(cmd) = operands.last() {
                    self.line(cmd, depth + 1);
                }
            }
            "find" => self.find(&argv, depth),
            _ if TERMINALS.contains(&program.as_str()) => self.terminal(&program, &argv, depth),
            "git" => self.git(&argv),
            "base64" | "base32" | "basenc" | "xxd" | "uudecode" | "openssl" | "gpg" => {
                let decodes = argv[1..].iter().any(|a| {
                    matches!(a.as_str(), "-d" | "--decode" | "-D" | "-r" | "--decrypt")
                        || (a.starts_with('-') && !a.starts_with("--") && a.contains('d'))
                });
                if decodes && seg.pipes_out {
                    self.out.opaque(
                        "decoded content is piped into another command: what runs is hidden",
                    );
                }
            }
            _ => {}
        }
    }

    fn operand(&self, word: &str) -> String {
        normalize_operand(word, &self.home)
    }

    /// Records `word` (or the value of `--opt=value`/`of=value`) when it looks like a
    /// path, joined to the tracked `cd` directory when relative.
    fn path_word(&mut self, word: &str) {
        let mut candidates = vec![word.to_owned()];
        if let Some((_, value)) = word.split_once('=') {
            candidates.push(self.operand(value));
        }
        for w in candidates {
            for w in expand_braces(&w) {
                if w.contains("://") {
                    continue;
                }
                let looks = w.contains('/') || w.starts_with('~') || w.starts_with('.');
                if !looks {
                    continue;
                }
                if let Some(joined) = self.join_cwd(&w) {
                    self.out.path(joined);
                }
                self.out.path(w);
            }
        }
    }

    fn join_cwd(&self, word: &str) -> Option<String> {
        let cwd = self.cwd.as_ref()?;
        if word.starts_with(['/', '~', '-', '$']) || word.is_empty() {
            return None;
        }
        Some(normalize_operand(&format!("{cwd}/{word}"), &self.home))
    }

    /// After `cd DIR`, relative operands also stand for `DIR/operand`: record that form
    /// as a subject and its path-like words.
    fn cd_joined(&mut self, program: &str, argv: &[String]) {
        if self.cwd.is_none() || matches!(program, "cd" | "pushd") {
            return;
        }
        let mut changed = false;
        let mut joined = vec![argv[0].clone()];
        for a in &argv[1..] {
            match self.join_cwd(a) {
                Some(j) if !a.starts_with('-') => {
                    changed = true;
                    self.out.path(j.clone());
                    joined.push(j);
                }
                _ => joined.push(a.clone()),
            }
        }
        if changed {
            self.out.subject(self.canonical(&joined));
        }
    }

    fn track_cd(&mut self, argv: &[String]) {
        let target = argv[1..].iter().find(|a| !a.starts_with('-') || *a == "-");
        self.cwd = match target.map(String::as_str) {
            None => Some("~".to_owned()),
            Some("-") => None,
            Some(t) => {
                let t = self.operand(t);
                if t.starts_with(['/', '~']) {
                    Some(t)
                } else {
                    self.join_cwd(&t)
                }
            }
        };
    }

    fn check_assignment(&mut self, word: &str) {
        let name = word.split('=').next().unwrap_or_default();
        if INJECTION_VARS.contains(&name) {
            self.out.opaque(format!(
                "setting `{name}` changes which code the command runs"
            ));
        }
    }

    /// `bash -c '...'` is followed; a shell with no script reads its program from
    /// standard input, which we cannot see.
    fn shell_payload(&mut self, argv: &[String], reads_stdin: bool, seg: &Segment, depth: usize) {
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

    fn interpreter(&mut self, program: &str, argv: &[String], reads_stdin: bool) {
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

    fn find(&mut self, argv: &[String], depth: usize) {
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
    fn terminal(&mut self, program: &str, argv: &[String], depth: usize) {
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

    fn sub_argv(&mut self, argv: Vec<String>, depth: usize) {
        if depth >= MAX_DEPTH {
            self.out
                .opaque("commands nested deeper than familiar looks (bash -c, $(...))");
            return;
        }
        let seg = Segment::default();
        self.simple(argv, &seg, depth + 1);
    }

    fn git(&mut self, argv: &[String]) {
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

    /// `PROGRAM OPTIONS OPERANDS`: program basename, options exploded, deduped, sorted,
    /// operands normalised in order.
    fn canonical(&self, argv: &[String]) -> String {
        let Some(first) = argv.first() else {
            return String::new();
        };
        let program = program_name(first);
        let long_single_dash = LONG_SINGLE_DASH.contains(&program.as_str());
        let mut options: Vec<String> = Vec::new();
        let mut operands: Vec<String> = Vec::new();
        let mut after_dashdash = false;
        for a in &argv[1..] {
            if !after_dashdash && a == "--" {
                after_dashdash = true;
            } else if !after_dashdash && a.starts_with('-') && a.len() > 1 {
                let cluster = &a[1..];
                if !a.starts_with("--")
                    && !long_single_dash
                    && cluster.len() > 1
                    && cluster.chars().all(|c| c.is_ascii_alphanumeric())
                {
                    options.extend(cluster.chars().map(|c| format!("-{c}")));
                } else {
                    options.push(a.clone());
                }
            } else {
                operands.push(self.operand(a));
            }
        }
        options.sort();
        options.dedup();
        let mut out = program;
        for w in options.iter().chain(&operands) {
            out.push(' ');
            out.push_str(w);
        }
        out
    }
}
