//! The broker's records and in-memory rows: property names, consumer-state records, topics,
//! groups, pending transactions and delays, deliveries in flight, and the counters.

use super::*;

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
pub(super) mod op {
    pub const RESOLVED: &str = "d";
    pub const CHECKED: &str = "c";
    pub const CHECK_MAX: &str = "x";
    pub const EXPIRED: &str = "e";
}

/// Consumer state records (rmq_sys_REVIVE_LOG and the offsets topic), postcard-encoded.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) enum StateOp<'a> {
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
    /// A consumer group deleted by a host (RocketMQ's deleteSubGroup): its declaration,
    /// committed offsets and receive positions are gone; the name starts afresh.
    GroupDeleted { name: &'a str },
    /// A user topic's order settings, set by a host (RocketMQ's updateTopic -o: the topic
    /// config's `order` flag, and the name server's ORDER_TOPIC_CONFIG entry, `conf`, empty
    /// for none). The last record wins; the topic's deletion clears them.
    TopicOrder {
        name: &'a str,
        order: bool,
        conf: &'a str,
    },
}

pub(super) struct Topic {
    pub(super) name: String,
    pub(super) kind: TopicKind,
    pub(super) queues: Vec<u32>,
    pub(super) round_robin: u32,
    /// Deleted ([`Broker::delete_topic`]): no longer found by name.
    pub(super) deleted: bool,
    /// Its order settings ([`Broker::topic_order`]): the flag and the conf (empty: none).
    pub(super) order: bool,
    pub(super) order_conf: String,
}

pub(super) struct Group {
    pub(super) name: String,
    pub(super) online: bool,
    /// Transactions whose check waits for a producer of the group: (id, the deadline it
    /// was parked at).
    pub(super) parked: Vec<(u64, Millis)>,
    /// Receives are orderly (FIFO): a queue's messages in queue order, one batch in flight
    /// per queue, redelivered in place.
    pub(super) fifo: bool,
}

pub(super) const DEAD: u32 = u32::MAX;
/// Most queues a topic may have.
pub const MAX_QUEUES: u32 = 1024;

#[derive(Clone, Copy, Debug)]
pub(super) struct PendingTxn {
    /// The transaction's id (the offset of its first half record, which producers name).
    pub(super) offset: u64,
    /// Where its half record is now: `offset`, or where retention carried it forward.
    pub(super) record: u64,
    pub(super) deadline: Millis,
    pub(super) size: u32,
    pub(super) queue: u32,
    pub(super) tag_hash: i32,
    pub(super) checks: u16,
    pub(super) group: u32,
    /// The latest check sent was answered (UNKNOWN), or is counted as unanswered already:
    /// `false` from a check going out until one of those ([`Stats::checks_unanswered`]).
    pub(super) answered: bool,
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
pub(super) struct PendingDelay {
    /// Its key (the offset of its first record).
    pub(super) offset: u64,
    /// Where its record is now: `offset`, or where retention carried it forward.
    pub(super) record: u64,
    pub(super) due: Millis,
    pub(super) size: u32,
    pub(super) queue: u32,
    pub(super) tag_hash: i32,
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
pub(super) type PopTimer = (Millis, u32, u32, u64, u64);

/// A half message waiting for its END_TRANSACTION while it is still parked (no producer of
/// its group is online); its deadline is this value.
pub(super) const PARKED: Millis = Millis::MAX - 1;

#[derive(Clone, Copy, Debug)]
pub(super) struct Inflight {
    pub(super) attempt: u32,
    /// The record of its latest receive or invisible-time change.
    pub(super) generation: u64,
    /// The record of the receive that began this attempt: a handle of any generation from
    /// here on (a renewal's earlier handle) still names this delivery.
    pub(super) since: u64,
}

impl Inflight {
    /// Whether a receipt handle of `generation` names this delivery attempt.
    pub(super) fn named_by(&self, generation: u64) -> bool {
        (self.since..=self.generation).contains(&generation)
    }
}

#[derive(Default)]
pub(super) struct PopQueue {
    pub(super) next: u64,
    pub(super) inflight: BTreeMap<u64, Inflight>,
    /// In-flight messages whose invisible time ran out: deliverable again.
    pub(super) ready: BTreeSet<u64>,
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
