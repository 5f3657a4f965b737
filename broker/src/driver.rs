//! The core thread: one std thread owns the [`Broker`] and drives it as quinn's
//! `ConnectionDriver` drives a connection (../shared/STYLE.md §6).
//!
//! The protocols reach it through [`CoreHandle`] (`driver/handle.rs`: typed requests, each
//! reply matched once in [`answer`]; read-only inspections; durable table changes); this file
//! is the thread's side.
//!
//! gRPC tasks send [`Command`]s over a channel, each with a oneshot for its answer. The
//! loop blocks for the next command or until the core's `poll_timeout()`, takes every queued
//! command into two local queues — inspections ([`Command::Inspect`]: admin, routes,
//! metrics) and everything else — and serves the second first: its requests go to
//! `handle(now, id, request)` (at most [`MAX_GROUP`] or [`GROUP_BUDGET`] of them per group),
//! then the group is made durable and its replies go out, and only then do inspections run:
//! one after each group (so a flood of writes cannot starve them), then more, one at a
//! time, while no other command waits, for at most [`READ_BUDGET`] per round. A write
//! therefore waits behind at most one inspection.
//!
//! Durability:
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
//! long polls (receives and pulls). The tokio runtime
//! never waits on an fsync.
//!
//! Crash-only: a failed fsync (detached or run here), the core reporting itself failed
//! ([`Broker::failed`]: an append left a partial record), or an append the device refused
//! (EIO, EROFS; not ENOSPC, which clears when space returns) is never retried — on Linux a
//! failed fsync may mark the pages it could not write clean, so a retry "succeeds" without
//! the data. The driver tells the core ([`Broker::sync_failed`]), hands every reply that
//! waited on the sync out as an error, logs one ERROR naming the segment files, the log
//! offsets that were not made durable and the errno, and raises [`Fatal`]
//! ([`CoreHandle::wait_fatal`]); from then on every request is answered with an error until
//! the host stops it. `rocklet broker` then stops its listeners and exits non-zero, so a
//! supervisor restarts it and recovery reads what is really on disk. A panic of the core
//! thread raises [`Fatal::Panic`] the same way (callers waiting on it get
//! [`CoreFailure::Stopped`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rocklet_core::{
    AnyStorage, Broker, CheckRequest, ClientError, DetachedSync, Error, FlushMode, Message, Millis,
    NewMessage, Output, ReceiptHandle, Received, Reply, Request, Resolution, SendResult, Storage,
    TagFilter, TxnId,
};
use tokio::sync::{mpsc as tmpsc, oneshot, watch};
use tracing::{debug, error, info, warn};

use crate::clock::Clock;
use crate::metrics::Metrics;

mod handle;

pub use handle::{answer, Answer, CoreHandle, Ended, Pulled};

/// The broker type the host runs.
pub type CoreBroker = Broker<AnyStorage>;

/// A failure of a core call in the host.
pub type CoreError = Error<<AnyStorage as Storage>::Error>;

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
    /// Run a closure that replaces the broker (a replica reopening its cut log), then tell
    /// the new one which producer groups are online: the driver's connections outlive it.
    Reopen(InspectFn),
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
            Command::Reopen(_) => f.write_str("Reopen"),
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
    /// The core answered a request with a reply of another request (a broker bug, reported
    /// rather than panicking): the typed methods of [`CoreHandle`] name it here, the one
    /// place that handles it. Holds the request's kind and the reply.
    Unexpected(String),
}

impl std::fmt::Display for CoreFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CoreFailure::Stopped => f.write_str("the broker is shutting down"),
            CoreFailure::Storage(e) => write!(f, "storage failure: {e}"),
            CoreFailure::Unexpected(e) => write!(f, "unexpected reply from the core: {e}"),
        }
    }
}

/// Why the core thread stopped serving for good. The host should exit non-zero (crash-only):
/// a supervisor restarts it and recovery reads what is really on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fatal {
    /// A sync failed, an append left a partial record, or the device refused an append (EIO,
    /// EROFS): what the storage holds is unknown, so the core takes nothing more
    /// ([`Broker::failed`]). Every reply that waited on a sync went out as an error.
    Storage(String),
    /// The core thread panicked.
    Panic(String),
}

impl std::fmt::Display for Fatal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fatal::Storage(e) => write!(f, "the storage failed: {e}"),
            Fatal::Panic(e) => write!(f, "the core thread panicked: {e}"),
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
    /// Topics in `waiters` after its last sweep (see `Driver::watch`).
    waiters_swept_at: usize,
    producers: HashMap<u64, Producer>,
    online: HashSet<String>,
    round_robin: usize,
    /// Detached syncs to the sync thread (sync flush).
    sync_tx: mpsc::Sender<(u64, DetachedSync)>,
    sync_in_flight: bool,
    /// Raised once when the broker fails for good.
    fatal: Arc<watch::Sender<Option<Fatal>>>,
    /// The log's end after each round.
    log_end: watch::Sender<u64>,
    /// Debug builds only: a send to this topic panics the core thread
    /// (`ROCKLET_DEBUG_PANIC_ON_TOPIC`, read once at start), for the test of the exit path.
    panic_topic: Option<String>,
    /// Gone when every [`CoreHandle`] is.
    handles: Weak<()>,
}

/// The environment variable that, in debug builds only, names a topic whose sends panic the
/// core thread. Release builds never read it.
pub const DEBUG_PANIC_ENV: &str = "ROCKLET_DEBUG_PANIC_ON_TOPIC";

fn debug_panic_topic() -> Option<String> {
    if cfg!(debug_assertions) {
        let t = std::env::var(DEBUG_PANIC_ENV)
            .ok()
            .filter(|t| !t.is_empty());
        if let Some(t) = &t {
            warn!(topic = %t, "{DEBUG_PANIC_ENV} is set (debug build): a send to this topic panics the core thread");
        }
        t
    } else {
        None
    }
}

/// Whether an I/O error says the device or the file system gave up (EIO, or EROFS after
/// the file system went read-only on an error), not a condition that clears by itself
/// such as a full disk (ENOSPC, where the broker refuses the write and serves on). The
/// host treats such an append failure as a failed sync: nothing pending is acknowledged,
/// and the process exits so recovery reads what is on disk.
fn device_failed(e: &std::io::Error) -> bool {
    /// EIO on Linux and every other Unix.
    const EIO: i32 = 5;
    e.raw_os_error() == Some(EIO) || e.kind() == std::io::ErrorKind::ReadOnlyFilesystem
}

/// The text of a panic payload.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_string()
    }
}

/// One command sent through a [`CoreHandle`] ran (or can no longer run).
fn ran(waiting: &AtomicU64) {
    let _ = waiting.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
}

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
                // A panic here would leave the sync in flight for ever: report it as a
                // failed sync instead.
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run()))
                    .unwrap_or_else(|p| {
                        Err(std::io::Error::other(format!(
                            "the sync thread panicked: {}",
                            panic_text(&*p)
                        )))
                    });
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
    let waiting = metrics.core_commands_waiting.clone();
    let (fatal_tx, fatal_rx) = watch::channel(None);
    let fatal_tx = Arc::new(fatal_tx);
    let (log_end_tx, log_end_rx) = watch::channel(broker.log_end());
    let driver = Driver {
        broker,
        clock,
        metrics,
        next_id: 0,
        pending: HashMap::new(),
        waiters: HashMap::new(),
        waiters_swept_at: 0,
        producers: HashMap::new(),
        online: HashSet::new(),
        round_robin: 0,
        sync_tx,
        sync_in_flight: false,
        fatal: fatal_tx.clone(),
        log_end: log_end_tx,
        panic_topic: debug_panic_topic(),
        handles: Arc::downgrade(&alive),
    };
    let join = std::thread::Builder::new()
        .name("rocklet-core".into())
        .spawn(move || {
            // A panic unwinds the driver (every waiting caller gets `Stopped`, later sends
            // fail): say so, so the host exits instead of answering "shutting down" for ever.
            if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| driver.run(rx))) {
                let why = panic_text(&*p);
                error!(panic = %why, "the core thread panicked; the broker stops (restart it: recovery reads the log)");
                fatal_tx.send_replace(Some(Fatal::Panic(why)));
            }
        })?;
    Ok((
        CoreHandle {
            tx,
            fatal: fatal_rx,
            log_end: log_end_rx,
            _alive: alive,
            waiting,
        },
        join,
    ))
}

/// Commands handled in one group at most before it is made durable and its replies go out.
pub const MAX_GROUP: usize = 4096;
/// Time one group of commands may take before it is made durable and its replies go out.
pub const GROUP_BUDGET: Duration = Duration::from_millis(2);
/// Time inspections may take in one round (they yield to any other command after each one).
pub const READ_BUDGET: Duration = Duration::from_millis(5);
/// The loop looks at the clock at least this often.
const MAX_WAIT_MS: Millis = 1_000;
/// The long-poll wake-up map is first swept of ended polls at this many topics.
const WAITERS_SWEEP_MIN: usize = 1024;

/// Commands taken from the channel, by lane.
#[derive(Default)]
struct Queues {
    /// Requests and control commands, in arrival order: served first.
    writes: VecDeque<Command>,
    /// Inspections, in arrival order: served while no write waits.
    reads: VecDeque<InspectFn>,
    /// Every sender is gone.
    disconnected: bool,
}

impl Queues {
    fn push(&mut self, cmd: Command) {
        match cmd {
            Command::Inspect(f) => self.reads.push_back(f),
            cmd => self.writes.push_back(cmd),
        }
    }

    fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.reads.is_empty()
    }

    /// Takes what is waiting in the channel (at most [`MAX_GROUP`] commands).
    fn take(&mut self, rx: &mpsc::Receiver<Command>) {
        for _ in 0..MAX_GROUP {
            match rx.try_recv() {
                Ok(cmd) => self.push(cmd),
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => {
                    self.disconnected = true;
                    return;
                }
            }
        }
    }
}

impl Driver {
    fn run(mut self, rx: mpsc::Receiver<Command>) {
        let sync_mode = self.broker.config().flush == FlushMode::Sync;
        let mut shutdown: Option<oneshot::Sender<()>> = None;
        let mut q = Queues::default();
        loop {
            if q.is_empty() && !q.disconnected {
                let now = self.clock.now();
                let mut wake = now + MAX_WAIT_MS;
                // Timers and, under async flush, the next scheduled fsync (none once the
                // broker failed: they would be due for ever).
                if let Some(t) = self
                    .broker
                    .poll_timeout()
                    .filter(|_| self.broker.failed().is_none())
                {
                    wake = wake.min(t);
                }
                if wake > now {
                    match rx.recv_timeout(Duration::from_millis(wake - now)) {
                        Ok(cmd) => q.push(cmd),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => q.disconnected = true,
                    }
                }
            }
            q.take(&rx);
            // Requests and control commands first, one group within its budget.
            let mut stop = false;
            let started = Instant::now();
            let mut taken = 0;
            while let Some(cmd) = q.writes.pop_front() {
                taken += 1;
                // Every command but a sync thread's report came through a handle.
                if !matches!(cmd, Command::Synced { .. }) {
                    ran(&self.metrics.core_commands_waiting);
                }
                if let Some(s) = self.command(cmd) {
                    shutdown = Some(s);
                    stop = true;
                    break;
                }
                if taken >= MAX_GROUP || started.elapsed() >= GROUP_BUDGET {
                    break;
                }
            }
            // The sync thread holds a sender too: every handle gone means stop.
            if q.disconnected || self.handles.strong_count() == 0 {
                stop = true;
            }
            let now = self.clock.now();
            // Due timers; under async flush this is also where the core's interval fsync
            // happens (its deadline is part of poll_timeout()).
            let syncs = self.broker.stats().syncs;
            let t = Instant::now();
            if let Err(e) = self.broker.handle_timeout(now) {
                self.storage_error(
                    "timers",
                    &e,
                    self.broker.log_synced()..self.broker.log_end(),
                );
            }
            if self.broker.stats().syncs > syncs {
                self.metrics.fsync_latency.observe(t.elapsed());
            }
            // Group commit: one fsync for every request handled above, off this thread
            // (at the stop, here: it covers everything, including a sync in flight).
            if stop {
                self.sync();
            } else if sync_mode {
                self.start_sync();
            }
            self.drain();
            self.check_failed();
            if stop {
                break;
            }
            // Then inspections: one in any case (so a flood of writes does not starve them),
            // more while no other command waits.
            let started = Instant::now();
            let mut first = true;
            while first || q.writes.is_empty() {
                first = false;
                let Some(f) = q.reads.pop_front() else { break };
                ran(&self.metrics.core_commands_waiting);
                f(&mut self.broker);
                if started.elapsed() >= READ_BUDGET {
                    break;
                }
                q.take(&rx);
            }
            // An inspection may have written (admin resolve runs a request).
            self.drain();
            self.check_failed();
            let end = self.broker.log_end();
            self.log_end.send_if_modified(|v| {
                let changed = *v != end;
                *v = end;
                changed
            });
        }
        // Anything still waiting can no longer be answered: dropping the oneshots says so.
        self.pending.clear();
        // A clean stop is recorded as one (LOG_END): the next start trusts the page cache.
        if self.broker.failed().is_none() {
            if let Err(e) = self.broker.close() {
                let end = self.broker.log_end();
                self.storage_error("closing the log", &e, end..end);
            }
        }
        match self.broker.failed() {
            None => info!(
                log_end = self.broker.log_end(),
                log_synced = self.broker.log_synced(),
                "core stopped; log flushed"
            ),
            Some(why) => warn!(
                log_end = self.broker.log_end(),
                log_synced = self.broker.log_synced(),
                reason = why,
                "core stopped after a storage failure; what is durable is what recovery finds on the next start"
            ),
        }
        if let Some(s) = shutdown {
            let _ = s.send(());
        }
    }

    /// Detaches a sync of everything appended to the sync thread, unless one is in flight.
    fn start_sync(&mut self) {
        if self.sync_in_flight || self.broker.failed().is_some() {
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
                // Nothing was synced yet: syncing here reports a failure properly.
                warn!(error = %e, "cannot start a detached fsync; syncing on the core thread");
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
                let range = self.broker.log_synced()..upto;
                let reason = format!(
                    "fsync of log offsets {}..{} failed: {e}",
                    range.start, range.end
                );
                // Never retried: the core fails every reply that waited on it.
                self.broker.sync_failed(&reason);
                self.fatal_storage("fsync", range, &e, reason);
            }
        }
    }

    fn sync(&mut self) {
        let needed = self.broker.needs_sync();
        let range = self.broker.log_synced()..self.broker.log_end();
        let t = Instant::now();
        match self.broker.sync() {
            Ok(()) => {
                if needed {
                    self.metrics.fsync_latency.observe(t.elapsed());
                }
            }
            Err(e) => self.storage_error("fsync", &e, range),
        }
    }

    /// A core call failed: fatal when the core is failed now or the device refused a write
    /// ([`device_failed`]), else (a full disk under a timer's append, say) logged and served
    /// on.
    fn storage_error(
        &mut self,
        what: &str,
        e: &Error<std::io::Error>,
        range: std::ops::Range<u64>,
    ) {
        match e {
            // Failed before: reported then.
            Error::Failed { .. } => {}
            Error::Storage(io) if self.broker.failed().is_some() || device_failed(io) => {
                if self.broker.failed().is_none() {
                    self.broker.sync_failed(&format!("{what} failed: {io}"));
                }
                let reason = self.broker.failed().unwrap_or_default().to_string();
                self.fatal_storage(what, range, io, reason);
            }
            e => error!(error = %e, "{what} failed"),
        }
    }

    /// Raises [`Fatal`] once the core reports itself failed (whatever the path).
    fn check_failed(&mut self) {
        if self.fatal.borrow().is_some() {
            return;
        }
        if let Some(why) = self.broker.failed().map(str::to_string) {
            self.record_failure();
            error!(data_dir = %self.data_dir(), reason = %why, "the broker failed; it acknowledges nothing more and stops (restart it: recovery reads what is on disk)");
            self.fatal.send_replace(Some(Fatal::Storage(why)));
        }
    }

    /// One ERROR naming the segment files, the log offsets that were not made durable and
    /// the errno; then [`Fatal`] for the host.
    fn fatal_storage(
        &mut self,
        what: &str,
        range: std::ops::Range<u64>,
        e: &std::io::Error,
        reason: String,
    ) {
        if self.fatal.borrow().is_some() {
            return;
        }
        self.record_failure();
        let files = self.segments_of(range.clone());
        error!(
            data_dir = %self.data_dir(),
            files = %files,
            offsets = %format!("{}..{}", range.start, range.end),
            errno = e.raw_os_error().unwrap_or(0),
            error = %e,
            "{what} failed: nothing it covered is acknowledged (no retry: a failed fsync may have dropped the data); the broker stops, restart it so recovery reads what is on disk"
        );
        self.fatal.send_replace(Some(Fatal::Storage(reason)));
    }

    /// Tells the next start where what this run made durable ends
    /// ([`rocklet_core::FileStorage::record_failure`]): recovery cuts everything after it, which nothing
    /// acknowledged, however much of it reached the disk out of order.
    fn record_failure(&mut self) {
        let durable = self.broker.log_synced();
        if let AnyStorage::File(f) = self.broker.storage_mut() {
            if let Err(e) = f.record_failure(durable) {
                warn!(data_dir = %f.dir().display(), durable, error = %e, "cannot record where the durable log ends; the next start judges the tail by its bytes alone");
            }
        }
    }

    fn data_dir(&self) -> String {
        match self.broker.storage() {
            AnyStorage::File(f) => f.dir().display().to_string(),
            AnyStorage::Mem(_) => "(memory)".to_string(),
        }
    }

    /// The segment files that hold log offsets in `range`.
    fn segments_of(&mut self, range: std::ops::Range<u64>) -> String {
        let dir = self.data_dir();
        let Ok(bases) = self.broker.storage_mut().segments() else {
            return format!("{dir}/?");
        };
        let mut names = Vec::new();
        for (i, &base) in bases.iter().enumerate() {
            let next = bases.get(i + 1).copied().unwrap_or(u64::MAX);
            if base < range.end.max(range.start + 1) && next > range.start {
                names.push(format!("{dir}/{base:020}"));
            }
        }
        names.join(",")
    }

    /// Handles one command; `Some` when it is the shutdown.
    fn command(&mut self, cmd: Command) -> Option<oneshot::Sender<()>> {
        let now = self.clock.now();
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
                if let (Some(t), Request::Send { messages }) = (&self.panic_topic, &*request) {
                    if messages.iter().any(|m| &m.topic == t) {
                        panic!("{DEBUG_PANIC_ENV}: a send to `{t}` (debug builds only)");
                    }
                }
                self.pending.insert(id, Pending { reply, watch });
                if let Err(e) = self.broker.handle(now, id, *request) {
                    match &e {
                        // The broker failed earlier: every request is refused.
                        Error::Failed { .. } => {}
                        // A failed append that left a partial record fails the core; so
                        // does (by the host's choice) one the device refused.
                        Error::Storage(io)
                            if self.broker.failed().is_some() || device_failed(io) =>
                        {
                            if self.broker.failed().is_none() {
                                self.broker.sync_failed(&format!("an append failed: {io}"));
                            }
                            let reason = self.broker.failed().unwrap_or_default().to_string();
                            let at = self.broker.log_end();
                            self.fatal_storage("append", at..at + 1, io, reason);
                        }
                        e => error!(error = %e, "request failed in storage; not applied"),
                    }
                    if let Some(p) = self.pending.remove(&id) {
                        let _ = p.reply.send(Err(e.to_string()));
                    }
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
            Command::Reopen(f) => {
                f(&mut self.broker);
                for g in &self.online {
                    self.broker.set_producer_online(now, g, true);
                }
            }
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
                        self.watch(topic, w);
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
                    if let Some(s) = self.metrics.stories.get() {
                        s.record(&t);
                    }
                    debug!(kind = t.kind.as_str(), offset = t.offset, topic = %t.topic, detail = %t.detail, "trace")
                }
            }
        }
    }

    /// Registers a long poll's wake-up for `topic`. A poll that ends (answered at its
    /// deadline, or its client gone) drops its receiver; what it left behind is swept here
    /// whenever the map has doubled since the last sweep, so the map is bounded by the polls
    /// waiting (a receive on a topic that never gets a message, or does not exist, leaves
    /// nothing behind once it ends) at an amortized constant cost per poll.
    fn watch(&mut self, topic: String, w: oneshot::Sender<()>) {
        let list = self.waiters.entry(topic).or_default();
        list.retain(|w| !w.is_closed());
        list.push(w);
        if self.waiters.len()
            >= self
                .waiters_swept_at
                .saturating_mul(2)
                .max(WAITERS_SWEEP_MIN)
        {
            self.waiters.retain(|_, list| {
                list.retain(|w| !w.is_closed());
                !list.is_empty()
            });
            self.waiters.shrink_to(self.waiters.len() * 2);
            self.waiters_swept_at = self.waiters.len();
        }
        self.metrics
            .long_poll_topics
            .store(self.waiters.len() as u64, Ordering::Relaxed);
    }

    /// Wakes the long polls waiting on `topic` (each receives again; one that finds nothing
    /// waits anew).
    fn wake(&mut self, topic: &str) {
        if let Some(list) = self.waiters.remove(topic) {
            for w in list {
                let _ = w.send(());
            }
            self.metrics
                .long_poll_topics
                .store(self.waiters.len() as u64, Ordering::Relaxed);
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
            let now = self.clock.now();
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
