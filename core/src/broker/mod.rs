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
mod consumers;
mod delays;
mod index;
mod pages;
mod replication;
mod retention;

pub use pages::{GroupLag, Page, MAX_PAGE};
pub use replication::{common_prefix, ReplicationError, Role};
pub use retention::{Retention, RetentionHold, MAX_CARRY_BYTES};
mod send;
mod topics;
mod transactions;

/// Property names, as RocketMQ's MessageConst.
pub mod prop {
    pub const TAGS: &str = "TAGS";
    pub const KEYS: &str = "KEYS";
    pub const UNIQ_KEY: &str = "UNIQ_KEY";
    pub const DELAY: &str = "DELAY";
    pub const TIMER_DELIVER_MS: &str = "TIMER_DELIVER_MS";
    pub const TIMER_DELAY_SEC: &str = "TIMER_DELAY_SEC";
    pub const TIMER_DELAY_MS: &str = "TIMER_DELAY_MS";
    pub const TIMER_OUT_MS: &str = "TIMER_OUT_MS";
    pub const TRAN_MSG: &str = "TRAN_MSG";
    pub const PGROUP: &str = "PGROUP";
    pub const REAL_TOPIC: &str = "REAL_TOPIC";
    pub const REAL_QID: &str = "REAL_QID";
    pub const CHECK_IMMUNITY_TIME_IN_SECONDS: &str = "CHECK_IMMUNITY_TIME_IN_SECONDS";
    pub const TRANSACTION_CHECK_TIMES: &str = "TRANSACTION_CHECK_TIMES";
    pub const SHARDING_KEY: &str = "__SHARDINGKEY";
    pub const RETRY_TOPIC: &str = "RETRY_TOPIC";
    pub const ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";
    pub const RECONSUME_TIME: &str = "RECONSUME_TIME";
    pub const WAIT: &str = "WAIT";
    /// On a half or delayed record retention re-wrote: the offset of the record it carries
    /// forward (the transaction's id, the delay's key), which it goes on answering to.
    pub const CARRIED: &str = "__CARRIED";
    /// On a committed or delivered message's record retention re-wrote (its first record
    /// was in a retired segment): the key of the transaction or delay it was. The record is
    /// read through its queue's unit only; replay finds it through the record of where the
    /// log starts.
    pub const CARRIED_UNIT: &str = "__CARRIED_UNIT";
    /// Keys the broker writes and strips before consumers see a message.
    pub const INTERNAL: [&str; 7] = [
        REAL_TOPIC,
        REAL_QID,
        TIMER_OUT_MS,
        super::BATCH_LEN,
        "__CRC32#",
        CARRIED,
        CARRIED_UNIT,
    ];
    /// Keys a producer may not set (the broker sets them).
    pub const RESERVED: [&str; 10] = [
        CARRIED,
        CARRIED_UNIT,
        REAL_TOPIC,
        REAL_QID,
        TIMER_OUT_MS,
        super::BATCH_LEN,
        "__CRC32#",
        TRAN_MSG,
        PGROUP,
        UNIQ_KEY,
    ];
}

/// Op record tags (RMQ_SYS_TRANS_OP_HALF_TOPIC). `d` is RocketMQ's REMOVE_TAG.
mod op {
    pub const RESOLVED: &str = "d";
    pub const CHECKED: &str = "c";
    pub const CHECK_MAX: &str = "x";
    pub const EXPIRED: &str = "e";
}

/// Consumer state records (rmq_sys_REVIVE_LOG and the offsets topic), postcard-encoded.
#[derive(serde::Serialize, serde::Deserialize)]
enum StateOp<'a> {
    /// Messages handed out by a receive (or an invisible-time change): invisible until `until`.
    Ck {
        group: &'a str,
        topic: &'a str,
        queue_id: u32,
        until: Millis,
        next: u64,
        entries: Vec<(u64, u32)>,
    },
    /// A delivery acked (or forwarded to the DLQ).
    Ack {
        group: &'a str,
        topic: &'a str,
        queue_id: u32,
        queue_offset: u64,
        generation: u64,
    },
    /// A committed pull offset.
    Offset {
        group: &'a str,
        topic: &'a str,
        queue_id: u32,
        offset: u64,
    },
    /// A user topic created (or grown) by a host with this many queues: recovery gives it
    /// exactly as many. (Auto-created topics need no record: recovery gives them the
    /// configured `default_queues`, or more if their records name more.)
    Topic { name: &'a str, queues: u32 },
    /// A consumer group declared by a host (RocketMQ's subscription group config): `fifo`
    /// (consumeMessageOrderly) makes its receives orderly. The last record wins.
    Group { name: &'a str, fifo: bool },
    /// A master took over from here on, in this epoch (replication).
    Epoch { epoch: u64 },
    /// A user topic deleted by a host (RocketMQ's deleteTopic): its name is free again.
    TopicDeleted { name: &'a str },
    /// An empty queue starts at this queue offset ([`Broker::start_queue_at`]).
    QueueStart {
        topic: &'a str,
        queue_id: u32,
        offset: u64,
    },
}

/// Record offset → (queue, queue offset) of messages whose record is not in their queue's
/// topic. They come mostly in log order (a transaction commits soon after its prepare), so
/// those go to the end of a sorted `Vec` (no hashing, no random access, growth by
/// doubling); the others, in a `BTreeMap`.
#[derive(Default)]
struct Moved {
    ascending: Vec<(u64, u32, u64)>,
    rest: BTreeMap<u64, (u32, u64)>,
}

impl Moved {
    fn insert(&mut self, offset: u64, place: (u32, u64)) {
        match self.ascending.last() {
            Some(&(last, ..)) if offset <= last => {
                match self.ascending.binary_search_by_key(&offset, |e| e.0) {
                    Ok(i) => self.ascending[i] = (offset, place.0, place.1),
                    Err(_) => {
                        self.rest.insert(offset, place);
                    }
                }
            }
            _ => self.ascending.push((offset, place.0, place.1)),
        }
    }

    fn get(&self, offset: u64) -> Option<(u32, u64)> {
        match self.ascending.binary_search_by_key(&offset, |e| e.0) {
            Ok(i) => Some((self.ascending[i].1, self.ascending[i].2)),
            Err(_) => self.rest.get(&offset).copied(),
        }
    }
}

/// One unit of a consume queue. RocketMQ stores it in 20 bytes
/// (physical offset 8, size 4, tag hash 8); see [`CqUnit::to_rocketmq_bytes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqUnit {
    pub offset: u64,
    pub size: u32,
    pub tag_hash: i32,
}

impl CqUnit {
    /// The unit as RocketMQ's ConsumeQueue file holds it.
    #[must_use]
    pub fn to_rocketmq_bytes(&self) -> [u8; 20] {
        let mut b = [0; 20];
        b[..8].copy_from_slice(&self.offset.to_be_bytes());
        b[8..12].copy_from_slice(&self.size.to_be_bytes());
        b[12..].copy_from_slice(&i64::from(self.tag_hash).to_be_bytes());
        b
    }
}

/// Java's `String.hashCode`, RocketMQ's tag code.
#[must_use]
pub fn tag_hash(tag: Option<&str>) -> i32 {
    let Some(tag) = tag else { return 0 };
    let mut h: i32 = 0;
    for u in tag.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(u));
    }
    h
}

struct Topic {
    name: String,
    kind: TopicKind,
    queues: Vec<u32>,
    round_robin: u32,
    /// Deleted ([`Broker::delete_topic`]): no longer found by name.
    deleted: bool,
}

struct Queue {
    topic: u32,
    queue_id: u32,
    /// Queue offset of `units[0]` (a queue brought over from RocketMQ starts where its
    /// oldest kept message was: [`Broker::start_queue_at`]).
    base: u64,
    units: Vec<CqUnit>,
    /// Next queue offset (internal topics keep only this).
    next: u64,
    /// Units consumers may see (below the durable point under sync flush).
    visible: usize,
    notify: bool,
}

impl Queue {
    /// The unit at a queue offset, if the queue holds it.
    fn unit(&self, queue_offset: u64) -> Option<CqUnit> {
        let i = usize::try_from(queue_offset.checked_sub(self.base)?).ok()?;
        self.units.get(i).copied()
    }
    /// The queue offset consumers may read up to (exclusive).
    fn visible_end(&self) -> u64 {
        self.base + self.visible as u64
    }
    /// The queue offset after the last unit held.
    fn stored_end(&self) -> u64 {
        self.base + self.units.len() as u64
    }
}

struct Group {
    name: String,
    online: bool,
    parked: Vec<u64>,
    /// Receives are orderly (FIFO): a queue's messages in queue order, one batch in flight
    /// per queue, redelivered in place.
    fifo: bool,
}

const DEAD: u32 = u32::MAX;
/// Most queues a topic may have.
pub const MAX_QUEUES: u32 = 1024;

#[derive(Clone, Copy, Debug)]
struct PendingTxn {
    /// The transaction's id (the offset of its first half record, which producers name).
    offset: u64,
    /// Where its half record is now: `offset`, or where retention carried it forward.
    record: u64,
    deadline: Millis,
    size: u32,
    queue: u32,
    tag_hash: i32,
    checks: u16,
    group: u32,
    /// The latest check sent was answered (UNKNOWN), or is counted as unanswered already:
    /// `false` from a check going out until one of those ([`Stats::checks_unanswered`]).
    answered: bool,
}

impl Row for PendingTxn {
    fn offset(&self) -> u64 {
        self.offset
    }
    fn deadline(&self) -> Millis {
        self.deadline
    }
    fn is_dead(&self) -> bool {
        self.queue == DEAD
    }
    fn kill(&mut self) {
        self.queue = DEAD;
    }
}

#[derive(Clone, Copy, Debug)]
struct PendingDelay {
    /// Its key (the offset of its first record).
    offset: u64,
    /// Where its record is now: `offset`, or where retention carried it forward.
    record: u64,
    due: Millis,
    size: u32,
    queue: u32,
    tag_hash: i32,
}

impl Row for PendingDelay {
    fn offset(&self) -> u64 {
        self.offset
    }
    fn deadline(&self) -> Millis {
        self.due
    }
    fn is_dead(&self) -> bool {
        self.queue == DEAD
    }
    fn kill(&mut self) {
        self.queue = DEAD;
    }
}

/// When a delivery becomes visible again: (until, group, queue, queue offset, generation).
type PopTimer = (Millis, u32, u32, u64, u64);

/// A half message waiting for its END_TRANSACTION while it is still parked (no producer of
/// its group is online); its deadline is this value.
const PARKED: Millis = Millis::MAX - 1;

#[derive(Clone, Copy, Debug)]
struct Inflight {
    attempt: u32,
    /// The record of its latest receive or invisible-time change.
    generation: u64,
    /// The record of the receive that began this attempt: a handle of any generation from
    /// here on (a renewal's earlier handle) still names this delivery.
    since: u64,
}

impl Inflight {
    /// Whether a receipt handle of `generation` names this delivery attempt.
    fn named_by(&self, generation: u64) -> bool {
        (self.since..=self.generation).contains(&generation)
    }
}

#[derive(Default)]
struct PopQueue {
    next: u64,
    inflight: BTreeMap<u64, Inflight>,
    /// In-flight messages whose invisible time ran out: deliverable again.
    ready: BTreeSet<u64>,
}

/// Counters for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Messages that became readable in a user, retry or dead-letter topic: sends,
    /// committed transactions and delivered delayed messages. Like every counter here it
    /// counts the whole log: opening a broker counts what recovery replays.
    pub messages_stored: u64,
    pub halves_stored: u64,
    pub committed: u64,
    pub rolled_back: u64,
    pub unknown_answers: u64,
    pub checks_sent: u64,
    pub checks_answered: u64,
    /// Checks the producer group did not answer before the transaction's next check came
    /// due (or it reached the check maximum or expired): the transaction was still pending
    /// and no UNKNOWN came back. A check answered UNKNOWN is counted in `unknown_answers`.
    pub checks_unanswered: u64,
    /// Checks answered UNKNOWN (also in `unknown_answers`, which counts a producer's own
    /// END_TRANSACTION of UNKNOWN too).
    pub checks_unknown: u64,
    pub check_max_reached: u64,
    pub halves_expired: u64,
    pub delayed_stored: u64,
    pub delayed_delivered: u64,
    pub received: u64,
    pub acked: u64,
    pub redelivered: u64,
    pub dead_lettered: u64,
    pub syncs: u64,
    pub client_errors: u64,
}

/// A topic as [`Broker::topics`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    /// Per queue: (queue id, next queue offset, visible messages).
    pub queues: Vec<(u32, u64, u64)>,
}

/// A pending transaction as [`Broker::pending_transactions`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingTxnInfo {
    pub txn: TxnId,
    pub group: String,
    pub topic: String,
    pub queue_id: u32,
    pub checks: u32,
    /// Next check; `None` while parked (no producer of the group online).
    pub next_check: Option<Millis>,
}

/// A delayed message as [`Broker::pending_delays`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingDelayInfo {
    pub offset: u64,
    pub topic: String,
    pub queue_id: u32,
    pub due: Millis,
}

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
    /// Opens a broker over `storage`, recovering every record in it.
    ///
    /// Only a torn tail is cut (invalid bytes at the end of the last segment, with no valid
    /// record after them): a crash can leave one, and nothing acknowledged is in it. Any
    /// other damage — bad bytes followed by valid records, damage in an older segment,
    /// another program's log — is [`Error::Corrupted`], naming the segment and offset, and
    /// the storage is left as it was. [`Broker::open_repairing`] opens such a log.
    pub fn open(cfg: Config, storage: S, now: Millis) -> Res<Self, S> {
        Self::open_with(cfg, storage, now, false)
    }

    /// Opens a broker over `storage` as [`Broker::open`] does, repairing damage instead of
    /// refusing it: every valid record stays where it is, and each damaged range is moved to
    /// the storage's quarantine (for files, `quarantine/` in the data directory) and skipped
    /// from then on. [`RecoveryReport::quarantined`] lists what was moved.
    pub fn open_repairing(cfg: Config, storage: S, now: Millis) -> Res<Self, S> {
        Self::open_with(cfg, storage, now, true)
    }

    fn open_with(cfg: Config, storage: S, now: Millis, repair: bool) -> Res<Self, S> {
        cfg.validate()?;
        let max_record = cfg.max_message_size.max(4 << 20).saturating_add(1 << 16);
        let mut b = Broker {
            log: Log::new(storage, cfg.segment_size, max_record),
            cfg,
            now,
            topic_ids: HashMap::new(),
            topics: Vec::new(),
            recent_topics: [u32::MAX; RECENT_TOPICS],
            recent_next: 0,
            queues: Vec::new(),
            group_ids: HashMap::new(),
            groups: Vec::new(),
            txns: PendingTable::new(),
            delays: PendingTable::new(),
            offsets: HashMap::new(),
            moved: Moved::default(),
            pops: HashMap::new(),
            pop_timers: BinaryHeap::new(),
            pop_cursor: HashMap::new(),
            resolved: heapless::Deque::new(),
            outputs: VecDeque::new(),
            held: VecDeque::new(),
            unsynced: VecDeque::new(),
            notify: Vec::new(),
            rescan_now: Vec::new(),
            rescans: VecDeque::new(),
            buf: Vec::new(),
            recovering: true,
            flush_due: None,
            failed: None,
            report: RecoveryReport::default(),
            stats: Stats::default(),
            next_id: 1 << 63,
            role: Role::Master,
            replicated: 0,
            epochs: Vec::new(),
            props_pool: Vec::new(),
            index: index::KeyIndex::default(),
            disk_full: None,
            retired_total: 0,
            carried_total: 0,
            carried_units: BTreeMap::new(),
            carried_keys: BTreeMap::new(),
        };
        // Retention retired the oldest segments: the log starts where its record says, with
        // what replaying from there cannot rebuild.
        let start = match b.log.storage.log_start().map_err(Error::Storage)? {
            Some(bytes) => b
                .apply_log_start(&bytes)
                .map_err(|reason| Error::Corrupted { offset: 0, reason })?,
            None => 0,
        };
        let mut rec = b
            .log
            .start_recovery(repair, start)
            .map_err(Error::Storage)?;
        let recovery_err = |e| match e {
            RecoveryError::Storage(e) => Error::Storage(e),
            RecoveryError::Corrupt { offset, reason } => Error::Corrupted { offset, reason },
        };
        while let Some((off, bytes)) = rec.next(&mut b.log).map_err(recovery_err)? {
            // Recovery verified the record already.
            if let Ok(Decoded::Record(r)) = record::decode_trusted(bytes) {
                b.apply(off, &r);
            }
        }
        b.report = b.log.finish_recovery(rec);
        b.recovering = false;
        // What a previous run of this master acknowledged was replicated then.
        b.replicated = b.log.end();
        for q in &mut b.queues {
            q.visible = q.units.len();
        }
        b.unsynced.clear();
        b.notify.clear();
        Ok(b)
    }

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

    /// For hosts that sync off the thread that drives the broker: the log offset a sync
    /// started now must make durable, or `None` when everything is. Start the sync (e.g.
    /// `FileStorage::detach_sync` and its `run` on another thread), keep handling requests
    /// meanwhile, and report it with [`Broker::synced_to`].
    #[must_use]
    pub fn sync_target(&self) -> Option<u64> {
        self.needs_sync().then(|| self.log.end())
    }

    /// Records that the storage is durable below `upto` (a target from
    /// [`Broker::sync_target`] whose sync the host completed): releases the replies held for
    /// writes that end at or below it and makes their messages visible. Later writes stay
    /// held until a sync covers them. [`Broker::sync`] is the same for everything, run here.
    pub fn synced_to(&mut self, upto: u64) {
        let upto = upto.min(self.log.end());
        if upto <= self.log.synced() {
            return;
        }
        if self.failed.is_some() {
            return;
        }
        self.log.mark_synced(upto);
        self.stats.syncs += 1;
        if !self.needs_sync() {
            self.flush_due = None;
        }
        self.release(self.release_point());
    }

    /// Records that a sync the host ran (see [`Broker::sync_target`]) failed. The broker is
    /// failed from then on, as after a failed [`Broker::sync`]: see [`Broker::failed`].
    pub fn sync_failed(&mut self, reason: &str) {
        self.fail(String::from(reason));
    }

    /// Why the broker stopped taking requests, if it did: a sync failed. On Linux a failed
    /// fsync can mark the pages it could not write as clean, so a later sync that succeeds
    /// proves nothing about them; the broker never treats one as if the first had not failed.
    /// Every reply that waited for a sync came out as [`Output::Failed`], and every call that
    /// could change state returns [`Error::Failed`]. Drop the broker and open the storage
    /// again: recovery keeps what is really durable.
    #[must_use]
    pub fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    fn fail(&mut self, reason: String) {
        if self.failed.is_some() {
            return;
        }
        for (_, id, _) in core::mem::take(&mut self.held) {
            self.outputs.push_back(Output::Failed {
                id,
                reason: reason.clone(),
            });
        }
        self.unsynced.clear();
        self.rescans.clear();
        self.flush_due = None;
        self.failed = Some(reason);
    }

    fn check_failed(&self) -> Res<(), S> {
        match &self.failed {
            Some(reason) => Err(Error::Failed {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
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

    /// Makes everything appended durable; releases held replies and makes their messages
    /// visible. When the storage's sync fails the broker is failed for good (see
    /// [`Broker::failed`]) and this returns the storage's error.
    pub fn sync(&mut self) -> Res<(), S> {
        self.check_failed()?;
        if self.log.synced() < self.log.end() {
            if let Err(e) = self.log.sync() {
                self.fail(alloc::format!("sync failed: {e}"));
                return Err(Error::Storage(e));
            }
            self.stats.syncs += 1;
        }
        self.flush_due = None;
        self.release(self.release_point());
        Ok(())
    }

    /// A clean stop: syncs everything and has the storage record where the log ends and that
    /// it was closed cleanly ([`Storage::record_log_end`]), so the next open knows no write
    /// of this run failed unseen. Append nothing after it; open the storage again to go on.
    pub fn close(&mut self) -> Res<(), S> {
        self.sync()?;
        if let Err(e) = self.log.close() {
            self.fail(alloc::format!("closing the log failed: {e}"));
            return Err(Error::Storage(e));
        }
        Ok(())
    }

    /// Where replies and visibility may go: what the flush mode needs synced locally, and,
    /// under [`Config::replicated_acks`], what enough replicas hold.
    fn release_point(&self) -> u64 {
        let local = match self.cfg.flush {
            FlushMode::Sync => self.log.synced(),
            FlushMode::Async => self.log.end(),
        };
        if self.cfg.replicated_acks {
            local.min(self.replicated)
        } else {
            local
        }
    }

    /// Whether what a write makes visible waits for a sync or replication first.
    fn holds_visibility(&self) -> bool {
        self.cfg.flush == FlushMode::Sync || self.cfg.replicated_acks
    }

    /// Under sync flush: what writes ending at or below `upto` held back — their units in
    /// the consume queues, their replies — becomes visible and goes out.
    fn release(&mut self, upto: u64) {
        while let Some(&(end, q)) = self.unsynced.front() {
            if end > upto {
                break;
            }
            self.unsynced.pop_front();
            let queue = &mut self.queues[q as usize];
            if queue.visible < queue.units.len() {
                queue.visible += 1;
                self.mark_notify(q);
            }
        }
        while self.held.front().is_some_and(|h| h.0 <= upto) {
            if let Some((_, id, reply)) = self.held.pop_front() {
                self.outputs.push_back(Output::Reply { id, reply });
            }
        }
        while self.rescans.front().is_some_and(|r| r.0 <= upto) {
            if let Some((_, q)) = self.rescans.pop_front() {
                self.mark_notify(q);
            }
        }
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

    /// When [`Broker::handle_timeout`] next has something to do.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Millis> {
        if self.role == Role::Replica {
            return None;
        }
        let t = self.txns.next_deadline().filter(|&d| d != PARKED);
        let d = self.delays.next_deadline();
        let p = self.pop_timers.peek().map(|Reverse(x)| x.0);
        [t, d, p, self.flush_due].into_iter().flatten().min()
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

struct Plan {
    props: Vec<u8>,
    delay_due: Option<Millis>,
    level: Option<u32>,
}

impl Plan {
    /// Where the record of a message for `topic`'s queue `queue_id` is written: there, or,
    /// when it is delayed, in the schedule topic (a level's queue) or the timer topic, with
    /// its real topic, queue and due time in its properties.
    fn route<'t>(&mut self, topic: &'t str, queue_id: u32) -> (&'t str, u32) {
        let Some(due) = self.delay_due else {
            return (topic, queue_id);
        };
        record::push_prop(&mut self.props, prop::REAL_TOPIC, topic);
        record::push_prop(
            &mut self.props,
            prop::REAL_QID,
            itoa(u64::from(queue_id)).as_str(),
        );
        record::push_prop(&mut self.props, prop::TIMER_OUT_MS, itoa(due).as_str());
        match self.level {
            Some(l) => (topic::SCHEDULE, l - 1),
            None => (topic::TIMER, 0),
        }
    }
}

/// RocketMQ's offset message id of the record at `offset` stored by `store_host`
/// ([`OffsetMsgId`]: 32 hex digits for an IPv4 host, 56 for IPv6), as a `String`.
#[must_use]
pub fn offset_msg_id(store_host: Host, offset: u64) -> String {
    String::from(OffsetMsgId::new(store_host, offset).as_str())
}

fn message_from(r: &RecordView<'_>, offset: u64, store_host: Host) -> Message {
    let mut tag = None;
    let mut keys = Vec::new();
    let mut msg_id = None;
    let mut properties = Vec::new();
    for (k, v) in r.props() {
        match k {
            prop::TAGS => tag = Some(String::from(v)),
            prop::KEYS => {
                keys = v
                    .split(' ')
                    .filter(|k| !k.is_empty())
                    .map(String::from)
                    .collect()
            }
            prop::UNIQ_KEY => msg_id = Some(String::from(v)),
            k if prop::INTERNAL.contains(&k) => {}
            k => properties.push((String::from(k), String::from(v))),
        }
    }
    Message {
        topic: String::new(),
        queue_id: 0,
        queue_offset: 0,
        offset,
        msg_id: msg_id.unwrap_or_else(|| offset_msg_id(store_host, offset)),
        tag,
        keys,
        properties,
        body: r.body.to_vec(),
        born_timestamp: r.header.born_timestamp,
        store_timestamp: r.header.store_timestamp,
        reconsume_times: r.header.reconsume_times,
        flag: r.header.flag,
        sys_flag: r.header.sys_flag,
        born_host: r.header.born_host,
        store_host: r.header.store_host,
    }
}

/// Formats an integer without allocating (and without the formatting machinery: it is on
/// the write path of every transaction).
fn itoa(mut v: u64) -> Digits {
    let mut d = Digits {
        buf: [0; 20],
        start: 20,
    };
    loop {
        d.start -= 1;
        d.buf[d.start] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    d
}

/// Decimal digits from [`itoa`].
struct Digits {
    buf: [u8; 20],
    start: usize,
}

impl Digits {
    fn as_str(&self) -> &str {
        // Only ASCII digits are ever written.
        core::str::from_utf8(&self.buf[self.start..]).unwrap_or_default()
    }
}

#[cfg(test)]
mod itoa_tests {
    use alloc::string::ToString;

    #[test]
    fn moved_finds_what_was_inserted_in_any_order() {
        let mut m = super::Moved::default();
        let mut reference = alloc::collections::BTreeMap::new();
        // Mostly ascending, some out of order, one key twice.
        for (i, off) in [10u64, 20, 15, 30, 5, 40, 20, 35, 50]
            .into_iter()
            .enumerate()
        {
            m.insert(off, (i as u32, off * 2));
            reference.insert(off, (i as u32, off * 2));
        }
        for off in 0..60 {
            assert_eq!(m.get(off), reference.get(&off).copied(), "{off}");
        }
    }

    #[test]
    fn itoa_is_display() {
        for v in [
            0,
            1,
            9,
            10,
            99,
            100,
            12_345,
            u64::from(u32::MAX),
            u64::MAX - 1,
            u64::MAX,
        ] {
            assert_eq!(super::itoa(v).as_str(), v.to_string());
        }
    }
}
