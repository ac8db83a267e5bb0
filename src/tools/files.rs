//! File tools: `read_file` and `list_dir`.
//!
//! They run in the daemon's process for now, after the policy check (protected paths,
//! tier modes); the sandbox issue moves them into the Landlock-confined helper so that
//! the kernel, not this code, is what keeps them inside the soul's paths. Output is
//! bounded here: a tool never returns more than [`MAX_READ_BYTES`].

use std::io::Read;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, ToolInfo, opt_u64, str_arg};

/// Largest slice of a file `read_file` returns.
pub const MAX_READ_BYTES: usize = 256 * 1024;
/// Lines returned when the call gives no `limit`.
pub const DEFAULT_READ_LINES: u64 = 400;
/// Entries `list_dir` returns at most.
pub const MAX_DIR_ENTRIES: usize = 500;

pub struct ReadFile;

impl Tool for ReadFile {
    fn info(&self) -> &'static ToolInfo {
        &super::READ_FILE
    }

    fn description(&self) -> &'static str {
        "Read a text file. Returns numbered lines. Use offset (1-based first line) and limit \
         (number of lines, default 400) to page through long files. Relative paths are \
         relative to the task workspace; ~ is the home directory."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File to read"},
                "offset": {"type": "integer", "minimum": 1, "description": "First line (1-based)"},
                "limit": {"type": "integer", "minimum": 1, "description": "Number of lines"}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    fn execute(
        &self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<String, ToolError>> {
        async move {
            let path = ctx.resolve(str_arg(&args, "path")?);
            let offset = opt_u64(&args, "offset")?.unwrap_or(1).max(1);
            let limit = opt_u64(&args, "limit")?
                .unwrap_or(DEFAULT_READ_LINES)
                .max(1);
            tokio::task::spawn_blocking(move || read_lines(&path, offset, limit))
                .await
                .map_err(|e| ToolError::Fatal(format!("read_file worker failed: {e}")))?
        }
        .boxed()
    }
}

fn read_lines(path: &std::path::Path, offset: u64, limit: u64) -> Result<String, ToolError> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| ToolError::model(format!("{shown}: {e}")))?;
    if meta.is_dir() {
        return Err(ToolError::model(format!(
            "{shown} is a directory: use list_dir"
        )));
    }
    let file = std::fs::File::open(path).map_err(|e| ToolError::model(format!("{shown}: {e}")))?;
    // Read at most a bounded prefix: a 10 GB log must not be loaded to show 400 lines.
    let mut buf = Vec::new();
    file.take((MAX_READ_BYTES * 16) as u64)
        .read_to_end(&mut buf)
        .map_err(|e| ToolError::model(format!("{shown}: {e}")))?;
    if buf.iter().take(8192).any(|&b| b == 0) {
        return Err(ToolError::model(format!(
            "{shown} looks like a binary file ({} bytes); read_file only shows text",
            meta.len()
        )));
    }
    let text = String::from_utf8_lossy(&buf);
    let mut out = String::new();
    let mut last = 0;
    let mut truncated = false;
    for (i, line) in text
        .lines()
        .enumerate()
        .skip((offset - 1) as usize)
        .take(limit as usize)
    {
        if out.len() + line.len() > MAX_READ_BYTES {
            truncated = true;
            break;
        }
        out.push_str(&format!("{:>6}\t{line}\n", i + 1));
        last = i + 1;
    }
    let total_known = buf.len() as u64 == meta.len();
    let total = if total_known {
        text.lines().count().to_string()
    } else {
        "more than shown".to_owned()
    };
    if out.is_empty() {
        return Ok(format!(
            "{shown}: no lines at offset {offset} (file has {total} lines)"
        ));
    }
    let mut header = format!("{shown}: lines {offset}-{last} of {total}");
    if truncated {
        header.push_str(&format!(
            " (cut at {MAX_READ_BYTES} bytes: use offset/limit)"
        ));
    }
    Ok(format!("{header}\n{out}"))
}

pub struct ListDir;

impl Tool for ListDir {
    fn info(&self) -> &'static ToolInfo {
        &super::LIST_DIR
    }

    fn description(&self) -> &'static str {
        "List a directory: one entry per line with its type (dir, file, link) and size. \
         Relative paths are relative to the task workspace; ~ is the home directory."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"path": {"type": "string", "description": "Directory to list"}},
            "required": ["path"],
            "additionalProperties": false
        })
    }

    fn execute(
        &self,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'static, Result<String, ToolError>> {
        async move {
            let path = ctx.resolve(str_arg(&args, "path")?);
            tokio::task::spawn_blocking(move || list(&path))
                .await
                .map_err(|e| ToolError::Fatal(format!("list_dir worker failed: {e}")))?
        }
        .boxed()
    }
}

fn list(path: &std::path::Path) -> Result<String, ToolError> {
    let shown = path.display();
    let rd = std::fs::read_dir(path).map_err(|e| ToolError::model(format!("{shown}: {e}")))?;
    let mut entries: Vec<(String, String)> = Vec::new();
    let mut total = 0usize;
    for entry in rd {
        let Ok(entry) = entry else { continue };
        total += 1;
        if entries.len() >= MAX_DIR_ENTRIES {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let desc = match entry.metadata() {
            Ok(m) if m.is_dir() => "dir".to_owned(),
            Ok(m) if m.file_type().is_symlink() => "link".to_owned(),
            Ok(m) => format!("file {}", human_size(m.len())),
            Err(_) => "?".to_owned(),
        };
        entries.push((name, desc));
    }
    entries.sort();
    let mut out = format!("{shown}: {total} entries\n");
    for (name, desc) in &entries {
        out.push_str(&format!("{desc:<14} {name}\n"));
    }
    if total > entries.len() {
        out.push_str(&format!("… {} more not shown\n", total - entries.len()));
    }
    Ok(out)
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
    fn read_lines_pages_with_offset_and_limit() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.txt");
        std::fs::write(&p, "a\nb\nc\nd\n").unwrap();
        let out = read_lines(&p, 2, 2).unwrap();
        assert!(
            out.starts_with(&format!("{}: lines 2-3 of 4\n", p.display())),
            "{out}"
        );
        assert!(out.contains("     2\tb\n     3\tc\n"));
        assert!(!out.contains("\td\n"));
    }

    #[test]
    fn binary_files_and_directories_are_refused_with_a_reason() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bin");
        std::fs::write(&p, [0u8, 1, 2, 3]).unwrap();
        assert!(
            matches!(read_lines(&p, 1, 10), Err(ToolError::RespondToModel(m)) if m.contains("binary"))
        );
        assert!(
            matches!(read_lines(dir.path(), 1, 10), Err(ToolError::RespondToModel(m)) if m.contains("list_dir"))
        );
        assert!(matches!(
            read_lines(&dir.path().join("nope"), 1, 10),
            Err(ToolError::RespondToModel(_))
        ));
    }

    #[test]
    fn list_shows_types_and_sizes_sorted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b.txt"), vec![b'x'; 2048]).unwrap();
        std::fs::create_dir(dir.path().join("a")).unwrap();
        let out = list(dir.path()).unwrap();
        let lines: Vec<_> = out.lines().collect();
        assert_eq!(lines[1], "dir            a");
        assert_eq!(lines[2], "file 2.0 KiB   b.txt");
    }
}
