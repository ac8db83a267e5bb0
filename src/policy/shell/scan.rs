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
    let mut scan = Scan::default();
    let mut cur = Segment::default();
    let mut pending_heredocs: Vec<(String, bool)> = Vec::new();
    let mut i = 0;

    let end_segment = |scan: &mut Scan, cur: &mut Segment, pipe: bool| {
        let mut done = std::mem::take(cur);
        done.pipes_out = pipe;
        cur.piped_in = pipe;
        if !done.text.trim().is_empty() || !done.heredocs.is_empty() {
            scan.segments.push(done);
        }
    };

    while i < chars.len() {
        let c = chars[i];
        match c {
            '\'' => match chars[i + 1..].iter().position(|&x| x == '\'') {
                Some(p) => {
                    cur.text.extend(&chars[i..=i + 1 + p]);
                    i += p + 2;
                }
                None => {
                    scan.error
                        .get_or_insert("unbalanced single quote `'`".to_owned());
                    cur.text.extend(&chars[i + 1..]);
                    i = chars.len();
                }
            },
            '"' => {
                cur.text.push('"');
                i += 1;
                let mut closed = false;
                while i < chars.len() {
                    match chars[i] {
                        '\\' => {
                            cur.text.extend(chars[i..(i + 2).min(chars.len())].iter());
                            i += 2;
                        }
                        '"' => {
                            cur.text.push('"');
                            i += 1;
                            closed = true;
                            break;
                        }
                        '$' if chars.get(i + 1) == Some(&'(') => {
                            i = substitution(&chars, i, &mut scan, &mut cur);
                        }
                        '`' => i = backtick(&chars, i, &mut scan, &mut cur),
                        other => {
                            cur.text.push(other);
                            i += 1;
                        }
                    }
                }
                if !closed {
                    scan.error
                        .get_or_insert("unbalanced double quote `\"`".to_owned());
                }
            }
            '\\' => {
                if chars.get(i + 1) == Some(&'\n') {
                    i += 2;
                } else {
                    cur.text.extend(chars[i..(i + 2).min(chars.len())].iter());
                    i += 2;
                }
            }
            '#' if cur.text.is_empty() || cur.text.ends_with(char::is_whitespace) => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '$' if chars.get(i + 1) == Some(&'(') => {
                i = substitution(&chars, i, &mut scan, &mut cur);
            }
            '`' => i = backtick(&chars, i, &mut scan, &mut cur),
            '<' | '>' if chars.get(i + 1) == Some(&'(') => {
                scan.opaque
                    .push("process substitution `<(...)`/`>(...)` runs a hidden command");
                let (payload, end) = balanced(&chars, i + 1);
                match end {
                    Some(end) => {
                        scan.nested.push(payload);
                        i = end + 1;
                    }
                    None => {
                        scan.error
                            .get_or_insert("unbalanced `(` in process substitution".to_owned());
                        scan.nested.push(payload);
                        i = chars.len();
                    }
                }
                cur.text.push_str(" <(...) ");
            }
            '<' | '>' | '&' if is_redirect_start(&chars, i) => {
                let op = redirect_op(&chars, i);
                i += op.chars().count();
                // A digit-only word right before the operator is the fd it applies to.
                let trimmed = cur.text.trim_end_matches(|c: char| c.is_ascii_digit());
                if trimmed.len() < cur.text.len()
                    && (trimmed.is_empty() || trimmed.ends_with(char::is_whitespace))
                {
                    cur.text.truncate(trimmed.len());
                }
                cur.text.push(' ');
                cur.text.push(REDIR);
                cur.text.push_str(&op);
                cur.text.push(' ');
                if op == "<<" || op == "<<-" {
                    let (delim, next) = heredoc_delimiter(&chars, i);
                    cur.text.push_str("EOF ");
                    pending_heredocs.push((delim, op == "<<-"));
                    i = next;
                }
            }
            ';' | '(' | ')' => {
                end_segment(&mut scan, &mut cur, false);
                i += 1;
            }
            '\n' => {
                if !pending_heredocs.is_empty() {
                    i += 1;
                    for (delim, strip_tabs) in std::mem::take(&mut pending_heredocs) {
                        let mut body = String::new();
                        loop {
                            if i >= chars.len() {
                                scan.error.get_or_insert(format!(
                                    "here-document not terminated by `{delim}`"
                                ));
                                break;
                            }
                            let end = chars[i..]
                                .iter()
                                .position(|&x| x == '\n')
                                .map_or(chars.len(), |p| i + p);
                            let line: String = chars[i..end].iter().collect();
                            i = end + 1;
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
                        cur.heredocs.push(body);
                    }
                    end_segment(&mut scan, &mut cur, false);
                } else {
                    end_segment(&mut scan, &mut cur, false);
                    i += 1;
                }
            }
            '&' => {
                end_segment(&mut scan, &mut cur, false);
                i += if chars.get(i + 1) == Some(&'&') { 2 } else { 1 };
            }
            '|' => match chars.get(i + 1) {
                Some('|') => {
                    end_segment(&mut scan, &mut cur, false);
                    i += 2;
                }
                Some('&') => {
                    end_segment(&mut scan, &mut cur, true);
                    i += 2;
                }
                _ => {
                    end_segment(&mut scan, &mut cur, true);
                    i += 1;
                }
            },
            other => {
                cur.text.push(other);
                i += 1;
            }
        }
    }
    end_segment(&mut scan, &mut cur, false);
    scan
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
