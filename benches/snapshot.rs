//! Benchmark: the environment snapshot the loop takes every iteration.
//!
//! Run: `cargo bench --bench snapshot`. Prints the first call (constructor + first
//! take) and steady-state takes, the two renderings, and the parts a take is made of
//! (measured with the same sysinfo calls), so the dominant cost is visible.

// A benchmark reports on stdout.
#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use familiar::snapshot::Snapshotter;
use sysinfo::{
    DiskRefreshKind, Disks, MemoryRefreshKind, ProcessRefreshKind, ProcessesToUpdate, System,
    UpdateKind, Users,
};

fn report(label: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let median = ms(samples[samples.len() / 2]);
    let p95 = ms(samples[(samples.len() * 95).div_ceil(100).saturating_sub(1)]);
    println!(
        "{label:<44} runs {:>4}  median {median:>8.3} ms  p95 {p95:>8.3} ms",
        samples.len()
    );
}

fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> Vec<Duration> {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed()
        })
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const RUNS: usize = 200;
    const COLD_RUNS: usize = 20;

    let cold = time(COLD_RUNS, || {
        Snapshotter::with_hyprland(None).map(|mut s| s.take(None).processes.count)
    });
    report("first call: with_hyprland(None) + take", cold);

    let mut snapshotter = Snapshotter::with_hyprland(None)?;
    snapshotter.take(None);
    report(
        "steady take, back to back (processes reused)",
        time(RUNS, || snapshotter.take(None)),
    );
    // As in the loop, where an LLM call separates two snapshots: every take re-reads
    // the processes. The sleep is outside the timed part.
    let spaced: Vec<Duration> = (0..30)
        .map(|_| {
            std::thread::sleep(sysinfo::MINIMUM_CPU_UPDATE_INTERVAL);
            let t = Instant::now();
            std::hint::black_box(snapshotter.take(None));
            t.elapsed()
        })
        .collect();
    report("steady take, 200 ms apart (processes re-read)", spaced);

    let snap = snapshotter.take(None);
    report(
        "serde_json::to_value",
        time(RUNS, || serde_json::to_value(&snap).map(|v| v.is_object())),
    );
    report("to_prompt_text", time(RUNS, || snap.to_prompt_text()));
    println!(
        "  processes {}, disks {}, prompt text {} chars, JSON {} bytes",
        snap.processes.count,
        snap.disks.len(),
        snap.to_prompt_text().chars().count(),
        serde_json::to_string(&snap)?.len()
    );

    println!("parts:");
    let mut sys = System::new()?;
    let ours = ProcessRefreshKind::nothing()
        .with_cpu()
        .with_memory()
        .with_user(UpdateKind::OnlyIfNotSet)
        .without_tasks();
    sys.refresh_processes_specifics(ProcessesToUpdate::All, true, ours);
    report(
        "  processes (cpu, memory, user; no tasks)",
        time(RUNS, || {
            sys.refresh_processes_specifics(ProcessesToUpdate::All, true, ours)
        }),
    );
    let with_tasks = ours.with_tasks();
    report(
        "  processes, with tasks (sysinfo default)",
        time(RUNS, || {
            sys.refresh_processes_specifics(ProcessesToUpdate::All, true, with_tasks)
        }),
    );
    report(
        "  memory",
        time(RUNS, || {
            sys.refresh_memory_specifics(MemoryRefreshKind::nothing().with_ram().with_swap())
        }),
    );
    report(
        "  load average + uptime + hostname + kernel",
        time(RUNS, || {
            (
                System::load_average().is_ok(),
                System::uptime().is_ok(),
                System::host_name().is_ok(),
                System::kernel_version().is_ok(),
            )
        }),
    );
    let storage = DiskRefreshKind::nothing().with_storage();
    let mut disks = Disks::new_with_refreshed_list_specifics(storage)?;
    report(
        "  disks: refresh space of known mounts",
        time(RUNS, || {
            for d in &mut disks {
                d.refresh_specifics(storage);
            }
        }),
    );
    report(
        "  disks: re-enumerate mounts",
        time(RUNS, || disks.refresh_specifics(true, storage)),
    );
    report(
        "  users: refresh list",
        time(RUNS, || Users::new_with_refreshed_list().map(|u| u.len())),
    );
    match starship_battery::Manager::new() {
        Ok(manager) => report(
            "  battery: list and read",
            time(RUNS, || manager.batteries().map(|mut b| b.next().is_some())),
        ),
        Err(e) => println!("  battery: no manager ({e})"),
    }
    Ok(())
}
