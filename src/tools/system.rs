//! System tools: `system_snapshot` and `process_list`, both from the shared
//! [`Snapshotter`](crate::snapshot::Snapshotter), so a tool call costs one refresh.

use futures::FutureExt;
use serde_json::{Value, json};

use super::util::{object_schema, opt_u64};
use super::{Tool, ToolContext, ToolError, ToolFuture};
use crate::catalog::{self, ToolInfo};
use crate::snapshot::Snapshot;

pub const DEFAULT_PROCESS_LIMIT: u64 = 15;
pub const MAX_PROCESS_LIMIT: u64 = 100;

fn take(ctx: &ToolContext) -> Snapshot {
    let mut s = ctx.snapshotter.lock().unwrap_or_else(|e| e.into_inner());
    s.take(Some(&ctx.workspace))
}

pub struct SystemSnapshot;

impl Tool for SystemSnapshot {
    fn info(&self) -> &'static ToolInfo {
        &catalog::SYSTEM_SNAPSHOT
    }

    fn description(&self) -> &'static str {
        "A fresh snapshot of the machine as JSON: load, memory and swap, top processes by \
         CPU and memory, disks, battery, the Hyprland workspace and window. The system \
         prompt already has one from the start of this step; call this only to see changes."
    }

    fn schema(&self) -> Value {
        object_schema(json!({}), &[])
    }

    fn execute(&self, _args: Value, ctx: ToolContext) -> ToolFuture {
        async move {
            let snap = tokio::task::spawn_blocking(move || take(&ctx))
                .await
                .map_err(|e| ToolError::Fatal(format!("snapshot worker failed: {e}")))?;
            serde_json::to_string_pretty(&snap).map_err(|e| ToolError::Fatal(e.to_string()))
        }
        .boxed()
    }
}

pub struct ProcessList;

impl Tool for ProcessList {
    fn info(&self) -> &'static ToolInfo {
        &catalog::PROCESS_LIST
    }

    fn description(&self) -> &'static str {
        "The processes using the most CPU or memory: pid, name, user, CPU %, resident memory."
    }

    fn schema(&self) -> Value {
        object_schema(
            json!({
                "sort_by": {"type": "string", "enum": ["cpu", "memory"], "description": "default cpu"},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_PROCESS_LIMIT}
            }),
            &[],
        )
    }

    fn execute(&self, args: Value, ctx: ToolContext) -> ToolFuture {
        async move {
            let by_memory = match args.get("sort_by").and_then(Value::as_str) {
                None | Some("cpu") => false,
                Some("memory") => true,
                Some(other) => {
                    return Err(ToolError::model(format!(
                        "sort_by must be \"cpu\" or \"memory\", not {other:?}"
                    )));
                }
            };
            let limit = opt_u64(&args, "limit")?
                .unwrap_or(DEFAULT_PROCESS_LIMIT)
                .clamp(1, MAX_PROCESS_LIMIT) as usize;
            let procs = tokio::task::spawn_blocking(move || {
                let mut s = ctx.snapshotter.lock().unwrap_or_else(|e| e.into_inner());
                s.top_processes(limit)
            })
            .await
            .map_err(|e| ToolError::Fatal(format!("snapshot worker failed: {e}")))?;
            let list = if by_memory {
                &procs.top_memory
            } else {
                &procs.top_cpu
            };
            let mut out = String::new();
            if !by_memory && !procs.cpu_measured {
                out.push_str("(CPU % needs two samples; this is the first, so it shows 0 for every process: call again for real numbers)\n");
            }
            out.push_str(&format!(
                "{} processes; top {} by {}:\n{:>8} {:>6} {:>10}  {:<12} NAME\n",
                procs.count,
                limit.min(list.len()),
                if by_memory { "memory" } else { "CPU" },
                "PID",
                "CPU%",
                "RSS",
                "USER"
            ));
            for p in list.iter().take(limit) {
                out.push_str(&format!(
                    "{:>8} {:>6.1} {:>10}  {:<12} {}\n",
                    p.pid,
                    p.cpu_percent,
                    super::files::human_size(p.rss_bytes),
                    p.user.as_deref().unwrap_or("?"),
                    p.name
                ));
            }
            Ok(out)
        }
        .boxed()
    }
}
