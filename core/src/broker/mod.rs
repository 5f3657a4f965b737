//! The state machine: one [`Broker`] over one log.

use alloc::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::cmp::Reverse;
use core::fmt;

use hashbrown::HashMap;

use crate::config::{Config, FlushMode};
use crate::error::Error;
use crate::log::{Log, LogError, RecoveryError, RecoveryReport, BATCH_LEN};
use crate::record::{self, sys_flag, Decoded, Header, Host, RecordView};
use crate::storage::Storage;
use crate::table::{PendingTable, Row};
use crate::topic::{self, TopicKind};
use crate::types::*;
use crate::Millis;

mod apply;
mod checkpoint;
mod consumers;
mod delays;
mod durability;
mod index;
mod message;
mod open;
mod order;
#[cfg(test)]
mod order_tests;
mod pages;
mod queue;
mod replication;
mod retention;
mod send;
mod state;
mod topics;
mod transactions;

pub(crate) use checkpoint::covered_offset as checkpoint_covers;
#[cfg(feature = "std")]
pub(crate) use checkpoint::whole_covers as whole_checkpoint_covers;
pub use checkpoint::CheckpointDraft;
pub use index::{INDEX_DIR, INDEX_ENTRIES, INDEX_SLOTS, MAX_CHAIN};
pub use message::offset_msg_id;
use message::*;
pub use order::{parse_order_conf, TopicOrder, MAX_ORDER_CONF};
pub use pages::{GroupLag, Page, MAX_PAGE};
use queue::*;
pub use queue::{tag_hash, CqUnit, CQ_DIR, CQ_FILE_UNITS, CQ_UNIT_BYTES};
pub use replication::{common_prefix, ReplicationError, Role};
pub use retention::{Retention, RetentionHold, MAX_CARRY_BYTES};
use state::*;
pub use state::{prop, PendingDelayInfo, PendingTxnInfo, Stats, TopicInfo, MAX_QUEUES};

/// How many recently used topics [`Broker::find_topic`] finds without hashing: a
/// transaction moves between three (its own, the half topic, the op topic), and one more.
const RECENT_TOPICS: usize = 4;

/// RocketMQ's transactional message store as a sans-IO state machine.
///
/// # Driving it
///
/// The host owns the clock, the storage's durability schedule and every connection; the
/// broker owns everything else. Its methods, in the order a host uses them:
///
/// - [`Broker::open`] recovers state from the storage (cutting a torn tail).
/// - **Inputs.** [`Broker::handle`] takes a request tagged with the host's id. Everything
///   due at or before `now` (checks, delayed deliveries, redeliveries) happens first, so
///   the order of events never depends on how often the host calls
///   [`Broker::handle_timeout`], which does only that part.
/// - **Durability.** [`Broker::sync`] makes every appended byte durable. Under
///   [`FlushMode::Sync`] replies to writes are held, and their messages invisible, until the
///   sync that covers them: call it after a burst of `handle`s (group commit), or whenever
///   [`Broker::needs_sync`] says so. Under [`FlushMode::Async`] call it at an interval.
/// - **Outputs.** After any of the above, drain [`Broker::poll_output`]: replies,
///   transaction checks to route to a producer of the group, availability notices for long
///   polling, trace events. Then sleep until [`Broker::poll_timeout`] or the next input.
/// - **Producers.** [`Broker::set_producer_online`] says whether a producer group can be
///   checked; checks of an offline group wait without using up attempts.
///
/// - **Failure.** A failed sync fails the broker for good ([`Broker::failed`]): what waited
///   on it comes out as [`Output::Failed`], later calls return [`Error::Failed`]; drop it and
///   open the storage again. A host that syncs off the broker's thread reports a failure with
///   [`Broker::sync_failed`].
///
/// [`Broker::execute`] runs one request to its reply (syncing when the flush mode needs
/// it) for hosts that call the broker synchronously.
///
/// `Err` is returned only for a storage failure or a corrupt log; a client's mistake is a
/// [`Reply::Error`], and the request that caused it changed nothing.
pub struct Broker<S: Storage> {
    cfg: Config,
    log: Log<S>,
    now: Millis,
    topic_ids: HashMap<String, u32>,
    topics: Vec<Topic>,
    /// The last few distinct topics [`Broker::topic_with`] gave, replaced oldest first (see
    /// [`Broker::find_topic`]); `u32::MAX` in a slot not used yet.
    recent_topics: [u32; RECENT_TOPICS],
    /// The slot of `recent_topics` the next new topic replaces.
    recent_next: u8,
    queues: Vec<Queue>,
    group_ids: HashMap<String, u32>,
    groups: Vec<Group>,
    txns: PendingTable<PendingTxn>,
    delays: PendingTable<PendingDelay>,
    offsets: HashMap<(u32, u32), u64>,
    /// Messages whose record lives in another topic than their queue's (committed halves,
    /// delivered delays): record offset → (queue, queue offset).
    moved: Moved,
    pops: HashMap<(u32, u32), PopQueue>,
    pop_timers: BinaryHeap<Reverse<PopTimer>>,
    pop_cursor: HashMap<(u32, u32), u32>,
    resolved: heapless::Deque<(u64, bool), 1024>,
    outputs: VecDeque<Output>,
    /// Under sync flush: replies to writes, with the log end after the write, until a sync
    /// covers it (ends never decrease).
    held: VecDeque<(u64, u64, Reply)>,
    /// Under sync flush: units pushed to a queue but not yet visible, with the log end after
    /// the write that pushed them, in push order.
    unsynced: VecDeque<(u64, u32)>,
    notify: Vec<u32>,
    /// Queues a receive stopped scanning early (its scan limit), to mark available once its
    /// reply goes out: a long poll then comes back for the rest at once.
    rescan_now: Vec<u32>,
    /// Under sync flush: such queues with the log end of the held reply they go out with.
    rescans: VecDeque<(u64, u32)>,
    buf: Vec<u8>,
    recovering: bool,
    /// The latest store time of a record applied (what replaying the log sets `now` to).
    applied_at: Millis,
    /// Under async flush: when the appended bytes must be synced.
    flush_due: Option<Millis>,
    /// Set when a sync failed: what the storage holds is unknown from then on, so the broker
    /// takes nothing more (see [`Broker::failed`]).
    failed: Option<String>,
    report: RecoveryReport,
    stats: Stats,
    next_id: u64,
    role: Role,
    /// Replicas enough for an acknowledgement hold the log below this (replication).
    replicated: u64,
    /// (epoch, offset of its first record), oldest first.
    epochs: Vec<(u64, u64)>,
    /// Property buffers to reuse (the send path allocates none per message).
    props_pool: Vec<Vec<u8>>,
    /// Messages by key and message id.
    index: index::KeyIndex,
    /// Set by the host while the disk is too full for new messages ([`Broker::set_disk_full`]).
    disk_full: Option<DiskFull>,
    /// Segments retention retired and bytes it carried forward, all runs together.
    retired_total: u64,
    carried_total: u64,
    /// Messages of a queue whose record retention carried forward after they were
    /// committed or delivered: key of the transaction or delay → the unit. Replaying from
    /// where the log starts, the op that committed or delivered one finds its unit here (its
    /// first record is gone). Kept in the record of where the log starts.
    carried_units: BTreeMap<u64, (u32, CqUnit)>,
    /// Records of carried-forward halves and delays that were then committed or delivered:
    /// record → key, so a later run knows the key of the unit reading them.
    carried_keys: BTreeMap<u64, u64>,
    /// User topics deleted, by name: how many times. A topic made again under a deleted
    /// name keeps its consume queues apart from the deleted one's (which pending halves
    /// and delays may still name): `consumequeue/<name>~<times>/`.
    deleted_names: HashMap<String, u32>,
    /// Blocks of consume-queue units read back from their files.
    cq_cache: CqCache,
    /// Units encoded for a consume-queue file, and its name (reused).
    cq_buf: Vec<u8>,
    cq_name: String,
    /// The first failed consume-queue read or write where no error could be returned (the
    /// broker failed on it): what an open returns.
    side_error: Option<Error<S::Error>>,
}

impl<S: Storage> fmt::Debug for Broker<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Broker")
            .field("now", &self.now)
            .field("log_end", &self.log.end())
            .field("topics", &self.topics.len())
            .field("pending_transactions", &self.txns.len())
            .field("pending_delays", &self.delays.len())
            .finish_non_exhaustive()
    }
}

type Res<T, S> = Result<T, Error<<S as Storage>::Error>>;

fn storage_err<E>(e: LogError<E>) -> Error<E> {
    match e {
        LogError::Storage(e) => Error::Storage(e),
        LogError::TooLarge => Error::Encode(record::EncodeError::TooLarge),
    }
}

/// A record to write: where, what, and the fields the encoder needs.
struct Spec<'a> {
    topic: &'a str,
    queue_id: u32,
    sys_flag: u32,
    flag: i32,
    born_timestamp: Millis,
    born_host: Host,
    reconsume_times: u32,
    prepared_offset: u64,
    body: &'a [u8],
    props: Vec<u8>,
}

impl<'a> Spec<'a> {
    /// The record of a client's message `m`, written to `topic`'s queue `queue_id`.
    fn outgoing<M: send::Outgoing>(
        m: &'a M,
        topic: &'a str,
        queue_id: u32,
        sys_flag: u32,
        props: Vec<u8>,
        now: Millis,
    ) -> Self {
        Spec {
            topic,
            queue_id,
            sys_flag,
            flag: m.flag(),
            born_timestamp: m.born_timestamp().unwrap_or(now),
            born_host: m.born_host().unwrap_or_default(),
            reconsume_times: 0,
            prepared_offset: 0,
            body: m.body(),
            props,
        }
    }

    fn internal(topic: &'a str, body: &'a [u8], props: Vec<u8>, now: Millis) -> Self {
        Spec {
            topic,
            queue_id: 0,
            sys_flag: 0,
            flag: 0,
            born_timestamp: now,
            born_host: Host::Unspecified,
            reconsume_times: 0,
            prepared_offset: 0,
            body,
            props,
        }
    }
}

impl<S: Storage> Broker<S> {
    // ---- getters ----------------------------------------------------------------------

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.cfg
    }
    /// What recovery found on open.
    #[must_use]
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.report
    }
    /// Counters.
    #[must_use]
    pub fn stats(&self) -> Stats {
        self.stats
    }
    /// The storage.
    pub fn storage(&self) -> &S {
        &self.log.storage
    }
    /// The storage, for hosts that need to reach it (tests corrupting it, say).
    pub fn storage_mut(&mut self) -> &mut S {
        &mut self.log.storage
    }
    /// Gives the storage back.
    pub fn into_storage(self) -> S {
        self.log.storage
    }
    /// Next append offset; bytes in the log.
    #[must_use]
    pub fn log_end(&self) -> u64 {
        self.log.end()
    }
    /// Everything below this offset is durable.
    #[must_use]
    pub fn log_synced(&self) -> u64 {
        self.log.synced()
    }
    /// Segments in the log.
    #[must_use]
    pub fn segment_count(&self) -> usize {
        self.log.segment_count()
    }
    /// The latest time the broker was given.
    #[must_use]
    pub fn now(&self) -> Millis {
        self.now
    }
    /// Pending (unresolved) transactions.
    #[must_use]
    pub fn pending_transaction_count(&self) -> usize {
        self.txns.len()
    }
    /// Delayed messages not yet delivered.
    #[must_use]
    pub fn pending_delay_count(&self) -> usize {
        self.delays.len()
    }
    /// Bytes of memory the pending-transaction and pending-delay tables hold.
    #[must_use]
    pub fn pending_table_bytes(&self) -> usize {
        self.txns.heap_bytes() + self.delays.heap_bytes()
    }
    /// Bytes of memory the message index holds ([`Config::index_keys`]).
    #[must_use]
    pub fn index_bytes(&self) -> usize {
        self.index.heap_bytes()
    }
    /// Whether appended bytes wait for a [`Broker::sync`].
    #[must_use]
    pub fn needs_sync(&self) -> bool {
        self.log.synced() < self.log.end()
    }

    // ---- inputs -----------------------------------------------------------------------

    /// Handles a request; its reply comes out of [`Broker::poll_output`] tagged with `id`.
    /// Under sync flush a reply never tells of state that is not durable yet: it is held
    /// until the [`Broker::sync`] that covers everything appended before it was made,
    /// whether this request wrote or only read what an earlier one wrote (a duplicate
    /// END_TRANSACTION, say).
    pub fn handle(&mut self, now: Millis, id: u64, request: Request) -> Res<(), S> {
        self.check_failed()?;
        let reply = self.process(now, request)?;
        // A replica refuses every request, and a refusal tells of no state, so it waits for
        // nothing: its log runs ahead of `replicated`, which only a master advances.
        if self.role != Role::Replica && self.release_point() < self.log.end() {
            let end = self.log.end();
            self.held.push_back((end, id, reply));
            for q in core::mem::take(&mut self.rescan_now) {
                self.rescans.push_back((end, q));
            }
        } else {
            self.outputs.push_back(Output::Reply { id, reply });
            self.rescan_pending();
        }
        Ok(())
    }

    /// Marks the queues a receive stopped scanning early as available (after its reply).
    fn rescan_pending(&mut self) {
        for q in core::mem::take(&mut self.rescan_now) {
            self.mark_notify(q);
        }
    }

    /// A receive stopped scanning `q` at its scan limit.
    pub(super) fn rescan(&mut self, q: u32) {
        self.rescan_now.push(q);
    }

    /// Runs one request to its reply, syncing first when the flush mode requires it. Other
    /// outputs stay queued for [`Broker::poll_output`]. It does not wait for replicas
    /// ([`Config::replicated_acks`]): a host that replicates uses [`Broker::handle`].
    pub fn execute(&mut self, now: Millis, request: Request) -> Res<Reply, S> {
        self.check_failed()?;
        let reply = self.process(now, request)?;
        if self.cfg.flush == FlushMode::Sync && self.needs_sync() {
            self.sync()?;
        }
        self.rescan_pending();
        Ok(reply)
    }

    /// Sends one message, borrowed, as [`Broker::execute`] runs a [`Request::Send`] of it, and
    /// answers with a [`SendReceipt`] instead of a [`Reply`]: the fast path for synchronous
    /// hosts. In steady state it allocates nothing: the body is copied once, into the
    /// record, and the message id is formatted only when [`SendReceipt::msg_id`] is asked.
    ///
    /// `Ok(Err(_))` is the client's mistake (nothing changed), exactly the error the same
    /// request would get from `execute` as [`Reply::Error`].
    pub fn send_ref<'m>(
        &mut self,
        now: Millis,
        message: &MessageRef<'m>,
    ) -> Res<Result<SendReceipt<'m>, ClientError>, S> {
        let placed = self.run_direct(now, |b| b.send_single(message))?;
        Ok(placed.map(|(queue_id, queue_offset, offset)| SendReceipt {
            queue_id,
            queue_offset,
            offset,
            txn: None,
            message_id: message.message_id,
            store_host: self.store_host(),
        }))
    }

    /// Stores a half message, borrowed, as [`Broker::execute`] runs a [`Request::Prepare`]
    /// of it; the receipt's `txn` is the transaction. Allocates nothing in steady state, as
    /// [`Broker::send_ref`].
    pub fn prepare_ref<'m>(
        &mut self,
        now: Millis,
        group: &str,
        message: &MessageRef<'m>,
        check_immunity_ms: Option<Millis>,
    ) -> Res<Result<SendReceipt<'m>, ClientError>, S> {
        let placed =
            self.run_direct(now, |b| b.prepare_single(group, message, check_immunity_ms))?;
        Ok(placed.map(|(queue_id, queue_offset, offset)| SendReceipt {
            queue_id,
            queue_offset,
            offset,
            txn: Some(TxnId(offset)),
            message_id: message.message_id,
            store_host: self.store_host(),
        }))
    }

    /// Ends a transaction as [`Broker::execute`] runs a [`Request::EndTransaction`], without
    /// building the request (the group is borrowed). The reply is [`Reply::Ended`], or
    /// [`Reply::Error`] for the client's mistake.
    pub fn end_transaction(
        &mut self,
        now: Millis,
        txn: TxnId,
        resolution: Resolution,
        group: Option<&str>,
        from_check: bool,
    ) -> Res<Reply, S> {
        let r = self.run_direct(now, |b| {
            b.end_transaction_inner(txn, resolution, group, from_check)
        })?;
        Ok(r.unwrap_or_else(Reply::Error))
    }

    /// What [`Broker::execute`] does around a request, for the direct entry points: refuses
    /// on a failed broker or a replica, fires what is due, counts a client error, syncs when
    /// the flush mode needs it.
    fn run_direct<T>(
        &mut self,
        now: Millis,
        f: impl FnOnce(&mut Self) -> Res<Result<T, ClientError>, S>,
    ) -> Res<Result<T, ClientError>, S> {
        self.check_failed()?;
        if self.role == Role::Replica {
            self.tick(now);
            return Ok(Err(ClientError::NotMaster));
        }
        self.handle_timeout(now)?;
        let result = f(self)?;
        if result.is_err() {
            self.stats.client_errors += 1;
        }
        if self.cfg.flush == FlushMode::Sync && self.needs_sync() {
            self.sync()?;
        }
        self.rescan_pending();
        Ok(result)
    }

    /// Refuses new messages from clients while `Some` (the host measured the disk holding the
    /// log above its limit), and takes them again once `None`. Refused: sends, half messages
    /// and consumers' send-backs, with [`ClientError::DiskFull`]. Not refused: what finishes
    /// or serves what is already stored — transaction ends (a commit copies its half),
    /// delayed messages coming due, receives, acks, offsets, dead-lettering — so the little
    /// they write keeps the broker whole while reads go on.
    pub fn set_disk_full(&mut self, full: Option<DiskFull>) {
        self.disk_full = full;
    }

    /// Whether new messages are refused ([`Broker::set_disk_full`]).
    #[must_use]
    pub fn disk_full(&self) -> Option<DiskFull> {
        self.disk_full
    }

    /// The refusal of a new message while the disk is full.
    pub(super) fn refuse_new(&self) -> Result<(), ClientError> {
        match self.disk_full {
            Some(d) => Err(ClientError::DiskFull(d)),
            None => Ok(()),
        }
    }

    fn store_host(&self) -> Host {
        self.cfg.store_host.host()
    }

    /// Does what is due at or before `now`: transaction checks, delayed deliveries,
    /// redeliveries and dead-lettering of received messages.
    pub fn handle_timeout(&mut self, now: Millis) -> Res<(), S> {
        self.check_failed()?;
        self.now = self.now.max(now);
        if self.role == Role::Replica {
            // A replica decides nothing: its master fires the timers.
            return Ok(());
        }
        let now = self.now;
        let before = self.log.end();
        self.fire_timers(now)?;
        match self.cfg.flush {
            // What timers wrote (deliveries, checks, dead letters) is synced here: no host
            // request waits on it to make it durable and visible.
            FlushMode::Sync if self.log.end() > before => self.sync()?,
            FlushMode::Async if self.flush_due.is_some_and(|d| d <= now) => self.sync()?,
            _ => {}
        }
        Ok(())
    }

    fn fire_timers(&mut self, now: Millis) -> Res<(), S> {
        loop {
            let t = self.txns.next_deadline().unwrap_or(Millis::MAX);
            let d = self.delays.next_deadline().unwrap_or(Millis::MAX);
            let p = self.pop_timers.peek().map_or(Millis::MAX, |Reverse(x)| x.0);
            let first = t.min(d).min(p);
            if first > now || first == Millis::MAX || first == PARKED {
                break;
            }
            // A timer whose action fails (storage) is put back, so nothing due is forgotten.
            if d == first {
                if let Some(row) = self.delays.pop_due(first) {
                    if let Err(e) = self.deliver(row) {
                        self.delays.reschedule(row.offset);
                        return Err(e);
                    }
                }
            } else if t == first {
                if let Some(row) = self.txns.pop_due(first) {
                    if let Err(e) = self.check(row) {
                        self.txns.reschedule(row.offset);
                        return Err(e);
                    }
                }
            } else if let Some(Reverse(timer)) = self.pop_timers.pop() {
                let (_, g, q, qoff, gen) = timer;
                if let Err(e) = self.expire_inflight(g, q, qoff, gen) {
                    self.pop_timers.push(Reverse(timer));
                    return Err(e);
                }
                self.prune_pop_timers();
            }
        }
        Ok(())
    }

    /// When [`Broker::handle_timeout`] next has something to do: never before the core's
    /// time (a deadline already passed — a parked transaction whose producer came back
    /// online keeps the one it was parked at — is due now).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Millis> {
        if self.role == Role::Replica {
            return None;
        }
        let t = self.txns.next_deadline().filter(|&d| d != PARKED);
        let d = self.delays.next_deadline();
        let p = self.pop_timers.peek().map(|Reverse(x)| x.0);
        [t, d, p, self.flush_due]
            .into_iter()
            .flatten()
            .min()
            .map(|at| at.max(self.now))
    }

    /// The next output.
    pub fn poll_output(&mut self) -> Option<Output> {
        if let Some(o) = self.outputs.pop_front() {
            return Some(o);
        }
        let q = self.notify.pop()?;
        let queue = &mut self.queues[q as usize];
        queue.notify = false;
        Some(Output::Available {
            topic: self.topics[queue.topic as usize].name.clone(),
            queue_id: queue.queue_id,
        })
    }

    /// A fresh id for [`Broker::handle`] (hosts may use their own).
    pub fn next_request_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    // ---- requests -----------------------------------------------------------------------

    fn tick(&mut self, now: Millis) {
        self.now = self.now.max(now);
    }

    fn process(&mut self, now: Millis, request: Request) -> Res<Reply, S> {
        if self.role == Role::Replica {
            self.tick(now);
            return Ok(Reply::Error(ClientError::NotMaster));
        }
        self.handle_timeout(now)?;
        let result = match request {
            Request::Send { messages } => self.send(messages),
            Request::Prepare {
                group,
                message,
                check_immunity_ms,
            } => self.prepare(&group, message, check_immunity_ms),
            Request::EndTransaction {
                txn,
                resolution,
                group,
                from_check,
            } => self.end_transaction_inner(txn, resolution, group.as_deref(), from_check),
            Request::Pull {
                group,
                topic,
                queue_id,
                offset,
                max,
                filter,
                auto_commit,
            } => self.pull(&group, &topic, queue_id, offset, max, &filter, auto_commit),
            Request::CommitOffset {
                group,
                topic,
                queue_id,
                offset,
            } => self.commit_offset(&group, &topic, queue_id, offset),
            Request::Receive {
                group,
                topic,
                queue_id,
                max,
                invisible_ms,
                filter,
            } => self.receive(&group, &topic, queue_id, max, invisible_ms, &filter),
            Request::Ack { group, handle } => self.ack(&group, &handle),
            Request::ChangeInvisible {
                group,
                handle,
                invisible_ms,
            } => self.change_invisible(&group, &handle, invisible_ms),
            Request::ForwardToDeadLetter { group, handle } => self.forward_to_dlq(&group, &handle),
            Request::SendBack {
                group,
                offset,
                delay_level,
            } => self.send_back(&group, offset, delay_level),
        };
        Ok(match result? {
            Ok(reply) => reply,
            Err(e) => {
                self.stats.client_errors += 1;
                Reply::Error(e)
            }
        })
    }
}
