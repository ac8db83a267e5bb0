//! Giving freed heap back to the kernel once the daemon is idle again.
//!
//! glibc keeps what a thread freed in that thread's arena: after a burst of tasks the
//! daemon would idle at its peak heap (BENCHMARKS.md, "Idle memory": 4.7 MiB of
//! anonymous memory after 120 tasks without this, against 2.1 MiB fresh).
//! `malloc_trim(0)` walks the arenas and returns their free pages. It briefly locks
//! every arena, so it runs only when no task is running or queued: when the last task
//! ends, and when a runtime thread exits while the daemon is idle.

use std::sync::atomic::{AtomicBool, Ordering};

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

/// musl and other allocators do not keep freed pages the way glibc does.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(super) fn release_freed_memory() {}
