//! Per-task resource limits (a soul's `[resources]`): the memory, CPU share and process
//! count of a task's tool processes, together.
//!
//! Where the user's systemd manager answers on the session bus, a task whose soul sets
//! limits gets a transient slice named after the task, `familiar-t_<HEX>.slice` (under
//! `familiar.slice`),
//! carrying them as `MemoryMax`, `CPUQuota` and `TasksMax`. Each sandboxed call's helper
//! is moved into a transient scope inside it before it is told what to run, so all the
//! task's processes share the slice's bounds and the kernel's cgroup controllers
//! enforce them (an allocation past `MemoryMax` ends in the OOM killer, a fork past
//! `TasksMax` fails). Each scope carries the same limits too, so they hold even if the
//! slice is stopped under a running task. The slice is stopped when the task ends.
//!
//! Without a manager, or for a limit whose cgroup controller the manager does not have
//! (checked on the slice's cgroup after it started), rlimits of each call's processes
//! stand in: `RLIMIT_DATA` for memory, the per-call process cap for tasks. A CPU quota
//! has no rlimit and is then reported as not enforced. What holds is reported in
//! `task_started` ([`ResourceReport`]), never guessed.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use familiar_protocol::ids::TaskId;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use zbus::{Connection, OwnedObjectPath, Variant};

use super::SandboxError;
use crate::dbus::systemd::{ManagerProxy, SliceProxy};

/// How long the manager gets to create a slice or scope (it takes a millisecond or two).
pub const MANAGER_TIMEOUT: Duration = Duration::from_secs(5);
/// `CPUQuota` is a share of one CPU per second, in microseconds of CPU time.
const USEC_PER_PERCENT: u64 = 10_000;

/// A soul's `[resources]`: each bound optional.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    /// Bytes of memory the task's processes may use together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_max: Option<u64>,
    /// Percent of one CPU (200 is two CPUs' worth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_quota: Option<u32>,
    /// Processes and threads at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks_max: Option<u64>,
}

impl Resources {
    pub fn is_empty(&self) -> bool {
        *self == Resources::default()
    }

    /// The tighter of both, bound by bound (a delegated sub-task's limits).
    pub fn tighten(&self, other: &Resources) -> Resources {
        fn min<T: Ord + Copy>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        Resources {
            memory_max: min(self.memory_max, other.memory_max),
            cpu_quota: min(self.cpu_quota, other.cpu_quota),
            tasks_max: min(self.tasks_max, other.tasks_max),
        }
    }

    /// The limits as unit properties (slice and scope alike).
    fn properties(&self) -> Vec<(&'static str, Variant<'static>)> {
        let mut props = Vec::new();
        if let Some(m) = self.memory_max {
            props.push(("MemoryMax", Variant::U64(m)));
        }
        if let Some(q) = self.cpu_quota {
            let usec = u64::from(q).saturating_mul(USEC_PER_PERCENT);
            props.push(("CPUQuotaPerSecUSec", Variant::U64(usec)));
        }
        if let Some(t) = self.tasks_max {
            props.push(("TasksMax", Variant::U64(t)));
        }
        props
    }
}

/// Who enforces a task's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Enforcer {
    /// The user manager's transient slice (cgroup controllers).
    Systemd,
    /// Per-process rlimits of each call.
    Rlimits,
}

/// What `task_started` says of a task's limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResourceReport {
    #[serde(flatten)]
    pub limits: Resources,
    pub enforced_by: Enforcer,
    /// The slice, when systemd enforces them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// Limits nothing enforces here (`cpu_quota` without a manager's cpu controller).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_enforced: Vec<&'static str>,
    /// Why it is not (all) systemd, in a sentence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One task's limits in force: its slice, or the rlimits standing in.
#[derive(Debug)]
pub struct TaskResources {
    report: ResourceReport,
    slice: Option<TaskSlice>,
    /// Per-process `RLIMIT_DATA` of each call, when memory is not bounded by the slice.
    rlimit_data: Option<u64>,
    /// The per-call process cap, when tasks are not bounded by the slice.
    rlimit_tasks: Option<u64>,
}

#[derive(Debug)]
struct TaskSlice {
    /// The user manager on the task's own connection, subscribed to its signals.
    manager: ManagerProxy<'static>,
    name: String,
    /// The limits each call's scope carries as well.
    limits: Resources,
    /// `familiar-t_<HEX>` without `.slice`: scope names start with it.
    stem: String,
    calls: AtomicU64,
    /// Cleared once stopped.
    open: AtomicBool,
}

impl TaskResources {
    /// Sets up `limits` for `task`: its slice when the user manager makes one, the
    /// rlimit stand-ins otherwise. Never fails: what could not be had is reported.
    pub async fn open(limits: Resources, task: &TaskId, soul: &str) -> TaskResources {
        let slice = tokio::time::timeout(MANAGER_TIMEOUT, TaskSlice::start(limits, task, soul))
            .await
            .unwrap_or(Err(SliceError::Timeout));
        let (slice, held, note) = match slice {
            Ok((slice, held)) => (Some(slice), held, None),
            Err(why) => (
                None,
                Resources::default(),
                Some(format!(
                    "no systemd user manager to make a slice ({why}): per-call rlimits instead"
                )),
            ),
        };
        let rlimit_data = limits.memory_max.filter(|_| held.memory_max.is_none());
        let rlimit_tasks = limits.tasks_max.filter(|_| held.tasks_max.is_none());
        let mut not_enforced = Vec::new();
        if limits.cpu_quota.is_some() && held.cpu_quota.is_none() {
            not_enforced.push("cpu_quota");
        }
        let partial = slice.is_some() && (held != limits);
        let note = note.or_else(|| {
            partial.then(|| {
                "the user manager has no cgroup controller for some limits here: memory and tasks fall back to per-call rlimits, a CPU quota is not enforced".to_owned()
            })
        });
        let report = ResourceReport {
            limits,
            enforced_by: match &slice {
                Some(_) => Enforcer::Systemd,
                None => Enforcer::Rlimits,
            },
            unit: slice.as_ref().map(|s| s.name.clone()),
            not_enforced,
            note,
        };
        if let Some(note) = &report.note {
            tracing::info!(task_id = %task, "resource limits: {note}");
        }
        TaskResources {
            report,
            slice,
            rlimit_data,
            rlimit_tasks,
        }
    }

    pub fn report(&self) -> &ResourceReport {
        &self.report
    }

    /// Bytes of `RLIMIT_DATA` each call's processes get, when the slice does not bound
    /// memory.
    pub fn rlimit_data(&self) -> Option<u64> {
        self.rlimit_data
    }

    /// The process cap of each call, when the slice does not bound tasks.
    pub fn rlimit_tasks(&self) -> Option<u64> {
        self.rlimit_tasks
    }

    /// Moves the (waiting) helper `pid` into a scope of the task's slice. An error
    /// fails the call: the soul asked for limits, and it does not run without them.
    pub async fn place(&self, pid: u32) -> Result<(), SandboxError> {
        let Some(slice) = &self.slice else {
            return Ok(());
        };
        tokio::time::timeout(MANAGER_TIMEOUT, slice.place(pid))
            .await
            .unwrap_or(Err(SliceError::Timeout))
            .map_err(|e| {
                SandboxError::Setup(format!(
                    "placing the call in the task's slice {}: {e}",
                    slice.name
                ))
            })
    }

    /// Stops the task's slice (and whatever is still in it). Idempotent.
    pub async fn close(&self) {
        if let Some(slice) = &self.slice {
            slice.stop().await;
        }
    }
}

impl Drop for TaskResources {
    /// A task that ended without [`TaskResources::close`] (an error on the way) still
    /// stops its slice, from the runtime it ran on.
    fn drop(&mut self) {
        let Some(slice) = self.slice.take() else {
            return;
        };
        if !slice.is_open() {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move { slice.stop().await });
        }
    }
}

impl TaskSlice {
    /// Starts the slice; returns it and which of `limits` its cgroup enforces.
    async fn start(
        limits: Resources,
        task: &TaskId,
        soul: &str,
    ) -> Result<(TaskSlice, Resources), SliceError> {
        let conn = Connection::session().await?;
        let stem = format!("familiar-{}", unit_safe(task.as_str()));
        let name = format!("{stem}.slice");
        let description = format!(
            "familiar task {task} (soul {soul}, pid {})",
            std::process::id()
        );
        let mut props = vec![("Description", Variant::from(description))];
        props.extend(limits.properties());
        let manager = ManagerProxy::new(&conn).await?;
        // Once per connection: the manager sends `JobRemoved` to subscribers only.
        manager.subscribe().await?;
        run_job(&manager, &name, &props).await?;
        let slice = TaskSlice {
            manager,
            name,
            limits,
            stem,
            calls: AtomicU64::new(0),
            open: AtomicBool::new(true),
        };
        let held = match slice.control_group().await {
            Ok(cg) => held_by(&limits, &cg),
            Err(e) => {
                tracing::warn!("reading the cgroup of {}: {e}", slice.name);
                Resources::default()
            }
        };
        Ok((slice, held))
    }

    async fn control_group(&self) -> zbus::Result<String> {
        let path = self.manager.get_unit(&self.name).await?;
        SliceProxy::builder(self.manager.inner().connection())
            .path(path)
            .build()
            .await?
            .control_group()
            .await
    }

    async fn place(&self, pid: u32) -> Result<(), SliceError> {
        let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let name = format!("{}-call{n}.scope", self.stem);
        let mut props = vec![
            ("PIDs", Variant::from(vec![pid])),
            ("Slice", Variant::from(self.name.clone())),
            (
                "Description",
                Variant::from(format!("familiar tool call {n}")),
            ),
            // A scope ended by the OOM killer is "failed": collect it all the same.
            ("CollectMode", Variant::from("inactive-or-failed")),
        ];
        props.extend(self.limits.properties());
        run_job(&self.manager, &name, &props).await
    }

    fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    async fn stop(&self) {
        if !self.open.swap(false, Ordering::AcqRel) {
            return;
        }
        let stopped = self.manager.stop_unit(&self.name, "replace");
        match tokio::time::timeout(MANAGER_TIMEOUT, stopped).await {
            Ok(Ok(_)) => tracing::debug!("stopped {}", self.name),
            Ok(Err(e)) => tracing::warn!("stopping {}: {e}", self.name),
            Err(_) => tracing::warn!("stopping {}: the user manager did not answer", self.name),
        }
    }
}

/// Starts a transient unit and waits for its job (the connection is subscribed): a
/// scope's processes are in it once the job is done, not when the call returns.
async fn run_job(
    manager: &ManagerProxy<'_>,
    name: &str,
    props: &[(&str, Variant<'_>)],
) -> Result<(), SliceError> {
    let mut removed = manager.receive_job_removed().await?;
    let job: OwnedObjectPath = manager
        .start_transient_unit(name, "fail", props, &[])
        .await?;
    while let Some(signal) = removed.next().await {
        let Ok(args) = signal.args() else {
            continue;
        };
        if args.job.as_str() != job.as_str() {
            continue;
        }
        return match args.result.as_str() {
            "done" => Ok(()),
            other => Err(SliceError::Job {
                unit: name.to_owned(),
                result: other.to_owned(),
            }),
        };
    }
    Err(SliceError::Gone)
}

/// Why the user manager made no slice or scope for a task.
#[derive(Debug, thiserror::Error)]
enum SliceError {
    #[error("{0}")]
    Bus(#[from] zbus::Error),
    #[error("the user manager did not answer in time")]
    Timeout,
    #[error("starting {unit}: the job ended `{result}`")]
    Job { unit: String, result: String },
    #[error("the user manager went away")]
    Gone,
}

/// Which of `limits` the cgroup `cg` (as the manager names it) enforces: those whose
/// controller file exists there, on the unified hierarchy or the v1 one.
fn held_by(limits: &Resources, cg: &str) -> Resources {
    let root = Path::new("/sys/fs/cgroup");
    let rel = cg.trim_start_matches('/');
    let unified = root.join("cgroup.controllers").exists();
    // (v1 hierarchy, v1 file, unified file)
    let has = |(hierarchy, v1, v2): (&str, &str, &str)| match unified {
        true => root.join(rel).join(v2).exists(),
        false => root.join(hierarchy).join(rel).join(v1).exists(),
    };
    Resources {
        memory_max: limits
            .memory_max
            .filter(|_| has(("memory", "memory.limit_in_bytes", "memory.max"))),
        cpu_quota: limits
            .cpu_quota
            .filter(|_| has(("cpu", "cpu.cfs_quota_us", "cpu.max"))),
        tasks_max: limits
            .tasks_max
            .filter(|_| has(("pids", "pids.max", "pids.max"))),
    }
}

/// `id` with everything but `[A-Za-z0-9_]` turned to `_` (a `-` in a slice name means
/// nesting).
fn unit_safe(id: &str) -> String {
    id.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tighten_takes_the_smaller_bound_and_keeps_a_lone_one() {
        let a = Resources {
            memory_max: Some(100),
            cpu_quota: None,
            tasks_max: Some(10),
        };
        let b = Resources {
            memory_max: Some(50),
            cpu_quota: Some(20),
            tasks_max: None,
        };
        assert_eq!(
            a.tighten(&b),
            Resources {
                memory_max: Some(50),
                cpu_quota: Some(20),
                tasks_max: Some(10),
            }
        );
    }

    #[test]
    fn properties_are_what_systemd_takes() {
        let r = Resources {
            memory_max: Some(1 << 20),
            cpu_quota: Some(50),
            tasks_max: Some(8),
        };
        let props = r.properties();
        assert_eq!(props[0], ("MemoryMax", Variant::U64(1 << 20)));
        assert_eq!(props[1], ("CPUQuotaPerSecUSec", Variant::U64(500_000)));
        assert_eq!(props[2], ("TasksMax", Variant::U64(8)));
    }

    #[test]
    fn a_task_id_becomes_one_slice_level() {
        assert_eq!(unit_safe("t-0a1b2c"), "t_0a1b2c");
    }

    #[test]
    fn report_serialises_flat() {
        let report = ResourceReport {
            limits: Resources {
                memory_max: Some(1024),
                cpu_quota: Some(50),
                tasks_max: None,
            },
            enforced_by: Enforcer::Rlimits,
            unit: None,
            not_enforced: vec!["cpu_quota"],
            note: Some("why".into()),
        };
        assert_eq!(
            serde_json::to_value(&report).unwrap(),
            serde_json::json!({
                "memory_max": 1024, "cpu_quota": 50, "enforced_by": "rlimits",
                "not_enforced": ["cpu_quota"], "note": "why"
            })
        );
    }
}
