//! The shell scanner: a command line split into simple commands, quotes respected.
//!
//! Invariant: never fails and never panics; unbalanced quotes, parentheses and
//! unterminated here-documents are reported in [`Scan::error`] and the rest of the
//! text is still returned, so the caller can look for paths and programs in it.

/// Marks a redirection operator the scanner found unquoted, so a quoted `">"` stays
/// an ordinary word.
pub(super) const REDIR: char = '\u{1}';

/// One simple command's text, before tokenising.
#[derive(Debug, Default)]
pub(super) struct Segment {
    pub(super) text: String,
    pub(super) piped_in: bool,
    pub(super) pipes_out: bool,
    /// Here-document bodies fed to this command.
    pub(super) heredocs: Vec<String>,
}

/// The scanner's result for one command line.
#[derive(Debug, Default)]
pub(super) struct Scan {
    pub(super) segments: Vec<Segment>,
    /// `$(...)`, backtick and `<(...)` payloads.
    pub(super) nested: Vec<String>,
    pub(super) opaque: Vec<&'static str>,
    pub(super) error: Option<String>,
}

/// Words of one segment: shell-words, or whitespace when the quoting is broken (the
/// scanner already reported that), so paths and programs are still seen.
pub(super) fn tokenize(text: &str) -> Vec<String> {
    match shell_words::split(text) {
        Ok(words) => words,
        Err(_) => text
            .split_whitespace()
            .map(|w| w.trim_matches(['\'', '"']).to_owned())
            .filter(|w| !w.is_empty())
            .collect(),
    }
}

/// Separates `REDIR`-marked operators and their targets from the arguments.
pub(super) fn split_redirects(words: Vec<String>) -> (Vec<String>, Vec<(String, String)>) {
    let mut argv = Vec::new();
    let mut redirects = Vec::new();
    let mut it = words.into_iter();
    while let Some(w) = it.next() {
        if let Some(op) = w.strip_prefix(REDIR) {
            let target = it.next().unwrap_or_default();
            redirects.push((op.to_owned(), target));
        } else {
            argv.push(w);
        }
    }
    (argv, redirects)
}

/// Splits a command line into segments, respecting quotes; collects substitution
/// payloads and here-document bodies. Never fails: problems land in `error`.
pub(super) fn scan(src: &str) -> Scan {
    let chars: Vec<char> = src.chars().collect();
    let mut s = Scanner {
        chars: &chars,
        i: 0,
        scan: Scan::default(),
        cur: Segment::default(),
        pending_heredocs: Vec::new(),
    };
    while s.i < chars.len() {
        s.step();
    }
    s.end_segment(false);
    s.scan
}

/// The scanner's state while it walks one command line.
struct Scanner<'a> {
    chars: &'a [char],
    i: usize,
    scan: Scan,
    cur: Segment,
    /// Here-documents opened on the current line: (delimiter, strip leading tabs).
    pending_heredocs: Vec<(String, bool)>,
}

impl Scanner<'_> {
    /// Consumes one token at `i`.
    fn step(&mut self) {
        let (chars, i) = (self.chars, self.i);
        match chars[i] {
            '\'' => self.single_quote(),
            '"' => self.double_quote(),
            '\\' => {
                // A backslash-newline is a line continuation: it vanishes.
                if chars.get(i + 1) != Some(&'\n') {
                    self.cur
                        .text
                        .extend(chars[i..(i + 2).min(chars.len())].iter());
                }
                self.i += 2;
            }
            '#' if self.cur.text.is_empty() || self.cur.text.ends_with(char::is_whitespace) => {
                while self.i < chars.len() && chars[self.i] != '\n' {
                    self.i += 1;
                }
            }
            '$' if chars.get(i + 1) == Some(&'(') => {
                self.i = substitution(chars, i, &mut self.scan, &mut self.cur);
            }
            '`' => self.i = backtick(chars, i, &mut self.scan, &mut self.cur),
            '<' | '>' if chars.get(i + 1) == Some(&'(') => self.process_substitution(),
            '<' | '>' | '&' if is_redirect_start(chars, i) => self.redirect(),
            ';' | '(' | ')' => {
                self.end_segment(false);
                self.i += 1;
            }
            '\n' => {
                if self.pending_heredocs.is_empty() {
                    self.i += 1;
                } else {
                    self.heredoc_bodies();
                }
                self.end_segment(false);
            }
            '&' => {
                self.end_segment(false);
                self.i += if chars.get(i + 1) == Some(&'&') { 2 } else { 1 };
            }
            '|' => {
                // `||` starts a new command; `|` and `|&` pipe into the next one.
                let (pipe, len) = match chars.get(i + 1) {
                    Some('|') => (false, 2),
                    Some('&') => (true, 2),
                    _ => (true, 1),
                };
                self.end_segment(pipe);
                self.i += len;
            }
            other => {
                self.cur.text.push(other);
                self.i += 1;
            }
        }
    }

    fn end_segment(&mut self, pipe: bool) {
        let mut done = std::mem::take(&mut self.cur);
        done.pipes_out = pipe;
        self.cur.piped_in = pipe;
        if !done.text.trim().is_empty() || !done.heredocs.is_empty() {
            self.scan.segments.push(done);
        }
    }

    fn single_quote(&mut self) {
        let (chars, i) = (self.chars, self.i);
        match chars[i + 1..].iter().position(|&x| x == '\'') {
            Some(p) => {
                self.cur.text.extend(&chars[i..=i + 1 + p]);
                self.i += p + 2;
            }
            None => {
                self.scan
                    .error
                    .get_or_insert("unbalanced single quote `'`".to_owned());
                self.cur.text.extend(&chars[i + 1..]);
                self.i = chars.len();
            }
        }
    }

    /// A double-quoted string: substitutions inside it still run, so they are scanned.
    fn double_quote(&mut self) {
        let chars = self.chars;
        self.cur.text.push('"');
        self.i += 1;
        while self.i < chars.len() {
            let i = self.i;
            match chars[i] {
                '\\' => {
                    self.cur
                        .text
                        .extend(chars[i..(i + 2).min(chars.len())].iter());
                    self.i += 2;
                }
                '"' => {
                    self.cur.text.push('"');
                    self.i += 1;
                    return;
                }
                '$' if chars.get(i + 1) == Some(&'(') => {
                    self.i = substitution(chars, i, &mut self.scan, &mut self.cur);
                }
                '`' => self.i = backtick(chars, i, &mut self.scan, &mut self.cur),
                other => {
                    self.cur.text.push(other);
                    self.i += 1;
                }
            }
        }
        self.scan
            .error
            .get_or_insert("unbalanced double quote `\"`".to_owned());
    }

    fn process_substitution(&mut self) {
        self.scan
            .opaque
            .push("process substitution `<(...)`/`>(...)` runs a hidden command");
        let (payload, end) = balanced(self.chars, self.i + 1);
        self.scan.nested.push(payload);
        match end {
            Some(end) => self.i = end + 1,
            None => {
                self.scan
                    .error
                    .get_or_insert("unbalanced `(` in process substitution".to_owned());
                self.i = self.chars.len();
            }
        }
        self.cur.text.push_str(" <(...) ");
    }

    /// A redirection operator, marked with [`REDIR`]; `<<` and `<<-` also open a
    /// here-document whose body starts on the next line.
    fn redirect(&mut self) {
        let op = redirect_op(self.chars, self.i);
        self.i += op.chars().count();
        let text = &mut self.cur.text;
        // A digit-only word right before the operator is the fd it applies to.
        let trimmed = text.trim_end_matches(|c: char| c.is_ascii_digit());
        if trimmed.len() < text.len()
            && (trimmed.is_empty() || trimmed.ends_with(char::is_whitespace))
        {
            text.truncate(trimmed.len());
        }
        text.push(' ');
        text.push(REDIR);
        text.push_str(&op);
        text.push(' ');
        if op == "<<" || op == "<<-" {
            let (delim, next) = heredoc_delimiter(self.chars, self.i);
            text.push_str("EOF ");
            self.pending_heredocs.push((delim, op == "<<-"));
            self.i = next;
        }
    }

    /// At the newline after `<<DELIM`: reads each pending here-document's body up to
    /// its delimiter line and gives it to the current command.
    fn heredoc_bodies(&mut self) {
        let chars = self.chars;
        self.i += 1;
        for (delim, strip_tabs) in std::mem::take(&mut self.pending_heredocs) {
            let mut body = String::new();
            loop {
                if self.i >= chars.len() {
                    self.scan
                        .error
                        .get_or_insert(format!("here-document not terminated by `{delim}`"));
                    break;
                }
                let end = chars[self.i..]
                    .iter()
                    .position(|&x| x == '\n')
                    .map_or(chars.len(), |p| self.i + p);
                let line: String = chars[self.i..end].iter().collect();
                self.i = end + 1;
                let cmp = if strip_tabs {
                    line.trim_start_matches('\t')
                } else {
                    line.as_str()
                };
                if cmp == delim {
                    break;
                }
                body.push_str(&line);
                body.push('\n');
            }
            self.cur.heredocs.push(body);
        }
    }
}

pub(super) fn is_redirect_start(chars: &[char], i: usize) -> bool {
    match chars[i] {
        '<' | '>' => true,
        '&' => chars.get(i + 1) == Some(&'>'),
        _ => false,
    }
}

pub(super) fn redirect_op(chars: &[char], i: usize) -> String {
    let rest: String = chars[i..(i + 3).min(chars.len())].iter().collect();
    for op in [
        "&>>", "<<<", "<<-", ">>", ">|", ">&", "&>", "<<", "<>", "<&", ">", "<",
    ] {
        if rest.starts_with(op) {
            return op.to_owned();
        }
    }
    chars[i].to_string()
}

/// The delimiter word after `<<` (quotes removed) and where scanning resumes.
pub(super) fn heredoc_delimiter(chars: &[char], mut i: usize) -> (String, usize) {
    while i < chars.len() && (chars[i] == ' ' || chars[i] == '\t') {
        i += 1;
    }
    let mut delim = String::new();
    while i < chars.len() && !chars[i].is_whitespace() && !";|&<>()".contains(chars[i]) {
        if !matches!(chars[i], '\'' | '"' | '\\') {
            delim.push(chars[i]);
        }
        i += 1;
    }
    (delim, i)
}

/// `$(...)` at `i` (`$((...))` arithmetic is kept as text); returns where to resume.
pub(super) fn substitution(chars: &[char], i: usize, scan: &mut Scan, cur: &mut Segment) -> usize {
    if chars.get(i + 2) == Some(&'(') {
        let (inner, end) = balanced(chars, i + 1);
        cur.text.push_str("$((");
        cur.text.push_str(&inner.replace(char::is_whitespace, ""));
        return match end {
            Some(end) => {
                cur.text.push(')');
                end + 1
            }
            None => {
                scan.error
                    .get_or_insert("unbalanced `$((` arithmetic".to_owned());
                chars.len()
            }
        };
    }
    scan.opaque
        .push("command substitution `$(...)` runs a command whose output becomes part of this one");
    let (payload, end) = balanced(chars, i + 1);
    scan.nested.push(payload);
    cur.text.push_str("$(...)");
    match end {
        Some(end) => end + 1,
        None => {
            scan.error
                .get_or_insert("unbalanced `$(` in command substitution".to_owned());
            chars.len()
        }
    }
}

pub(super) fn backtick(chars: &[char], i: usize, scan: &mut Scan, cur: &mut Segment) -> usize {
    scan.opaque
        .push("backticks run a command whose output becomes part of this one");
    let mut j = i + 1;
    let mut payload = String::new();
    while j < chars.len() && chars[j] != '`' {
        if chars[j] == '\\' && j + 1 < chars.len() {
            payload.push(chars[j + 1]);
            j += 2;
            continue;
        }
        payload.push(chars[j]);
        j += 1;
    }
    scan.nested.push(payload);
    cur.text.push_str("$(...)");
    if j >= chars.len() {
        scan.error.get_or_insert("unbalanced backtick".to_owned());
        return chars.len();
    }
    j + 1
}

/// The text inside the parentheses opening at `open`, and the index of the closing
/// one (`None` when unbalanced), skipping quoted parentheses.
pub(super) fn balanced(chars: &[char], open: usize) -> (String, Option<usize>) {
    let mut depth = 0usize;
    let mut j = open;
    let mut quote: Option<char> = None;
    while j < chars.len() {
        let c = chars[j];
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') => j += 1,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '\\') => j += 1,
            (None, '(') => depth += 1,
            (None, ')') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return (chars[open + 1..j].iter().collect(), Some(j));
                }
            }
            (None, _) => {}
        }
        j += 1;
    }
    (chars[(open + 1).min(chars.len())..].iter().collect(), None)
}
