//! The owner's invariants, checked against recorded effects: tasks that run when the
//! test says they finish, and every event, end and count change in the order the owner
//! produced them. No bus, no model, no sleeps: each step waits for its record.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32};

use familiar_protocol::Error;
use familiar_protocol::events::{Event, EventPayload};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::*;
use crate::agent::events::EventBus;
use crate::agent::{Runtime, Services, Settings};
use crate::config::Config;
use crate::daemon::SubmitRequest;
use crate::soul::{Soul, SoulSet};

/// What the owner did, in order.
#[derive(Debug, Clone, PartialEq)]
enum Record {
    Event(TaskId, String),
    Finished(TaskId, TaskStatus, String),
    Counts { active_changed: bool },
}

/// A task the recorder is running: it ends with the status sent on `finish`, or
/// `Cancelled` when cancelled (unless its prompt starts with "stubborn").
struct Running {
    prompt: String,
    finish: oneshot::Sender<TaskStatus>,
}

#[derive(Clone)]
struct Recorder {
    records: UnboundedSender<Record>,
    started: UnboundedSender<Running>,
}

impl Effects for Recorder {
    async fn run(
        &self,
        _rt: Arc<Runtime>,
        spec: TaskSpec,
        _new_session: bool,
        mut bus: EventBus,
        cancel: CancellationToken,
    ) -> Result<TaskOutcome, TaskError> {
        let session_id = spec.session.clone().unwrap_or_else(SessionId::generate);
        bus.publish(Arc::new(Event {
            payload: EventPayload::TextDelta {
                text: spec.prompt.clone(),
            },
            task_id: spec.task_id.clone(),
            session_id: session_id.clone(),
        }))
        .await;
        let (finish, ends) = oneshot::channel();
        let _ = self.started.send(Running {
            prompt: spec.prompt.clone(),
            finish,
        });
        // A "stubborn" task runs on after its cancellation, until told to end.
        let stubborn = spec.prompt.starts_with("stubborn");
        let status = tokio::select! {
            s = ends => s.unwrap_or(TaskStatus::Failed),
            () = cancel.cancelled(), if !stubborn => TaskStatus::Cancelled,
        };
        Ok(TaskOutcome {
            task_id: spec.task_id,
            session_id,
            status,
            result: status.as_str().to_owned(),
            usage: Usage::default(),
            iterations: 1,
        })
    }

    async fn task_event(&self, event: &Event) {
        let _ = self.records.send(Record::Event(
            event.task_id.clone(),
            event.kind().to_owned(),
        ));
    }

    async fn task_finished(&self, id: &TaskId, status: TaskStatus, result: &str) {
        let _ = self
            .records
            .send(Record::Finished(id.clone(), status, result.to_owned()));
    }

    async fn counts(&self, active_changed: bool) {
        let _ = self.records.send(Record::Counts { active_changed });
    }
}

/// An owner running over recorded effects, with `[daemon]` limits of 2 running and
/// 1 queued.
struct Owner {
    _home: tempfile::TempDir,
    tx: mpsc::Sender<Op>,
    records: UnboundedReceiver<Record>,
    started: UnboundedReceiver<Running>,
    soul: Arc<Soul>,
    shared: Arc<Shared>,
    /// Every record so far.
    seen: Vec<Record>,
}

impl Owner {
    fn start() -> Owner {
        let home = tempfile::tempdir().unwrap();
        let env = BTreeMap::from([("HOME".to_owned(), home.path().display().to_string())]);
        let src = "[daemon]\nmax_concurrent_tasks = 2\nqueue_limit = 1\n";
        let config = Arc::new(Config::from_toml("config.toml", src, &env).unwrap());
        let policy = Arc::new(crate::policy::load(&config.policy, &config.paths).unwrap());
        let souls = Arc::new(SoulSet::load(&config.paths, &policy).unwrap());
        let soul = Arc::clone(souls.souls.values().next().unwrap());
        let services = Arc::new(Services::for_tests(&config.paths.data_dir));
        let settings = Arc::new(Settings::new(config, policy, souls, &services));
        let shared = Arc::new(Shared {
            runtime: crate::daemon::reload::Reloadable::new(Arc::new(Runtime {
                services,
                settings,
            })),
            active: AtomicU32::new(0),
            shutting_down: AtomicBool::new(false),
            uid: 0,
            submit_rate: crate::daemon::DaemonOptions::default().submit_rate,
        });
        let (records_tx, records) = unbounded_channel();
        let (started_tx, started) = unbounded_channel();
        let (tx, rx) = mpsc::channel(crate::daemon::OP_BUFFER);
        let effects = Recorder {
            records: records_tx,
            started: started_tx,
        };
        let sup = Supervisor::new(Arc::clone(&shared), effects, tx.clone());
        tokio::spawn(run(sup, rx, DaemonOptions::default()));
        Owner {
            _home: home,
            tx,
            records,
            started,
            soul,
            shared,
            seen: Vec::new(),
        }
    }

    async fn submit(&self, prompt: &str, session: Option<SessionId>) -> Result<TaskId, Error> {
        let (reply, answer) = oneshot::channel();
        let req = SubmitRequest {
            soul: Arc::clone(&self.soul),
            prompt: prompt.to_owned(),
            session,
            workspace: None,
            origin: "test".to_owned(),
            max_iterations: None,
            when: None,
            caller: ":1.1".to_owned(),
        };
        self.tx.send(Op::Submit { req, reply }).await.unwrap();
        answer.await.unwrap().map(|(task, _)| task)
    }

    async fn cancel(&self, id: &TaskId) {
        let (reply, answer) = oneshot::channel();
        let op = Op::Cancel {
            id: id.clone(),
            reply,
        };
        self.tx.send(op).await.unwrap();
        answer.await.unwrap().unwrap();
    }

    async fn next_started(&mut self) -> Running {
        self.started.recv().await.unwrap()
    }

    /// Every record so far, once the `TaskFinished` of `id` is among them.
    async fn until_finished(&mut self, id: &TaskId) -> Vec<Record> {
        while finished_of(&self.seen, id) == 0 {
            let r = self.records.recv().await.unwrap();
            self.seen.push(r);
        }
        self.seen.clone()
    }
}

fn finished_of(records: &[Record], id: &TaskId) -> usize {
    records
        .iter()
        .filter(|r| matches!(r, Record::Finished(t, ..) if t == id))
        .count()
}

#[tokio::test]
async fn at_most_the_limit_runs_the_rest_waits_in_order_and_a_full_queue_refuses() {
    let mut o = Owner::start();
    let a = o.submit("a", None).await.unwrap();
    let _b = o.submit("b", None).await.unwrap();
    let c = o.submit("c", None).await.unwrap();
    let refused = o.submit("d", None).await.unwrap_err();
    assert!(matches!(refused, Error::RateLimited(_)), "{refused:?}");
    let first = o.next_started().await;
    let second = o.next_started().await;
    assert_eq!((first.prompt.as_str(), second.prompt.as_str()), ("a", "b"));
    assert_eq!(o.shared.active.load(Ordering::SeqCst), 3);
    // `c` starts only once one of the two ends.
    first.finish.send(TaskStatus::Completed).unwrap();
    let records = o.until_finished(&a).await;
    assert_eq!(finished_of(&records, &a), 1);
    assert_eq!(o.next_started().await.prompt, "c");
    // The queue has room again.
    let _e = o.submit("e", None).await.unwrap();
    second.finish.send(TaskStatus::Completed).unwrap();
    assert_eq!(o.next_started().await.prompt, "e");
    let _ = c;
}

#[tokio::test]
async fn a_session_takes_one_task_at_a_time() {
    let mut o = Owner::start();
    let session = SessionId::generate();
    // A new session's first task: its id is made at Submit.
    let (reply, answer) = oneshot::channel();
    let req = SubmitRequest {
        soul: Arc::clone(&o.soul),
        prompt: "first".to_owned(),
        session: None,
        workspace: None,
        origin: "test".to_owned(),
        max_iterations: None,
        when: None,
        caller: ":1.1".to_owned(),
    };
    o.tx.send(Op::Submit { req, reply }).await.unwrap();
    let (first, session_id) = answer.await.unwrap().unwrap();
    let busy = o
        .submit("second", Some(session_id.clone()))
        .await
        .unwrap_err();
    assert!(matches!(busy, Error::SessionBusy(_)), "{busy:?}");
    // A session nobody made is unknown, not busy.
    let unknown = o.submit("other", Some(session)).await.unwrap_err();
    assert!(matches!(unknown, Error::UnknownSession(_)), "{unknown:?}");
    let running = o.next_started().await;
    running.finish.send(TaskStatus::Completed).unwrap();
    o.until_finished(&first).await;
    // Ended, the session takes its next task (the context file is the runner's to
    // make; the recorder makes none, so the test does).
    let mut context = crate::store::Context::new(session_id.clone(), o.soul.id.clone(), "first");
    o.shared
        .runtime
        .services()
        .store
        .save_context(&mut context)
        .unwrap();
    let second = o.submit("second", Some(session_id)).await.unwrap();
    assert_eq!(o.next_started().await.prompt, "second");
    assert_ne!(second, first);
}

#[tokio::test]
async fn every_task_ends_with_one_task_finished_after_all_of_its_events() {
    let mut o = Owner::start();
    let a = o.submit("a", None).await.unwrap();
    let b = o.submit("b", None).await.unwrap();
    let queued = o.submit("c", None).await.unwrap();
    // Cancelled while queued: it never ran, and still ends once.
    o.cancel(&queued).await;
    let records = o.until_finished(&queued).await;
    assert!(records.iter().any(|r| matches!(
        r,
        Record::Finished(t, TaskStatus::Cancelled, why) if *t == queued && why == "cancelled before it started"
    )));
    let first = o.next_started().await;
    let second = o.next_started().await;
    o.cancel(&b).await;
    first.finish.send(TaskStatus::Completed).unwrap();
    drop(second);
    let mut records = o.until_finished(&a).await;
    if !records
        .iter()
        .any(|r| matches!(r, Record::Finished(t, ..) if *t == b))
    {
        records.extend(o.until_finished(&b).await);
    }
    for id in [&a, &b] {
        assert_eq!(finished_of(&records, id), 1, "{records:?}");
        let end = records
            .iter()
            .position(|r| matches!(r, Record::Finished(t, ..) if t == id))
            .unwrap();
        let event = records
            .iter()
            .position(|r| matches!(r, Record::Event(t, _) if t == id))
            .unwrap();
        assert!(event < end, "an event after TaskFinished: {records:?}");
    }
    assert!(records.contains(&Record::Finished(
        b.clone(),
        TaskStatus::Cancelled,
        "cancelled".to_owned()
    )));
}

#[tokio::test]
async fn shutdown_ends_the_queued_cancels_the_running_and_refuses_new_work() {
    let mut o = Owner::start();
    let a = o.submit("a", None).await.unwrap();
    let stubborn = o.submit("stubborn", None).await.unwrap();
    let queued = o.submit("c", None).await.unwrap();
    let _first = o.next_started().await;
    let still = o.next_started().await;
    o.tx.send(Op::Shutdown).await.unwrap();
    let records = o.until_finished(&queued).await;
    assert!(
        records.contains(&Record::Finished(
            queued.clone(),
            TaskStatus::Cancelled,
            STOPPED_WITH_DAEMON.to_owned()
        )),
        "{records:?}"
    );
    // The running ones are cancelled by the stop and say so.
    let records = o.until_finished(&a).await;
    assert!(
        records.contains(&Record::Finished(
            a.clone(),
            TaskStatus::Cancelled,
            STOPPED_WITH_DAEMON.to_owned()
        )),
        "{records:?}"
    );
    // While one still runs, the owner is there and refuses new work.
    let refused = o.submit("late", None).await.unwrap_err();
    assert!(matches!(refused, Error::ShuttingDown(_)), "{refused:?}");
    assert!(o.shared.shutting_down.load(Ordering::SeqCst));
    still.finish.send(TaskStatus::Completed).unwrap();
    let records = o.until_finished(&stubborn).await;
    assert_eq!(finished_of(&records, &stubborn), 1);
    // With nothing left running, the owner is done.
    o.tx.closed().await;
}

#[tokio::test]
async fn the_active_count_follows_submits_and_ends() {
    let mut o = Owner::start();
    let a = o.submit("a", None).await.unwrap();
    o.next_started()
        .await
        .finish
        .send(TaskStatus::Completed)
        .unwrap();
    let records = o.until_finished(&a).await;
    // Published at the Submit (before or after the task's first event).
    let counts = Record::Counts {
        active_changed: true,
    };
    assert_eq!(
        records.iter().filter(|r| **r == counts).count(),
        1,
        "{records:?}"
    );
    // And again at its end, to zero.
    assert_eq!(o.records.recv().await.unwrap(), counts);
    assert_eq!(o.shared.active.load(Ordering::SeqCst), 0);
}
