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
use crate::log::{Log, LogError, RecoveryReport, BATCH_LEN};
use crate::record::{self, sys_flag, Decoded, Header, Host, RecordView};
use crate::storage::Storage;
use crate::table::{PendingTable, Row};
use crate::topic::{self, TopicKind};
use crate::types::*;
use crate::Millis;

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
    /// Keys the broker writes and strips before consumers see a message.
    pub const INTERNAL: [&str; 5] = [
        REAL_TOPIC,
        REAL_QID,
        TIMER_OUT_MS,
        super::BATCH_LEN,
        "__CRC32#",
    ];
    /// Keys a producer may not set (the broker sets them).
    pub const RESERVED: [&str; 8] = [
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
}

struct Queue {
    topic: u32,
    queue_id: u32,
    units: Vec<CqUnit>,
    /// Next queue offset (internal topics keep only this).
    next: u64,
    /// Units consumers may see (below the durable point under sync flush).
    visible: usize,
    notify: bool,
}

struct Group {
    name: String,
    online: bool,
    parked: Vec<u64>,
}

const DEAD: u32 = u32::MAX;
/// Most queues a topic may have.
pub const MAX_QUEUES: u32 = 1024;

#[derive(Clone, Copy, Debug)]
struct PendingTxn {
    offset: u64,
    deadline: Millis,
    size: u32,
    queue: u32,
    tag_hash: i32,
    checks: u16,
    group: u16,
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
    offset: u64,
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
type PopTimer = (Millis, u16, u32, u64, u64);

/// A half message waiting for its END_TRANSACTION while it is still parked (no producer of
/// its group is online); its deadline is this value.
const PARKED: Millis = Millis::MAX - 1;

#[derive(Clone, Copy, Debug)]
struct Inflight {
    attempt: u32,
    generation: u64,
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
    pub messages_stored: u64,
    pub halves_stored: u64,
    pub committed: u64,
    pub rolled_back: u64,
    pub unknown_answers: u64,
    pub checks_sent: u64,
    pub checks_answered: u64,
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
    queues: Vec<Queue>,
    group_ids: HashMap<String, u16>,
    groups: Vec<Group>,
    txns: PendingTable<PendingTxn>,
    delays: PendingTable<PendingDelay>,
    offsets: HashMap<(u16, u32), u64>,
    pops: HashMap<(u16, u32), PopQueue>,
    pop_timers: BinaryHeap<Reverse<PopTimer>>,
    pop_cursor: HashMap<(u16, u32), u32>,
    resolved: heapless::Deque<(u64, bool), 1024>,
    outputs: VecDeque<Output>,
    /// Under sync flush: replies to writes, with the log end after the write, until a sync
    /// covers it (ends never decrease).
    held: VecDeque<(u64, u64, Reply)>,
    /// Under sync flush: units pushed to a queue but not yet visible, with the log end after
    /// the write that pushed them, in push order.
    unsynced: VecDeque<(u64, u32)>,
    notify: Vec<u32>,
    buf: Vec<u8>,
    recovering: bool,
    /// Under async flush: when the appended bytes must be synced.
    flush_due: Option<Millis>,
    /// Under sync flush: timers wrote and the sync after them failed.
    timer_sync_owed: bool,
    report: RecoveryReport,
    stats: Stats,
    next_id: u64,
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
    pub fn open(cfg: Config, storage: S, now: Millis) -> Res<Self, S> {
        cfg.validate()?;
        let max_record = cfg.max_message_size.max(4 << 20).saturating_add(1 << 16);
        let mut b = Broker {
            log: Log::new(storage, cfg.segment_size, max_record),
            cfg,
            now,
            topic_ids: HashMap::new(),
            topics: Vec::new(),
            queues: Vec::new(),
            group_ids: HashMap::new(),
            groups: Vec::new(),
            txns: PendingTable::new(),
            delays: PendingTable::new(),
            offsets: HashMap::new(),
            pops: HashMap::new(),
            pop_timers: BinaryHeap::new(),
            pop_cursor: HashMap::new(),
            resolved: heapless::Deque::new(),
            outputs: VecDeque::new(),
            held: VecDeque::new(),
            unsynced: VecDeque::new(),
            notify: Vec::new(),
            buf: Vec::new(),
            recovering: true,
            flush_due: None,
            timer_sync_owed: false,
            report: RecoveryReport::default(),
            stats: Stats::default(),
            next_id: 1 << 63,
        };
        let mut rec = b.log.start_recovery().map_err(Error::Storage)?;
        while let Some((off, bytes)) = rec.next(&mut b.log).map_err(Error::Storage)? {
            // Recovery verified the record already.
            if let Ok(Decoded::Record(r)) = record::decode_trusted(bytes) {
                b.apply(off, &r);
            }
        }
        b.report = b.log.finish_recovery(rec);
        b.recovering = false;
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
        self.log.mark_synced(upto);
        self.stats.syncs += 1;
        if !self.needs_sync() {
            self.flush_due = None;
            self.timer_sync_owed = false;
        }
        self.release(upto);
    }

    /// Consumer-visible topics and their queues (system topics that hold only the broker's
    /// own records are left out).
    #[must_use]
    pub fn topics(&self) -> Vec<TopicInfo> {
        let mut out: Vec<TopicInfo> = self
            .topics
            .iter()
            .filter(|t| t.kind.is_readable())
            .map(|t| TopicInfo {
                name: t.name.clone(),
                queues: t
                    .queues
                    .iter()
                    .map(|&q| {
                        let q = &self.queues[q as usize];
                        (q.queue_id, q.next, q.visible as u64)
                    })
                    .collect(),
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Queues of a topic, `None` when it does not exist.
    #[must_use]
    pub fn topic_queue_count(&self, name: &str) -> Option<u32> {
        self.topic_ids
            .get(name)
            .map(|&t| self.topics[t as usize].queues.len() as u32)
    }

    /// Pending transactions in log order, at most `limit`.
    #[must_use]
    pub fn pending_transactions(&self, limit: usize) -> Vec<PendingTxnInfo> {
        self.txns
            .iter()
            .take(limit)
            .map(|t| {
                let q = &self.queues[t.queue as usize];
                PendingTxnInfo {
                    txn: TxnId(t.offset),
                    group: self.groups[t.group as usize].name.clone(),
                    topic: self.topics[q.topic as usize].name.clone(),
                    queue_id: q.queue_id,
                    checks: u32::from(t.checks),
                    next_check: (t.deadline != PARKED).then_some(t.deadline),
                }
            })
            .collect()
    }

    /// Delayed messages not yet delivered, in log order, at most `limit`.
    #[must_use]
    pub fn pending_delays(&self, limit: usize) -> Vec<PendingDelayInfo> {
        self.delays
            .iter()
            .take(limit)
            .map(|d| {
                let q = &self.queues[d.queue as usize];
                PendingDelayInfo {
                    offset: d.offset,
                    topic: self.topics[q.topic as usize].name.clone(),
                    queue_id: q.queue_id,
                    due: d.due,
                }
            })
            .collect()
    }

    /// A group's committed pull offset in a queue.
    #[must_use]
    pub fn committed_offset(&self, group: &str, topic: &str, queue_id: u32) -> Option<u64> {
        let g = *self.group_ids.get(group)?;
        let q = self.queue_index(topic, queue_id)?;
        self.offsets.get(&(g, q)).copied()
    }

    /// Messages a consumer group has received and not yet acked in a topic.
    #[must_use]
    pub fn inflight_count(&self, group: &str, topic: &str) -> usize {
        let (Some(&g), Some(&t)) = (self.group_ids.get(group), self.topic_ids.get(topic)) else {
            return 0;
        };
        self.topics[t as usize]
            .queues
            .iter()
            .filter_map(|q| self.pops.get(&(g, *q)))
            .map(|p| p.inflight.len())
            .sum()
    }

    /// The consume-queue units of a queue (what RocketMQ's ConsumeQueue file would hold).
    #[must_use]
    pub fn consume_queue(&self, topic: &str, queue_id: u32) -> Vec<CqUnit> {
        self.queue_index(topic, queue_id)
            .map(|q| self.queues[q as usize].units.clone())
            .unwrap_or_default()
    }

    /// Visible messages of a queue from `from` on (at most `max`), for tools and test
    /// assertions: reads without a consumer group and changes nothing.
    pub fn browse(
        &mut self,
        topic_name: &str,
        queue_id: u32,
        from: u64,
        max: usize,
    ) -> Res<Vec<Message>, S> {
        let Some(q) = self.queue_index(topic_name, queue_id) else {
            return Ok(Vec::new());
        };
        let visible = self.queues[q as usize].visible as u64;
        let mut out = Vec::new();
        let mut at = from;
        while at < visible && out.len() < max {
            let unit = self.queues[q as usize].units[at as usize];
            if let Some(m) = self.read_message(q, at, unit)? {
                out.push(m);
            }
            at += 1;
        }
        Ok(out)
    }

    /// Raw records from `offset` on (at most `max`), each as (offset, bytes): for tools that
    /// show the log. Blanks are skipped.
    pub fn raw_records(&mut self, mut offset: u64, max: usize) -> Res<Vec<(u64, Vec<u8>)>, S> {
        let mut out = Vec::new();
        while out.len() < max && offset < self.log.end() {
            match self.log.read_any(offset).map_err(Error::Storage)? {
                Some(r) => {
                    let len = r.total_size as u64;
                    let mut bytes = Vec::with_capacity(len as usize);
                    record::encode(&mut bytes, &r.header, r.body, r.topic, r.properties)
                        .map_err(Error::Encode)?;
                    out.push((offset, bytes));
                    offset += len;
                }
                None => {
                    // A blank or the end of a segment: on to the next segment.
                    let next = (offset / self.cfg.segment_size + 1) * self.cfg.segment_size;
                    if next <= offset {
                        break;
                    }
                    offset = next;
                }
            }
        }
        Ok(out)
    }

    // ---- inputs -----------------------------------------------------------------------

    /// Tells the broker whether a producer of `group` can be checked now. Checks of an
    /// offline group wait (parked) and go out when it comes online.
    pub fn set_producer_online(&mut self, now: Millis, group: &str, online: bool) {
        self.tick(now);
        let g = self.group(group);
        self.groups[g as usize].online = online;
        if online {
            let parked = core::mem::take(&mut self.groups[g as usize].parked);
            for off in parked {
                self.txns.update(off, |t| t.deadline = now);
            }
        }
    }

    /// Creates a topic (or grows it to `queues` queues), durably. For hosts that declare
    /// topics. `Ok(Err(_))`: the name or count cannot be used.
    pub fn create_topic(&mut self, name: &str, queues: u32) -> Res<Result<(), ClientError>, S> {
        if let Err(e) = topic::validate_user_topic(name) {
            return Ok(Err(e));
        }
        if queues == 0 || queues > MAX_QUEUES {
            return Ok(Err(ClientError::InvalidArgument(format!(
                "{queues} queues is not within 1..=1024"
            ))));
        }
        self.ensure_topic(name, queues)?;
        Ok(Ok(()))
    }

    /// The user topic `name` with at least `queues` queues, creating or growing it with a
    /// record in the log, so a restart gives it the same queues.
    fn ensure_topic(&mut self, name: &str, queues: u32) -> Res<u32, S> {
        if let Some(&t) = self.topic_ids.get(name) {
            if self.topics[t as usize].queues.len() as u32 >= queues {
                return Ok(t);
            }
        }
        self.write_state(&StateOp::Topic { name, queues })?;
        Ok(self.topic(name, queues))
    }

    /// Handles a request; its reply comes out of [`Broker::poll_output`] tagged with `id`
    /// (under sync flush, only after the [`Broker::sync`] that makes it durable).
    pub fn handle(&mut self, now: Millis, id: u64, request: Request) -> Res<(), S> {
        let before = self.log.end();
        let reply = self.process(now, request)?;
        if self.cfg.flush == FlushMode::Sync && self.log.end() > before {
            self.held.push_back((self.log.end(), id, reply));
        } else {
            self.outputs.push_back(Output::Reply { id, reply });
        }
        Ok(())
    }

    /// Runs one request to its reply, syncing first when the flush mode requires it. Other
    /// outputs stay queued for [`Broker::poll_output`].
    pub fn execute(&mut self, now: Millis, request: Request) -> Res<Reply, S> {
        let before = self.log.end();
        let reply = self.process(now, request)?;
        if self.cfg.flush == FlushMode::Sync && self.log.end() > before {
            self.sync()?;
        }
        Ok(reply)
    }

    /// Makes everything appended durable; releases held replies and makes their messages
    /// visible.
    pub fn sync(&mut self) -> Res<(), S> {
        if self.log.synced() < self.log.end() {
            self.log.sync().map_err(Error::Storage)?;
            self.stats.syncs += 1;
        }
        self.flush_due = None;
        self.timer_sync_owed = false;
        self.release(u64::MAX);
        Ok(())
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
    }

    /// Does what is due at or before `now`: transaction checks, delayed deliveries,
    /// redeliveries and dead-lettering of received messages.
    pub fn handle_timeout(&mut self, now: Millis) -> Res<(), S> {
        self.now = self.now.max(now);
        let now = self.now;
        let before = self.log.end();
        self.fire_timers(now)?;
        match self.cfg.flush {
            // What timers wrote (deliveries, checks, dead letters) is synced here: no host
            // request waits on it to make it durable and visible. A sync that failed is owed
            // until one succeeds.
            FlushMode::Sync if self.log.end() > before || self.timer_sync_owed => {
                self.timer_sync_owed = true;
                self.sync()?;
            }
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
            } => self.end_transaction(txn, resolution, group.as_deref(), from_check),
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

    fn send(&mut self, messages: Vec<NewMessage>) -> Res<Result<Reply, ClientError>, S> {
        if messages.is_empty() {
            return Ok(Err(ClientError::EmptyBatch));
        }
        let batch = messages.len() > 1;
        let mut plans = Vec::with_capacity(messages.len());
        let mut total = 0usize;
        for m in &messages {
            let plan = match self.plan(m, batch) {
                Ok(p) => p,
                Err(e) => return Ok(Err(e)),
            };
            total += m.body.len();
            plans.push(plan);
        }
        if batch {
            let first = &messages[0];
            if let Some(m) = messages.iter().find(|m| m.topic != first.topic) {
                return Ok(Err(ClientError::MixedBatch(format!(
                    "topic `{}` differs from `{}`",
                    m.topic, first.topic
                ))));
            }
            // RocketMQ's Message.isWaitStoreMsgOK: absent means true, else Boolean.parseBoolean.
            let wait = |m: &NewMessage| {
                m.properties
                    .iter()
                    .find(|(k, _)| k == prop::WAIT)
                    .is_none_or(|(_, v)| v.eq_ignore_ascii_case("true"))
            };
            if messages.iter().any(|m| wait(m) != wait(first)) {
                return Ok(Err(ClientError::MixedBatch(
                    "the WAIT (wait-store) flag differs".into(),
                )));
            }
            if topic::is_retry(&first.topic) {
                return Ok(Err(ClientError::BatchToRetryTopic));
            }
            if total > self.cfg.max_batch_size as usize {
                return Ok(Err(ClientError::BatchTooLarge {
                    size: total,
                    max: self.cfg.max_batch_size,
                }));
            }
        }
        // Everything is valid: create the topic and pick queues.
        let t = self.topic(&messages[0].topic, self.cfg.default_queues);
        let n = messages.len();
        let mut specs = Vec::with_capacity(n);
        let now = self.now;
        // A batch goes to one queue, as RocketMQ's: the first message's choice.
        let batch_queue = match self.pick_queue(t, &messages[0]) {
            Ok(q) => q,
            Err(e) => return Ok(Err(e)),
        };
        for (i, (m, mut plan)) in messages.iter().zip(plans).enumerate() {
            let queue_id = if i == 0 || batch {
                batch_queue
            } else {
                match self.pick_queue(t, m) {
                    Ok(q) => q,
                    Err(e) => return Ok(Err(e)),
                }
            };
            let (topic, qid) = match plan.delay_due {
                Some(due) => {
                    record::push_prop(&mut plan.props, prop::REAL_TOPIC, &m.topic);
                    record::push_prop(
                        &mut plan.props,
                        prop::REAL_QID,
                        itoa(u64::from(queue_id)).as_str(),
                    );
                    record::push_prop(&mut plan.props, prop::TIMER_OUT_MS, itoa(due).as_str());
                    match plan.level {
                        Some(l) => (topic::SCHEDULE, l - 1),
                        None => (topic::TIMER, 0),
                    }
                }
                None => (m.topic.as_str(), queue_id),
            };
            if batch && i == 0 {
                record::push_prop(&mut plan.props, BATCH_LEN, itoa(n as u64).as_str());
            }
            specs.push(Spec {
                topic,
                queue_id: qid,
                sys_flag: 0,
                flag: m.flag,
                born_timestamp: m.born_timestamp.unwrap_or(now),
                born_host: m.born_host.unwrap_or_default(),
                reconsume_times: 0,
                prepared_offset: 0,
                body: &m.body,
                props: plan.props,
            });
        }
        let written = self.write(&specs)?;
        let results = written
            .into_iter()
            .zip(&specs)
            .zip(&messages)
            .map(|(((off, qoff), spec), m)| {
                let real_qid = if spec.topic == m.topic.as_str() {
                    spec.queue_id
                } else {
                    prop_u32(&spec.props, prop::REAL_QID)
                };
                SendResult {
                    msg_id: m
                        .message_id
                        .clone()
                        .unwrap_or_else(|| self.offset_msg_id(off)),
                    topic: m.topic.clone(),
                    queue_id: real_qid,
                    queue_offset: qoff,
                    offset: off,
                    txn: None,
                }
            })
            .collect();
        Ok(Ok(Reply::Sent(results)))
    }

    fn prepare(
        &mut self,
        group: &str,
        m: NewMessage,
        immunity: Option<Millis>,
    ) -> Res<Result<Reply, ClientError>, S> {
        if let Err(e) = topic::validate_group(group) {
            return Ok(Err(e));
        }
        let mut plan = match self.plan(&m, false) {
            Ok(p) => p,
            Err(e) => return Ok(Err(e)),
        };
        if plan.delay_due.is_some() {
            return Ok(Err(ClientError::DelayOnTransaction));
        }
        let immunity_s = immunity.map(|ms| ms.div_ceil(1000));
        let t = self.topic(&m.topic, self.cfg.default_queues);
        let queue_id = match self.pick_queue(t, &m) {
            Ok(q) => q,
            Err(e) => return Ok(Err(e)),
        };
        record::push_prop(&mut plan.props, prop::TRAN_MSG, "true");
        record::push_prop(&mut plan.props, prop::PGROUP, group);
        record::push_prop(&mut plan.props, prop::REAL_TOPIC, &m.topic);
        record::push_prop(
            &mut plan.props,
            prop::REAL_QID,
            itoa(u64::from(queue_id)).as_str(),
        );
        if let Some(s) = immunity_s {
            record::push_prop(
                &mut plan.props,
                prop::CHECK_IMMUNITY_TIME_IN_SECONDS,
                itoa(s).as_str(),
            );
        }
        let spec = Spec {
            topic: topic::HALF,
            queue_id: 0,
            sys_flag: sys_flag::TRANSACTION_PREPARED_TYPE,
            flag: m.flag,
            born_timestamp: m.born_timestamp.unwrap_or(self.now),
            born_host: m.born_host.unwrap_or_default(),
            reconsume_times: 0,
            prepared_offset: 0,
            body: &m.body,
            props: plan.props,
        };
        let (off, _) = self.write(core::slice::from_ref(&spec))?[0];
        Ok(Ok(Reply::Sent(alloc::vec![SendResult {
            msg_id: m
                .message_id
                .clone()
                .unwrap_or_else(|| self.offset_msg_id(off)),
            topic: m.topic.clone(),
            queue_id,
            queue_offset: 0,
            offset: off,
            txn: Some(TxnId(off)),
        }])))
    }

    fn end_transaction(
        &mut self,
        txn: TxnId,
        resolution: Resolution,
        group: Option<&str>,
        from_check: bool,
    ) -> Res<Result<Reply, ClientError>, S> {
        let Some(row) = self.txns.get(txn.0).copied() else {
            // Not pending: resolved before, or never a transaction.
            let earlier = self
                .resolved
                .iter()
                .rev()
                .find(|(o, _)| *o == txn.0)
                .map(|&(_, c)| c);
            let earlier = match earlier {
                Some(true) => Some(Resolution::Commit),
                Some(false) => Some(Resolution::Rollback),
                None => None,
            };
            if let Some(was) = earlier {
                if was == resolution || resolution == Resolution::Unknown {
                    return Ok(Ok(Reply::Ended {
                        txn,
                        resolution: was,
                        duplicate: true,
                    }));
                }
                return Ok(Err(ClientError::TransactionAlreadyResolved {
                    txn,
                    resolution: earlier,
                }));
            }
            let was_half = match self.log.read_any(txn.0).map_err(Error::Storage)? {
                Some(r) => r.topic == topic::HALF,
                None => false,
            };
            return Ok(Err(if was_half {
                ClientError::TransactionAlreadyResolved {
                    txn,
                    resolution: None,
                }
            } else {
                ClientError::UnknownTransaction(txn)
            }));
        };
        if let Some(g) = group {
            let expected = &self.groups[row.group as usize].name;
            if !g.is_empty() && g != expected {
                return Ok(Err(ClientError::WrongProducerGroup {
                    txn,
                    expected: expected.clone(),
                    got: g.into(),
                }));
            }
        }
        if from_check {
            self.stats.checks_answered += 1;
        }
        let flag = match resolution {
            Resolution::Unknown => {
                self.stats.unknown_answers += 1;
                return Ok(Ok(Reply::Ended {
                    txn,
                    resolution,
                    duplicate: false,
                }));
            }
            Resolution::Commit => sys_flag::TRANSACTION_COMMIT_TYPE,
            Resolution::Rollback => sys_flag::TRANSACTION_ROLLBACK_TYPE,
        };
        self.write_op(txn.0, op::RESOLVED, flag, None)?;
        Ok(Ok(Reply::Ended {
            txn,
            resolution,
            duplicate: false,
        }))
    }

    fn write_op(&mut self, half: u64, tag: &str, flag: u32, checks: Option<u16>) -> Res<u64, S> {
        let mut props = Vec::with_capacity(40);
        record::push_prop(&mut props, prop::TAGS, tag);
        if let Some(c) = checks {
            record::push_prop(
                &mut props,
                prop::TRANSACTION_CHECK_TIMES,
                itoa(u64::from(c)).as_str(),
            );
        }
        let body = itoa(half);
        let mut spec = Spec::internal(topic::OP, body.as_str().as_bytes(), props, self.now);
        spec.sys_flag = flag;
        spec.prepared_offset = half;
        Ok(self.write(core::slice::from_ref(&spec))?[0].0)
    }

    #[allow(clippy::too_many_arguments)]
    fn pull(
        &mut self,
        group: &str,
        topic_name: &str,
        queue_id: u32,
        offset: Option<u64>,
        max: u32,
        filter: &TagFilter,
        auto_commit: bool,
    ) -> Res<Result<Reply, ClientError>, S> {
        if let Err(e) = topic::validate_group(group) {
            return Ok(Err(e));
        }
        let q = match self.readable_queue(topic_name, queue_id) {
            Ok(Some(q)) => q,
            Ok(None) => {
                return Ok(Ok(Reply::Pulled {
                    messages: Vec::new(),
                    next_offset: 0,
                    max_offset: 0,
                }))
            }
            Err(e) => return Ok(Err(e)),
        };
        let g = self.group(group);
        let start = offset.unwrap_or_else(|| self.offsets.get(&(g, q)).copied().unwrap_or(0));
        let visible = self.queues[q as usize].visible as u64;
        let mut messages = Vec::new();
        let mut at = start.min(visible);
        let cap = u64::from(self.cfg.max_transfer_bytes);
        let mut bytes = 0u64;
        while at < visible && messages.len() < max.clamp(1, 1024) as usize {
            let unit = self.queues[q as usize].units[at as usize];
            if let TagFilter::Tags(tags) = filter {
                if !tags.iter().any(|t| tag_hash(Some(t)) == unit.tag_hash) {
                    at += 1;
                    continue;
                }
            }
            if let Some(m) = self.read_message(q, at, unit)? {
                if filter.matches(m.tag.as_deref()) {
                    // Past the transfer cap: this message starts the next pull.
                    if !messages.is_empty() && bytes + u64::from(unit.size) > cap {
                        break;
                    }
                    bytes += u64::from(unit.size);
                    messages.push(m);
                }
            }
            at += 1;
        }
        if auto_commit && at != start {
            self.write_state(&StateOp::Offset {
                group,
                topic: topic_name,
                queue_id,
                offset: at,
            })?;
        }
        Ok(Ok(Reply::Pulled {
            messages,
            next_offset: at,
            max_offset: visible,
        }))
    }

    fn commit_offset(
        &mut self,
        group: &str,
        topic_name: &str,
        queue_id: u32,
        offset: u64,
    ) -> Res<Result<Reply, ClientError>, S> {
        if let Err(e) = topic::validate_group(group) {
            return Ok(Err(e));
        }
        // An offset is kept for a queue that exists: committing one must not create a topic
        // (it would get `queue_id + 1` queues, not the configured count).
        match self.readable_queue(topic_name, queue_id) {
            Ok(Some(_)) => {}
            Ok(None) => return Ok(Err(ClientError::UnknownTopic(topic_name.into()))),
            Err(e) => return Ok(Err(e)),
        }
        self.write_state(&StateOp::Offset {
            group,
            topic: topic_name,
            queue_id,
            offset,
        })?;
        Ok(Ok(Reply::OffsetCommitted))
    }

    fn receive(
        &mut self,
        group: &str,
        topic_name: &str,
        queue_id: Option<u32>,
        max: u32,
        invisible_ms: Millis,
        filter: &TagFilter,
    ) -> Res<Result<Reply, ClientError>, S> {
        if let Err(e) = topic::validate_group(group) {
            return Ok(Err(e));
        }
        if invisible_ms == 0 || invisible_ms > self.cfg.max_invisible_ms {
            return Ok(Err(ClientError::InvalidArgument(format!(
                "invisible duration {invisible_ms} ms is not within 1..={} ms",
                self.cfg.max_invisible_ms
            ))));
        }
        let queues: Vec<u32> = match queue_id {
            Some(qid) => match self.readable_queue(topic_name, qid) {
                Ok(Some(q)) => alloc::vec![q],
                Ok(None) => Vec::new(),
                Err(e) => return Ok(Err(e)),
            },
            None => {
                if let Err(e) = topic::validate_readable_topic(topic_name) {
                    return Ok(Err(e));
                }
                match self.topic_ids.get(topic_name) {
                    Some(&t) => self.topics[t as usize].queues.clone(),
                    None => Vec::new(),
                }
            }
        };
        let g = self.group(group);
        let max = max.clamp(1, 1024) as usize;
        let cap = u64::from(self.cfg.max_transfer_bytes);
        // Bytes taken so far; a message that would go past `cap` ends the receive (the first
        // one always goes).
        let mut bytes = 0u64;
        let mut full = false;
        let until = self.now + invisible_ms;
        let mut out = Vec::new();
        let n = queues.len().max(1) as u32;
        let cursor = queues
            .first()
            .map_or(0, |q| *self.pop_cursor.get(&(g, *q)).unwrap_or(&0));
        for i in 0..queues.len() {
            if out.len() >= max || full {
                break;
            }
            let q = queues[((cursor + i as u32) % n) as usize];
            let mut entries: Vec<(u64, u32)> = Vec::new();
            let pq = self.pops.entry((g, q)).or_default();
            let units = &self.queues[q as usize].units;
            // Expired deliveries first, then new messages.
            let ready: Vec<u64> = pq.ready.iter().copied().take(max - out.len()).collect();
            for qoff in ready {
                let size = units.get(qoff as usize).map_or(0, |u| u64::from(u.size));
                if out.len() + entries.len() > 0 && bytes + size > cap {
                    full = true;
                    break;
                }
                bytes += size;
                let attempt = pq.inflight.get(&qoff).map_or(1, |i| i.attempt + 1);
                entries.push((qoff, attempt));
            }
            let mut next = pq.next;
            let visible = self.queues[q as usize].visible as u64;
            let mut msgs = Vec::new();
            for &(qoff, _) in &entries {
                // In-flight entries only ever name existing units (apply_state checks).
                let Some(&unit) = self.queues[q as usize].units.get(qoff as usize) else {
                    msgs.push(None);
                    continue;
                };
                msgs.push(self.read_message(q, qoff, unit)?);
            }
            while !full && next < visible && entries.len() + out.len() < max {
                let unit = self.queues[q as usize].units[next as usize];
                let m = self.read_message(q, next, unit)?;
                if let Some(m) = &m {
                    if filter.matches(m.tag.as_deref()) {
                        let size = u64::from(unit.size);
                        if entries.len() + out.len() > 0 && bytes + size > cap {
                            full = true;
                            break;
                        }
                        bytes += size;
                        entries.push((next, 1));
                        msgs.push(Some(m.clone()));
                    }
                }
                next += 1;
            }
            let old_next = self.pops.get(&(g, q)).map_or(0, |p| p.next);
            if entries.is_empty() && next == old_next {
                continue;
            }
            let qid = self.queues[q as usize].queue_id;
            let generation = self.write_state(&StateOp::Ck {
                group,
                topic: topic_name,
                queue_id: qid,
                until,
                next,
                entries: entries.clone(),
            })?;
            for ((qoff, attempt), m) in entries.into_iter().zip(msgs) {
                let Some(message) = m else { continue };
                if attempt > 1 {
                    self.stats.redelivered += 1;
                }
                self.stats.received += 1;
                out.push(Received {
                    message,
                    handle: ReceiptHandle {
                        topic: topic_name.into(),
                        queue_id: qid,
                        queue_offset: qoff,
                        generation,
                    },
                    attempt,
                    visible_at: until,
                });
            }
        }
        if let Some(first) = queues.first() {
            self.pop_cursor.insert((g, *first), (cursor + 1) % n);
        }
        Ok(Ok(Reply::Received(out)))
    }

    fn find_inflight(
        &self,
        group: &str,
        h: &ReceiptHandle,
    ) -> Result<(u16, u32, Inflight), ClientError> {
        let bad = |why: &str| ClientError::InvalidReceiptHandle(format!("{h}: {why}"));
        let g = *self
            .group_ids
            .get(group)
            .ok_or_else(|| bad("the group has received nothing"))?;
        let q = self
            .queue_index(&h.topic, h.queue_id)
            .ok_or_else(|| bad("no such topic or queue"))?;
        let inflight = self
            .pops
            .get(&(g, q))
            .and_then(|p| p.inflight.get(&h.queue_offset))
            .ok_or_else(|| bad("no delivery of this message is in flight (already acked?)"))?;
        if inflight.generation != h.generation {
            return Err(ClientError::StaleReceiptHandle(format!(
                "{h}: the message was delivered again or its invisible time changed since"
            )));
        }
        Ok((g, q, *inflight))
    }

    fn ack(&mut self, group: &str, h: &ReceiptHandle) -> Res<Result<Reply, ClientError>, S> {
        if let Err(e) = self.find_inflight(group, h) {
            return Ok(Err(e));
        }
        self.write_state(&StateOp::Ack {
            group,
            topic: &h.topic,
            queue_id: h.queue_id,
            queue_offset: h.queue_offset,
            generation: h.generation,
        })?;
        Ok(Ok(Reply::Acked))
    }

    fn change_invisible(
        &mut self,
        group: &str,
        h: &ReceiptHandle,
        ms: Millis,
    ) -> Res<Result<Reply, ClientError>, S> {
        if ms > self.cfg.max_invisible_ms {
            return Ok(Err(ClientError::InvalidArgument(format!(
                "invisible duration {ms} ms is above the maximum of {} ms",
                self.cfg.max_invisible_ms
            ))));
        }
        let (g, q, inflight) = match self.find_inflight(group, h) {
            Ok(x) => x,
            Err(e) => return Ok(Err(e)),
        };
        let next = self.pops.get(&(g, q)).map_or(0, |p| p.next);
        let until = self.now + ms;
        let generation = self.write_state(&StateOp::Ck {
            group,
            topic: &h.topic,
            queue_id: h.queue_id,
            until,
            next,
            entries: alloc::vec![(h.queue_offset, inflight.attempt)],
        })?;
        Ok(Ok(Reply::InvisibleChanged {
            handle: ReceiptHandle {
                generation,
                ..h.clone()
            },
            visible_at: until,
        }))
    }

    fn forward_to_dlq(
        &mut self,
        group: &str,
        h: &ReceiptHandle,
    ) -> Res<Result<Reply, ClientError>, S> {
        let (g, q, inflight) = match self.find_inflight(group, h) {
            Ok(x) => x,
            Err(e) => return Ok(Err(e)),
        };
        self.dead_letter(g, q, h.queue_offset, inflight.generation)?;
        Ok(Ok(Reply::Forwarded))
    }

    fn send_back(
        &mut self,
        group: &str,
        offset: u64,
        level: Option<u32>,
    ) -> Res<Result<Reply, ClientError>, S> {
        if let Err(e) = topic::validate_group(group) {
            return Ok(Err(e));
        }
        let Some(r) = self.log.read_any(offset).map_err(Error::Storage)? else {
            return Ok(Err(ClientError::InvalidArgument(format!(
                "no message at offset {offset}"
            ))));
        };
        let topic_name: String = r.prop(prop::REAL_TOPIC).unwrap_or(r.topic).into();
        if !topic::classify(&topic_name).is_readable() {
            return Ok(Err(ClientError::InvalidArgument(format!(
                "no message at offset {offset}"
            ))));
        }
        let reconsume = r.header.reconsume_times + 1;
        let body = r.body.to_vec();
        let mut props = Vec::new();
        let mut has_retry_topic = false;
        let mut origin_id = None;
        for (k, v) in r.props() {
            if prop::INTERNAL.contains(&k) || k == prop::DELAY || k == prop::RECONSUME_TIME {
                continue;
            }
            if k == prop::RETRY_TOPIC {
                has_retry_topic = true;
            }
            if k == prop::UNIQ_KEY {
                origin_id = Some(String::from(v));
            }
            record::push_prop(&mut props, k, v);
        }
        let (flag, born, born_host) = (r.header.flag, r.header.born_timestamp, r.header.born_host);
        if !has_retry_topic {
            record::push_prop(&mut props, prop::RETRY_TOPIC, &topic_name);
        }
        let origin = origin_id.unwrap_or_else(|| self.offset_msg_id(offset));
        record::push_prop(&mut props, prop::ORIGIN_MESSAGE_ID, &origin);
        let level = level.unwrap_or(3 + reconsume - 1);
        let dead = reconsume > self.cfg.max_delivery_attempts;
        let mut dest = if dead {
            topic::dlq(group)
        } else {
            topic::retry(group)
        };
        let t = self.topic(&dest, 1);
        dest = self.topics[t as usize].name.clone();
        let (stored_topic, qid) = if dead {
            (dest.as_str(), 0)
        } else {
            let lv = level.clamp(1, self.cfg.delay_levels.len() as u32);
            let due = self.now + self.cfg.delay_levels[lv as usize - 1];
            record::push_prop(&mut props, prop::DELAY, itoa(u64::from(lv)).as_str());
            record::push_prop(&mut props, prop::REAL_TOPIC, &dest);
            record::push_prop(&mut props, prop::REAL_QID, "0");
            record::push_prop(&mut props, prop::TIMER_OUT_MS, itoa(due).as_str());
            (topic::SCHEDULE, lv - 1)
        };
        let mut spec = Spec::internal(stored_topic, &body, props, born);
        spec.queue_id = qid;
        spec.flag = flag;
        spec.born_host = born_host;
        spec.reconsume_times = reconsume;
        let (off, qoff) = self.write(core::slice::from_ref(&spec))?[0];
        if dead {
            self.stats.dead_lettered += 1;
        }
        Ok(Ok(Reply::Sent(alloc::vec![SendResult {
            msg_id: origin,
            topic: dest,
            queue_id: 0,
            queue_offset: qoff,
            offset: off,
            txn: None
        }])))
    }

    // ---- timers -------------------------------------------------------------------------

    fn check(&mut self, row: PendingTxn) -> Res<(), S> {
        let now = self.now;
        let Some(r) = self
            .log
            .read(row.offset, row.size as usize)
            .map_err(Error::Storage)?
        else {
            // Damaged since it was written: it can never be committed; drop it, do not wedge.
            let rollback = sys_flag::TRANSACTION_ROLLBACK_TYPE;
            self.write_op(row.offset, op::EXPIRED, rollback, None)?;
            return Ok(());
        };
        let stored = r.header.store_timestamp;
        if stored.saturating_add(self.cfg.half_reserve_ms) <= now {
            self.write_op(
                row.offset,
                op::EXPIRED,
                sys_flag::TRANSACTION_ROLLBACK_TYPE,
                None,
            )?;
            return Ok(());
        }
        if u32::from(row.checks) >= self.cfg.transaction_check_max {
            self.write_op(row.offset, op::CHECK_MAX, 0, None)?;
            return Ok(());
        }
        if !self.groups[row.group as usize].online {
            self.txns.update(row.offset, |t| t.deadline = PARKED);
            self.groups[row.group as usize].parked.push(row.offset);
            self.trace_txn(TraceKind::CheckParked, row.offset, row.queue, String::new());
            return Ok(());
        }
        let check = u32::from(row.checks) + 1;
        self.write_op(row.offset, op::CHECKED, 0, Some(row.checks + 1))?;
        let unit = CqUnit {
            offset: row.offset,
            size: row.size,
            tag_hash: 0,
        };
        let Some(message) = self.read_message(row.queue, 0, unit)? else {
            return Ok(());
        };
        self.stats.checks_sent += 1;
        self.outputs.push_back(Output::Check(CheckRequest {
            group: self.groups[row.group as usize].name.clone(),
            txn: TxnId(row.offset),
            message,
            check,
        }));
        Ok(())
    }

    fn deliver(&mut self, row: PendingDelay) -> Res<(), S> {
        let body = itoa(row.offset);
        let mut spec = Spec::internal(
            topic::DELAY_OP,
            body.as_str().as_bytes(),
            Vec::new(),
            self.now,
        );
        spec.prepared_offset = row.offset;
        self.write(core::slice::from_ref(&spec))?;
        Ok(())
    }

    fn expire_inflight(&mut self, g: u16, q: u32, qoff: u64, gen: u64) -> Res<(), S> {
        let Some(inflight) = self
            .pops
            .get(&(g, q))
            .and_then(|p| p.inflight.get(&qoff))
            .copied()
        else {
            return Ok(());
        };
        if inflight.generation != gen {
            return Ok(());
        }
        if inflight.attempt >= self.cfg.max_delivery_attempts {
            return self.dead_letter(g, q, qoff, gen);
        }
        if let Some(p) = self.pops.get_mut(&(g, q)) {
            p.ready.insert(qoff);
        }
        self.mark_notify(q);
        Ok(())
    }

    /// Copies a received message to `%DLQ%<group>` and retires its delivery, in one atomic
    /// group of two records.
    fn dead_letter(&mut self, g: u16, q: u32, qoff: u64, gen: u64) -> Res<(), S> {
        let Some(&unit) = self.queues[q as usize].units.get(qoff as usize) else {
            return Ok(());
        };
        let group = self.groups[g as usize].name.clone();
        let topic_name = self.topics[self.queues[q as usize].topic as usize]
            .name
            .clone();
        let queue_id = self.queues[q as usize].queue_id;
        let Some(r) = self
            .log
            .read(unit.offset, unit.size as usize)
            .map_err(Error::Storage)?
        else {
            // Damaged since it was written: retire the delivery rather than wedge the timer.
            let state = StateOp::Ack {
                group: &group,
                topic: &topic_name,
                queue_id,
                queue_offset: qoff,
                generation: gen,
            };
            self.write_state(&state)?;
            return Ok(());
        };
        let body = r.body.to_vec();
        let (flag, born, born_host, reconsume) = (
            r.header.flag,
            r.header.born_timestamp,
            r.header.born_host,
            r.header.reconsume_times,
        );
        let mut props = Vec::new();
        let mut origin = None;
        for (k, v) in r.props() {
            if prop::INTERNAL.contains(&k) {
                continue;
            }
            if k == prop::UNIQ_KEY {
                origin = Some(String::from(v));
            }
            record::push_prop(&mut props, k, v);
        }
        let origin = origin.unwrap_or_else(|| self.offset_msg_id(unit.offset));
        record::push_prop(&mut props, prop::ORIGIN_MESSAGE_ID, &origin);
        record::push_prop(&mut props, prop::RETRY_TOPIC, &topic_name);
        record::push_prop(&mut props, BATCH_LEN, "2");
        let dlq = topic::dlq(&group);
        self.topic(&dlq, 1);
        let mut dead = Spec::internal(&dlq, &body, props, born);
        dead.flag = flag;
        dead.born_host = born_host;
        dead.reconsume_times = reconsume;
        let state = postcard::to_allocvec(&StateOp::Ack {
            group: &group,
            topic: &topic_name,
            queue_id,
            queue_offset: qoff,
            generation: gen,
        })
        .expect("postcard to a Vec cannot fail");
        let retire = Spec::internal(topic::REVIVE, &state, Vec::new(), self.now);
        self.write(&[dead, retire])?;
        self.stats.dead_lettered += 1;
        Ok(())
    }

    // ---- writing and applying records ---------------------------------------------------

    fn write_state(&mut self, op: &StateOp<'_>) -> Res<u64, S> {
        let body = postcard::to_allocvec(op).expect("postcard to a Vec cannot fail");
        let topic = match op {
            StateOp::Offset { .. } => topic::OFFSETS,
            StateOp::Topic { .. } => topic::TOPICS,
            StateOp::Ck { .. } | StateOp::Ack { .. } => topic::REVIVE,
        };
        let spec = Spec::internal(topic, &body, Vec::new(), self.now);
        Ok(self.write(core::slice::from_ref(&spec))?[0].0)
    }

    /// Encodes records as one contiguous append, then applies each exactly as recovery
    /// would: the log is the state. Returns (log offset, queue offset) per record.
    fn write(&mut self, specs: &[Spec<'_>]) -> Res<Vec<(u64, u64)>, S> {
        let store_host = Host::V4(self.cfg.store_host.ip, self.cfg.store_host.port);
        let lens: Vec<usize> = specs
            .iter()
            .map(|s| {
                let h = Header {
                    born_host: s.born_host,
                    store_host,
                    ..Header::default()
                };
                record::encoded_len(&h, s.body.len(), s.topic.len(), s.props.len())
            })
            .collect();
        let total: usize = lens.iter().sum();
        let at = self.log.place(total).map_err(storage_err)?;
        let mut buf = core::mem::take(&mut self.buf);
        buf.clear();
        let mut placed = Vec::with_capacity(specs.len());
        let mut phys = at;
        for (i, s) in specs.iter().enumerate() {
            let t = self.topic(s.topic, s.queue_id + 1);
            let q = self.queue_of(t, s.queue_id);
            let earlier = specs[..i]
                .iter()
                .filter(|o| o.topic == s.topic && o.queue_id == s.queue_id)
                .count() as u64;
            let queue_offset = self.queues[q as usize].next + earlier;
            let header = Header {
                queue_id: s.queue_id,
                flag: s.flag,
                queue_offset,
                phys_offset: phys,
                sys_flag: s.sys_flag,
                born_timestamp: s.born_timestamp,
                born_host: s.born_host,
                store_timestamp: self.now,
                store_host,
                reconsume_times: s.reconsume_times,
                prepared_offset: s.prepared_offset,
            };
            let n = record::encode(&mut buf, &header, s.body, s.topic, &s.props)
                .map_err(Error::Encode)?;
            placed.push((phys, queue_offset));
            phys += n as u64;
        }
        if let Err(e) = self.log.append(at, &buf) {
            self.buf = buf;
            return Err(Error::Storage(e));
        }
        if self.cfg.flush == FlushMode::Async && self.flush_due.is_none() {
            self.flush_due = Some(self.now.saturating_add(self.cfg.flush_interval_ms));
        }
        let mut pos = 0;
        for (i, &(off, _)) in placed.iter().enumerate() {
            let bytes = &buf[pos..pos + lens[i]];
            pos += lens[i];
            if let Ok(Decoded::Record(r)) = record::decode_trusted(bytes) {
                self.apply(off, &r);
            }
        }
        self.buf = buf;
        Ok(placed)
    }

    /// Applies one record to the in-memory state. Used by recovery and by every write.
    fn apply(&mut self, off: u64, r: &RecordView<'_>) {
        if r.header.queue_id >= MAX_QUEUES {
            // Never written by this broker: a record with a valid CRC but no place here.
            return;
        }
        let now = r.header.store_timestamp;
        if self.recovering {
            self.now = self.now.max(now);
        }
        match topic::classify(r.topic) {
            TopicKind::User | TopicKind::Retry | TopicKind::DeadLetter | TopicKind::CheckMax => {
                let t = self.topic(r.topic, r.header.queue_id + 1);
                let q = self.queue_of(t, r.header.queue_id);
                self.push_unit(
                    q,
                    CqUnit {
                        offset: off,
                        size: r.total_size,
                        tag_hash: tag_hash(r.prop(prop::TAGS)),
                    },
                );
                self.stats.messages_stored += 1;
                if topic::classify(r.topic) == TopicKind::DeadLetter {
                    self.trace(TraceKind::DeadLettered, off, r.topic, String::new());
                } else {
                    self.trace(TraceKind::Stored, off, r.topic, String::new());
                }
            }
            TopicKind::Half => {
                self.bump(r.topic, r.header.queue_id);
                let Some(q) = self.real_queue(r) else { return };
                let group = self.group(r.prop(prop::PGROUP).unwrap_or(""));
                let immunity = r
                    .prop(prop::CHECK_IMMUNITY_TIME_IN_SECONDS)
                    .and_then(|s| s.parse::<u64>().ok())
                    .map_or(0, |s| s.saturating_mul(1000));
                let deadline = now.saturating_add(self.cfg.transaction_timeout_ms.max(immunity));
                if self.txns.get(off).is_none() {
                    self.txns.insert(PendingTxn {
                        offset: off,
                        deadline,
                        size: r.total_size,
                        queue: q,
                        tag_hash: tag_hash(r.prop(prop::TAGS)),
                        checks: 0,
                        group,
                    });
                }
                self.stats.halves_stored += 1;
                self.trace_txn(TraceKind::HalfStored, off, q, String::new());
            }
            TopicKind::Op => {
                self.bump(r.topic, r.header.queue_id);
                let half = r.header.prepared_offset;
                let tag = r.prop(prop::TAGS).unwrap_or("");
                match tag {
                    op::RESOLVED => {
                        let Some(row) = self.txns.remove(half) else {
                            return;
                        };
                        self.forget_parked(row);
                        let commit = r.header.sys_flag & sys_flag::TRANSACTION_TYPE_MASK
                            == sys_flag::TRANSACTION_COMMIT_TYPE;
                        if self.resolved.is_full() {
                            self.resolved.pop_front();
                        }
                        let _ = self.resolved.push_back((half, commit));
                        if commit {
                            self.push_unit(
                                row.queue,
                                CqUnit {
                                    offset: half,
                                    size: row.size,
                                    tag_hash: row.tag_hash,
                                },
                            );
                            self.stats.committed += 1;
                            self.trace_txn(TraceKind::Committed, half, row.queue, String::new());
                        } else {
                            self.stats.rolled_back += 1;
                            self.trace_txn(TraceKind::RolledBack, half, row.queue, String::new());
                        }
                    }
                    op::CHECKED => {
                        let checks = r
                            .prop(prop::TRANSACTION_CHECK_TIMES)
                            .and_then(|c| c.parse::<u16>().ok());
                        let interval = self.cfg.transaction_check_interval_ms;
                        let updated = self.txns.update(half, |t| {
                            t.checks = checks.unwrap_or(t.checks.saturating_add(1));
                            t.deadline = now.saturating_add(interval);
                        });
                        if let Some(row) = updated {
                            self.trace_txn(
                                TraceKind::CheckSent,
                                half,
                                row.queue,
                                format!("check {}", row.checks),
                            );
                        }
                    }
                    op::CHECK_MAX => {
                        let Some(row) = self.txns.remove(half) else {
                            return;
                        };
                        self.forget_parked(row);
                        let t = self.topic(topic::CHECK_MAX, 1);
                        let q = self.queue_of(t, 0);
                        self.push_unit(
                            q,
                            CqUnit {
                                offset: half,
                                size: row.size,
                                tag_hash: row.tag_hash,
                            },
                        );
                        self.stats.check_max_reached += 1;
                        self.trace_txn(TraceKind::CheckMaxReached, half, row.queue, String::new());
                    }
                    op::EXPIRED => {
                        let Some(row) = self.txns.remove(half) else {
                            return;
                        };
                        self.forget_parked(row);
                        self.stats.halves_expired += 1;
                        self.trace_txn(TraceKind::HalfExpired, half, row.queue, String::new());
                    }
                    _ => {}
                }
            }
            TopicKind::Schedule => {
                self.bump(r.topic, r.header.queue_id);
                let Some(q) = self.real_queue(r) else { return };
                let due = r
                    .prop(prop::TIMER_OUT_MS)
                    .and_then(|s| s.parse::<u64>().ok())
                    .unwrap_or(now);
                if self.delays.get(off).is_none() {
                    self.delays.insert(PendingDelay {
                        offset: off,
                        due,
                        size: r.total_size,
                        queue: q,
                        tag_hash: tag_hash(r.prop(prop::TAGS)),
                    });
                }
                self.stats.delayed_stored += 1;
                self.trace_txn(TraceKind::DelayStored, off, q, format!("due {due}"));
            }
            TopicKind::DelayOp => {
                self.bump(r.topic, r.header.queue_id);
                let Some(row) = self.delays.remove(r.header.prepared_offset) else {
                    return;
                };
                self.push_unit(
                    row.queue,
                    CqUnit {
                        offset: row.offset,
                        size: row.size,
                        tag_hash: row.tag_hash,
                    },
                );
                self.stats.delayed_delivered += 1;
                self.trace_txn(TraceKind::Delivered, row.offset, row.queue, String::new());
            }
            TopicKind::State => {
                self.bump(r.topic, r.header.queue_id);
                if let Ok(op) = postcard::from_bytes::<StateOp<'_>>(r.body) {
                    self.apply_state(off, now, op);
                }
            }
        }
    }

    fn apply_state(&mut self, off: u64, now: Millis, op: StateOp<'_>) {
        let out_of_range = match &op {
            StateOp::Offset { queue_id, .. }
            | StateOp::Ck { queue_id, .. }
            | StateOp::Ack { queue_id, .. } => *queue_id >= MAX_QUEUES,
            StateOp::Topic { queues, .. } => *queues > MAX_QUEUES,
        };
        if out_of_range {
            // Never written by this broker: a state record with a valid CRC but no place here.
            return;
        }
        match op {
            StateOp::Topic { name, queues } => {
                if topic::validate_user_topic(name).is_ok() {
                    self.topic_with(name, queues, false);
                }
            }
            StateOp::Offset {
                group,
                topic: t,
                queue_id,
                offset,
            } => {
                let g = self.group(group);
                let t = self.topic(t, queue_id + 1);
                let q = self.queue_of(t, queue_id);
                self.offsets.insert((g, q), offset);
                self.trace_txn(
                    TraceKind::OffsetCommitted,
                    off,
                    q,
                    format!("{group} -> {offset}"),
                );
            }
            StateOp::Ck {
                group,
                topic: t,
                queue_id,
                until,
                next,
                entries,
            } => {
                let g = self.group(group);
                let t = self.topic(t, queue_id + 1);
                let q = self.queue_of(t, queue_id);
                // A record naming messages the queue does not hold (a damaged or forged log)
                // is ignored: deliveries exist only for stored messages.
                let stored = self.queues[q as usize].units.len() as u64;
                if next > stored || entries.iter().any(|&(qoff, _)| qoff >= stored) {
                    return;
                }
                let pq = self.pops.entry((g, q)).or_default();
                pq.next = pq.next.max(next);
                for &(qoff, attempt) in &entries {
                    pq.ready.remove(&qoff);
                    pq.inflight.insert(
                        qoff,
                        Inflight {
                            attempt,
                            generation: off,
                        },
                    );
                    self.pop_timers.push(Reverse((until, g, q, qoff, off)));
                }
                for &(qoff, attempt) in &entries {
                    let kind = if attempt > 1 {
                        TraceKind::Redelivered
                    } else {
                        TraceKind::Received
                    };
                    let unit_off = self.queues[q as usize]
                        .units
                        .get(qoff as usize)
                        .map_or(off, |u| u.offset);
                    self.trace_txn(
                        kind,
                        unit_off,
                        q,
                        format!("{group} attempt {attempt} until {until}"),
                    );
                }
                let _ = now;
                self.prune_pop_timers();
            }
            StateOp::Ack {
                group,
                topic: t,
                queue_id,
                queue_offset,
                generation,
            } => {
                let g = self.group(group);
                let t = self.topic(t, queue_id + 1);
                let q = self.queue_of(t, queue_id);
                if let Some(pq) = self.pops.get_mut(&(g, q)) {
                    if pq
                        .inflight
                        .get(&queue_offset)
                        .is_some_and(|i| i.generation == generation)
                    {
                        pq.inflight.remove(&queue_offset);
                        pq.ready.remove(&queue_offset);
                        self.stats.acked += 1;
                        let unit_off = self.queues[q as usize]
                            .units
                            .get(queue_offset as usize)
                            .map_or(off, |u| u.offset);
                        self.trace_txn(TraceKind::Acked, unit_off, q, String::from(group));
                    }
                }
                self.prune_pop_timers();
            }
        }
    }

    /// Drops pop timers whose delivery was acked or superseded, so `poll_timeout` is real.
    fn prune_pop_timers(&mut self) {
        while let Some(&Reverse((_, g, q, qoff, gen))) = self.pop_timers.peek() {
            let live = self
                .pops
                .get(&(g, q))
                .and_then(|p| p.inflight.get(&qoff))
                .is_some_and(|i| i.generation == gen);
            if live {
                break;
            }
            self.pop_timers.pop();
        }
    }

    fn forget_parked(&mut self, row: PendingTxn) {
        if row.deadline == PARKED {
            self.groups[row.group as usize]
                .parked
                .retain(|&o| o != row.offset);
        }
    }

    fn real_queue(&mut self, r: &RecordView<'_>) -> Option<u32> {
        let name = r.prop(prop::REAL_TOPIC)?;
        let qid: u32 = r.prop(prop::REAL_QID)?.parse().ok()?;
        if qid >= MAX_QUEUES {
            return None;
        }
        let t = self.topic(name, qid + 1);
        Some(self.queue_of(t, qid))
    }

    fn push_unit(&mut self, q: u32, unit: CqUnit) {
        let queue = &mut self.queues[q as usize];
        queue.units.push(unit);
        queue.next += 1;
        if self.recovering {
            return;
        }
        if self.cfg.flush == FlushMode::Async {
            queue.visible = queue.units.len();
            self.mark_notify(q);
        } else {
            self.unsynced.push_back((self.log.end(), q));
        }
    }

    fn mark_notify(&mut self, q: u32) {
        if !self.cfg.notify_available || self.recovering {
            return;
        }
        let queue = &mut self.queues[q as usize];
        if !queue.notify {
            queue.notify = true;
            self.notify.push(q);
        }
    }

    /// Advances the queue offset of an internal topic's queue.
    fn bump(&mut self, topic_name: &str, queue_id: u32) {
        let t = self.topic(topic_name, queue_id + 1);
        let q = self.queue_of(t, queue_id);
        self.queues[q as usize].next += 1;
    }

    fn trace(&mut self, kind: TraceKind, offset: u64, topic_name: &str, detail: String) {
        if self.cfg.trace && !self.recovering {
            self.outputs.push_back(Output::Trace(TraceEvent {
                at: self.now,
                kind,
                offset,
                topic: topic_name.into(),
                detail,
            }));
        }
    }

    fn trace_txn(&mut self, kind: TraceKind, offset: u64, q: u32, detail: String) {
        if self.cfg.trace && !self.recovering {
            let name = self.topics[self.queues[q as usize].topic as usize]
                .name
                .clone();
            self.trace(kind, offset, &name, detail);
        }
    }

    // ---- topics, queues, groups -----------------------------------------------------------

    fn topic(&mut self, name: &str, min_queues: u32) -> u32 {
        self.topic_with(name, min_queues, true)
    }

    /// [`Broker::topic`]; `auto`: a user topic recovery meets first in a record (not in a
    /// `Topic` state record) was auto-created, with `default_queues` queues — a record of
    /// queue 0 must not make it a topic of one queue.
    fn topic_with(&mut self, name: &str, mut min_queues: u32, auto: bool) -> u32 {
        let t = match self.topic_ids.get(name) {
            Some(&t) => t,
            None => {
                if auto && self.recovering && topic::classify(name) == TopicKind::User {
                    min_queues = min_queues.max(self.cfg.default_queues);
                }
                let t = self.topics.len() as u32;
                self.topics.push(Topic {
                    name: name.into(),
                    kind: topic::classify(name),
                    queues: Vec::new(),
                    round_robin: 0,
                });
                self.topic_ids.insert(name.into(), t);
                t
            }
        };
        while (self.topics[t as usize].queues.len() as u32) < min_queues {
            let queue_id = self.topics[t as usize].queues.len() as u32;
            let q = self.queues.len() as u32;
            self.queues.push(Queue {
                topic: t,
                queue_id,
                units: Vec::new(),
                next: 0,
                visible: 0,
                notify: false,
            });
            self.topics[t as usize].queues.push(q);
        }
        t
    }

    fn queue_of(&self, t: u32, queue_id: u32) -> u32 {
        self.topics[t as usize].queues[queue_id as usize]
    }

    fn queue_index(&self, topic_name: &str, queue_id: u32) -> Option<u32> {
        let t = *self.topic_ids.get(topic_name)?;
        self.topics[t as usize]
            .queues
            .get(queue_id as usize)
            .copied()
    }

    /// A readable queue, `None` when the topic does not exist (yet).
    fn readable_queue(&self, topic_name: &str, queue_id: u32) -> Result<Option<u32>, ClientError> {
        topic::validate_readable_topic(topic_name)?;
        let Some(&t) = self.topic_ids.get(topic_name) else {
            return Ok(None);
        };
        let topic = &self.topics[t as usize];
        match topic.queues.get(queue_id as usize) {
            Some(&q) => Ok(Some(q)),
            None => Err(ClientError::InvalidQueue {
                topic: topic_name.into(),
                queue_id,
                queues: topic.queues.len() as u32,
            }),
        }
    }

    fn group(&mut self, name: &str) -> u16 {
        if let Some(&g) = self.group_ids.get(name) {
            return g;
        }
        let g = self.groups.len() as u16;
        self.groups.push(Group {
            name: name.into(),
            online: false,
            parked: Vec::new(),
        });
        self.group_ids.insert(name.into(), g);
        g
    }

    fn pick_queue(&mut self, t: u32, m: &NewMessage) -> Result<u32, ClientError> {
        let topic = &mut self.topics[t as usize];
        let n = topic.queues.len() as u32;
        if let Some(q) = m.queue_id {
            if q >= n {
                return Err(ClientError::InvalidQueue {
                    topic: topic.name.clone(),
                    queue_id: q,
                    queues: n,
                });
            }
            return Ok(q);
        }
        if let Some(g) = &m.message_group {
            return Ok((tag_hash(Some(g)) as u32) % n);
        }
        topic.round_robin = topic.round_robin.wrapping_add(1);
        Ok(topic.round_robin % n)
    }

    // ---- validation ----------------------------------------------------------------------

    /// Validates a message and serializes its properties.
    fn plan(&self, m: &NewMessage, in_batch: bool) -> Result<Plan, ClientError> {
        topic::validate_user_topic(&m.topic)?;
        if !self.cfg.auto_create_topics && !self.topic_ids.contains_key(m.topic.as_str()) {
            return Err(ClientError::UnknownTopic(m.topic.clone()));
        }
        if m.body.is_empty() {
            return Err(ClientError::EmptyBody);
        }
        if m.body.len() > self.cfg.max_message_size as usize {
            return Err(ClientError::MessageTooLarge {
                size: m.body.len(),
                max: self.cfg.max_message_size,
            });
        }
        let mut props = Vec::with_capacity(64);
        let mut delay = m.delay;
        let mut delay_sources = u32::from(m.delay.is_some());
        let check_text = |what: &str, s: &str| -> Result<(), ClientError> {
            if s.bytes()
                .any(|b| b == record::NAME_VALUE_SEPARATOR || b == record::PROPERTY_SEPARATOR)
            {
                return Err(ClientError::InvalidProperty(format!(
                    "{what} contains a control character \\x01 or \\x02"
                )));
            }
            Ok(())
        };
        if let Some(tag) = &m.tag {
            check_text("tag", tag)?;
            if tag.contains("||") {
                return Err(ClientError::InvalidProperty(format!(
                    "tag `{tag}` contains `||`"
                )));
            }
            if !tag.is_empty() {
                record::push_prop(&mut props, prop::TAGS, tag);
            }
        }
        if !m.keys.is_empty() {
            let mut keys = String::new();
            for (i, k) in m.keys.iter().enumerate() {
                check_text("key", k)?;
                if i > 0 {
                    keys.push(' ');
                }
                keys.push_str(k);
            }
            record::push_prop(&mut props, prop::KEYS, &keys);
        }
        if let Some(id) = &m.message_id {
            check_text("message id", id)?;
            if id.is_empty() || id.len() > 128 {
                return Err(ClientError::InvalidProperty(
                    "message id must be 1..=128 bytes".into(),
                ));
            }
            record::push_prop(&mut props, prop::UNIQ_KEY, id);
        }
        if let Some(g) = &m.message_group {
            check_text("message group", g)?;
            record::push_prop(&mut props, prop::SHARDING_KEY, g);
        }
        for (k, v) in &m.properties {
            if k.is_empty() {
                return Err(ClientError::InvalidProperty("empty property name".into()));
            }
            check_text("property name", k)?;
            check_text("property value", v)?;
            if prop::RESERVED.contains(&k.as_str()) || k == prop::TAGS || k == prop::KEYS {
                return Err(ClientError::InvalidProperty(format!(
                    "`{k}` is set by the broker or a field, not a property"
                )));
            }
            let parse = |v: &str| {
                v.trim()
                    .parse::<i64>()
                    .map_err(|_| ClientError::InvalidDelay(format!("{k}=`{v}` is not a number")))
            };
            match k.as_str() {
                prop::DELAY => {
                    let l = parse(v)?;
                    if l < 0 {
                        return Err(ClientError::InvalidDelay(format!(
                            "delay level {l} is negative"
                        )));
                    }
                    delay = Some(Delay::Level(u32::try_from(l).unwrap_or(u32::MAX)));
                    delay_sources += 1;
                    continue;
                }
                prop::TIMER_DELIVER_MS => {
                    let at = parse(v)?;
                    if at < 0 {
                        return Err(ClientError::InvalidDelay(format!(
                            "delivery time {at} is negative"
                        )));
                    }
                    delay = Some(Delay::At(at as u64));
                    delay_sources += 1;
                    continue;
                }
                prop::TIMER_DELAY_SEC | prop::TIMER_DELAY_MS => {
                    let d = parse(v)?;
                    if d < 0 {
                        return Err(ClientError::InvalidDelay(format!("{k}={d} is negative")));
                    }
                    let ms = if k == prop::TIMER_DELAY_SEC {
                        (d as u64).saturating_mul(1000)
                    } else {
                        d as u64
                    };
                    delay = Some(Delay::After(ms));
                    delay_sources += 1;
                    continue;
                }
                _ => {}
            }
            record::push_prop(&mut props, k, v);
        }
        if delay_sources > 1 {
            return Err(ClientError::InvalidDelay(
                "more than one delay given".into(),
            ));
        }
        let (mut delay_due, mut level) = (None, None);
        match delay {
            None | Some(Delay::Level(0)) => {}
            Some(Delay::Level(l)) => {
                let l = l.min(self.cfg.delay_levels.len() as u32);
                record::push_prop(&mut props, prop::DELAY, itoa(u64::from(l)).as_str());
                delay_due = Some(
                    self.now
                        .saturating_add(self.cfg.delay_levels[l as usize - 1]),
                );
                level = Some(l);
            }
            Some(Delay::At(at)) => {
                const MAX_DELAY: Millis = 100 * 365 * 86_400_000;
                if at > self.now.saturating_add(MAX_DELAY) {
                    return Err(ClientError::InvalidDelay(format!(
                        "delivery time {at} is more than 100 years away"
                    )));
                }
                record::push_prop(&mut props, prop::TIMER_DELIVER_MS, itoa(at).as_str());
                delay_due = Some(at.max(self.now));
            }
            Some(Delay::After(ms)) => {
                const MAX_DELAY: Millis = 100 * 365 * 86_400_000;
                if ms > MAX_DELAY {
                    return Err(ClientError::InvalidDelay(format!(
                        "delay of {ms} ms is more than 100 years"
                    )));
                }
                let at = self.now.saturating_add(ms);
                record::push_prop(&mut props, prop::TIMER_DELIVER_MS, itoa(at).as_str());
                delay_due = Some(at);
            }
        }
        if in_batch && delay_due.is_some() {
            return Err(ClientError::DelayInBatch);
        }
        // Leave room for the broker's own properties.
        if props.len() + 512 > i16::MAX as usize {
            return Err(ClientError::PropertiesTooLarge(props.len()));
        }
        Ok(Plan {
            props,
            delay_due,
            level,
        })
    }

    // ---- reading -------------------------------------------------------------------------

    fn read_message(&mut self, q: u32, queue_offset: u64, unit: CqUnit) -> Res<Option<Message>, S> {
        let queue = &self.queues[q as usize];
        let (topic_name, queue_id) = (&self.topics[queue.topic as usize].name, queue.queue_id);
        let Some(r) = self
            .log
            .read(unit.offset, unit.size as usize)
            .map_err(Error::Storage)?
        else {
            return Ok(None);
        };
        let mut m = message_from(&r, unit.offset, r.header.store_host);
        m.topic.clone_from(topic_name);
        m.queue_id = queue_id;
        m.queue_offset = queue_offset;
        Ok(Some(m))
    }

    fn offset_msg_id(&self, offset: u64) -> String {
        offset_msg_id(
            Host::V4(self.cfg.store_host.ip, self.cfg.store_host.port),
            offset,
        )
    }
}

struct Plan {
    props: Vec<u8>,
    delay_due: Option<Millis>,
    level: Option<u32>,
}

/// RocketMQ's offset message id: store host (ip 4 + port 4) and log offset (8), 32 hex digits.
#[must_use]
pub fn offset_msg_id(store_host: Host, offset: u64) -> String {
    let mut b = [0u8; 16];
    if let Host::V4(ip, port) = store_host {
        b[..4].copy_from_slice(&ip);
        b[4..8].copy_from_slice(&u32::from(port).to_be_bytes());
    }
    b[8..].copy_from_slice(&offset.to_be_bytes());
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut s = String::with_capacity(32);
    for x in b {
        s.push(HEX[usize::from(x >> 4)] as char);
        s.push(HEX[usize::from(x & 15)] as char);
    }
    s
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

fn prop_u32(props: &[u8], key: &str) -> u32 {
    record::Props::new(props)
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// Formats an integer without allocating.
fn itoa(v: u64) -> heapless::String<20> {
    let mut s = heapless::String::new();
    let _ = fmt::Write::write_fmt(&mut s, format_args!("{v}"));
    s
}
