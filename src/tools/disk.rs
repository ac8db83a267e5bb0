//! `disk_usage`: the largest entries one level below a directory, with whole-subtree
//! sizes.
//!
//! It runs GNU `du -x -d 1 -B1 --null -- PATH` in the task's sandbox rather than a
//! walk of our own in the helper: `du` already counts hard links once, stays on one
//! file system (`-x`), reports allocated blocks (what fills a disk, not apparent sizes)
//! and is in the sandbox's read baseline; it only needs the same kernel rules any
//! command gets. The invariant: sizes cover only what the sandbox can read; what it
//! cannot is counted from `du`'s complaints and said, so a total is never presented as
//! complete when it is not.

use futures::FutureExt;
use serde_json::{Value, json};

use super::files::human_size;
use super::util::{object_schema, str_arg};
use super::{Tool, ToolContext, ToolError, ToolFuture};
use crate::catalog::{self, ToolInfo};

/// Entries listed at most (the total covers all of them).
pub const TOP_ENTRIES: usize = 20;

pub struct DiskUsage;

impl Tool for DiskUsage {
    fn info(&self) -> &'static ToolInfo {
        &catalog::DISK_USAGE
    }

    fn description(&self) -> &'static str {
        "Disk space used under a directory: its total and its 20 largest entries one level \
         down (each the size of its whole subtree), largest first. Stays on one file system."
    }

    fn schema(&self) -> Value {
        object_schema(
            json!({"path": {"type": "string", "description": "directory to measure"}}),
            &["path"],
        )
    }

    fn execute(&self, args: Value, ctx: ToolContext) -> ToolFuture {
        async move {
            let path = ctx.resolve(str_arg(&args, "path")?);
            let root = path.display().to_string();
            let argv = ["du", "-x", "-d", "1", "-B1", "--null", "--", &root].map(str::to_owned);
            let out = ctx
                .launcher
                .run(&ctx.sandbox, &argv, None, &ctx.cancel)
                .await?;
            if out.timed_out {
                return Err(ToolError::model(format!(
                    "du {root} did not finish in {}s: measure a smaller directory",
                    ctx.sandbox.limits.timeout.as_secs()
                )));
            }
            let usage = parse_du(&out.stdout, &root);
            let Some(total) = usage.total else {
                // Nothing measured: du's own message says why (missing, not a directory
                // we may read).
                return Err(ToolError::model(format!(
                    "du {root}: {}",
                    out.stderr.trim()
                )));
            };
            let refused = out
                .stderr
                .lines()
                .filter(|l| l.contains("Permission denied"))
                .count();
            Ok(format_usage(&root, total, usage.entries, refused))
        }
        .boxed()
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Usage {
    total: Option<u64>,
    entries: Vec<(u64, String)>,
}

/// `SIZE\tPATH\0` records; the record for `root` itself is the total.
fn parse_du(stdout: &str, root: &str) -> Usage {
    let mut usage = Usage {
        total: None,
        entries: Vec::new(),
    };
    for record in stdout.split('\0').filter(|r| !r.is_empty()) {
        let Some((size, path)) = record.split_once('\t') else {
            continue;
        };
        let Ok(size) = size.trim().parse::<u64>() else {
            continue;
        };
        if path == root {
            usage.total = Some(size);
        } else {
            usage.entries.push((size, path.to_owned()));
        }
    }
    usage
        .entries
        .sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    usage
}

fn format_usage(root: &str, total: u64, entries: Vec<(u64, String)>, refused: usize) -> String {
    let mut out = format!("{root}: {} in total\n", human_size(total));
    let count = entries.len();
    for (size, path) in entries.into_iter().take(TOP_ENTRIES) {
        let name = path
            .strip_prefix(root)
            .map(|p| p.trim_start_matches('/'))
            .unwrap_or(&path);
        out.push_str(&format!("{:>10}  {name}\n", human_size(size)));
    }
    if count > TOP_ENTRIES {
        out.push_str(&format!(
            "… {} smaller entries not shown\n",
            count - TOP_ENTRIES
        ));
    }
    if refused > 0 {
        out.push_str(&format!(
            "{refused} director{} could not be read (Permission denied: outside what this \
             soul's sandbox allows): the sizes leave them out\n",
            if refused == 1 { "y" } else { "ies" }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn du_records_sort_largest_first_and_the_root_is_the_total() {
        let out = "4096\t/w/a\0 1048576\t/w/big dir\0 8192\t/w/b\n\0 1060864\t/w\0";
        let usage = parse_du(out, "/w");
        assert_eq!(
            usage,
            Usage {
                total: Some(1_060_864),
                entries: vec![
                    (1_048_576, "/w/big dir".into()),
                    (8192, "/w/b\n".into()),
                    (4096, "/w/a".into()),
                ],
            }
        );
    }

    #[test]
    fn report_names_entries_relative_to_the_root() {
        let out = format_usage("/w", 2048, vec![(2048, "/w/x".into())], 1);
        assert_eq!(
            out,
            "/w: 2.0 KiB in total\n   2.0 KiB  x\n1 directory could not be read (Permission \
             denied: outside what this soul's sandbox allows): the sizes leave them out\n"
        );
    }
}
