//! Shell pathname matching of one path component (`*`, `?`, `[...]`), as bash without
//! `dotglob` does it. The helper's `search_files` glob uses it, and so do the daemon's
//! path policy and plan carving (`familiar::policy::paths`, `familiar::sandbox::plan`),
//! so both sides of the sandbox agree on what a pattern names.

pub fn has_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// Shell pathname matching of one component: `*`, `?`, `[...]` (with `!`/`^`), and a
/// leading `.` in the name only matched by a literal `.` (bash without `dotglob`).
///
/// Ours rather than `globset` 0.4 (evaluated and set aside): this is security code, and
/// globset agrees only with three settings changed (`backslash_escape(false)`,
/// `allow_unclosed_class(true)`, and the leading-dot rule above, which it lacks); even
/// then it reads `{a,b}` as alternation, and rejects an unbalanced brace or a reversed
/// range (`[a-*`), where the shell matches literally: every such pattern would need a
/// fallback decided here. It also compiles each pattern to a regex, per check, for a
/// pattern the model chose. With those settings, an exhaustive comparison (patterns
/// of up to 4 of `ab*?[]!^-.\`, names of up to 3 characters) found no other
/// difference; this matcher is proptested against its recursive definition below.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    if name.starts_with('.') && !pattern.starts_with('.') {
        return false;
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    glob_at(&p, &n)
}

/// Iterative, with one backtrack point (the last `*`): every element but `*` matches
/// exactly one character, so this is O(pattern × name). The recursive form it replaced
/// backtracked exponentially on many stars (the shell_policy and tool_args fuzzers
/// hung on `/****…` paths a model could send).
fn glob_at(p: &[char], n: &[char]) -> bool {
    let (mut pi, mut ni) = (0, 0);
    // After the last `*` seen: where the pattern goes on, and the name position the
    // star's match ends at so far.
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if p.get(pi) == Some(&'*') {
            star = Some((pi + 1, ni));
            pi += 1;
        } else if let Some(used) = one_char(p, pi, n[ni]) {
            pi += used;
            ni += 1;
        } else if let Some((after, end)) = star {
            // Let the star swallow one more character and try again from there.
            star = Some((after, end + 1));
            pi = after;
            ni = end + 1;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// How many pattern chars the element at `pi` used to match `c`, if it matches.
fn one_char(p: &[char], pi: usize, c: char) -> Option<usize> {
    match p.get(pi)? {
        '*' => None,
        '?' => Some(1),
        '[' => match class_match(&p[pi + 1..], c) {
            Some((true, used)) => Some(1 + used),
            Some((false, _)) => None,
            // An unclosed `[` is a literal.
            None => (c == '[').then_some(1),
        },
        &lit => (lit == c).then_some(1),
    }
}

/// Matches `c` against the class starting after `[`; returns whether it matched and
/// how many pattern chars the class used (including the closing `]`).
fn class_match(p: &[char], c: char) -> Option<(bool, usize)> {
    let mut i = 0;
    let negate = matches!(p.first(), Some('!' | '^'));
    if negate {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    while i < p.len() {
        if p[i] == ']' && !first {
            return Some((matched != negate, i + 1));
        }
        first = false;
        if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
            matched |= p[i] <= c && c <= p[i + 2];
            i += 3;
        } else {
            matched |= p[i] == c;
            i += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The recursive definition the iterative matcher must agree with.
    fn reference(p: &[char], n: &[char]) -> bool {
        match p.first() {
            None => n.is_empty(),
            Some('*') => (0..=n.len()).any(|i| reference(&p[1..], &n[i..])),
            Some(_) => match n.split_first() {
                Some((c, rest)) => {
                    one_char(p, 0, *c).is_some_and(|used| reference(&p[used..], rest))
                }
                None => false,
            },
        }
    }

    proptest! {
        #[test]
        fn the_matcher_agrees_with_the_recursive_definition(
            p in "[a-c*?\\[\\]!-]{0,8}",
            n in "[a-c\\[\\]-]{0,8}",
        ) {
            let (pc, nc): (Vec<char>, Vec<char>) = (p.chars().collect(), n.chars().collect());
            prop_assert_eq!(glob_at(&pc, &nc), reference(&pc, &nc), "{} ~ {}", p, n);
        }
    }
}
