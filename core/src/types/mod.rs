//! What goes in and out of a [`Broker`](crate::Broker): requests, replies, outputs, messages.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::str::FromStr;

use crate::Millis;

mod client_error;
mod msg_id;
pub use client_error::{ClientError, DiskFull};
pub use msg_id::{MsgId, OffsetMsgId};

/// A message as a producer sends it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewMessage {
    /// Destination topic.
    pub topic: String,
    /// Payload (at least one byte, at most `max_message_size`).
    pub body: Vec<u8>,
    /// RocketMQ tag (property TAGS).
    pub tag: Option<String>,
    /// Business keys (property KEYS, space separated).
    pub keys: Vec<String>,
    /// User properties. The wire forms of delay are understood here too: `DELAY` (a level),
    /// `TIMER_DELIVER_MS` (an absolute time), `TIMER_DELAY_SEC` and `TIMER_DELAY_MS`.
    pub properties: Vec<(String, String)>,
    /// Queue; `None` picks one round-robin (or by message group).
    pub queue_id: Option<u32>,
    /// The client's message id (UNIQ_KEY); `None` uses the offset message id.
    pub message_id: Option<String>,
    /// Delayed delivery.
    pub delay: Option<Delay>,
    /// FIFO message group (property __SHARDINGKEY); picks the queue by hash.
    pub message_group: Option<String>,
    /// Producer's clock; `None` uses the store time.
    pub born_timestamp: Option<Millis>,
    /// Producer's address.
    pub born_host: Option<crate::record::Host>,
    /// FLAG, opaque to the broker.
    pub flag: i32,
}

impl NewMessage {
    /// A message with a topic and body and nothing else.
    pub fn new(topic: impl Into<String>, body: impl Into<Vec<u8>>) -> Self {
        NewMessage {
            topic: topic.into(),
            body: body.into(),
            ..Default::default()
        }
    }
    /// Sets the tag.
    #[must_use]
    pub fn with_tag(mut self, tag: impl Into<String>) -> Self {
        self.tag = Some(tag.into());
        self
    }
    /// Sets a delay.
    #[must_use]
    pub fn with_delay(mut self, delay: Delay) -> Self {
        self.delay = Some(delay);
        self
    }
}

/// A message as a producer sends it, borrowed: the fast send path
/// ([`Broker::send_ref`](crate::Broker::send_ref), [`Broker::prepare_ref`](crate::Broker::prepare_ref))
/// takes it without copying the body or allocating. The fields mean what [`NewMessage`]'s do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MessageRef<'a> {
    pub topic: &'a str,
    pub body: &'a [u8],
    pub tag: Option<&'a str>,
    pub keys: &'a [&'a str],
    pub properties: &'a [(&'a str, &'a str)],
    pub queue_id: Option<u32>,
    pub message_id: Option<&'a str>,
    pub delay: Option<Delay>,
    pub message_group: Option<&'a str>,
    pub born_timestamp: Option<Millis>,
    pub born_host: Option<crate::record::Host>,
    pub flag: i32,
}

impl<'a> MessageRef<'a> {
    /// A message with a topic and body and nothing else.
    #[must_use]
    pub fn new(topic: &'a str, body: &'a [u8]) -> Self {
        MessageRef {
            topic,
            body,
            ..Default::default()
        }
    }
}

/// Where a message of the fast send path went ([`Broker::send_ref`](crate::Broker::send_ref)):
/// [`SendResult`] without its strings. The message id is formatted only when asked for
/// ([`SendReceipt::msg_id`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendReceipt<'a> {
    /// The message's queue (a delayed one's record waits in the schedule topic meanwhile).
    pub queue_id: u32,
    pub queue_offset: u64,
    /// Log offset of the record.
    pub offset: u64,
    /// For a half message: its transaction.
    pub txn: Option<TxnId>,
    /// The client's message id (UNIQ_KEY), when it gave one.
    pub(crate) message_id: Option<&'a str>,
    pub(crate) store_host: crate::record::Host,
}

impl<'a> SendReceipt<'a> {
    /// The message id: the client's own (UNIQ_KEY), or RocketMQ's offset message id.
    #[must_use]
    pub fn msg_id(&self) -> MsgId<'a> {
        match self.message_id {
            Some(id) => MsgId::Client(id),
            None => MsgId::Offset(OffsetMsgId::new(self.store_host, self.offset)),
        }
    }

    /// The [`SendResult`] of the same send (allocates the id and topic strings).
    #[must_use]
    pub fn to_result(&self, topic: &str) -> SendResult {
        SendResult {
            msg_id: self.msg_id().as_str().into(),
            topic: topic.into(),
            queue_id: self.queue_id,
            queue_offset: self.queue_offset,
            offset: self.offset,
            txn: self.txn,
        }
    }
}

/// When a delayed message becomes visible.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Delay {
    /// RocketMQ delay level 1..=N; above N is clamped to N; 0 means no delay.
    Level(u32),
    /// An absolute delivery time in ms (RocketMQ 5 TIMER_DELIVER_MS); in the past means now.
    At(Millis),
    /// Relative to the store time, in ms (TIMER_DELAY_MS).
    After(Millis),
}

/// How a transaction ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Resolution {
    /// Make the half message visible.
    Commit,
    /// Make sure it never is.
    Rollback,
    /// Not known yet: leave it pending for the next check.
    Unknown,
}

impl Resolution {
    /// `commit`, `rollback` or `unknown`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Resolution::Commit => "commit",
            Resolution::Rollback => "rollback",
            Resolution::Unknown => "unknown",
        }
    }
}

impl FromStr for Resolution {
    type Err = ClientError;
    fn from_str(s: &str) -> Result<Self, ClientError> {
        match s.to_ascii_lowercase().as_str() {
            "commit" | "commit_message" | "commit_type" => Ok(Resolution::Commit),
            "rollback" | "rollback_message" | "rollback_type" => Ok(Resolution::Rollback),
            "unknown" | "unknow" | "not_type" => Ok(Resolution::Unknown),
            _ => Err(ClientError::InvalidArgument(alloc::format!(
                "transaction resolution `{s}` is not one of commit, rollback, unknown"
            ))),
        }
    }
}

/// A transaction id: the log offset of its half message, written as 16 hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TxnId(pub u64);

impl fmt::Display for TxnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016X}", self.0)
    }
}

impl FromStr for TxnId {
    type Err = ClientError;
    fn from_str(s: &str) -> Result<Self, ClientError> {
        if s.len() != 16 {
            return Err(ClientError::MalformedTransactionId(s.into()));
        }
        u64::from_str_radix(s, 16)
            .map(TxnId)
            .map_err(|_| ClientError::MalformedTransactionId(s.into()))
    }
}

/// Identifies one delivery of a received message; acks and invisible-time changes name it.
/// Written as `<generation hex>.<queue>.<queue offset>.<topic>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReceiptHandle {
    pub topic: String,
    pub queue_id: u32,
    pub queue_offset: u64,
    /// Log offset of the record that made this delivery or changed its invisible time. A
    /// change keeps the delivery's earlier handles valid; a later delivery makes them stale.
    pub generation: u64,
}

impl fmt::Display for ReceiptHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:x}.{}.{}.{}",
            self.generation, self.queue_id, self.queue_offset, self.topic
        )
    }
}

impl FromStr for ReceiptHandle {
    type Err = ClientError;
    fn from_str(s: &str) -> Result<Self, ClientError> {
        let bad =
            || ClientError::InvalidReceiptHandle(alloc::format!("`{s}` is not a receipt handle"));
        let mut it = s.splitn(4, '.');
        let generation = u64::from_str_radix(it.next().ok_or_else(bad)?, 16).map_err(|_| bad())?;
        let queue_id = it.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
        let queue_offset = it.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
        let topic = it.next().ok_or_else(bad)?;
        if topic.is_empty() {
            return Err(bad());
        }
        Ok(ReceiptHandle {
            topic: topic.into(),
            queue_id,
            queue_offset,
            generation,
        })
    }
}

/// Which messages a consumer wants: `*`, a tag expression `TagA || TagB`, or a SQL92
/// expression over the message's properties (RocketMQ's `MessageSelector.bySql`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum TagFilter {
    /// Every message.
    #[default]
    All,
    /// Messages whose tag is one of these.
    Tags(Vec<String>),
    /// Messages for which this SQL92 expression is TRUE.
    Sql92(Sql92Filter),
}

/// A SQL92 filter parsed once, when the request came; equal when the expressions' texts are.
#[derive(Clone, Debug)]
pub struct Sql92Filter {
    expr: String,
    parsed: alloc::sync::Arc<crate::filter::Sql92>,
}

impl PartialEq for Sql92Filter {
    fn eq(&self, other: &Self) -> bool {
        self.expr == other.expr
    }
}
impl Eq for Sql92Filter {}

impl Sql92Filter {
    /// The expression as the client sent it.
    #[must_use]
    pub fn expression(&self) -> &str {
        &self.expr
    }
}

/// RocketMQ's separator of a message's keys in its `KEYS` property.
const KEY_SEPARATOR: &str = " ";

impl TagFilter {
    /// Parses RocketMQ's tag expression (`*`, empty, or `a || b`).
    #[must_use]
    pub fn parse(expr: &str) -> Self {
        let expr = expr.trim();
        if expr.is_empty() || expr == "*" {
            return TagFilter::All;
        }
        TagFilter::Tags(
            expr.split("||")
                .map(|t| String::from(t.trim()))
                .filter(|t| !t.is_empty())
                .collect(),
        )
    }
    /// Parses a SQL92 expression ([`crate::filter::Sql92::parse`]).
    ///
    /// # Errors
    /// The parser's refusal: the problem and its byte offset.
    pub fn sql92(expr: &str) -> Result<Self, crate::filter::FilterError> {
        let parsed = crate::filter::Sql92::parse(expr)?;
        Ok(TagFilter::Sql92(Sql92Filter {
            expr: expr.into(),
            parsed: alloc::sync::Arc::new(parsed),
        }))
    }
    /// Whether a message with this tag passes a tag filter (a SQL92 filter also needs the
    /// message's properties: see [`TagFilter::matches_message`]).
    #[must_use]
    pub fn matches(&self, tag: Option<&str>) -> bool {
        match self {
            TagFilter::All => true,
            TagFilter::Tags(tags) => tag.is_some_and(|t| tags.iter().any(|x| x == t)),
            TagFilter::Sql92(_) => false,
        }
    }
    /// Whether a message passes. A SQL92 expression sees the message's properties as RocketMQ
    /// exposes them to it: `TAGS` (the tag), `KEYS` (the keys joined by a space) and the user
    /// properties; a missing one is NULL.
    #[must_use]
    pub fn matches_message(&self, m: &Message) -> bool {
        match self {
            TagFilter::All | TagFilter::Tags(_) => self.matches(m.tag.as_deref()),
            TagFilter::Sql92(f) => {
                // Joined only when the expression reads KEYS of a message with several.
                let joined = core::cell::OnceCell::new();
                f.parsed.matches(|name| match name {
                    "TAGS" => m.tag.as_deref(),
                    "KEYS" => match m.keys.as_slice() {
                        [] => None,
                        [one] => Some(one.as_str()),
                        many => Some(joined.get_or_init(|| many.join(KEY_SEPARATOR)).as_str()),
                    },
                    _ => m.property(name),
                })
            }
        }
    }
}

/// What a client asks of the broker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Send one message, or a batch (several, one topic, stored with consecutive queue offsets,
    /// all or nothing).
    Send { messages: Vec<NewMessage> },
    /// Store a half (prepare) message of a transaction.
    Prepare {
        /// Producer group: who is checked.
        group: String,
        message: NewMessage,
        /// CHECK_IMMUNITY_TIME_IN_SECONDS: no check before this, in ms.
        check_immunity_ms: Option<Millis>,
    },
    /// END_TRANSACTION.
    EndTransaction {
        txn: TxnId,
        resolution: Resolution,
        /// The producer group, when the protocol carries it: a mismatch is refused.
        group: Option<String>,
        /// Whether this answers a check (SOURCE_SERVER_CHECK) or comes from the producer.
        from_check: bool,
    },
    /// Read a queue from an offset (or the group's committed offset).
    Pull {
        group: String,
        topic: String,
        queue_id: u32,
        offset: Option<u64>,
        max: u32,
        filter: TagFilter,
        /// Commit the offset after the returned messages.
        auto_commit: bool,
    },
    /// Commit a group's offset in a queue.
    CommitOffset {
        group: String,
        topic: String,
        queue_id: u32,
        offset: u64,
    },
    /// Receive up to `max` messages, invisible to the group for `invisible_ms` (RocketMQ 5 pop).
    Receive {
        group: String,
        topic: String,
        queue_id: Option<u32>,
        max: u32,
        invisible_ms: Millis,
        filter: TagFilter,
    },
    /// Acknowledge a received message.
    Ack {
        group: String,
        handle: ReceiptHandle,
    },
    /// Change how long a received message stays invisible; answers a new handle.
    ChangeInvisible {
        group: String,
        handle: ReceiptHandle,
        invisible_ms: Millis,
    },
    /// Give a received message up at once: `%DLQ%<group>` (ForwardMessageToDeadLetterQueue).
    ForwardToDeadLetter {
        group: String,
        handle: ReceiptHandle,
    },
    /// A pull consumer's failed message back (CONSUMER_SEND_MSG_BACK): to `%RETRY%<group>` at
    /// delay level `3 + reconsume times` (or the level given), to `%DLQ%<group>` after the maximum.
    SendBack {
        group: String,
        offset: u64,
        delay_level: Option<u32>,
    },
}

/// One stored message of a send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendResult {
    pub msg_id: String,
    pub topic: String,
    pub queue_id: u32,
    pub queue_offset: u64,
    /// Log offset of the record.
    pub offset: u64,
    /// For a half message: its transaction.
    pub txn: Option<TxnId>,
}

/// What the broker answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Stored (one entry per message; a half message's entry carries the transaction id).
    Sent(Vec<SendResult>),
    /// END_TRANSACTION applied. `duplicate`: it was already resolved this way; nothing changed.
    Ended {
        txn: TxnId,
        resolution: Resolution,
        duplicate: bool,
    },
    /// Messages from a pull, and the offset to pull from next.
    Pulled {
        messages: Vec<Message>,
        next_offset: u64,
        max_offset: u64,
    },
    /// An offset was committed.
    OffsetCommitted,
    /// Messages from a receive, each with its handle.
    Received(Vec<Received>),
    /// An ack was applied.
    Acked,
    /// New invisible time, with the handle to use from now on.
    InvisibleChanged {
        handle: ReceiptHandle,
        visible_at: Millis,
    },
    /// Forwarded to the dead-letter queue.
    Forwarded,
    /// The client's mistake; nothing changed.
    Error(ClientError),
}

/// A message as consumers see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub topic: String,
    pub queue_id: u32,
    pub queue_offset: u64,
    /// Log offset of the record holding the body.
    pub offset: u64,
    pub msg_id: String,
    pub tag: Option<String>,
    pub keys: Vec<String>,
    /// Properties other than TAGS, KEYS and the broker's own.
    pub properties: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub born_timestamp: Millis,
    pub store_timestamp: Millis,
    /// Times it was sent back for retry.
    pub reconsume_times: u32,
    pub flag: i32,
    pub sys_flag: u32,
    pub born_host: crate::record::Host,
    pub store_host: crate::record::Host,
}

impl Message {
    /// The value of a property.
    #[must_use]
    pub fn property(&self, key: &str) -> Option<&str> {
        self.properties
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A received message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    pub message: Message,
    pub handle: ReceiptHandle,
    /// Delivery attempt, from 1.
    pub attempt: u32,
    /// When it becomes visible again unless acked.
    pub visible_at: Millis,
}

/// A transaction check the host must route to a producer of `group`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckRequest {
    pub group: String,
    pub txn: TxnId,
    /// The half message, as it will be seen when committed.
    pub message: Message,
    /// Which check this is, from 1.
    pub check: u32,
}

/// What the broker hands the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// The reply to the request with this id.
    Reply { id: u64, reply: Reply },
    /// Ask a producer of the group about a transaction, and feed its answer back as
    /// [`Request::EndTransaction`] with `from_check: true`.
    Check(CheckRequest),
    /// A queue has a new visible message (with [`Config::notify_available`](crate::Config)).
    Available { topic: String, queue_id: u32 },
    /// A state change (with [`Config::trace`](crate::Config)).
    Trace(TraceEvent),
    /// The request with this id was applied in memory, but the sync that had to make it
    /// durable failed: whether it survives is unknown (as after a timeout), and the broker
    /// takes nothing more ([`Broker::failed`](crate::Broker::failed)).
    Failed { id: u64, reason: String },
}

/// What happened, for hosts that show or assert the flow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    pub at: Millis,
    pub kind: TraceKind,
    /// Log offset of the record concerned.
    pub offset: u64,
    /// Topic it concerns (the real topic for transactional and delayed messages).
    pub topic: String,
    pub detail: String,
}

/// Kinds of [`TraceEvent`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceKind {
    Stored,
    HalfStored,
    Committed,
    RolledBack,
    CheckSent,
    CheckParked,
    CheckMaxReached,
    HalfExpired,
    DelayStored,
    Delivered,
    Received,
    Acked,
    Redelivered,
    DeadLettered,
    OffsetCommitted,
}

impl TraceKind {
    /// A stable lower-case name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            TraceKind::Stored => "stored",
            TraceKind::HalfStored => "half_stored",
            TraceKind::Committed => "committed",
            TraceKind::RolledBack => "rolled_back",
            TraceKind::CheckSent => "check_sent",
            TraceKind::CheckParked => "check_parked",
            TraceKind::CheckMaxReached => "check_max_reached",
            TraceKind::HalfExpired => "half_expired",
            TraceKind::DelayStored => "delay_stored",
            TraceKind::Delivered => "delivered",
            TraceKind::Received => "received",
            TraceKind::Acked => "acked",
            TraceKind::Redelivered => "redelivered",
            TraceKind::DeadLettered => "dead_lettered",
            TraceKind::OffsetCommitted => "offset_committed",
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod filter_tests;
