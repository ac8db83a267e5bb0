//! `familiar daemon`: the session-bus service that runs agent tasks.
//!
//! Start-up order: load config, policy and souls; mark tasks a crash left `running` as
//! `interrupted`; serve the object; only then take the bus name (a client that sees
//! the name can call at once); then `READY=1`. One owner task
//! (`supervisor`) holds every piece of mutable task state; the D-Bus object
//! ([`service::Service`]) forwards [`Op`]s to it. SIGTERM stops new submissions, cancels running tasks (each persists
//! its partial context) and exits once they have finished.
//!
//! The name is requested without replacement: a second `familiar daemon` is refused
//! ("already running as pid N") instead of taking the name from the one serving. A
//! daemon that loses its name anyway (the bus, or its own connection, released it)
//! can no longer be reached: it stops taking work, cancels what it has and exits
//! non-zero so systemd restarts it.

mod reload;
pub mod service;
mod supervisor;
mod trim;
mod warm;

pub use reload::{Loaded, ReloadError};
pub use trim::tune_allocator;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use zbus::Connection;
use zbus::object_server::SignalEmitter;

use crate::agent::{Runtime, RuntimeError};
use crate::approval::{ApprovalBroker, ApprovalRequest, Frontend};
use crate::config::{Config, ProcessEnv};
use crate::dbus::{self, Error};
use crate::error::ConfigError;
use crate::ids::{RequestId, SessionId, TaskId};
use crate::policy::{self, RateSpec};
use crate::soul::{Soul, SoulSet};
use crate::store::Store;
use service::Service;

/// Ops waiting for the owner; D-Bus callers wait (backpressure) when it is full.
pub const OP_BUFFER: usize = 64;
/// Finished tasks the daemon remembers for `GetTask` and `ListTasks`.
pub const MAX_FINISHED: usize = 256;
/// `Submit`s one caller may make (the governor `Scope::Submit` limit).
pub const DEFAULT_SUBMIT_RATE: &str = "30/min";
/// How long shutdown waits for cancelled tasks to persist before exiting anyway
/// (below the unit's `TimeoutStopSec=30`).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error(
        "cannot serve {name} on the session bus: {source} (is another `familiar daemon` running? `systemctl --user status familiar`)",
        name = dbus::NAME
    )]
    Bus {
        #[source]
        source: zbus::Error,
    },
    #[error(
        "{name} is already running as pid {pid} (`systemctl --user status familiar`; stop it before starting another)",
        name = dbus::NAME,
        pid = pid.map_or_else(|| "unknown".to_owned(), |p| p.to_string())
    )]
    AlreadyRunning { pid: Option<u32> },
    #[error("cannot start the async runtime: {0}")]
    Io(#[from] std::io::Error),
    /// The session bus went away (or took our name): nobody can reach the daemon, so it
    /// exits non-zero and systemd's `Restart=on-failure` starts it on the new bus.
    #[error(
        "lost the session bus ({0}); running tasks were cancelled and saved. systemd restarts the daemon (`systemctl --user status familiar`); without systemd, start `familiar daemon` again"
    )]
    BusLost(String),
}

/// State the D-Bus object reads without asking the owner.
pub struct Shared {
    /// What every task shares whatever the policy (config, store, metrics, …).
    pub rt: Arc<Runtime>,
    /// The policy and souls new tasks get (see [`reload`]).
    pub loaded: reload::Reloadable,
    /// Queued plus running tasks (the `ActiveTasks` property).
    pub active: AtomicU32,
    pub shutting_down: AtomicBool,
    /// The daemon's own uid; callers must match it.
    pub uid: u32,
    pub submit_rate: RateSpec,
}

/// A validated `Submit`.
#[derive(Debug)]
pub struct SubmitRequest {
    pub soul: Arc<Soul>,
    pub prompt: String,
    pub session: Option<SessionId>,
    pub workspace: Option<std::path::PathBuf>,
    pub origin: String,
    pub max_iterations: Option<u32>,
    /// Run only if these hold when the task starts (`when`), else it ends `skipped`.
    pub when: Option<crate::snapshot::conditions::Conditions>,
    /// The caller's unique bus name (the rate-limit key).
    pub caller: String,
}

/// What the owner task is asked to do.
pub enum Op {
    Submit {
        req: SubmitRequest,
        reply: oneshot::Sender<Result<(TaskId, SessionId), Error>>,
    },
    Cancel {
        id: TaskId,
        reply: oneshot::Sender<Result<(), Error>>,
    },
    Steer {
        id: TaskId,
        message: String,
        reply: oneshot::Sender<Result<(), Error>>,
    },
    GetTask {
        id: TaskId,
        reply: oneshot::Sender<Result<String, Error>>,
    },
    ListTasks {
        reply: oneshot::Sender<Vec<(String, String, String, String)>>,
    },
    /// A task's runner is done (its events are all forwarded).
    Finished(supervisor::Finished),
    /// A delegated sub-task of a running task started or ended (seen in its events).
    Child(supervisor::ChildNote),
    /// Stop accepting, cancel everything, return once no task runs.
    Shutdown,
}

/// Knobs tests turn; `familiar daemon` uses the defaults.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    pub submit_rate: RateSpec,
    /// Ping the systemd watchdog this often (half of `WatchdogSec`).
    pub watchdog: Option<Duration>,
    /// Tell systemd about readiness and status (`NOTIFY_SOCKET`).
    pub sd_notify: bool,
    /// Offer approvals as desktop notifications.
    pub notifications: bool,
}

impl Default for DaemonOptions {
    fn default() -> Self {
        DaemonOptions {
            submit_rate: DEFAULT_SUBMIT_RATE.parse().unwrap_or(RateSpec {
                count: std::num::NonZeroU32::MIN,
                per: Duration::from_secs(2),
            }),
            watchdog: None,
            sd_notify: false,
            notifications: true,
        }
    }
}

/// A running daemon.
pub struct Daemon {
    conn: Connection,
    tx: mpsc::Sender<Op>,
    owner: JoinHandle<()>,
    /// `NameLost` and the connection's end, watched from the start.
    watch: Option<zbus::MessageStream>,
    pub shared: Arc<Shared>,
}

impl Daemon {
    /// Serves the object on the connection `builder` makes, then takes the name
    /// (`builder` is a `session()` or `address(..)` builder).
    pub async fn start(
        rt: Arc<Runtime>,
        souls: Arc<SoulSet>,
        builder: zbus::connection::Builder<'static>,
        options: DaemonOptions,
    ) -> Result<Daemon, DaemonError> {
        let (tx, rx) = mpsc::channel(OP_BUFFER);
        let shared = Arc::new(Shared {
            rt: Arc::clone(&rt),
            loaded: reload::Reloadable::new(Arc::clone(&rt), souls),
            active: AtomicU32::new(0),
            shutting_down: AtomicBool::new(false),
            uid: current_uid(),
            submit_rate: options.submit_rate,
        });
        // Not `.name()`: the builder requests with zbus's default flags, which let a
        // second daemon replace this one. The object is served before the name is taken.
        let conn = builder
            .serve_at(dbus::PATH, Service::new(tx.clone(), Arc::clone(&shared)))
            .build()
            .await
            .map_err(|source| DaemonError::Bus { source })?;
        let watch = watch_bus(&conn)
            .await
            .map_err(|source| DaemonError::Bus { source })?;
        take_name(&conn).await?;
        take_in_misplaced_data(&rt);
        let emitter = SignalEmitter::new(&conn, dbus::PATH)
            .map_err(|source| DaemonError::Bus { source })?
            .into_owned();
        rt.approvals.add_frontend(Arc::new(SignalFrontend {
            emitter: emitter.clone(),
        }));
        if options.notifications {
            rt.approvals
                .add_frontend(Arc::new(dbus::notifications::NotificationFrontend::new(
                    conn.clone(),
                )));
        }
        let owner = tokio::spawn(supervisor::run(
            supervisor::Supervisor::new(Arc::clone(&shared), conn.clone(), emitter, tx.clone()),
            rx,
            options,
        ));
        Ok(Daemon {
            conn,
            tx,
            owner,
            watch: Some(watch),
            shared,
        })
    }

    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// Serves until `stop` resolves or the daemon can no longer be reached (its bus
    /// connection closed, or the bus took the name away: [`DaemonError::BusLost`]),
    /// then shuts down (see [`Daemon::shutdown`]). Unreachable, it must exit non-zero
    /// for systemd to restart it.
    pub async fn serve_until(
        mut self,
        stop: impl std::future::Future<Output = ()>,
        sd: bool,
    ) -> Result<(), DaemonError> {
        let lost = tokio::select! {
            () = stop => None,
            why = bus_lost(self.watch.take()) => Some(why),
        };
        match &lost {
            None => tracing::info!("stopping: cancelling running tasks"),
            Some(why) => tracing::error!(
                "lost the session bus ({why}): cancelling running tasks and exiting"
            ),
        }
        notify(sd, &[sd_notify::NotifyState::Stopping]);
        self.shutdown().await;
        match lost {
            None => Ok(()),
            Some(why) => Err(DaemonError::BusLost(why)),
        }
    }

    /// Re-reads the policy and souls for new tasks (SIGHUP); a broken file keeps the
    /// previous version in force.
    pub fn reload(&self) -> Result<(), ReloadError> {
        self.shared.loaded.reload()
    }

    /// Stops accepting tasks, cancels the running ones and waits (up to
    /// [`SHUTDOWN_GRACE`]) until they have persisted and finished.
    pub async fn shutdown(self) {
        if self.tx.send(Op::Shutdown).await.is_err() {
            tracing::debug!("the supervisor had already stopped");
        }
        match tokio::time::timeout(SHUTDOWN_GRACE, self.owner).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!("the supervisor failed: {e}"),
            Err(_) => tracing::warn!(
                "tasks did not stop within {}s of being cancelled; exiting anyway (their last step is saved)",
                SHUTDOWN_GRACE.as_secs()
            ),
        }
        // The MCP servers tasks started live as long as the daemon.
        self.shared.loaded.get().rt.mcp.shutdown().await;
        // Release the name before the process goes, so an activation can start anew.
        if let Err(e) = self.conn.release_name(dbus::NAME).await {
            tracing::debug!("releasing {}: {e}", dbus::NAME);
        }
    }
}

/// `familiar daemon`: runs until SIGTERM or SIGINT.
pub fn run(config_path: Option<&Path>) -> Result<(), DaemonError> {
    let started = Instant::now();
    let config = Arc::new(Config::load(config_path, &ProcessEnv)?);
    if let Some(ignored) = crate::config::ignored_state_directory(&ProcessEnv) {
        tracing::info!(
            "not using $STATE_DIRECTORY={} (systemd before 254 gives a user unit the config dir): the data dir is {}, as for every familiar command",
            ignored.display(),
            config.paths.data_dir.display()
        );
    }
    let policy = Arc::new(policy::load(&config.policy, &config.paths)?);
    let souls = SoulSet::load(&config.paths, &policy)?;
    for err in &souls.errors {
        tracing::warn!("skipping soul file: {err}");
    }
    let souls = Arc::new(souls);
    let rt = Arc::new(Runtime::from_config(config, policy, Arc::clone(&souls))?);
    let repaired = mark_interrupted(&rt.store);
    if repaired > 0 {
        tracing::warn!(
            "marked {repaired} task(s) left running by a previous daemon as interrupted"
        );
    }
    let defaults = DaemonOptions::default();
    let options = DaemonOptions {
        submit_rate: rt.policy.submits.unwrap_or(defaults.submit_rate),
        watchdog: sd_notify::watchdog_enabled().map(|d| d / 2),
        sd_notify: std::env::var_os("NOTIFY_SOCKET").is_some(),
        ..defaults
    };
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // Blocking threads left over from a burst exit after tokio's keep-alive (10 s;
        // 2 s made them come and go under load and doubled ListTasks' p99): the heap is
        // trimmed as they go, when nothing runs.
        .on_thread_stop(trim::thread_stopping)
        .enable_all()
        .build()?;
    tokio.block_on(async move {
        let sd = options.sd_notify;
        // Handlers first: a SIGTERM right after READY=1 must stop us gracefully, not
        // hit the default action.
        let stop = stop_signals()?;
        // Likewise SIGHUP (reload), whose default action would end the daemon.
        let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
        let daemon =
            Daemon::start(rt, souls, zbus::connection::Builder::session(), options).await?;
        warm::spawn(Arc::clone(&daemon.shared), daemon.connection());
        notify(
            sd,
            &[
                sd_notify::NotifyState::Ready,
                sd_notify::NotifyState::Status("idle"),
            ],
        );
        tracing::info!(
            "serving {} (ready in {} ms)",
            dbus::NAME,
            started.elapsed().as_millis()
        );
        let stopped = wait_for_stop(stop);
        tokio::pin!(stopped);
        let mut daemon = daemon;
        let bus_gone = bus_lost(daemon.watch.take());
        tokio::pin!(bus_gone);
        let lost = loop {
            tokio::select! {
                () = &mut stopped => break None,
                why = &mut bus_gone => break Some(why),
                _ = hangup.recv() => {
                    notify(sd, &[sd_notify::NotifyState::Reloading]);
                    if let Err(e) = daemon.reload() {
                        tracing::error!("{e}");
                    }
                    notify(sd, &[sd_notify::NotifyState::Ready]);
                }
            }
        };
        match &lost {
            None => tracing::info!("stopping: cancelling running tasks"),
            Some(why) => tracing::error!(
                "lost the session bus ({why}): cancelling running tasks and exiting"
            ),
        }
        notify(sd, &[sd_notify::NotifyState::Stopping]);
        daemon.shutdown().await;
        match lost {
            None => Ok(()),
            Some(why) => Err(DaemonError::BusLost(why)),
        }
    })
}

/// Moves into the data dir what a daemon on systemd before 254 wrote to the config dir
/// (its `StateDirectory=` mapped there; see `config::paths::default_data_dir`). Done
/// once the name is owned: no other daemon can be writing there then, and a second
/// daemon, refused, never touches the files of the one running. A failure is logged and
/// the move retried at the next start; nothing is lost either way.
fn take_in_misplaced_data(rt: &Runtime) {
    let paths = &rt.config.paths;
    let (from, to) = (&paths.config_dir, &paths.data_dir);
    if from == to {
        return;
    }
    let max = rt.config.memory.max_entries_per_scope;
    match crate::store::off_runtime(|| rt.store.take_in(from, max)) {
        Ok(done) if done.is_empty() => {}
        Ok(done) => tracing::warn!(
            "moved the data an earlier daemon kept in {} (systemd before 254 put it there) to {}: {done}",
            from.display(),
            to.display()
        ),
        Err(e) => tracing::error!(
            "cannot move the data in {} to {}: {e}; what was not moved stays there and is tried again at the next start",
            from.display(),
            to.display()
        ),
    }
}

/// Takes [`dbus::NAME`] without allowing replacement and without queueing; a name
/// already owned is [`DaemonError::AlreadyRunning`] with the owner's pid. ([`bus_lost`]
/// notices if the name is ever taken away after this.)
async fn take_name(conn: &Connection) -> Result<(), DaemonError> {
    use zbus::fdo::{DBusProxy, RequestNameFlags, RequestNameReply};
    let bus = |source| DaemonError::Bus { source };
    let proxy = DBusProxy::new(conn).await.map_err(bus)?;
    match conn
        .request_name_with_flags(dbus::NAME, RequestNameFlags::DO_NOT_QUEUE)
        .await
    {
        Ok(RequestNameReply::PrimaryOwner | RequestNameReply::AlreadyOwner) => {}
        Ok(RequestNameReply::Exists | RequestNameReply::InQueue) | Err(zbus::Error::NameTaken) => {
            let name: zbus::names::BusName<'_> = dbus::NAME.try_into().map_err(bus)?;
            let pid = proxy.get_connection_unix_process_id(name).await.ok();
            return Err(DaemonError::AlreadyRunning { pid });
        }
        Err(source) => return Err(DaemonError::Bus { source }),
    }
    Ok(())
}

/// The `NameLost` signals of the bus driver, subscribed at start (before the name is
/// taken), so a loss at any later moment is in the stream for [`bus_lost`].
async fn watch_bus(conn: &Connection) -> Result<zbus::MessageStream, zbus::Error> {
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .sender("org.freedesktop.DBus")
        .interface("org.freedesktop.DBus")
        .member("NameLost")
        .build()?;
    zbus::MessageStream::for_match_rule(rule, conn, None).await
}

/// Returns once the daemon can no longer be reached: the connection to the bus closed
/// (the bus daemon exited or restarted) or the bus took our name away. Before this the
/// daemon lived on unreachable after a bus restart, and systemd never restarted it.
async fn bus_lost(stream: Option<zbus::MessageStream>) -> String {
    use futures::StreamExt;
    let Some(mut stream) = stream else {
        return "cannot watch the bus connection".to_owned();
    };
    let mut last_error = None;
    while let Some(msg) = stream.next().await {
        match msg {
            Ok(msg) => {
                let name: Result<String, _> = msg.body().deserialize();
                if name.is_ok_and(|n| n == dbus::NAME) {
                    return format!("the bus took the name {}", dbus::NAME);
                }
            }
            // The socket reader sends its error to every stream, then closes them.
            Err(e) => last_error = Some(e.to_string()),
        }
    }
    match last_error {
        Some(e) => format!("connection closed: {e}"),
        None => "connection closed".to_owned(),
    }
}

type StopSignals = (tokio::signal::unix::Signal, tokio::signal::unix::Signal);

fn stop_signals() -> std::io::Result<StopSignals> {
    use tokio::signal::unix::{SignalKind, signal};
    Ok((
        signal(SignalKind::terminate())?,
        signal(SignalKind::interrupt())?,
    ))
}

async fn wait_for_stop((mut term, mut int): StopSignals) {
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Sends to systemd when it listens; a failure is logged, never fatal.
pub(crate) fn notify(enabled: bool, state: &[sd_notify::NotifyState<'_>]) {
    if enabled && let Err(e) = notify_nonblocking(state) {
        tracing::warn!("cannot notify systemd: {e}");
    }
}

/// `sd_notify::notify`, except that it never blocks. The crate's send is blocking, and
/// a unix datagram socket queues only `net.unix.max_dgram_qlen` (10 by default)
/// messages: a manager slow to read, or a test harness that stopped reading, would
/// stall the supervisor's own task on a STATUS update. A full queue drops that one
/// message instead (WouldBlock, logged); the next state change says it again.
fn notify_nonblocking(state: &[sd_notify::NotifyState<'_>]) -> std::io::Result<()> {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(());
    };
    let msg: String = state.iter().map(|s| format!("{s}\n")).collect();
    let sock = std::os::unix::net::UnixDatagram::unbound()?;
    sock.set_nonblocking(true)?;
    sock.connect(path)?;
    sock.send(msg.as_bytes())?;
    Ok(())
}

/// Marks tasks of every session not locked by a live process as interrupted.
pub fn mark_interrupted(store: &Store) -> usize {
    let sessions = match store.list_sessions() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("cannot list sessions to repair them: {e}");
            return 0;
        }
    };
    let mut total = 0;
    for s in sessions {
        // Locked means a live `familiar run` owns it: its tasks are really running.
        let Ok(_lock) = store.lock_session(&s.id) else {
            continue;
        };
        match store.load_context(&s.id) {
            Ok(Some(mut ctx)) => {
                let n = ctx.mark_interrupted();
                if n > 0 {
                    match store.save_context(&mut ctx) {
                        Ok(()) => total += n,
                        Err(e) => {
                            tracing::warn!(session_id = %s.id, "cannot save the repaired session: {e}")
                        }
                    }
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(session_id = %s.id, "cannot load the session to repair it: {e}")
            }
        }
    }
    total
}

fn current_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    // Our own /proc entry belongs to our uid; avoids unsafe libc::getuid.
    std::fs::metadata("/proc/self").map_or(u32::MAX, |m| m.uid())
}

/// Announces approval requests as the `ApprovalRequested` signal; `familiar ask` and
/// any desktop client answer with `Respond`.
struct SignalFrontend {
    emitter: SignalEmitter<'static>,
}

impl Frontend for SignalFrontend {
    fn present(&self, r: &ApprovalRequest, _broker: &ApprovalBroker) -> bool {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let emitter = self.emitter.clone();
        let (task, request, tool, summary, tier) = (
            r.task_id.to_string(),
            r.request_id.to_string(),
            r.tool.clone(),
            r.summary.clone(),
            r.tier.to_string(),
        );
        handle.spawn(async move {
            if let Err(e) =
                Service::approval_requested(&emitter, &task, &request, &tool, &summary, &tier).await
            {
                tracing::warn!(task_id = %task, "cannot emit ApprovalRequested: {e}");
            }
        });
        // Whoever listens answers with Respond; if nobody does, the timeout denies.
        true
    }

    fn withdraw(&self, _request_id: &RequestId) {}
}
