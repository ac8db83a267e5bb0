//! File tools: `read_file`, `list_dir`, `write_file`, `edit_file`.
//!
//! Every file access happens in the sandboxed helper (`familiar-sandbox --op`),
//! under the task's Landlock rules: the policy check before it gives the model a clear
//! reason, but what keeps a tool inside the soul's paths is the kernel, even if a path
//! check had a bug. Writes are atomic and never follow a final symlink. Output is
//! bounded: a tool never returns more than [`MAX_READ_BYTES`]. A write or edit
//! outside the workspace keeps what it replaced and is recorded for undo
//! ([`super::changes`]).

use familiar_sandbox::fileops::{DirEntry, EntryKind, FileOp, FileReply};
use futures::FutureExt;
use serde_json::{Value, json};

use super::changes::{edited_hash, keep_for, record_write};
use super::util::{object_schema, opt_u64, sandboxed, str_arg, unexpected};
use super::{Tool, ToolContext, ToolError, ToolFuture};
use crate::catalog::{self, ToolInfo};
use crate::store::sha256_hex;

/// Largest slice of a file `read_file` returns to the model.
pub const MAX_READ_BYTES: usize = 256 * 1024;
/// Lines returned when the call gives no `limit`.
pub const DEFAULT_READ_LINES: u64 = 400;
/// Entries `list_dir` returns at most.
pub const MAX_DIR_ENTRIES: usize = 500;

pub struct ReadFile;

impl Tool for ReadFile {
    fn info(&self) -> &'static ToolInfo {
        &catalog::READ_FILE
    }

    fn description(&self) -> &'static str {
        "Read a text file. Returns numbered lines. Use offset (1-based first line) and limit \
         (number of lines, default 400) to page through long files. Relative paths are \
         relative to the task workspace; ~ is the home directory."
    }

    fn schema(&self) -> Value {
        object_schema(
            json!({
                "path": {"type": "string", "description": "File to read"},
                "offset": {"type": "integer", "minimum": 1, "description": "First line (1-based)"},
                "limit": {"type": "integer", "minimum": 1, "description": "Number of lines"}
            }),
            &["path"],
        )
    }

    fn execute(&self, args: Value, ctx: ToolContext) -> ToolFuture {
        async move {
            let path = ctx.resolve(str_arg(&args, "path")?);
            let offset = opt_u64(&args, "offset")?.unwrap_or(1).max(1) as usize;
            let limit = opt_u64(&args, "limit")?
                .unwrap_or(DEFAULT_READ_LINES)
                .max(1) as usize;
            let op = FileOp::Read {
                path: path.clone(),
                offset: Some(offset),
                limit: Some(limit),
            };
            match sandboxed(&ctx, op).await? {
                FileReply::Read {
                    content,
                    total_lines,
                    truncated,
                } => format_lines(&path, &content, offset, total_lines, truncated),
                other => Err(unexpected("read", &other)),
            }
        }
        .boxed()
    }
}

/// Numbered lines with a header that says which part of the file this is.
fn format_lines(
    path: &std::path::Path,
    content: &str,
    offset: usize,
    total: usize,
    truncated: bool,
) -> Result<String, ToolError> {
    let shown = path.display();
    if content.bytes().take(8192).any(|b| b == 0) {
        return Err(ToolError::model(format!(
            "{shown} looks like a binary file; read_file only shows text"
        )));
    }
    let total = if truncated {
        format!("more than {total}")
    } else {
        total.to_string()
    };
    if content.is_empty() {
        return Ok(format!(
            "{shown}: no lines at offset {offset} (file has {total} lines)"
        ));
    }
    let mut out = String::with_capacity(content.len() + content.len() / 8);
    let mut last = offset;
    for (i, line) in content.lines().enumerate() {
        if out.len() + line.len() > MAX_READ_BYTES {
            out.push_str(&format!(
                "[cut at {MAX_READ_BYTES} bytes: use offset/limit]\n"
            ));
            break;
        }
        last = offset + i;
        out.push_str(&format!("{last:>6}\t{line}\n"));
    }
    Ok(format!("{shown}: lines {offset}-{last} of {total}\n{out}"))
}

pub struct ListDir;

impl Tool for ListDir {
    fn info(&self) -> &'static ToolInfo {
        &catalog::LIST_DIR
    }

    fn description(&self) -> &'static str {
        "List a directory: one entry per line with its type (dir, file, link) and size. \
         Relative paths are relative to the task workspace; ~ is the home directory."
    }

    fn schema(&self) -> Value {
        object_schema(
            json!({"path": {"type": "string", "description": "Directory to list"}}),
            &["path"],
        )
    }

    fn execute(&self, args: Value, ctx: ToolContext) -> ToolFuture {
        async move {
            let path = ctx.resolve(str_arg(&args, "path")?);
            match sandboxed(&ctx, FileOp::List { path: path.clone() }).await? {
                FileReply::List { entries, truncated } => {
                    Ok(format_list(&path, &entries, truncated))
                }
                other => Err(unexpected("list", &other)),
            }
        }
        .boxed()
    }
}

fn format_list(path: &std::path::Path, entries: &[DirEntry], truncated: bool) -> String {
    let mut out = format!("{}: {} entries\n", path.display(), entries.len());
    for e in entries.iter().take(MAX_DIR_ENTRIES) {
        let desc = match e.kind {
            EntryKind::Dir => "dir".to_owned(),
            EntryKind::Symlink => "link".to_owned(),
            EntryKind::File => format!("file {}", human_size(e.size)),
            EntryKind::Other => "other".to_owned(),
        };
        out.push_str(&format!("{desc:<14} {}\n", e.name));
    }
    if entries.len() > MAX_DIR_ENTRIES || truncated {
        out.push_str(&format!(
            "… more entries not shown (first {MAX_DIR_ENTRIES} listed)\n"
        ));
    }
    out
}

pub struct WriteFile;

impl Tool for WriteFile {
    fn info(&self) -> &'static ToolInfo {
        &catalog::WRITE_FILE
    }

    fn description(&self) -> &'static str {
        "Create or replace a text file with `content` (atomically; never through a symlink). \
         Relative paths are relative to the task workspace. Needs the user's approval unless \
         the policy allows writes. The previous content is kept so the user can undo the \
         change. To delete a file use `trash`, never `rm`."
    }

    fn schema(&self) -> Value {
        object_schema(
            json!({
                "path": {"type": "string"},
                "content": {"type": "string", "description": "the whole new content"}
            }),
            &["path", "content"],
        )
    }

    fn execute(&self, args: Value, ctx: ToolContext) -> ToolFuture {
        async move {
            let path = ctx.resolve(str_arg(&args, "path")?);
            let content = str_arg(&args, "content")?.to_owned();
            let after = sha256_hex(content.as_bytes());
            let op = FileOp::Write {
                path: path.clone(),
                content,
                keep: keep_for(&ctx, &path),
            };
            match sandboxed(&ctx, op).await? {
                FileReply::Written { bytes } => {
                    Ok(format!("wrote {bytes} bytes to {}", path.display()))
                }
                FileReply::Replaced { bytes, previous } => {
                    let note = record_write(&ctx, &path, &previous, Some(after)).await?;
                    Ok(format!("wrote {bytes} bytes to {}{note}", path.display()))
                }
                other => Err(unexpected("write", &other)),
            }
        }
        .boxed()
    }
}

pub struct EditFile;

impl Tool for EditFile {
    fn info(&self) -> &'static ToolInfo {
        &catalog::EDIT_FILE
    }

    fn description(&self) -> &'static str {
        "Replace one exact snippet `old` with `new` in a file. `old` must occur exactly once: \
         include enough surrounding lines to make it unique. Needs the user's approval unless \
         the policy allows writes."
    }

    fn schema(&self) -> Value {
        object_schema(
            json!({
                "path": {"type": "string"},
                "old": {"type": "string", "description": "exact text to replace, occurring once"},
                "new": {"type": "string"}
            }),
            &["path", "old", "new"],
        )
    }

    fn execute(&self, args: Value, ctx: ToolContext) -> ToolFuture {
        async move {
            let path = ctx.resolve(str_arg(&args, "path")?);
            let old = str_arg(&args, "old")?.to_owned();
            let new = str_arg(&args, "new")?.to_owned();
            if old.is_empty() {
                return Err(ToolError::model(
                    "`old` is empty: give the exact text to replace",
                ));
            }
            let op = FileOp::Edit {
                path: path.clone(),
                old: old.clone(),
                new: new.clone(),
                keep: keep_for(&ctx, &path),
            };
            match sandboxed(&ctx, op).await? {
                FileReply::Written { bytes } => {
                    Ok(format!("edited {} ({bytes} bytes now)", path.display()))
                }
                FileReply::Replaced { bytes, previous } => {
                    let after = edited_hash(&previous, &old, &new);
                    let note = record_write(&ctx, &path, &previous, after).await?;
                    Ok(format!(
                        "edited {} ({bytes} bytes now){note}",
                        path.display()
                    ))
                }
                other => Err(unexpected("edit", &other)),
            }
        }
        .boxed()
    }
}

/// 1536 → "1.5 KiB".
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_numbered_from_the_offset() {
        let out = format_lines(std::path::Path::new("/f"), "b\nc\n", 2, 4, false).unwrap();
        assert_eq!(out, "/f: lines 2-3 of 4\n     2\tb\n     3\tc\n");
        let binary = format_lines(std::path::Path::new("/b"), "\0\u{1}", 1, 1, false);
        assert!(matches!(binary, Err(ToolError::RespondToModel(m)) if m.contains("binary")));
    }

    #[test]
    fn listing_shows_types_and_sizes() {
        let entries = vec![
            DirEntry {
                name: "a".into(),
                kind: EntryKind::Dir,
                size: 0,
            },
            DirEntry {
                name: "b.txt".into(),
                kind: EntryKind::File,
                size: 2048,
            },
        ];
        let out = format_list(std::path::Path::new("/d"), &entries, false);
        assert_eq!(
            out,
            "/d: 2 entries\ndir            a\nfile 2.0 KiB   b.txt\n"
        );
    }
}
