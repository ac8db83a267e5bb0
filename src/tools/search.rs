//! `search_files`: lines matching a regex in the text files under a directory.
//!
//! The invariant: the walk happens in the sandboxed helper ([`FileOp::Search`]), so it
//! sees exactly what the task's Landlock rules let it read; a protected subtree inside
//! a readable one is refused by the kernel, and the reply says how much was skipped and
//! why instead of failing. The regex is checked here first, so a bad pattern costs no
//! helper process and the model gets the parser's message.

use familiar_sandbox::fileops::{FileOp, FileReply};
use familiar_sandbox::search::{
    MAX_SEARCH_FILE_BYTES, MAX_SEARCH_FILES, MAX_SEARCH_MATCHES, SearchMatch, SearchReply,
    SearchStop, search_regex,
};
use futures::FutureExt;
use serde_json::{Value, json};

use super::util::{object_schema, sandboxed, str_arg, unexpected};
use super::{Tool, ToolContext, ToolError, ToolFuture};
use crate::catalog::{self, ToolInfo};

pub struct SearchFiles;

impl Tool for SearchFiles {
    fn info(&self) -> &'static ToolInfo {
        &catalog::SEARCH_FILES
    }

    fn description(&self) -> &'static str {
        "Search the text files under `path` for lines matching the regex `pattern` (Rust \
         regex syntax; `(?i)` for case-insensitive). `glob` limits the file names searched \
         (e.g. `*.rs`). Symlinks are not followed; binary files and files over 2 MiB are \
         skipped; at most 200 matches. Returns `path:line: text` lines."
    }

    fn schema(&self) -> Value {
        object_schema(
            json!({
                "path": {"type": "string", "description": "directory (or file) to search"},
                "pattern": {"type": "string", "description": "regular expression"},
                "glob": {"type": "string", "description": "file-name glob, e.g. *.toml"}
            }),
            &["path", "pattern"],
        )
    }

    fn execute(&self, args: Value, ctx: ToolContext) -> ToolFuture {
        async move {
            let path = ctx.resolve(str_arg(&args, "path")?);
            let pattern = str_arg(&args, "pattern")?.to_owned();
            if let Err(e) = search_regex(&pattern) {
                return Err(ToolError::model(format!("bad `pattern`: {e}")));
            }
            let glob = match args.get("glob") {
                None | Some(Value::Null) => None,
                Some(Value::String(g)) if g.contains('/') => {
                    return Err(ToolError::model(
                        "`glob` matches file names only (no `/`): narrow `path` instead",
                    ));
                }
                Some(Value::String(g)) => Some(g.clone()),
                Some(other) => {
                    return Err(ToolError::model(format!(
                        "`glob` must be a string, got {other}"
                    )));
                }
            };
            let op = FileOp::Search {
                path: path.clone(),
                pattern: pattern.clone(),
                glob: glob.clone(),
            };
            match sandboxed(&ctx, op).await? {
                FileReply::Search(SearchReply {
                    matches,
                    files_searched,
                    skipped_files,
                    unreadable,
                    unreadable_examples,
                    stopped,
                }) => Ok(format_search(&Found {
                    root: &path,
                    pattern: &pattern,
                    glob: glob.as_deref(),
                    matches: &matches,
                    files_searched,
                    skipped_files,
                    unreadable,
                    unreadable_examples: &unreadable_examples,
                    stopped,
                })),
                other => Err(unexpected("search", &other)),
            }
        }
        .boxed()
    }
}

struct Found<'a> {
    root: &'a std::path::Path,
    pattern: &'a str,
    glob: Option<&'a str>,
    matches: &'a [SearchMatch],
    files_searched: usize,
    skipped_files: usize,
    unreadable: usize,
    unreadable_examples: &'a [String],
    stopped: Option<SearchStop>,
}

fn format_search(f: &Found<'_>) -> String {
    let glob = f.glob.map(|g| format!(" in {g}")).unwrap_or_default();
    let mut out = format!(
        "search {} for `{}`{glob}: {} matching line(s) in {} file(s) searched\n",
        f.root.display(),
        f.pattern,
        f.matches.len(),
        f.files_searched
    );
    for m in f.matches {
        out.push_str(&format!("{}:{}: {}\n", m.path.display(), m.line, m.text));
    }
    if f.skipped_files > 0 {
        out.push_str(&format!(
            "skipped {} binary file(s) or file(s) over {}\n",
            f.skipped_files,
            super::files::human_size(MAX_SEARCH_FILE_BYTES)
        ));
    }
    if f.unreadable > 0 {
        out.push_str(&format!(
            "skipped {} unreadable entr{} (outside what this soul's sandbox allows, or gone):\n",
            f.unreadable,
            if f.unreadable == 1 { "y" } else { "ies" }
        ));
        for e in f.unreadable_examples {
            out.push_str(&format!("  {e}\n"));
        }
        if f.unreadable > f.unreadable_examples.len() {
            out.push_str("  …\n");
        }
    }
    match f.stopped {
        Some(SearchStop::MatchLimit) => out.push_str(&format!(
            "stopped early at {MAX_SEARCH_MATCHES} matches: narrow the pattern, path or glob\n"
        )),
        Some(SearchStop::FileLimit) => out.push_str(&format!(
            "stopped early after {MAX_SEARCH_FILES} files: narrow the path or glob\n"
        )),
        None => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;

    #[test]
    fn report_lists_matches_then_what_was_skipped() {
        let matches = [SearchMatch {
            path: PathBuf::from("/w/a.rs"),
            line: 3,
            text: "fn main()".into(),
        }];
        let out = format_search(&Found {
            root: Path::new("/w"),
            pattern: "fn",
            glob: Some("*.rs"),
            matches: &matches,
            files_searched: 4,
            skipped_files: 1,
            unreadable: 1,
            unreadable_examples: &["/w/secret: Permission denied (os error 13)".into()],
            stopped: Some(SearchStop::MatchLimit),
        });
        assert_eq!(
            out,
            "search /w for `fn` in *.rs: 1 matching line(s) in 4 file(s) searched\n\
             /w/a.rs:3: fn main()\n\
             skipped 1 binary file(s) or file(s) over 2.0 MiB\n\
             skipped 1 unreadable entry (outside what this soul's sandbox allows, or gone):\n  \
             /w/secret: Permission denied (os error 13)\n\
             stopped early at 200 matches: narrow the pattern, path or glob\n"
        );
    }
}
