//! The daemon's heap: how glibc is set up for it, and giving freed heap back to the
//! kernel once the daemon is idle again.
//!
//! glibc keeps what a thread freed in that thread's arena and in its per-thread cache:
//! after a burst of tasks the daemon would idle at its peak heap (BENCHMARKS.md, "Idle
//! memory": 4.7 MiB of anonymous memory after 120 tasks without trimming, against 2.1
//! MiB fresh). Two things make the memory go back:
//!
//! - [`tune_allocator`]: the daemon runs with one malloc arena and without per-thread
//!   caches (`GLIBC_TUNABLES`, which glibc reads only when a process starts, so the
//!   daemon re-executes itself once with them). Ten arenas each kept a few hundred KiB
//!   after a burst, and cached chunks of the long-lived runtime threads kept
//!   neighbouring free memory from merging; measured with the load tests, the daemon
//!   settled 3–4 MiB above its idle memory with glibc's defaults and 0.5–1.5 MiB above
//!   with these, at no cost in CPU time (tests/README.md).
//! - `malloc_trim(0)` walks the heap and returns its free pages. It briefly locks the
//!   arena, so it runs only when no task is running or queued: when the last task ends,
//!   and when a runtime thread exits while the daemon is idle.
//!
//! The rest of an idle daemon's RSS is the binary itself: its code and read-only data
//! in the page cache, counted for every page the process has touched. Start-up (the
//! command line, the configuration and souls, the warm request's whole HTTP stack)
//! touches 2–3 MiB of code that an idle daemon never runs again (BENCHMARKS.md, "Idle
//! RSS"). [`release_startup_code`] drops the process's mappings of those pages once
//! start-up and warming are over; the pages stay in the page cache, so what runs next
//! maps them back with a minor fault, and the kernel may reclaim the rest.

use std::sync::atomic::{AtomicBool, Ordering};

/// The glibc settings the daemon runs with: one arena, no per-thread caches.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TUNABLES: &str = "glibc.malloc.arena_max=1:glibc.malloc.tcache_count=0";

/// Set for the re-executed daemon: the `GLIBC_TUNABLES` it was started with (empty for
/// none), given back to its environment for what it starts.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TUNED_ENV: &str = "FAMILIAR_MALLOC_TUNED";

/// Set while no task runs or waits (the supervisor keeps it).
static IDLE: AtomicBool = AtomicBool::new(true);

/// The supervisor's word on whether any task runs or waits.
pub(super) fn set_idle(idle: bool) {
    IDLE.store(idle, Ordering::Release);
}

/// A runtime thread is about to exit (an idle blocking thread, 10 s after its last job):
/// what it freed goes back too, when the daemon is idle. The blocking threads of a
/// burst of tasks outlive the last task by their keep-alive, so the trim at the end of
/// that task could not return what they held.
pub(super) fn thread_stopping() {
    if IDLE.load(Ordering::Acquire) {
        release_freed_memory();
    }
}

/// Returns the allocator's free pages to the kernel (glibc); elsewhere nothing.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[expect(unsafe_code, reason = "malloc_trim is a C function")]
pub(super) fn release_freed_memory() {
    // SAFETY: malloc_trim takes a plain integer and has no caller-side invariants; it
    // is thread-safe (it takes each arena's lock).
    let released = unsafe { libc::malloc_trim(0) } != 0;
    tracing::debug!(released, "gave freed heap back to the kernel");
}

/// Drops this process's page-table entries for the binary's clean read-only mappings
/// (its code and read-only data), so that an idle daemon holds only the pages it runs
/// from then on. Only mappings of the running executable that are not writable and
/// hold no private copy of a page (`Anonymous: 0 kB` in smaps: no relocation or
/// breakpoint wrote to them) are released: for those `MADV_DONTNEED` only forgets
/// mappings of page-cache pages, and the next access maps the same page again.
/// Called when the daemon has settled (warm.rs), not per task: mapping back the code a
/// task runs costs about a thousand minor faults.
#[expect(
    unsafe_code,
    reason = "madvise on the process's own read-only file mappings"
)]
pub(super) fn release_startup_code() {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return;
    };
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return;
    };
    let mut released = 0usize;
    for (start, end) in clean_readonly_mappings(&smaps, &exe) {
        // SAFETY: [start, end) is a whole mapping of this process, read-only and backed
        // by the executable's file with no private (anonymous) page in it; dropping its
        // page-table entries changes no content: every later access maps the file's
        // page again. No Rust reference can point into code or .rodata pages that this
        // invalidates, since their contents stay the same.
        let r =
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        if r == 0 {
            released += end - start;
        }
    }
    tracing::debug!(
        mapped_kib = released / 1024,
        "released the start-up code's pages"
    );
}

/// The `(start, end)` of each mapping of `exe` in `smaps` that is not writable and has
/// no anonymous pages.
fn clean_readonly_mappings(smaps: &str, exe: &std::path::Path) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, usize)> = None;
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else { continue };
        if let Some((a, b)) = first.split_once('-')
            && let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
        {
            let perms = fields.next().unwrap_or("");
            let path = fields.nth(3);
            current = (path == exe.to_str() && perms.starts_with('r') && !perms.contains('w'))
                .then_some((a, b));
        } else if first == "Anonymous:"
            && let Some(m) = current.take()
            && fields.next() == Some("0")
        {
            out.push(m);
        }
    }
    out
}

/// musl and other allocators do not keep freed pages the way glibc does.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(super) fn release_freed_memory() {}

/// Runs the daemon with [`TUNABLES`]: re-executes it with them unless this process is
/// that re-execution, which instead puts the caller's `GLIBC_TUNABLES` back. The user's
/// own tunables come after ours, so theirs win. Must be called before any other thread
/// exists (it changes the environment). When the re-execution fails the daemon runs on
/// with glibc's defaults.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn tune_allocator() {
    use std::ffi::OsString;
    use std::os::unix::process::CommandExt;

    if let Some(original) = std::env::var_os(TUNED_ENV) {
        restore_environment(&original);
        tracing::debug!("malloc: {TUNABLES}");
        return;
    }
    let original = std::env::var_os("GLIBC_TUNABLES").unwrap_or_default();
    let mut tunables = OsString::from(TUNABLES);
    if !original.is_empty() {
        tunables.push(":");
        tunables.push(&original);
    }
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| OsString::from("familiar"));
    // The binary's own path, not `/proc/self/exe`: the kernel names a process after the
    // file it executes, and `exe` is what `ps`, `pgrep -x familiar`, `systemctl status`
    // and busctl showed. `/proc/self/exe` only when the path is gone (the
    // binary was deleted or replaced since it started: that link still reaches it).
    let program = std::env::current_exe()
        .ok()
        .filter(|p| p.is_file())
        .unwrap_or_else(|| "/proc/self/exe".into());
    let err = std::process::Command::new(program)
        .arg0(arg0)
        .args(args)
        .env("GLIBC_TUNABLES", tunables)
        .env(TUNED_ENV, &original)
        .exec();
    tracing::warn!("running with glibc's default malloc settings: cannot re-execute: {err}");
}

/// Other C libraries read no `GLIBC_TUNABLES`.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn tune_allocator() {}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[expect(unsafe_code, reason = "changing the environment")]
fn restore_environment(original: &std::ffi::OsStr) {
    // SAFETY: `tune_allocator` runs before the daemon starts its runtime or any other
    // thread, so nothing reads the environment meanwhile.
    unsafe {
        std::env::remove_var(TUNED_ENV);
        if original.is_empty() {
            std::env::remove_var("GLIBC_TUNABLES");
        } else {
            std::env::set_var("GLIBC_TUNABLES", original);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::clean_readonly_mappings;

    #[test]
    fn only_the_executables_clean_read_only_mappings_are_released() {
        let smaps = "\
55d0a0000000-55d0a0100000 r--p 00000000 fe:01 42 /usr/bin/familiar
Anonymous:             0 kB
55d0a0100000-55d0a0900000 r-xp 00100000 fe:01 42 /usr/bin/familiar
Rss:                 812 kB
Anonymous:             0 kB
55d0a0900000-55d0a0a00000 r--p 00900000 fe:01 42 /usr/bin/familiar
Anonymous:            64 kB
55d0a0a00000-55d0a0a10000 rw-p 00a00000 fe:01 42 /usr/bin/familiar
Anonymous:             0 kB
7f0000000000-7f0000100000 r-xp 00000000 fe:01 7 /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             0 kB
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
Anonymous:           132 kB
";
        assert_eq!(
            clean_readonly_mappings(smaps, Path::new("/usr/bin/familiar")),
            vec![
                (0x55d0a0000000, 0x55d0a0100000),
                (0x55d0a0100000, 0x55d0a0900000)
            ],
        );
    }
}
