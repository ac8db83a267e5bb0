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

mod bus;
mod error;
mod ops;
mod process;
mod reload;
pub mod service;
mod supervisor;
mod trim;
mod warm;

pub use error::DaemonError;
pub use ops::{MAX_FINISHED, OP_BUFFER, Op, Shared, SubmitRequest};
pub use process::mark_interrupted;
pub(crate) use process::notify;
pub use reload::ReloadError;
pub use trim::tune_allocator;

use bus::{SignalFrontend, bus_lost, take_name, watch_bus};
use process::{current_uid, reload_on_hangup, stop_signals, take_in_misplaced_data, wait_for_stop};

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use zbus::Connection;
use zbus::object_server::SignalEmitter;

use crate::agent::Runtime;
use crate::approval;
use crate::config::{Config, ProcessEnv};
use crate::launcher::Menu;
use crate::policy::{self, RateSpec};
use crate::soul::SoulSet;
use service::Service;

/// `Submit`s one caller may make (the governor `Scope::Submit` limit).
pub const DEFAULT_SUBMIT_RATE: &str = "30/min";
/// How long shutdown waits for cancelled tasks to persist before exiting anyway
/// (below the unit's `TimeoutStopSec=30`).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

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
        builder: zbus::connection::Builder<'static>,
        options: DaemonOptions,
    ) -> Result<Daemon, DaemonError> {
        let (tx, rx) = mpsc::channel(OP_BUFFER);
        let services = Arc::clone(&rt.services);
        let shared = Arc::new(Shared {
            runtime: reload::Reloadable::new(rt),
            active: AtomicU32::new(0),
            shutting_down: AtomicBool::new(false),
            uid: current_uid(),
            submit_rate: options.submit_rate,
        });
        // Not `.name()`: the builder requests with zbus's default flags, which let a
        // second daemon replace this one. The object is served before the name is taken.
        let conn = builder
            .serve_at(
                familiar_protocol::PATH,
                Service::new(tx.clone(), Arc::clone(&shared)),
            )
            .build()
            .await
            .map_err(|source| DaemonError::Bus { source })?;
        let watch = watch_bus(&conn)
            .await
            .map_err(|source| DaemonError::Bus { source })?;
        take_name(&conn).await?;
        take_in_misplaced_data(&shared.runtime.get());
        let emitter = SignalEmitter::new(&conn, familiar_protocol::PATH)
            .map_err(|source| DaemonError::Bus { source })?
            .into_owned();
        services.approvals.add_frontend(Arc::new(SignalFrontend {
            emitter: emitter.clone(),
        }));
        if options.notifications {
            // Weak: the frontends live in the services the shared state holds.
            let current = Arc::downgrade(&shared);
            let started = Menu::from_config(&shared.runtime.get().settings.config);
            let menu: crate::launcher::CurrentMenu = Arc::new(move || match current.upgrade() {
                Some(s) => Menu::from_config(&s.runtime.get().settings.config),
                None => started.clone(),
            });
            services
                .approvals
                .add_frontend(Arc::new(approval::NotificationFrontend::new(
                    conn.clone(),
                    menu,
                )));
        }
        let owner = tokio::spawn(supervisor::run(
            supervisor::Supervisor::new(
                Arc::clone(&shared),
                supervisor::BusEffects {
                    conn: conn.clone(),
                    emitter,
                },
                tx.clone(),
            ),
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
        self.shared.runtime.reload()
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
        self.shared.runtime.get().settings.mcp.shutdown().await;
        // Release the name before the process goes, so an activation can start anew.
        if let Err(e) = self.conn.release_name(familiar_protocol::NAME).await {
            tracing::debug!("releasing {}: {e}", familiar_protocol::NAME);
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
    let rt = Arc::new(Runtime::from_config(config, policy, souls)?);
    let repaired = mark_interrupted(&rt.services.store);
    if repaired > 0 {
        tracing::warn!(
            "marked {repaired} task(s) left running by a previous daemon as interrupted"
        );
    }
    let defaults = DaemonOptions::default();
    let options = DaemonOptions {
        submit_rate: rt.settings.policy.submits.unwrap_or(defaults.submit_rate),
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
        let hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
        let daemon = Daemon::start(rt, zbus::connection::Builder::session(), options).await?;
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
            familiar_protocol::NAME,
            started.elapsed().as_millis()
        );
        tokio::spawn(reload_on_hangup(Arc::clone(&daemon.shared), hangup, sd));
        daemon.serve_until(wait_for_stop(stop), sd).await
    })
}
