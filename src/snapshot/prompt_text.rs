//! The snapshot as text for the model: [`Snapshot::to_prompt_text`], the whole picture
//! (`familiar snapshot`), and [`Snapshot::to_brief_text`], a glance for a task's first
//! reminder, which every new task re-reads in full: a few lines, so a local server
//! evaluates little more than the user's prompt.
//!
//! Invariant: the texts are at most [`super::PROMPT_TEXT_MAX_CHARS`] and
//! [`super::BRIEF_TEXT_MAX_CHARS`] characters whatever the machine holds: every name,
//! title and path is cut, every list capped.

use std::fmt::{self, Write};
use std::time::Duration;

use super::{BatteryInfo, MAX_DISKS, ProcessInfo, Snapshot, TOP_PROCESSES};
use crate::compositor::Desktop;

const PROMPT_NAME_CHARS: usize = 24;
const PROMPT_TITLE_CHARS: usize = 80;
const PROMPT_PATH_CHARS: usize = 120;
/// Other workspaces and outputs named at most.
const PROMPT_DESKTOP_ITEMS: usize = 8;
/// Processes and disks in the brief text: the biggest few, the rest is a tool call away.
const BRIEF_PROCESSES: usize = 3;
const BRIEF_DISKS: usize = 3;
const BRIEF_NAME_CHARS: usize = 16;
const BRIEF_TITLE_CHARS: usize = 48;
const BRIEF_PATH_CHARS: usize = 40;

/// `s` cut to `max` characters, with `…` when cut.
pub(super) fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Gibibytes with one decimal, for people and models.
fn gib(bytes: u64) -> String {
    format!("{:.1}G", bytes as f64 / (1024.0 * 1024.0 * 1024.0))
}

fn mib(bytes: u64) -> String {
    format!("{}M", bytes / (1024 * 1024))
}

/// Mebibytes below a gibibyte, gibibytes with one decimal above.
fn size(bytes: u64) -> String {
    if bytes < 1024 * 1024 * 1024 {
        mib(bytes)
    } else {
        gib(bytes)
    }
}

/// A duration to the minute (`2h 42m`).
fn minutes(secs: u64) -> impl fmt::Display {
    humantime::format_duration(Duration::from_secs(secs / 60 * 60))
}

/// Runs a writer over a new String. Writing to a String cannot fail; what was written is
/// kept if it ever does.
fn render(write: impl FnOnce(&mut String) -> fmt::Result) -> String {
    let mut s = String::with_capacity(1024);
    match write(&mut s) {
        Ok(()) | Err(fmt::Error) => s,
    }
}

impl Snapshot {
    /// The whole snapshot as a compact block, at most [`super::PROMPT_TEXT_MAX_CHARS`]
    /// characters: names and titles are cut, lists are capped.
    pub fn to_prompt_text(&self) -> String {
        render(|s| {
            self.write_head(s)?;
            self.write_processes(s)?;
            self.write_disks(s)?;
            write_battery(s, self.battery.as_ref())?;
            if let Some(w) = &self.workspace {
                writeln!(
                    s,
                    "workspace: {}",
                    cut(&w.to_string_lossy(), PROMPT_PATH_CHARS)
                )?;
            }
            if let Some(d) = &self.desktop {
                write_desktop(s, d)?;
            }
            Ok(())
        })
    }

    /// A glance at the machine for a task's first reminder, at most
    /// [`super::BRIEF_TEXT_MAX_CHARS`] characters: the time (to the minute), the load,
    /// memory, the busiest few processes (name and figure only), the fullest disks, the
    /// battery and the focused window. Host, kernel, uptime, pids and the rest are left
    /// to `system_snapshot` and `process_list`.
    pub fn to_brief_text(&self) -> String {
        render(|s| {
            let time = self.taken_at.get(..16).unwrap_or(&self.taken_at);
            write!(s, "time: {time}Z")?;
            if let Some(l) = self.load_average {
                write!(s, ", load {:.2}", l.one)?;
            }
            s.push('\n');
            let m = &self.memory;
            write!(s, "memory: {} used of {}", gib(m.used), gib(m.total))?;
            if m.swap_total > 0 {
                write!(s, ", swap {} of {}", gib(m.swap_used), gib(m.swap_total))?;
            }
            s.push('\n');
            let brief = |p: &ProcessInfo| cut(&p.name, BRIEF_NAME_CHARS);
            let top = |list: &[ProcessInfo], figure: &dyn Fn(&ProcessInfo) -> String| {
                list.iter()
                    .take(BRIEF_PROCESSES)
                    .map(|p| format!("{} {}", brief(p), figure(p)))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            if self.processes.cpu_measured {
                let cpu = top(&self.processes.top_cpu, &|p| {
                    format!("{:.0}%", p.cpu_percent)
                });
                writeln!(s, "top cpu: {cpu}")?;
            }
            let mem = top(&self.processes.top_memory, &|p| size(p.rss_bytes));
            writeln!(s, "top memory: {mem}")?;
            let mut disks: Vec<_> = self.disks.iter().collect();
            disks.sort_by_key(|d| d.available.saturating_mul(1000) / d.total.max(1));
            let disks: Vec<String> = disks
                .iter()
                .take(BRIEF_DISKS)
                .map(|d| {
                    format!(
                        "{} {} free of {}",
                        cut(&d.mount_point.to_string_lossy(), BRIEF_PATH_CHARS),
                        gib(d.available),
                        gib(d.total)
                    )
                })
                .collect();
            if !disks.is_empty() {
                writeln!(s, "disks: {}", disks.join("; "))?;
            }
            write_battery(s, self.battery.as_ref())?;
            if let Some(w) = self
                .desktop
                .as_ref()
                .and_then(|d| d.focused_window.as_ref())
            {
                writeln!(
                    s,
                    "focused: {} \"{}\"",
                    cut(&w.app_id, BRIEF_NAME_CHARS),
                    cut(&w.title, BRIEF_TITLE_CHARS)
                )?;
            }
            Ok(())
        })
    }

    fn write_head(&self, s: &mut String) -> fmt::Result {
        let or_unknown = |v: Option<&str>| cut(v.unwrap_or("unknown"), PROMPT_NAME_CHARS);
        writeln!(s, "time: {}", self.taken_at)?;
        write!(
            s,
            "host: {} (kernel {})",
            or_unknown(self.hostname.as_deref()),
            or_unknown(self.kernel.as_deref())
        )?;
        if let Some(up) = self.uptime_secs {
            write!(s, ", up {}", minutes(up))?;
        }
        s.push('\n');
        if let Some(l) = self.load_average {
            writeln!(s, "load: {:.2} {:.2} {:.2}", l.one, l.five, l.fifteen)?;
        }
        let m = &self.memory;
        writeln!(
            s,
            "memory: {} used of {}, {} available; swap {} of {}",
            gib(m.used),
            gib(m.total),
            gib(m.available),
            gib(m.swap_used),
            gib(m.swap_total)
        )
    }

    fn write_processes(&self, s: &mut String) -> fmt::Result {
        writeln!(s, "processes: {}", self.processes.count)?;
        for (label, list) in [
            ("top cpu", &self.processes.top_cpu),
            ("top memory", &self.processes.top_memory),
        ] {
            write!(s, "  {label}:")?;
            if label == "top cpu" && !self.processes.cpu_measured {
                // One sample gives every process 0 %: saying so beats a wrong list.
                s.push_str(" (not measured yet: ask process_list in a moment)\n");
                continue;
            }
            for (i, p) in list.iter().take(TOP_PROCESSES).enumerate() {
                write!(
                    s,
                    "{} {} (pid {}, {}, {:.0}% cpu, {})",
                    if i == 0 { "" } else { ";" },
                    cut(&p.name, PROMPT_NAME_CHARS),
                    p.pid,
                    cut(p.user.as_deref().unwrap_or("?"), PROMPT_NAME_CHARS),
                    p.cpu_percent,
                    mib(p.rss_bytes)
                )?;
            }
            s.push('\n');
        }
        Ok(())
    }

    fn write_disks(&self, s: &mut String) -> fmt::Result {
        if self.disks.is_empty() {
            return Ok(());
        }
        writeln!(s, "disks:")?;
        for d in self.disks.iter().take(MAX_DISKS) {
            writeln!(
                s,
                "  {} ({}): {} free of {}",
                cut(&d.mount_point.to_string_lossy(), PROMPT_PATH_CHARS),
                cut(&d.fs, PROMPT_NAME_CHARS),
                gib(d.available),
                gib(d.total)
            )?;
        }
        Ok(())
    }
}

fn write_battery(s: &mut String, battery: Option<&BatteryInfo>) -> fmt::Result {
    let Some(b) = battery else {
        return writeln!(s, "battery: none");
    };
    write!(s, "battery: {:.0}% {}", b.percent, b.state.as_str())?;
    if let Some(t) = b.time_to_empty_secs {
        write!(s, ", {} to empty", minutes(t))?;
    }
    if let Some(t) = b.time_to_full_secs {
        write!(s, ", {} to full", minutes(t))?;
    }
    s.push('\n');
    Ok(())
}

/// The desktop: the compositor and focused workspace, the focused window, the other
/// workspaces with windows (capped), the outputs.
fn write_desktop(s: &mut String, d: &Desktop) -> fmt::Result {
    let focused_ws = d.workspaces.iter().find(|w| w.focused);
    write!(s, "desktop: {}", d.compositor)?;
    match (&d.focused_workspace, focused_ws) {
        (Some(name), Some(w)) => write!(
            s,
            ", workspace {} ({} windows)",
            cut(name, PROMPT_NAME_CHARS),
            w.windows
        )?,
        (Some(name), None) => write!(s, ", workspace {}", cut(name, PROMPT_NAME_CHARS))?,
        (None, _) => {}
    }
    s.push('\n');
    if let Some(w) = &d.focused_window {
        write!(
            s,
            "  focused: {} \"{}\"",
            cut(&w.app_id, PROMPT_NAME_CHARS),
            cut(&w.title, PROMPT_TITLE_CHARS),
        )?;
        if let Some(pid) = w.pid {
            write!(s, " (pid {pid})")?;
        }
        s.push('\n');
    }
    let others: Vec<String> = d
        .workspaces
        .iter()
        .filter(|w| !w.focused && w.windows > 0)
        .take(PROMPT_DESKTOP_ITEMS)
        .map(|w| format!("{} ({})", cut(&w.name, PROMPT_NAME_CHARS), w.windows))
        .collect();
    if !others.is_empty() {
        writeln!(s, "  other workspaces: {}", others.join(", "))?;
    }
    let outputs: Vec<String> = d
        .outputs
        .iter()
        .take(PROMPT_DESKTOP_ITEMS)
        .map(|o| match (o.width, o.height) {
            (Some(w), Some(h)) => format!("{} {w}x{h}", cut(&o.name, PROMPT_NAME_CHARS)),
            _ => cut(&o.name, PROMPT_NAME_CHARS),
        })
        .collect();
    if !outputs.is_empty() {
        writeln!(s, "  outputs: {}", outputs.join(", "))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::compositor::{Output, Window, Workspace};
    use crate::snapshot::{
        BRIEF_TEXT_MAX_CHARS, BatteryInfo, BatteryState, DiskInfo, LoadAverage, Memory,
        PROMPT_TEXT_MAX_CHARS, ProcessInfo, Processes,
    };

    fn worst_case() -> Snapshot {
        let long = "x".repeat(10_000);
        let p = ProcessInfo {
            pid: u32::MAX,
            name: long.clone(),
            user: Some(long.clone()),
            cpu_percent: 12_345.0,
            rss_bytes: u64::MAX,
        };
        Snapshot {
            taken_at: "2026-11-02T10:15:00.123Z".into(),
            hostname: Some(long.clone()),
            kernel: Some(long.clone()),
            uptime_secs: Some(u64::MAX / 4),
            load_average: Some(LoadAverage {
                one: 1e9,
                five: 1e9,
                fifteen: 1e9,
            }),
            memory: Memory {
                total: u64::MAX,
                used: u64::MAX,
                available: u64::MAX,
                swap_total: u64::MAX,
                swap_used: u64::MAX,
            },
            processes: Processes {
                count: usize::MAX,
                cpu_measured: true,
                top_cpu: vec![p.clone(); 100],
                top_memory: vec![p; 100],
            },
            disks: vec![
                DiskInfo {
                    mount_point: PathBuf::from(format!("/{long}")),
                    fs: long.clone(),
                    total: u64::MAX,
                    available: u64::MAX,
                };
                100
            ],
            battery: Some(BatteryInfo {
                percent: 100.0,
                state: BatteryState::Discharging,
                time_to_empty_secs: Some(u64::MAX / 4),
                time_to_full_secs: Some(u64::MAX / 4),
            }),
            workspace: Some(PathBuf::from(format!("/{long}"))),
            desktop: Some(Desktop {
                compositor: "sway",
                focused_window: Some(Window {
                    id: long.clone(),
                    app_id: long.clone(),
                    title: long.clone(),
                    pid: Some(i64::MIN),
                    workspace: Some(long.clone()),
                    focused: true,
                }),
                focused_workspace: Some(long.clone()),
                workspaces: vec![
                    Workspace {
                        name: long.clone(),
                        output: Some(long.clone()),
                        focused: false,
                        windows: u32::MAX,
                    };
                    64
                ],
                outputs: vec![
                    Output {
                        name: long,
                        focused: true,
                        width: Some(u32::MAX),
                        height: Some(u32::MAX),
                        scale: Some(f64::MAX),
                    };
                    64
                ],
            }),
            hyprland: None,
        }
    }

    #[test]
    fn prompt_text_is_bounded_in_the_worst_case() {
        let text = worst_case().to_prompt_text();
        let chars = text.chars().count();
        assert!(chars <= PROMPT_TEXT_MAX_CHARS, "{chars} chars:\n{text}");
        assert!(text.contains("focused:"));
    }

    #[test]
    fn brief_text_is_bounded_in_the_worst_case() {
        let text = worst_case().to_brief_text();
        let chars = text.chars().count();
        assert!(chars <= BRIEF_TEXT_MAX_CHARS, "{chars} chars:\n{text}");
        assert!(
            text.contains("focused:") && text.contains("top cpu:"),
            "{text}"
        );
    }

    #[test]
    fn cut_counts_characters_not_bytes() {
        assert_eq!(cut("héllo", 5), "héllo");
        assert_eq!(cut("héllo!", 5), "héll…");
    }
}
