//! One program and its arguments, never a shell line: what `desktop_dispatch launch`
//! (and the deprecated `hypr_dispatch exec`) start through the compositor, outside
//! familiar's sandbox.
//!
//! The model gives a `program` and its `args` (a list of words); the older `command`
//! string is taken only when it splits into plain words ([`Argv::from_words`]): any
//! shell syntax (`&&`, `|`, `;`, `$`, backticks, redirections, globs, a quote that
//! does not close, a newline) is refused, naming what was found. The program is then
//! [`resolve`]d like every program the daemon runs: a name on the fixed system `PATH`
//! ([`super::SYSTEM_PATH`]), or an absolute path outside the home directory, where a
//! soul could have written it.
//!
//! Invariant: what reaches a compositor's shell (Hyprland's and sway's `exec` run
//! `sh -c`) is [`sh_line`]: `exec` and each word quoted whole, so the shell sees
//! exactly the words here, one program and no second command; niri gets the words as
//! an argv ([`Resolved::argv`]).

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The longest program and arguments taken, in bytes in all.
pub const MAX_BYTES: usize = 1024;

/// Why a launch is refused: said to the model, which can correct it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgvError {
    #[error(
        "launch takes one program and its arguments, not a shell line: {what} is shell syntax ({why}); give `program` and `args` (a list of words) instead"
    )]
    ShellSyntax {
        what: &'static str,
        why: &'static str,
    },
    #[error("launch needs a `program` (a name or an absolute path) and optionally `args`")]
    NoProgram,
    #[error("`args` must be a list of strings, one word each")]
    BadArgs,
    #[error(
        "the program and its arguments must be single lines without control characters (a newline, a tab)"
    )]
    Control,
    #[error("the program and its arguments are longer than {MAX_BYTES} bytes")]
    TooLong,
    #[error(
        "`{0}` is a relative path: give a program's name (found in the system's directories) or its absolute path"
    )]
    Relative(String),
    #[error(
        "`{0}` is not installed in the system's directories ({path}): give the absolute path of a program installed outside your home directory",
        path = super::SYSTEM_PATH
    )]
    NotFound(String),
    #[error(
        "`{0}` is under the home directory, where a soul could have written it: familiar starts only programs installed outside it"
    )]
    UnderHome(String),
    #[error("`{0}` is not an executable file")]
    NotExecutable(String),
}

/// A program (as given: a name or an absolute path) and its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Argv {
    pub program: String,
    pub args: Vec<String>,
}

/// An [`Argv`] whose program is found: the file that will run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub program: PathBuf,
    pub args: Vec<String>,
}

impl Argv {
    /// `program` and `args` as the model gave them; only their size and control
    /// characters are checked here (each word is passed on whole, whatever it holds).
    pub fn new(program: &str, args: Vec<String>) -> Result<Argv, ArgvError> {
        let program = program.trim();
        if program.is_empty() {
            return Err(ArgvError::NoProgram);
        }
        let words = std::iter::once(program).chain(args.iter().map(String::as_str));
        if words.clone().any(|w| w.chars().any(char::is_control)) {
            return Err(ArgvError::Control);
        }
        if words.map(|w| w.len() + 1).sum::<usize>() > MAX_BYTES {
            return Err(ArgvError::TooLong);
        }
        Ok(Argv {
            program: program.to_owned(),
            args,
        })
    }

    /// A command line of plain words: separated by spaces, a word quoted whole with
    /// `'…'` or `"…"` where it holds a space. Anything a shell would act on is refused.
    pub fn from_words(command: &str) -> Result<Argv, ArgvError> {
        let mut words = split(command)?.into_iter();
        let program = words.next().ok_or(ArgvError::NoProgram)?;
        Argv::new(&program, words.collect())
    }

    /// A launch call's program and arguments, from its JSON arguments: `program` and
    /// `args`, else the older `command` string ([`Argv::from_words`]).
    pub fn from_call(args: &Value) -> Result<Argv, ArgvError> {
        if let Some(program) = args.get("program").and_then(Value::as_str) {
            let words = match args.get("args") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|w| w.as_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
                    .ok_or(ArgvError::BadArgs)?,
                Some(_) => return Err(ArgvError::BadArgs),
            };
            return Argv::new(program, words);
        }
        match args.get("command").and_then(Value::as_str) {
            Some(command) => Argv::from_words(command),
            None => Err(ArgvError::NoProgram),
        }
    }

    /// Finds the program ([`resolve`]).
    pub fn resolve(&self, home: Option<&Path>) -> Result<Resolved, ArgvError> {
        Ok(Resolved {
            program: resolve(&self.program, home)?,
            args: self.args.clone(),
        })
    }

    /// The words as a person reads them (quoted only where needed), for the policy's
    /// patterns.
    pub fn display(&self) -> String {
        shell_words::join(std::iter::once(&self.program).chain(&self.args))
    }
}

impl Resolved {
    /// Every word, the program's path first.
    pub fn argv(&self) -> Vec<String> {
        std::iter::once(self.program.display().to_string())
            .chain(self.args.iter().cloned())
            .collect()
    }

    /// The words as a person reads them, the program as the path that runs.
    pub fn display(&self) -> String {
        shell_words::join(self.argv())
    }
}

/// `program` as the file that runs: a name on [`super::SYSTEM_PATH`] (never the
/// daemon's `PATH`), or an absolute path that is, once its links are followed, an
/// executable file outside `home`.
pub fn resolve(program: &str, home: Option<&Path>) -> Result<PathBuf, ArgvError> {
    if !program.contains('/') {
        return super::find(program).ok_or_else(|| ArgvError::NotFound(program.to_owned()));
    }
    let path = Path::new(program);
    if !path.is_absolute() {
        return Err(ArgvError::Relative(program.to_owned()));
    }
    let real = std::fs::canonicalize(path).map_err(|_| ArgvError::NotFound(program.to_owned()))?;
    if let Some(home) = home
        && (path.starts_with(home) || real.starts_with(canonical(home)))
    {
        return Err(ArgvError::UnderHome(program.to_owned()));
    }
    if !is_executable(&real) {
        return Err(ArgvError::NotExecutable(program.to_owned()));
    }
    Ok(real)
}

/// `home` with its links followed (a home under a linked `/home` still matches).
fn canonical(home: &Path) -> PathBuf {
    std::fs::canonicalize(home).unwrap_or_else(|_| home.to_owned())
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// What a compositor's `exec` hands to `sh -c`: `exec` (so the shell becomes the
/// program) and every word [`quote`]d.
pub fn sh_line(resolved: &Resolved) -> String {
    std::iter::once("exec".to_owned())
        .chain(resolved.argv().iter().map(|w| quote(w)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `word` as one shell word: inside `'…'`, where nothing is special to `sh`, except
/// `'` written `"'"` and `\` written `"\\"`. sway reads quotes before the shell does,
/// and takes a backslash as an escape even inside `'…'`; written this way its reading
/// and the shell's agree on where every quote opens and closes, so its command
/// separators (`;`, `,`) inside a word stay inside.
pub fn quote(word: &str) -> String {
    let mut out = String::with_capacity(word.len() + 2);
    out.push('\'');
    for c in word.chars() {
        match c {
            '\'' => out.push_str("'\"'\"'"),
            '\\' => out.push_str("'\"\\\\\"'"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// The words of a plain command line; the first shell construct found is refused.
fn split(command: &str) -> Result<Vec<String>, ArgvError> {
    let syntax = |what, why| Err(ArgvError::ShellSyntax { what, why });
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = command.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                words.extend(word.take());
                continue;
            }
            '\'' => {
                let quoted = until(&mut chars, '\'')?;
                word.get_or_insert_default().push_str(&quoted);
                continue;
            }
            '"' => {
                let quoted = until(&mut chars, '"')?;
                if let Some(found) = quoted.chars().find(|c| matches!(c, '$' | '`' | '\\')) {
                    return match found {
                        '$' => syntax("`$` inside double quotes", "an expansion"),
                        '`' => syntax("a backtick inside double quotes", "command substitution"),
                        _ => syntax("a backslash inside double quotes", "an escape"),
                    };
                }
                word.get_or_insert_default().push_str(&quoted);
                continue;
            }
            _ => {}
        }
        let next = chars.peek().copied();
        let starts_word = word.is_none();
        match c {
            '\n' | '\r' => return syntax("a newline", "it would start a second command"),
            c if c.is_control() => return Err(ArgvError::Control),
            ';' => return syntax("`;`", "it would start a second command"),
            '&' if next == Some('&') => return syntax("`&&`", "it would run a second command"),
            '&' => return syntax("`&`", "it would run the program in the background"),
            '|' if next == Some('|') => return syntax("`||`", "it would run a second command"),
            '|' => return syntax("`|`", "a pipe into a second program"),
            '<' | '>' => return syntax("a redirection (`<`, `>`)", "it would open files"),
            '$' => return syntax("`$`", "an expansion or command substitution"),
            '`' => return syntax("a backtick", "command substitution"),
            '(' | ')' => return syntax("a parenthesis", "a subshell"),
            '*' | '?' | '[' | ']' => {
                return syntax("a glob (`*`, `?`, `[`)", "it matches file names");
            }
            '{' | '}' => return syntax("a brace", "brace expansion"),
            '\\' => return syntax("a backslash", "an escape"),
            '~' if starts_word => {
                return syntax("a leading `~`", "home expansion: give the whole path");
            }
            '#' if starts_word => return syntax("a leading `#`", "a comment"),
            c => word.get_or_insert_default().push(c),
        }
    }
    words.extend(word);
    Ok(words)
}

/// The characters up to the closing `end`, which is consumed.
fn until(chars: &mut impl Iterator<Item = char>, end: char) -> Result<String, ArgvError> {
    let mut out = String::new();
    for c in chars.by_ref() {
        if c == end {
            return Ok(out);
        }
        if c.is_control() {
            return Err(ArgvError::Control);
        }
        out.push(c);
    }
    Err(ArgvError::ShellSyntax {
        what: "a quote that does not close",
        why: "the shell would read past it",
    })
}

#[cfg(test)]
mod tests;
