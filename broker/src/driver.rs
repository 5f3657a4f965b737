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
//! - checkpoints ([`Command::Checkpoint`], from `checkpoint.rs`'s schedule): the core
//!   thread writes the queues' tails and index entries (no fsync) and copies the state
//!   (`Broker::begin_checkpoint`), then detaches a sync of everything written so far that
//!   carries the copy (`FileStorage::detach_checkpoint`) — in place of the group commit's
//!   sync, once none is in flight. The sync thread runs the sync and, only when it
//!   succeeded, encodes the copy and writes `CHECKPOINT` (atomic replace, fsynced, directory fsynced). A failed
//!   sync is a failed detached sync (below): the checkpoint is never written. The clean
//!   stop's checkpoint is taken on this thread (nothing waits on it); it supersedes one in
//!   flight, which then writes nothing.
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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rocklet_core::{
    AnyStorage, Broker, CheckRequest, CheckpointWrite, ClientError, DetachedSync, Error, FlushMode,
    Message, Millis, NewMessage, Output, ReceiptHandle, Received, Reply, Request, Resolution,
    SendResult, Storage, TagFilter, TxnId,
};
use tokio::sync::{mpsc as tmpsc, oneshot, watch};
use tracing::{debug, error, info, warn};

use crate::clock::Clock;
use crate::metrics::Metrics;

mod handle;
mod run;

pub use handle::{answer, Answer, CoreHandle, Ended, Pulled};
pub use run::{GROUP_BUDGET, MAX_GROUP, READ_BUDGET};

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

/// Where a checkpoint's answer goes: the offset it covers (`None`: nothing recorded), or why
/// it was not written.
pub type CheckpointReply = oneshot::Sender<Result<Option<u64>, String>>;

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
    /// Record a checkpoint ([`CoreHandle::checkpoint`]); the answer comes once it is
    /// written.
    Checkpoint(CheckpointReply),
    /// The sync thread finished a detached sync of the log below `upto` (and wrote the
    /// checkpoint it carried, if it did).
    Synced {
        upto: u64,
        job: DetachedSync,
        result: std::io::Result<CheckpointWrite>,
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
            Command::Checkpoint(_) => f.write_str("Checkpoint"),
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
    /// A checkpoint asked for and not yet taken.
    checkpoint_wanted: Option<CheckpointReply>,
    /// The checkpoint the sync in flight carries: the offset it covers, and who waits.
    checkpoint_in_flight: Option<(u64, CheckpointReply)>,
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
        checkpoint_wanted: None,
        checkpoint_in_flight: None,
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
            writable: Arc::new(AtomicBool::new(true)),
        },
        join,
    ))
}
