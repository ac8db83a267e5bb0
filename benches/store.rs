//! Benchmark: context save and load as the history grows.
//!
//! Run: `cargo bench --bench store`. Histories of 100, 1 000 and 10 000 messages,
//! mixed like a real session (user text, assistant text + tool_use, tool_result of a
//! few hundred bytes). Save includes both fsyncs, so it measures the disk too: run it
//! on the file system the data dir lives on (`FAMILIAR_BENCH_DIR`, default a temp dir
//! under `$TMPDIR`).
//!
//! The second table is what a running task pays per step: one turn (an assistant
//! message with a tool call, its result, the task's record changed) appended to the
//! session's journal and synced, on top of a history of that size; and a load of the
//! base plus 20 journal lines.

// A benchmark reports on stdout.
#![allow(clippy::print_stdout)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use familiar::llm::{ContentBlock, Message, Role};
use familiar::store::{Context, Store, TaskRecord};
use familiar_protocol::ids::{CallId, SessionId, SoulId, TaskId};
use familiar_protocol::task::TaskStatus;
use serde_json::json;

fn history(n: usize) -> Vec<Message> {
    let filler = "lorem ipsum dolor sit amet, consectetur adipiscing elit ";
    (0..n)
        .map(|i| match i % 3 {
            0 => Message::user_text(format!("step {i}: {}", filler.repeat(2))),
            1 => Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::Text {
                        text: format!("Looking at {i}."),
                    },
                    ContentBlock::ToolUse {
                        id: CallId::from_provider(format!("call_{i}")),
                        name: "read_file".into(),
                        input: json!({"path": format!("/home/u/project/src/file{i}.rs"), "limit": 200}),
                    },
                ],
            },
            _ => Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: CallId::from_provider(format!("call_{}", i - 1)),
                    content: filler.repeat(6),
                    is_error: false,
                }],
            },
        })
        .collect()
}

fn stats(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let median = ms(samples[samples.len() / 2]);
    let p95 = ms(samples[(samples.len() * 95).div_ceil(100).saturating_sub(1)]);
    (median, p95)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base = std::env::var_os("FAMILIAR_BENCH_DIR").map(PathBuf::from);
    let tmp = match &base {
        Some(b) => tempfile::tempdir_in(b)?,
        None => tempfile::tempdir()?,
    };
    let store = Store::open(tmp.path())?;
    println!("store bench in {}", tmp.path().display());
    println!(
        "{:>8} {:>10} {:>6} {:>12} {:>12} {:>12} {:>12}",
        "messages", "bytes", "runs", "save med ms", "save p95 ms", "load med ms", "load p95 ms"
    );
    for n in [100, 1_000, 10_000] {
        let id = SessionId::new(format!("bench-{n}"))?;
        let mut ctx = Context::new(id.clone(), SoulId::new("system_admin")?, "bench");
        ctx.history = history(n);
        let runs = match n {
            10_000 => 30,
            _ => 100,
        };
        store.save_context(&mut ctx)?;
        let bytes = std::fs::metadata(store.context_path(&id))?.len();
        let mut save = Vec::with_capacity(runs);
        let mut load = Vec::with_capacity(runs);
        for _ in 0..runs {
            let t = Instant::now();
            store.save_context(&mut ctx)?;
            save.push(t.elapsed());
            let t = Instant::now();
            let back = store.load_context(&id)?;
            load.push(t.elapsed());
            assert_eq!(back.map(|c| c.history.len()), Some(n));
        }
        let (sm, sp) = stats(save);
        let (lm, lp) = stats(load);
        println!("{n:>8} {bytes:>10} {runs:>6} {sm:>12.3} {sp:>12.3} {lm:>12.3} {lp:>12.3}");
    }
    println!();
    println!(
        "{:>8} {:>6} {:>12} {:>12} {:>14} {:>14}",
        "messages", "steps", "step med ms", "step p95 ms", "load+20 med ms", "load+20 p95 ms"
    );
    for n in [100, 1_000, 10_000] {
        steps(&store, n)?;
    }
    Ok(())
}

/// One task's steps through the journal on a history of `n` messages.
fn steps(store: &Store, n: usize) -> Result<(), Box<dyn std::error::Error>> {
    let id = SessionId::new(format!("steps-{n}"))?;
    let mut ctx = Context::new(id.clone(), SoulId::new("system_admin")?, "bench");
    ctx.history = history(n);
    ctx.tasks.push(TaskRecord {
        task_id: TaskId::new(format!("t-{n}"))?,
        prompt: "bench".into(),
        status: TaskStatus::Running,
        origin: "bench".into(),
        workspace: None,
        started_at: familiar::store::now_rfc3339(),
        finished_at: None,
        plan: Default::default(),
        usage: Default::default(),
        result: None,
    });
    let turn = history(3);
    let (runs, loads) = (100, 30);
    let mut step = Vec::with_capacity(runs);
    let mut load = Vec::with_capacity(loads);
    let mut journal = store.start_journal(&mut ctx)?;
    for i in 0..runs {
        // A fresh journal every 20 steps, so the loads below see 20 lines.
        if i % 20 == 0 {
            journal = store.start_journal(&mut ctx)?;
        }
        let t = Instant::now();
        ctx.history.extend_from_slice(&turn[1..]);
        if let Some(task) = ctx.tasks.last_mut() {
            task.usage.output_tokens += 100;
        }
        ctx.touch();
        journal.persist(store, &mut ctx)?;
        step.push(t.elapsed());
    }
    for _ in 0..loads {
        let t = Instant::now();
        let back = store.load_context(&id)?;
        load.push(t.elapsed());
        assert_eq!(back.map(|c| c.history.len()), Some(ctx.history.len()));
    }
    let (sm, sp) = stats(step);
    let (lm, lp) = stats(load);
    println!("{n:>8} {runs:>6} {sm:>12.3} {sp:>12.3} {lm:>14.3} {lp:>14.3}");
    Ok(())
}
