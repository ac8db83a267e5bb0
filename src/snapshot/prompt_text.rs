//! [`Snapshot::to_prompt_text`]: the snapshot as a compact block for the system prompt.
//!
//! Invariant: the text is at most [`super::PROMPT_TEXT_MAX_CHARS`] characters whatever the
//! machine holds: every name, title and path is cut, every list capped.

use std::time::Duration;

use super::{MAX_DISKS, Snapshot, TOP_PROCESSES};

const PROMPT_NAME_CHARS: usize = 24;
const PROMPT_TITLE_CHARS: usize = 80;
const PROMPT_PATH_CHARS: usize = 120;

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

impl Snapshot {
    /// A compact block for the system prompt, at most [`super::PROMPT_TEXT_MAX_CHARS`]
    /// characters: names and titles are cut, lists are capped.
    pub fn to_prompt_text(&self) -> String {
        let mut s = String::with_capacity(1024);
        match self.write_prompt_text(&mut s) {
            Ok(()) => s,
            // Writing to a String cannot fail; keep what was written if it ever does.
            Err(std::fmt::Error) => s,
        }
    }

    fn write_prompt_text(&self, s: &mut String) -> std::fmt::Result {
        use std::fmt::Write;
        let minutes = |secs: u64| humantime::format_duration(Duration::from_secs(secs / 60 * 60));
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
        )?;
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
        if !self.disks.is_empty() {
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
        }
        match &self.battery {
            Some(b) => {
                write!(s, "battery: {:.0}% {}", b.percent, b.state.as_str())?;
                if let Some(t) = b.time_to_empty_secs {
                    write!(s, ", {} to empty", minutes(t))?;
                }
                if let Some(t) = b.time_to_full_secs {
                    write!(s, ", {} to full", minutes(t))?;
                }
                s.push('\n');
            }
            None => writeln!(s, "battery: none")?,
        }
        if let Some(w) = &self.workspace {
            writeln!(
                s,
                "workspace: {}",
                cut(&w.to_string_lossy(), PROMPT_PATH_CHARS)
            )?;
        }
        if let Some(h) = &self.hyprland {
            let ws = &h.active_workspace;
            writeln!(
                s,
                "hyprland: workspace {} ({} windows)",
                cut(&ws.name, PROMPT_NAME_CHARS),
                ws.windows
            )?;
            if let Some(w) = &h.active_window {
                writeln!(
                    s,
                    "  focused: {} \"{}\" (pid {})",
                    cut(&w.class, PROMPT_NAME_CHARS),
                    cut(&w.title, PROMPT_TITLE_CHARS),
                    w.pid
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::hyprland::{HyprState, Window, Workspace, WorkspaceRef};
    use crate::snapshot::{
        BatteryInfo, BatteryState, DiskInfo, LoadAverage, Memory, PROMPT_TEXT_MAX_CHARS,
        ProcessInfo, Processes,
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
            hyprland: Some(HyprState {
                active_workspace: Workspace {
                    id: i64::MIN,
                    name: long.clone(),
                    windows: u32::MAX,
                },
                active_window: Some(Window {
                    class: long.clone(),
                    title: long.clone(),
                    pid: i64::MIN,
                    workspace: WorkspaceRef { id: 1, name: long },
                }),
            }),
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
    fn cut_counts_characters_not_bytes() {
        assert_eq!(cut("héllo", 5), "héllo");
        assert_eq!(cut("héllo!", 5), "héll…");
    }
}
