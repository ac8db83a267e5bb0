//! [`changes`]: what moved between two snapshots, as short lines for a system reminder.
//!
//! Only changes a model might act on are reported, so a quiet machine yields nothing:
//! a process entering or leaving the top lists, memory, a disk or the battery crossing
//! a [`STEP_PERCENT`] boundary (or the battery changing state), a disk appearing or
//! going, and the focused window or workspace changing (on any compositor). Figures that move all
//! the time (the clock, load, uptime, CPU percentages) are never a change by themselves.

use std::collections::BTreeSet;

use super::prompt_text::cut;
use super::{ProcessInfo, Snapshot};

/// Percentages are reported when they cross a multiple of this.
pub const STEP_PERCENT: f64 = 10.0;
/// Processes named per "entered"/"left" line at most.
const MAX_PROCESSES: usize = 5;
const NAME_CHARS: usize = 24;
const TITLE_CHARS: usize = 80;

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// Whether `a` and `b` lie in different [`STEP_PERCENT`] bands.
fn crossed(a: f64, b: f64) -> bool {
    (a / STEP_PERCENT).floor() != (b / STEP_PERCENT).floor()
}

fn gib(bytes: u64) -> String {
    format!("{:.1}G", bytes as f64 / (1024.0 * 1024.0 * 1024.0))
}

/// Processes of both top lists, by pid and name (a reused pid is another process).
fn top_set(s: &Snapshot) -> BTreeSet<(u32, &str)> {
    s.processes
        .top_cpu
        .iter()
        .chain(&s.processes.top_memory)
        .map(|p| (p.pid, p.name.as_str()))
        .collect()
}

fn find<'a>(s: &'a Snapshot, pid: u32, name: &str) -> Option<&'a ProcessInfo> {
    s.processes
        .top_cpu
        .iter()
        .chain(&s.processes.top_memory)
        .find(|p| p.pid == pid && p.name == name)
}

/// What changed from `prev` to `cur`, one short line each, most useful first.
pub fn changes(prev: &Snapshot, cur: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    processes(prev, cur, &mut out);
    let (pm, cm) = (&prev.memory, &cur.memory);
    let (was, now) = (percent(pm.used, pm.total), percent(cm.used, cm.total));
    if crossed(was, now) {
        out.push(format!(
            "memory: {now:.0}% used (was {was:.0}%), {} available",
            gib(cm.available)
        ));
    }
    disks(prev, cur, &mut out);
    battery(prev, cur, &mut out);
    desktop(prev, cur, &mut out);
    out
}

fn processes(prev: &Snapshot, cur: &Snapshot, out: &mut Vec<String>) {
    // The first sample's CPU list is all zeros: comparing against it is noise.
    if !prev.processes.cpu_measured || !cur.processes.cpu_measured {
        return;
    }
    let (before, after) = (top_set(prev), top_set(cur));
    let entered: Vec<String> = after
        .difference(&before)
        .take(MAX_PROCESSES)
        .filter_map(|(pid, name)| find(cur, *pid, name))
        .map(|p| {
            format!(
                "{} (pid {}, {:.0}% cpu, {}M)",
                cut(&p.name, NAME_CHARS),
                p.pid,
                p.cpu_percent,
                p.rss_bytes / (1024 * 1024)
            )
        })
        .collect();
    let left: Vec<String> = before
        .difference(&after)
        .take(MAX_PROCESSES)
        .map(|(pid, name)| format!("{} (pid {pid})", cut(name, NAME_CHARS)))
        .collect();
    if !entered.is_empty() {
        out.push(format!("top processes, new: {}", entered.join("; ")));
    }
    if !left.is_empty() {
        out.push(format!("top processes, gone: {}", left.join("; ")));
    }
}

fn disks(prev: &Snapshot, cur: &Snapshot, out: &mut Vec<String>) {
    for d in &cur.disks {
        let mount = cut(&d.mount_point.to_string_lossy(), TITLE_CHARS);
        let now = percent(d.total - d.available.min(d.total), d.total);
        match prev.disks.iter().find(|p| p.mount_point == d.mount_point) {
            None => out.push(format!(
                "disk {mount} appeared: {} free of {}",
                gib(d.available),
                gib(d.total)
            )),
            Some(p) => {
                let was = percent(p.total - p.available.min(p.total), p.total);
                if crossed(was, now) {
                    out.push(format!(
                        "disk {mount}: {now:.0}% used (was {was:.0}%), {} free",
                        gib(d.available)
                    ));
                }
            }
        }
    }
    for p in &prev.disks {
        if !cur.disks.iter().any(|d| d.mount_point == p.mount_point) {
            out.push(format!(
                "disk {} is gone",
                cut(&p.mount_point.to_string_lossy(), TITLE_CHARS)
            ));
        }
    }
}

fn battery(prev: &Snapshot, cur: &Snapshot, out: &mut Vec<String>) {
    match (&prev.battery, &cur.battery) {
        (Some(p), Some(c)) => {
            if p.state != c.state || crossed(f64::from(p.percent), f64::from(c.percent)) {
                out.push(format!(
                    "battery: {:.0}% {} (was {:.0}% {})",
                    c.percent,
                    c.state.as_str(),
                    p.percent,
                    p.state.as_str()
                ));
            }
        }
        (None, Some(c)) => out.push(format!("battery: {:.0}% {}", c.percent, c.state.as_str())),
        (Some(_), None) => out.push("battery: no longer readable".to_owned()),
        (None, None) => {}
    }
}

fn desktop(prev: &Snapshot, cur: &Snapshot, out: &mut Vec<String>) {
    match (&prev.desktop, &cur.desktop) {
        (Some(p), Some(c)) => {
            let name = c.compositor;
            if p.focused_workspace != c.focused_workspace
                && let Some(ws) = &c.focused_workspace
            {
                let windows = c.workspaces.iter().find(|w| w.focused).map(|w| w.windows);
                out.push(match windows {
                    Some(n) => format!(
                        "{name}: now on workspace {} ({n} windows)",
                        cut(ws, NAME_CHARS)
                    ),
                    None => format!("{name}: now on workspace {}", cut(ws, NAME_CHARS)),
                });
            }
            let key = |w: &crate::compositor::Window| {
                (w.id.clone(), w.pid, w.app_id.clone(), w.title.clone())
            };
            if p.focused_window.as_ref().map(key) != c.focused_window.as_ref().map(key) {
                out.push(match &c.focused_window {
                    Some(w) => {
                        let mut line = format!(
                            "{name}: focused window is now {} \"{}\"",
                            cut(&w.app_id, NAME_CHARS),
                            cut(&w.title, TITLE_CHARS),
                        );
                        if let Some(pid) = w.pid {
                            line.push_str(&format!(" (pid {pid})"));
                        }
                        line
                    }
                    None => format!("{name}: no window has the focus now"),
                });
            }
        }
        (None, Some(c)) => out.push(format!("{}: now running", c.compositor)),
        (Some(p), None) => out.push(format!("{}: no longer answers", p.compositor)),
        (None, None) => {}
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::compositor::{Desktop, Window, Workspace};
    use crate::snapshot::{BatteryInfo, BatteryState, DiskInfo, Memory, Processes};

    const GIB: u64 = 1024 * 1024 * 1024;

    fn proc_(pid: u32, name: &str) -> ProcessInfo {
        ProcessInfo {
            pid,
            name: name.into(),
            user: Some("me".into()),
            cpu_percent: 50.0,
            rss_bytes: 100 * 1024 * 1024,
        }
    }

    pub(crate) fn base() -> Snapshot {
        Snapshot {
            taken_at: "2026-11-02T10:15:00Z".into(),
            hostname: Some("box".into()),
            kernel: Some("6.12".into()),
            uptime_secs: Some(3600),
            load_average: None,
            memory: Memory {
                total: 16 * GIB,
                used: 8 * GIB,
                available: 8 * GIB,
                swap_total: 0,
                swap_used: 0,
            },
            processes: Processes {
                count: 200,
                cpu_measured: true,
                top_cpu: vec![proc_(10, "firefox"), proc_(11, "cargo")],
                top_memory: vec![proc_(10, "firefox")],
            },
            disks: vec![DiskInfo {
                mount_point: PathBuf::from("/"),
                fs: "ext4".into(),
                total: 100 * GIB,
                available: 45 * GIB,
            }],
            battery: Some(BatteryInfo {
                percent: 81.0,
                state: BatteryState::Discharging,
                time_to_empty_secs: None,
                time_to_full_secs: None,
            }),
            workspace: None,
            desktop: Some(Desktop {
                compositor: "hyprland",
                focused_window: Some(Window {
                    id: "0x55d1".into(),
                    app_id: "kitty".into(),
                    title: "~".into(),
                    pid: Some(99),
                    workspace: Some("1".into()),
                    focused: true,
                }),
                focused_workspace: Some("1".into()),
                workspaces: vec![Workspace {
                    name: "1".into(),
                    output: Some("DP-1".into()),
                    focused: true,
                    windows: 2,
                }],
                outputs: vec![],
            }),
            hyprland: None,
        }
    }

    #[test]
    fn a_quiet_machine_changes_nothing() {
        let a = base();
        let mut b = base();
        b.taken_at = "2026-11-02T10:15:09Z".into();
        b.uptime_secs = Some(3609);
        b.memory.used += GIB / 4; // 50% → 51.6%: same band
        b.processes.top_cpu[0].cpu_percent = 3.0;
        b.battery.as_mut().unwrap().percent = 80.2;
        assert_eq!(changes(&a, &b), Vec::<String>::new());
    }

    #[test]
    fn each_kind_of_change_is_one_line() {
        let a = base();
        let mut b = base();
        b.processes.top_cpu[1] = proc_(12, "rustc");
        b.memory.used = 12 * GIB;
        b.disks[0].available = 5 * GIB;
        b.battery.as_mut().unwrap().percent = 79.0;
        b.desktop
            .as_mut()
            .unwrap()
            .focused_window
            .as_mut()
            .unwrap()
            .title = "vim".into();
        let c = changes(&a, &b);
        assert_eq!(
            c,
            vec![
                "top processes, new: rustc (pid 12, 50% cpu, 100M)".to_owned(),
                "top processes, gone: cargo (pid 11)".to_owned(),
                "memory: 75% used (was 50%), 8.0G available".to_owned(),
                "disk /: 95% used (was 55%), 5.0G free".to_owned(),
                "battery: 79% discharging (was 81% discharging)".to_owned(),
                "hyprland: focused window is now kitty \"vim\" (pid 99)".to_owned(),
            ]
        );
    }

    #[test]
    fn unmeasured_cpu_lists_are_not_compared() {
        let mut a = base();
        a.processes.cpu_measured = false;
        let mut b = base();
        b.processes.top_cpu = vec![proc_(20, "x")];
        assert_eq!(changes(&a, &b), Vec::<String>::new());
    }

    #[test]
    fn appearing_and_vanishing_parts_are_reported() {
        let a = base();
        let mut b = base();
        b.battery = None;
        b.desktop = None;
        b.disks.push(DiskInfo {
            mount_point: PathBuf::from("/run/media/usb"),
            fs: "vfat".into(),
            total: 8 * GIB,
            available: 8 * GIB,
        });
        let c = changes(&a, &b);
        assert_eq!(
            c,
            vec![
                "disk /run/media/usb appeared: 8.0G free of 8.0G".to_owned(),
                "battery: no longer readable".to_owned(),
                "hyprland: no longer answers".to_owned(),
            ]
        );
        let back = changes(&b, &a);
        assert!(
            back.contains(&"disk /run/media/usb is gone".to_owned()),
            "{back:?}"
        );
    }
}
