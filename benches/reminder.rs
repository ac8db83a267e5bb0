//! Benchmark: what a system reminder costs per iteration, in characters and time
//! : the snapshot take it is built from plus [`reminder::build`].
//!
//! Run: `cargo bench --bench reminder`. Prints the first reminder of a task (a glance at the
//! environment) and later ones (only what changed since the previous snapshot), taken
//! 200 ms apart as in the loop, where a model call separates two snapshots.

// A benchmark reports on stdout.
#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use familiar::agent::context::reminder::{self, Budget, Environment, Inputs, Place};
use familiar::snapshot::Snapshotter;
use familiar_protocol::task::Plan;

fn report(label: &str, mut samples: Vec<Duration>, mut chars: Vec<usize>) {
    samples.sort();
    chars.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let median = ms(samples[samples.len() / 2]);
    let p95 = ms(samples[(samples.len() * 95).div_ceil(100).saturating_sub(1)]);
    println!(
        "{label:<40} runs {:>3}  median {median:>7.3} ms  p95 {p95:>7.3} ms  chars median {} max {}",
        samples.len(),
        chars[chars.len() / 2],
        chars[chars.len() - 1]
    );
}

fn budget(iteration: u32) -> Budget {
    Budget {
        iteration,
        max_iterations: 20,
        tokens_used: 12_345,
        max_tokens: 200_000,
        elapsed: Duration::from_secs(u64::from(iteration) * 7),
        max_wall_clock: Duration::from_secs(600),
        stated: false,
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const RUNS: usize = 30;
    let plan = Plan {
        goal: "bench".into(),
        steps: Vec::new(),
    };
    let mut snapshotter = Snapshotter::with_hyprland(None)?;
    let ws = std::env::temp_dir()
        .join("workspaces")
        .join("s-0123456789ab");

    let (mut times, mut chars) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        std::thread::sleep(sysinfo::MINIMUM_CPU_UPDATE_INTERVAL);
        let t = Instant::now();
        let snap = snapshotter.take(Some(&ws));
        let text = reminder::build(&Inputs {
            place: Some(Place { workspace: &ws }),
            environment: Environment::Fresh {
                previous: None,
                current: &snap,
            },
            plan: &plan,
            budget: budget(1),
            notes: &[],
        });
        times.push(t.elapsed());
        chars.push(text.chars().count());
    }
    report("first reminder (take + build)", times, chars);

    let (mut times, mut chars) = (Vec::new(), Vec::new());
    let mut previous = snapshotter.take(Some(&ws));
    let mut sample = String::new();
    for i in 0..RUNS {
        std::thread::sleep(sysinfo::MINIMUM_CPU_UPDATE_INTERVAL);
        let t = Instant::now();
        let snap = snapshotter.take(Some(&ws));
        let text = reminder::build(&Inputs {
            place: None,
            environment: Environment::Fresh {
                previous: Some(&previous),
                current: &snap,
            },
            plan: &plan,
            budget: budget(2 + i as u32),
            notes: &[],
        });
        times.push(t.elapsed());
        chars.push(text.chars().count());
        if text.len() > sample.len() {
            sample.clone_from(&text);
        }
        previous = snap;
    }
    report("later reminder (take + diff + build)", times, chars);
    println!("largest later reminder seen:\n{sample}");
    Ok(())
}
