//! The environment snapshot: what the machine looks like right now, for the model's
//! reminders (a glance on a task's first step, then what changed), the
//! `system_snapshot` tool, `familiar snapshot` and D-Bus `Snapshot()`.
//!
//! [`Snapshotter`] keeps one `sysinfo::System` alive and refreshes only what a snapshot
//! shows, because the loop takes one per iteration. [`Snapshot`]'s JSON keys are a
//! contract (documented on each field); [`Snapshot::to_prompt_text`] is bounded by
//! [`PROMPT_TEXT_MAX_CHARS`] whatever the machine holds. Missing parts (no battery, no
//! compositor, an unreadable file) are `null`, never errors. The desktop section comes
//! from whichever compositor runs ([`crate::compositor`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use sysinfo::{
    DiskRefreshKind, Disks, MemoryRefreshKind, ProcessRefreshKind, ProcessesToUpdate, System,
    UpdateKind, Users,
};

use crate::compositor::hyprland::HyprState;
use crate::compositor::{Compositor, Desktop, Hyprland};
use crate::config::ProcessEnv;
use prompt_text::cut;

pub mod conditions;
mod diff;
mod prompt_text;
pub use diff::changes;

/// Entries in each of `top_cpu` and `top_memory`.
pub const TOP_PROCESSES: usize = 5;
/// Disks shown at most (the JSON and the prompt).
pub const MAX_DISKS: usize = 8;
/// Upper bound of [`Snapshot::to_prompt_text`] (≈ 1 500 tokens at 4 chars per token).
pub const PROMPT_TEXT_MAX_CHARS: usize = 6_000;
/// Upper bound of [`Snapshot::to_brief_text`] (a few lines; ~400 characters on a real
/// desktop, this only with absurd figures).
pub const BRIEF_TEXT_MAX_CHARS: usize = 1_000;
/// Longest process name, user name or window title kept in the JSON.
const MAX_NAME_CHARS: usize = 64;

/// File system types that are not storage a person cares about: memory-backed,
/// kernel interfaces, read-only images and container layers.
pub const PSEUDO_FILESYSTEMS: &[&str] = &[
    "autofs",
    "binfmt_misc",
    "bpf",
    "cgroup",
    "cgroup2",
    "configfs",
    "debugfs",
    "devpts",
    "devtmpfs",
    "efivarfs",
    "fusectl",
    "hugetlbfs",
    "mqueue",
    "nsfs",
    "overlay",
    "proc",
    "pstore",
    "ramfs",
    "rpc_pipefs",
    "securityfs",
    "squashfs",
    "sysfs",
    "tmpfs",
    "tracefs",
    "fuse.portal",
    "fuse.gvfsd-fuse",
];

/// Mount points under these are kernel or runtime state, whatever their fs type.
pub const PSEUDO_MOUNT_PREFIXES: &[&str] =
    &["/proc", "/sys", "/dev", "/run", "/snap", "/var/lib/docker"];

/// Processes are re-read at most this often: CPU percentages over a shorter interval
/// are noise (sysinfo's own minimum), and reading /proc/PID/* for every process is
/// most of a snapshot's cost (benches/snapshot.rs).
const PROCESS_REFRESH_INTERVAL: Duration = sysinfo::MINIMUM_CPU_UPDATE_INTERVAL;
/// Disks (the mount table and a `statfs` of each mount) are re-read at most this often:
/// with a dozen mounts that was a tenth of a millisecond at every step of a task
/// (BENCHMARKS.md, "Where the loop's own work goes"), and free space does not change
/// meaningfully within a second.
const DISK_REFRESH_INTERVAL: Duration = Duration::from_secs(1);
/// How often the user list is re-read when a process's uid is unknown.
const USER_LIST_TTL: Duration = Duration::from_secs(60);
/// How often we look for a compositor again when none was running.
const COMPOSITOR_REDETECT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("cannot read system information: {0}")]
    Sysinfo(String),
}

/// One snapshot. Serialised with these keys (a contract: `familiar snapshot --json` and D-Bus `Snapshot()` print them; docs/cli.md).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Snapshot {
    /// RFC 3339 UTC.
    pub taken_at: String,
    pub hostname: Option<String>,
    /// Kernel release (`6.12.1-arch1-1`).
    pub kernel: Option<String>,
    pub uptime_secs: Option<u64>,
    pub load_average: Option<LoadAverage>,
    pub memory: Memory,
    pub processes: Processes,
    /// Real storage only: see [`is_pseudo_filesystem`].
    pub disks: Vec<DiskInfo>,
    /// `null` when the machine has no battery or it cannot be read.
    pub battery: Option<BatteryInfo>,
    /// The task's workspace, `null` outside a task.
    pub workspace: Option<PathBuf>,
    /// The desktop (Hyprland, sway or niri): the compositor, the focused window,
    /// workspaces and outputs; `null` when no compositor runs or answers.
    pub desktop: Option<Desktop>,
    /// Hyprland's active workspace and window as before the desktop section (kept for
    /// one release for scripts that read it); `null` on other compositors.
    pub hyprland: Option<HyprState>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LoadAverage {
    pub one: f64,
    pub five: f64,
    pub fifteen: f64,
}

/// Bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Memory {
    pub total: u64,
    pub used: u64,
    pub available: u64,
    pub swap_total: u64,
    pub swap_used: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Processes {
    pub count: usize,
    /// False on the first sample: CPU % needs two samples, so every process shows 0.
    pub cpu_measured: bool,
    /// Highest CPU first, at most [`TOP_PROCESSES`].
    pub top_cpu: Vec<ProcessInfo>,
    /// Highest RSS first, at most [`TOP_PROCESSES`].
    pub top_memory: Vec<ProcessInfo>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessInfo {
    pub pid: u32,
    /// Cut to 64 characters.
    pub name: String,
    pub user: Option<String>,
    /// Percent of one CPU since the previous snapshot (can exceed 100; 0 on the first).
    pub cpu_percent: f32,
    pub rss_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiskInfo {
    pub mount_point: PathBuf,
    pub fs: String,
    /// Bytes.
    pub total: u64,
    /// Bytes.
    pub available: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BatteryInfo {
    pub percent: f32,
    pub state: BatteryState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_to_empty_secs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_to_full_secs: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BatteryState {
    Charging,
    Discharging,
    Full,
    Empty,
    Unknown,
}

impl BatteryState {
    pub fn as_str(self) -> &'static str {
        match self {
            BatteryState::Charging => "charging",
            BatteryState::Discharging => "discharging",
            BatteryState::Full => "full",
            BatteryState::Empty => "empty",
            BatteryState::Unknown => "unknown",
        }
    }
}

/// Whether a mount is left out of `disks`: a [`PSEUDO_FILESYSTEMS`] type, a mount
/// under [`PSEUDO_MOUNT_PREFIXES`] (except removable media in `/run/media`), or a file
/// system of size 0.
pub fn is_pseudo_filesystem(fs: &str, mount_point: &Path, total: u64) -> bool {
    if total == 0 || PSEUDO_FILESYSTEMS.contains(&fs) {
        return true;
    }
    if mount_point.starts_with("/run/media") {
        return false;
    }
    PSEUDO_MOUNT_PREFIXES
        .iter()
        .any(|p| mount_point.starts_with(p))
}

/// Takes snapshots, keeping what is costly to rebuild between them.
pub struct Snapshotter {
    system: System,
    users: Users,
    users_refreshed: Instant,
    processes_refreshed: Option<Instant>,
    /// Process refreshes so far; CPU % is meaningful from the second on.
    process_samples: u32,
    disks: Disks,
    /// The last disk list and when it was read (see [`DISK_REFRESH_INTERVAL`]).
    disks_read: Option<(Instant, Vec<DiskInfo>)>,
    battery: Option<starship_battery::Manager>,
    compositor: Option<Compositor>,
    /// When set, a compositor is looked for again (from the process environment) at
    /// most every [`COMPOSITOR_REDETECT`] while none is found.
    compositor_redetect: Option<Instant>,
}

impl Snapshotter {
    /// A snapshotter that finds the compositor from the process environment, now and
    /// later (the compositor may start after the daemon).
    pub fn new() -> Result<Snapshotter, SnapshotError> {
        let mut s = Snapshotter::with_compositor(Compositor::detect(&ProcessEnv))?;
        s.compositor_redetect = Some(Instant::now());
        Ok(s)
    }

    /// A snapshotter that reports exactly this Hyprland instance (or none).
    pub fn with_hyprland(hyprland: Option<Hyprland>) -> Result<Snapshotter, SnapshotError> {
        Snapshotter::with_compositor(hyprland.map(Compositor::Hyprland))
    }

    /// A snapshotter that reports exactly this compositor (or none).
    pub fn with_compositor(compositor: Option<Compositor>) -> Result<Snapshotter, SnapshotError> {
        let err = |e: sysinfo::Error| SnapshotError::Sysinfo(e.to_string());
        let battery = match starship_battery::Manager::new() {
            Ok(m) => Some(m),
            Err(e) => {
                tracing::debug!(error = %e, "no battery information");
                None
            }
        };
        Ok(Snapshotter {
            system: System::new().map_err(err)?,
            users: Users::new_with_refreshed_list().map_err(err)?,
            users_refreshed: Instant::now(),
            processes_refreshed: None,
            process_samples: 0,
            disks: Disks::new_with_refreshed_list_specifics(disk_refresh()).map_err(err)?,
            disks_read: None,
            battery,
            compositor,
            compositor_redetect: None,
        })
    }

    /// The machine now. `workspace` is the running task's workspace, if any.
    pub fn take(&mut self, workspace: Option<&Path>) -> Snapshot {
        self.system
            .refresh_memory_specifics(MemoryRefreshKind::nothing().with_ram().with_swap());
        self.refresh_processes();
        let processes = self.processes(TOP_PROCESSES);
        let (desktop, hyprland) = self.desktop();
        Snapshot {
            taken_at: crate::store::now_rfc3339(),
            hostname: System::host_name().ok(),
            kernel: System::kernel_version().ok(),
            uptime_secs: System::uptime().ok(),
            load_average: System::load_average().ok().map(|l| LoadAverage {
                one: l.one,
                five: l.five,
                fifteen: l.fifteen,
            }),
            memory: Memory {
                total: self.system.total_memory(),
                used: self.system.used_memory(),
                available: self.system.available_memory(),
                swap_total: self.system.total_swap(),
                swap_used: self.system.used_swap(),
            },
            processes,
            disks: self.disks(),
            battery: self.battery(),
            workspace: workspace.map(Path::to_owned),
            desktop,
            hyprland,
        }
    }

    /// Re-reads processes unless they were read less than sysinfo's minimum CPU interval
    /// ago (CPU % over a shorter interval is noise).
    fn refresh_processes(&mut self) {
        if self
            .processes_refreshed
            .is_none_or(|t| t.elapsed() >= PROCESS_REFRESH_INTERVAL)
        {
            self.system.refresh_processes_specifics(
                ProcessesToUpdate::All,
                true,
                // Threads are not processes here, and reading each one's /proc/PID/task
                // would add half again to the snapshot.
                ProcessRefreshKind::nothing()
                    .with_cpu()
                    .with_memory()
                    .with_user(UpdateKind::OnlyIfNotSet)
                    .without_tasks(),
            );
            self.processes_refreshed = Some(Instant::now());
            self.process_samples = self.process_samples.saturating_add(1);
        }
    }

    /// The `n` processes using the most CPU (or memory), and how many processes run.
    pub fn top_processes(&mut self, n: usize) -> Processes {
        self.refresh_processes();
        self.processes(n)
    }

    fn processes(&mut self, limit: usize) -> Processes {
        let procs = self.system.processes();
        let unknown_uid = procs
            .values()
            .filter_map(|p| p.user_id())
            .any(|uid| self.users.get_user_by_id(uid).is_none());
        if unknown_uid && self.users_refreshed.elapsed() >= USER_LIST_TTL {
            self.users.refresh();
            self.users_refreshed = Instant::now();
        }
        let mut all: Vec<&sysinfo::Process> = procs.values().collect();
        let info = |p: &sysinfo::Process| ProcessInfo {
            pid: p.pid().as_u32(),
            name: cut(&p.name().to_string_lossy(), MAX_NAME_CHARS),
            user: p
                .user_id()
                .and_then(|uid| self.users.get_user_by_id(uid))
                .map(|u| cut(u.name(), MAX_NAME_CHARS)),
            cpu_percent: p.cpu_usage(),
            rss_bytes: p.memory(),
        };
        let n = limit.min(all.len());
        if n > 0 {
            all.select_nth_unstable_by(n - 1, |a, b| b.cpu_usage().total_cmp(&a.cpu_usage()));
        }
        let mut top_cpu: Vec<_> = all[..n].iter().map(|p| info(p)).collect();
        top_cpu.sort_by(|a, b| {
            b.cpu_percent
                .total_cmp(&a.cpu_percent)
                .then(a.pid.cmp(&b.pid))
        });
        if n > 0 {
            all.select_nth_unstable_by(n - 1, |a, b| b.memory().cmp(&a.memory()));
        }
        let mut top_memory: Vec<_> = all[..n].iter().map(|p| info(p)).collect();
        top_memory.sort_by(|a, b| b.rss_bytes.cmp(&a.rss_bytes).then(a.pid.cmp(&b.pid)));
        Processes {
            count: procs.len(),
            cpu_measured: self.process_samples >= 2,
            top_cpu,
            top_memory,
        }
    }

    /// The real disks, re-read at most every [`DISK_REFRESH_INTERVAL`] (a disk mounted
    /// meanwhile shows within that).
    fn disks(&mut self) -> Vec<DiskInfo> {
        if let Some((at, disks)) = &self.disks_read
            && at.elapsed() < DISK_REFRESH_INTERVAL
        {
            return disks.clone();
        }
        let disks = self.read_disks();
        self.disks_read = Some((Instant::now(), disks.clone()));
        disks
    }

    fn read_disks(&mut self) -> Vec<DiskInfo> {
        self.disks.refresh_specifics(true, disk_refresh());
        let mut out: Vec<DiskInfo> = Vec::new();
        for d in &self.disks {
            let fs = d.file_system().to_string_lossy();
            let mount_point = d.mount_point();
            if is_pseudo_filesystem(&fs, mount_point, d.total_space())
                || out.iter().any(|o| o.mount_point == mount_point)
            {
                continue;
            }
            out.push(DiskInfo {
                mount_point: mount_point.to_owned(),
                fs: fs.into_owned(),
                total: d.total_space(),
                available: d.available_space(),
            });
        }
        out.truncate(MAX_DISKS);
        out
    }

    fn battery(&self) -> Option<BatteryInfo> {
        use starship_battery::units::ratio::percent;
        use starship_battery::units::time::second;
        let manager = self.battery.as_ref()?;
        let battery = match manager.batteries().map(|mut b| b.next()) {
            Ok(Some(Ok(b))) => b,
            Ok(None) => return None,
            Ok(Some(Err(e))) | Err(e) => {
                tracing::debug!(error = %e, "cannot read the battery");
                return None;
            }
        };
        let state = match battery.state() {
            starship_battery::State::Charging => BatteryState::Charging,
            starship_battery::State::Discharging => BatteryState::Discharging,
            // Paused: a charge limit was reached on AC, which is full for the user.
            starship_battery::State::Full | starship_battery::State::Paused => BatteryState::Full,
            starship_battery::State::Empty => BatteryState::Empty,
            starship_battery::State::Unknown => BatteryState::Unknown,
        };
        let secs = |t: starship_battery::units::Time| {
            let s = t.get::<second>();
            (s.is_finite() && s >= 0.0).then(|| s.round() as u64)
        };
        Some(BatteryInfo {
            percent: battery.state_of_charge().get::<percent>(),
            state,
            time_to_empty_secs: battery.time_to_empty().and_then(secs),
            time_to_full_secs: battery.time_to_full().and_then(secs),
        })
    }

    /// The desktop section, and the `hyprland` one on Hyprland (from the same replies).
    fn desktop(&mut self) -> (Option<Desktop>, Option<HyprState>) {
        if self.compositor.is_none()
            && let Some(last) = self.compositor_redetect
            && last.elapsed() >= COMPOSITOR_REDETECT
        {
            self.compositor = Compositor::detect(&ProcessEnv);
            self.compositor_redetect = Some(Instant::now());
        }
        let Some(c) = self.compositor.as_ref() else {
            return (None, None);
        };
        let got = match c {
            Compositor::Hyprland(h) => h.desktop().map(|(d, s)| (d, Some(s))).map_err(Into::into),
            Compositor::Sway(_) | Compositor::Niri(_) => c.desktop().map(|d| (d, None)),
        };
        match got {
            Ok((desktop, hyprland)) => (Some(desktop), hyprland),
            Err(e) => {
                tracing::debug!(error = %e, compositor = c.name(), "desktop state unavailable");
                // A compositor found by detection may have gone (a new session has a new
                // socket): look again after the interval.
                if self.compositor_redetect.is_some() {
                    self.compositor = None;
                }
                (None, None)
            }
        }
    }
}

fn disk_refresh() -> DiskRefreshKind {
    DiskRefreshKind::nothing().with_storage()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshotter_can_move_between_threads() {
        fn is_send<T: Send>() {}
        is_send::<Snapshotter>();
    }

    #[test]
    fn disks_are_read_again_only_once_the_interval_has_passed() {
        let mut s = Snapshotter::with_hyprland(None).unwrap();
        let first = s.take(None).disks;
        let read_at = s.disks_read.as_ref().map(|(at, _)| *at);
        assert_eq!(s.take(None).disks, first);
        assert_eq!(s.disks_read.as_ref().map(|(at, _)| *at), read_at, "reused");
        // As if the interval had passed: the next take reads them again.
        s.disks_read = s
            .disks_read
            .take()
            .map(|(at, d)| (at.checked_sub(DISK_REFRESH_INTERVAL).unwrap_or(at), d));
        s.take(None);
        assert_ne!(
            s.disks_read.as_ref().map(|(at, _)| *at),
            read_at,
            "read again"
        );
    }

    #[test]
    fn pseudo_filesystems_are_skipped() {
        let p = Path::new;
        assert!(is_pseudo_filesystem("tmpfs", p("/tmp"), 1));
        assert!(is_pseudo_filesystem("overlay", p("/"), 1));
        assert!(is_pseudo_filesystem("ext4", p("/run/user/1000/doc"), 1));
        assert!(is_pseudo_filesystem("ext4", p("/data"), 0));
        assert!(!is_pseudo_filesystem("ext4", p("/"), 1));
        assert!(!is_pseudo_filesystem("btrfs", p("/home"), 1));
        assert!(!is_pseudo_filesystem("vfat", p("/run/media/u/USB"), 1));
    }
}
