//! The core thread: one std thread owns the [`Broker`] and drives it as quinn's
//! `ConnectionDriver` drives a connection (../shared/STYLE.md §6).
//!
//! gRPC tasks send [`Command`]s over a channel, each with a oneshot for its answer. The
//! loop blocks for the next command or until the core's `poll_timeout()`, drains every
//! queued command into `handle(now, id, request)`, then makes them durable:
//!
//! - sync flush: group commit with the fsync off this thread. After a drained group the
//!   loop detaches a sync of everything appended so far (`sync_target()`,
//!   `FileStorage::detach_sync`) to the sync thread and goes on handling requests; when it
//!   completes, `synced_to()` releases every reply it covers. Writes made meanwhile form
//!   the next group, synced as soon as the previous fsync returns, so CPU work and fsync
//!   time overlap instead of adding up. One sync is in flight at a time.
//! - async flush: the core schedules its interval fsync itself (`Config::flush_interval_ms`,
//!   part of `poll_timeout()`), done in `handle_timeout()`.
//!
//! Then it drains `poll_output()`: replies to their oneshot, transaction checks to a live
//! producer that can answer them (a gRPC producer of the topic for `%TXN%<topic>`, a
//! remoting connection of the producer group otherwise), availability notices to waiting
//! long polls (receives and pulls). An ack or dead-lettering by a FIFO group wakes the long
//! polls of its topic too, as it may unlock a queue. The tokio runtime never waits on an
//! fsync.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rocklet_core::{
    AnyStorage, Broker, CheckRequest, ClientError, DetachedSync, FlushMode, Millis, Output, Reply,
    Request,
};
use tokio::sync::{mpsc as tmpsc, oneshot};
use tracing::{debug, error, info, warn};

use crate::clock::Clock;
use crate::metrics::Metrics;

/// The broker type the host runs.
pub type CoreBroker = Broker<AnyStorage>;

/// A closure run on the core thread with the broker (introspection, admin).
pub type InspectFn = Box<dyn FnOnce(&mut CoreBroker) + Send>;

/// The producer group the broker gives transactions sent to `topic`. RocketMQ 5 gRPC
/// producers have no group, so checks are routed by topic: every producer that declared the
/// topic can answer for its transactions.
#[must_use]
pub fn txn_group(topic: &str) -> String {
    format!("%TXN%{topic}")
}

/// What the core thread is asked to do.
pub enum Command {
    /// A request for the core; `watch` is woken when the topic gets a visible message if the
    /// reply is an empty receive (long polling).
    Request {
        request: Box<Request>,
        reply: oneshot::Sender<Result<Reply, String>>,
        watch: Option<oneshot::Sender<()>>,
    },
    /// A producer's telemetry stream declared (or re-declared) the topics it publishes to.
    ProducerUp {
        conn: u64,
        client: String,
        topics: Vec<String>,
        checks: tmpsc::UnboundedSender<CheckRequest>,
    },
    /// A client sends a transactional message to `topic`: its telemetry streams can answer
    /// checks for the topic even if their settings did not list it.
    ProducerSends { client: String, topic: String },
    /// A RocketMQ 4 (remoting) connection's heartbeat named the producer groups it serves:
    /// it answers checks of transactions prepared with those groups.
    GroupProducerUp {
        conn: u64,
        groups: Vec<String>,
        checks: tmpsc::UnboundedSender<CheckRequest>,
    },
    /// A producer's telemetry stream (or remoting connection) closed.
    ProducerDown { conn: u64 },
    /// Run a closure with the broker.
    Inspect(InspectFn),
    /// Look at the clock and the timers now (for tests that move a manual clock).
    Tick,
    /// The sync thread finished a detached sync of the log below `upto`.
    Synced {
        upto: u64,
        job: DetachedSync,
        result: std::io::Result<()>,
        took: Duration,
    },
    /// Flush and stop.
    Shutdown(oneshot::Sender<()>),
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Request { request, .. } => {
                f.debug_struct("Request").field("request", request).finish()
            }
            Command::ProducerUp { conn, topics, .. } => f
                .debug_struct("ProducerUp")
                .field("conn", conn)
                .field("topics", topics)
                .finish(),
            Command::ProducerSends { client, topic } => f
                .debug_struct("ProducerSends")
                .field("client", client)
                .field("topic", topic)
                .finish(),
            Command::GroupProducerUp { conn, groups, .. } => f
                .debug_struct("GroupProducerUp")
                .field("conn", conn)
                .field("groups", groups)
                .finish(),
            Command::ProducerDown { conn } => {
                f.debug_struct("ProducerDown").field("conn", conn).finish()
            }
            Command::Inspect(_) => f.write_str("Inspect"),
            Command::Tick => f.write_str("Tick"),
            Command::Synced { upto, result, .. } => f
                .debug_struct("Synced")
                .field("upto", upto)
                .field("result", result)
                .finish(),
            Command::Shutdown(_) => f.write_str("Shutdown"),
        }
    }
}

/// Why a command got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoreFailure {
    /// The core thread has stopped (shutting down).
    Stopped,
    /// The storage failed; the request was not applied.
    Storage(String),
}

impl std::fmt::Display for CoreFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CoreFailure::Stopped => f.write_str("the broker is shutting down"),
            CoreFailure::Storage(e) => write!(f, "storage failure: {e}"),
        }
    }
}

/// The gRPC side's handle on the core thread. Cheap to clone.
#[derive(Clone, Debug)]
pub struct CoreHandle {
    tx: mpsc::Sender<Command>,
    /// The core thread stops (flushing) once every handle is gone.
    _alive: Arc<()>,
}

impl CoreHandle {
    fn send(&self, cmd: Command) -> Result<(), CoreFailure> {
        self.tx.send(cmd).map_err(|_| CoreFailure::Stopped)
    }

    /// Runs a request to its reply (under sync flush, after the fsync that covers it).
    pub async fn request(&self, request: Request) -> Result<Reply, CoreFailure> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Request {
            request: Box::new(request),
            reply,
            watch: None,
        })?;
        rx.await
            .map_err(|_| CoreFailure::Stopped)?
            .map_err(CoreFailure::Storage)
    }

    /// Runs a receive (or a pull); when it finds nothing, the returned receiver fires once
    /// the topic has a newly visible message.
    pub async fn receive(
        &self,
        request: Request,
    ) -> Result<(Reply, oneshot::Receiver<()>), CoreFailure> {
        let (reply, rx) = oneshot::channel();
        let (watch, woken) = oneshot::channel();
        self.send(Command::Request {
            request: Box::new(request),
            reply,
            watch: Some(watch),
        })?;
        let reply = rx
            .await
            .map_err(|_| CoreFailure::Stopped)?
            .map_err(CoreFailure::Storage)?;
        Ok((reply, woken))
    }

    /// Runs a closure with the broker on the core thread and returns its result.
    pub async fn inspect<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut CoreBroker) -> T + Send + 'static,
    ) -> Result<T, CoreFailure> {
        let (tx, rx) = oneshot::channel();
        self.send(Command::Inspect(Box::new(move |b| {
            let _ = tx.send(f(b));
        })))?;
        rx.await.map_err(|_| CoreFailure::Stopped)
    }

    /// Declares a consumer group ([`Broker::declare_group`]) and makes the declaration
    /// durable before answering, whatever the flush mode: for `rocklet admin group` and, later,
    /// mqadmin's updateSubGroup. `Ok(Err(_))`: the core refused the name.
    pub async fn declare_group(
        &self,
        name: String,
        fifo: bool,
    ) -> Result<Result<(), ClientError>, CoreFailure> {
        self.inspect(move |b| match b.declare_group(&name, fifo) {
            Ok(Ok(())) => b
                .sync()
                .map(Ok)
                .map_err(|e| CoreFailure::Storage(e.to_string())),
            Ok(Err(e)) => Ok(Err(e)),
            Err(e) => Err(CoreFailure::Storage(e.to_string())),
        })
        .await?
    }

    /// Declares a producer connection's topics.
    pub fn producer_up(
        &self,
        conn: u64,
        client: String,
        topics: Vec<String>,
        checks: tmpsc::UnboundedSender<CheckRequest>,
    ) {
        let _ = self.send(Command::ProducerUp {
            conn,
            client,
            topics,
            checks,
        });
    }

    /// Declares the producer groups a remoting connection serves (replacing earlier ones).
    pub fn group_producer_up(
        &self,
        conn: u64,
        groups: Vec<String>,
        checks: tmpsc::UnboundedSender<CheckRequest>,
    ) {
        let _ = self.send(Command::GroupProducerUp {
            conn,
            groups,
            checks,
        });
    }

    /// A client is about to send a transactional message to `topic`.
    pub fn producer_sends(&self, client: String, topic: String) {
        let _ = self.send(Command::ProducerSends { client, topic });
    }

    /// A producer connection closed.
    pub fn producer_down(&self, conn: u64) {
        let _ = self.send(Command::ProducerDown { conn });
    }

    /// Wakes the core thread to look at the clock (tests with a manual clock).
    pub fn tick(&self) {
        let _ = self.send(Command::Tick);
    }

    /// Flushes and stops the core thread.
    pub async fn shutdown(&self) {
        let (tx, rx) = oneshot::channel();
        if self.send(Command::Shutdown(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

struct Producer {
    client: String,
    topics: Vec<String>,
    /// Producer groups (RocketMQ 4 connections; gRPC producers have none).
    groups: Vec<String>,
    checks: tmpsc::UnboundedSender<CheckRequest>,
}

struct Pending {
    reply: oneshot::Sender<Result<Reply, String>>,
    watch: Option<(String, oneshot::Sender<()>)>,
}

/// The state of the core thread.
struct Driver {
    broker: CoreBroker,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    next_id: u64,
    pending: HashMap<u64, Pending>,
    waiters: HashMap<String, Vec<oneshot::Sender<()>>>,
    producers: HashMap<u64, Producer>,
    online: HashSet<String>,
    round_robin: usize,
    /// Detached syncs to the sync thread (sync flush).
    sync_tx: mpsc::Sender<(u64, DetachedSync)>,
    sync_in_flight: bool,
    /// After a failed sync, the next is not tried before this time.
    sync_retry_at: Millis,
    /// Gone when every [`CoreHandle`] is.
    handles: Weak<()>,
}

/// Wait after a failed fsync before the next try.
const SYNC_RETRY_MS: Millis = 100;

/// Starts the core thread over an opened broker.
pub fn spawn(
    broker: CoreBroker,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
) -> std::io::Result<(CoreHandle, JoinHandle<()>)> {
    let (tx, rx) = mpsc::channel();
    let (sync_tx, sync_rx) = mpsc::channel::<(u64, DetachedSync)>();
    let done = tx.clone();
    // The sync thread ends when the driver drops `sync_tx`.
    std::thread::Builder::new()
        .name("rocklet-sync".into())
        .spawn(move || {
            for (upto, job) in sync_rx {
                let t = Instant::now();
                let result = job.run();
                let took = t.elapsed();
                let synced = Command::Synced {
                    upto,
                    job,
                    result,
                    took,
                };
                if done.send(synced).is_err() {
                    break;
                }
            }
        })?;
    let alive = Arc::new(());
    let driver = Driver {
        broker,
        clock,
        metrics,
        next_id: 0,
        pending: HashMap::new(),
        waiters: HashMap::new(),
        producers: HashMap::new(),
        online: HashSet::new(),
        round_robin: 0,
        sync_tx,
        sync_in_flight: false,
        sync_retry_at: 0,
        handles: Arc::downgrade(&alive),
    };
    let join = std::thread::Builder::new()
        .name("rocklet-core".into())
        .spawn(move || driver.run(rx))?;
    Ok((CoreHandle { tx, _alive: alive }, join))
}

/// Commands taken into one group at most (so replies of a huge burst are not held back).
const MAX_GROUP: usize = 4096;
/// The loop looks at the clock at least this often.
const MAX_WAIT_MS: Millis = 1_000;

impl Driver {
    fn run(mut self, rx: mpsc::Receiver<Command>) {
        let sync_mode = self.broker.config().flush == FlushMode::Sync;
        let mut shutdown: Option<oneshot::Sender<()>> = None;
        loop {
            let now = self.clock.now_ms();
            let mut wake = now + MAX_WAIT_MS;
            // Timers and, under async flush, the next scheduled fsync.
            if let Some(t) = self.broker.poll_timeout() {
                wake = wake.min(t);
            }
            if sync_mode && !self.sync_in_flight && self.broker.needs_sync() {
                wake = wake.min(self.sync_retry_at);
            }
            let first = if wake <= now {
                rx.try_recv().map_err(|e| match e {
                    TryRecvError::Empty => RecvTimeoutError::Timeout,
                    TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
                })
            } else {
                rx.recv_timeout(Duration::from_millis(wake - now))
            };
            let mut stop = false;
            match first {
                Ok(cmd) => {
                    let mut taken = 1;
                    if let Some(s) = self.command(cmd) {
                        shutdown = Some(s);
                        stop = true;
                    }
                    while !stop && taken < MAX_GROUP {
                        match rx.try_recv() {
                            Ok(cmd) => {
                                taken += 1;
                                if let Some(s) = self.command(cmd) {
                                    shutdown = Some(s);
                                    stop = true;
                                }
                            }
                            Err(_) => break,
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => stop = true,
            }
            // The sync thread holds a sender too: every handle gone means stop.
            if self.handles.strong_count() == 0 {
                stop = true;
            }
            let now = self.clock.now_ms();
            // Due timers; under async flush this is also where the core's interval fsync
            // happens (its deadline is part of poll_timeout()).
            let syncs = self.broker.stats().syncs;
            let t = Instant::now();
            if let Err(e) = self.broker.handle_timeout(now) {
                error!(error = %e, "timers failed");
            }
            if self.broker.stats().syncs > syncs {
                self.metrics.fsync_latency.observe(t.elapsed());
            }
            // Group commit: one fsync for every request drained above, off this thread
            // (at the stop, here: it covers everything, including a sync in flight).
            if stop {
                self.sync();
            } else if sync_mode {
                self.start_sync(now);
            }
            self.drain();
            if stop {
                break;
            }
        }
        // Anything still waiting can no longer be answered: dropping the oneshots says so.
        self.pending.clear();
        info!(
            log_end = self.broker.log_end(),
            log_synced = self.broker.log_synced(),
            "core stopped; log flushed"
        );
        if let Some(s) = shutdown {
            let _ = s.send(());
        }
    }

    /// Detaches a sync of everything appended to the sync thread, unless one is in flight.
    fn start_sync(&mut self, now: Millis) {
        if self.sync_in_flight || now < self.sync_retry_at {
            return;
        }
        let Some(upto) = self.broker.sync_target() else {
            return;
        };
        match self.broker.storage_mut().detach_sync() {
            Ok(Some(job)) => match self.sync_tx.send((upto, job)) {
                Ok(()) => self.sync_in_flight = true,
                Err(_) => self.sync(),
            },
            // Memory storage (nothing to fsync), or nothing the files still owe.
            Ok(None) => self.sync(),
            Err(e) => {
                error!(error = %e, "cannot start an fsync; syncing here");
                self.sync();
            }
        }
    }

    /// A detached sync finished.
    fn synced(
        &mut self,
        upto: u64,
        job: &DetachedSync,
        result: std::io::Result<()>,
        took: Duration,
    ) {
        self.sync_in_flight = false;
        match result {
            Ok(()) => {
                self.broker.storage_mut().detached_done(job, true);
                self.broker.synced_to(upto);
                self.metrics.fsync_latency.observe(took);
            }
            Err(e) => {
                self.broker.storage_mut().detached_done(job, false);
                self.sync_retry_at = self.clock.now_ms() + SYNC_RETRY_MS;
                error!(error = %e, "fsync failed; replies that wait on it stay held until a sync succeeds");
            }
        }
    }

    fn sync(&mut self) {
        let needed = self.broker.needs_sync();
        let t = Instant::now();
        match self.broker.sync() {
            Ok(()) => {
                if needed {
                    self.metrics.fsync_latency.observe(t.elapsed());
                }
            }
            Err(e) => {
                error!(error = %e, "fsync failed; replies that wait on it stay held until a sync succeeds")
            }
        }
    }

    /// Handles one command; `Some` when it is the shutdown.
    fn command(&mut self, cmd: Command) -> Option<oneshot::Sender<()>> {
        let now = self.clock.now_ms();
        match cmd {
            Command::Request {
                request,
                reply,
                watch,
            } => {
                self.next_id += 1;
                let id = self.next_id;
                let watch = match (&*request, watch) {
                    (Request::Receive { topic, .. } | Request::Pull { topic, .. }, Some(w)) => {
                        Some((topic.clone(), w))
                    }
                    _ => None,
                };
                // An ack or dead-lettering by a FIFO group may unlock its queue; the core gives
                // no availability notice for that, so its long polls are woken here.
                let unlocks = match &*request {
                    Request::Ack { group, handle }
                    | Request::ForwardToDeadLetter { group, handle }
                        if self.broker.group_is_fifo(group) =>
                    {
                        Some(handle.topic.clone())
                    }
                    _ => None,
                };
                self.pending.insert(id, Pending { reply, watch });
                if let Err(e) = self.broker.handle(now, id, *request) {
                    error!(error = %e, "request failed in storage; not applied");
                    if let Some(p) = self.pending.remove(&id) {
                        let _ = p.reply.send(Err(e.to_string()));
                    }
                } else if let Some(topic) = unlocks {
                    self.wake(&topic);
                }
            }
            Command::ProducerUp {
                conn,
                client,
                topics,
                checks,
            } => {
                debug!(conn, ?topics, "producer online");
                self.producers.insert(
                    conn,
                    Producer {
                        client,
                        topics,
                        groups: Vec::new(),
                        checks,
                    },
                );
                self.update_online(now);
            }
            Command::GroupProducerUp {
                conn,
                groups,
                checks,
            } => {
                debug!(conn, ?groups, "remoting producer online");
                self.producers.insert(
                    conn,
                    Producer {
                        client: String::new(),
                        topics: Vec::new(),
                        groups,
                        checks,
                    },
                );
                self.update_online(now);
            }
            Command::ProducerSends { client, topic } => {
                let mut changed = false;
                for p in self.producers.values_mut() {
                    if p.client == client && !p.topics.contains(&topic) {
                        p.topics.push(topic.clone());
                        changed = true;
                    }
                }
                if changed {
                    self.update_online(now);
                }
            }
            Command::ProducerDown { conn } => {
                if self.producers.remove(&conn).is_some() {
                    debug!(conn, "producer offline");
                    self.update_online(now);
                }
            }
            Command::Inspect(f) => f(&mut self.broker),
            Command::Tick => {}
            Command::Synced {
                upto,
                job,
                result,
                took,
            } => self.synced(upto, &job, result, took),
            Command::Shutdown(s) => return Some(s),
        }
        None
    }

    /// Tells the core which transaction groups have a live producer.
    fn update_online(&mut self, now: Millis) {
        let groups: HashSet<String> = self
            .producers
            .values()
            .flat_map(|p| {
                p.topics
                    .iter()
                    .map(|t| txn_group(t))
                    .chain(p.groups.iter().cloned())
            })
            .collect();
        for g in groups.difference(&self.online) {
            self.broker.set_producer_online(now, g, true);
        }
        for g in self.online.difference(&groups) {
            self.broker.set_producer_online(now, g, false);
        }
        self.online = groups;
        self.metrics
            .producers_online
            .store(self.producers.len() as u64, Ordering::Relaxed);
    }

    fn drain(&mut self) {
        while let Some(out) = self.broker.poll_output() {
            match out {
                Output::Reply { id, reply } => {
                    let Some(p) = self.pending.remove(&id) else {
                        continue;
                    };
                    let empty = match &reply {
                        Reply::Received(msgs) => msgs.is_empty(),
                        Reply::Pulled { messages, .. } => messages.is_empty(),
                        _ => false,
                    };
                    if let (true, Some((topic, w))) = (empty, p.watch) {
                        let list = self.waiters.entry(topic).or_default();
                        list.retain(|w| !w.is_closed());
                        list.push(w);
                    }
                    let _ = p.reply.send(Ok(reply));
                }
                Output::Failed { id, reason } => {
                    if let Some(p) = self.pending.remove(&id) {
                        let _ = p.reply.send(Err(reason));
                    }
                }
                Output::Check(check) => self.route_check(check),
                Output::Available { topic, .. } => self.wake(&topic),
                Output::Trace(t) => {
                    debug!(kind = t.kind.as_str(), offset = t.offset, topic = %t.topic, detail = %t.detail, "trace")
                }
            }
        }
    }

    /// Wakes the long polls waiting on `topic` (each receives again; one that finds nothing
    /// waits anew).
    fn wake(&mut self, topic: &str) {
        if let Some(list) = self.waiters.remove(topic) {
            for w in list {
                let _ = w.send(());
            }
        }
    }

    /// Sends a transaction check to one live producer that can answer it: a gRPC producer
    /// that declared the topic (group `%TXN%<topic>`), or a remoting connection of the group.
    fn route_check(&mut self, check: CheckRequest) {
        let topic = check.message.topic.clone();
        let by_topic = check.group == txn_group(&topic);
        let mut conns: Vec<u64> = self
            .producers
            .iter()
            .filter(|(_, p)| {
                (by_topic && p.topics.contains(&topic)) || p.groups.contains(&check.group)
            })
            .map(|(c, _)| *c)
            .collect();
        conns.sort_unstable();
        let n = conns.len();
        let mut check = Some(check);
        for i in 0..n {
            let conn = conns[(self.round_robin + i) % n];
            let c = check.take().expect("present until sent");
            match self.producers[&conn].checks.send(c) {
                Ok(()) => {
                    self.round_robin = self.round_robin.wrapping_add(1);
                    self.metrics.checks_pushed.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Err(tmpsc::error::SendError(c)) => {
                    check = Some(c);
                    self.producers.remove(&conn);
                }
            }
        }
        if n > 0 {
            let now = self.clock.now_ms();
            self.update_online(now);
        }
        self.metrics
            .checks_unroutable
            .fetch_add(1, Ordering::Relaxed);
        if let Some(c) = check {
            warn!(txn = %c.txn, topic = %topic, check = c.check, "no producer of the topic is connected; the check is repeated after the check interval");
        }
    }
}
