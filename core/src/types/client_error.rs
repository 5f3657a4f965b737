//! A client's mistakes ([`ClientError`]), with their stable codes and texts.

use alloc::string::String;
use core::fmt;

use super::{Resolution, TxnId};

/// A client's mistake: answered, never an `Err`. [`ClientError::code`] is stable.
///
/// Not `#[non_exhaustive]`, on purpose: each protocol maps every variant to its own code
/// with no wildcard arm, so a new error is a compile error in every mapping rather than a
/// wrong code on the wire (a wildcard once answered a replica's NOT_MASTER as a malformed
/// message, which v4 producers do not retry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientError {
    InvalidTopic(String),
    ReservedTopic(String),
    UnknownTopic(String),
    InvalidGroup(String),
    InvalidQueue {
        topic: String,
        queue_id: u32,
        queues: u32,
    },
    EmptyBody,
    MessageTooLarge {
        size: usize,
        max: u32,
    },
    BatchTooLarge {
        size: usize,
        max: u32,
    },
    EmptyBatch,
    MixedBatch(String),
    DelayInBatch,
    BatchToRetryTopic,
    InvalidDelay(String),
    DelayOnTransaction,
    InvalidProperty(String),
    PropertiesTooLarge(usize),
    UnknownTransaction(TxnId),
    MalformedTransactionId(String),
    TransactionAlreadyResolved {
        txn: TxnId,
        resolution: Option<Resolution>,
    },
    WrongProducerGroup {
        txn: TxnId,
        expected: String,
        got: String,
    },
    InvalidReceiptHandle(String),
    StaleReceiptHandle(String),
    InvalidArgument(String),
    /// END_TRANSACTION that does not name its producer group: a transaction is ended only
    /// by its own group.
    ProducerGroupRequired(TxnId),
    /// A new group past [`Config::max_groups`](crate::Config).
    TooManyGroups {
        max: u32,
    },
    /// A new topic past [`Config::max_topics`](crate::Config).
    TooManyTopics {
        max: u32,
    },
    /// A send-back of something this group cannot consume: no visible message of a
    /// consumer topic is at that offset (a pending or rolled-back half, a delayed message
    /// not yet delivered, another group's retry topic, broker records).
    NotConsumable(String),
    /// The broker is a replica: requests go to the master.
    NotMaster,
    /// The disk holding the log is fuller than the host allows new messages to make it
    /// ([`Broker::set_disk_full`](crate::Broker::set_disk_full)): a new message is refused,
    /// while everything already stored is still served.
    DiskFull(DiskFull),
}

/// How full the disk holding the log is, and the fill at which new messages are refused, in
/// thousandths (RocketMQ's `diskSpaceWarningLevelRatio`: 900 = 90 %).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskFull {
    pub used_permille: u16,
    pub limit_permille: u16,
}

/// `permille` as a percentage with one decimal, `91.5 %`.
struct Percent(u16);

impl fmt::Display for Percent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{} %", self.0 / 10, self.0 % 10)
    }
}

impl ClientError {
    /// A stable, upper-case code for hosts (exception classes, gRPC details, JS `code`).
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            ClientError::InvalidTopic(_) => "INVALID_TOPIC",
            ClientError::ReservedTopic(_) => "RESERVED_TOPIC",
            ClientError::UnknownTopic(_) => "UNKNOWN_TOPIC",
            ClientError::InvalidGroup(_) => "INVALID_GROUP",
            ClientError::InvalidQueue { .. } => "INVALID_QUEUE",
            ClientError::EmptyBody => "EMPTY_BODY",
            ClientError::MessageTooLarge { .. } => "MESSAGE_TOO_LARGE",
            ClientError::BatchTooLarge { .. } => "BATCH_TOO_LARGE",
            ClientError::EmptyBatch => "EMPTY_BATCH",
            ClientError::MixedBatch(_) => "MIXED_BATCH",
            ClientError::DelayInBatch => "DELAY_IN_BATCH",
            ClientError::BatchToRetryTopic => "BATCH_TO_RETRY_TOPIC",
            ClientError::InvalidDelay(_) => "INVALID_DELAY",
            ClientError::DelayOnTransaction => "DELAY_ON_TRANSACTION",
            ClientError::InvalidProperty(_) => "INVALID_PROPERTY",
            ClientError::PropertiesTooLarge(_) => "PROPERTIES_TOO_LARGE",
            ClientError::UnknownTransaction(_) => "UNKNOWN_TRANSACTION",
            ClientError::MalformedTransactionId(_) => "MALFORMED_TRANSACTION_ID",
            ClientError::TransactionAlreadyResolved { .. } => "TRANSACTION_ALREADY_RESOLVED",
            ClientError::WrongProducerGroup { .. } => "WRONG_PRODUCER_GROUP",
            ClientError::InvalidReceiptHandle(_) => "INVALID_RECEIPT_HANDLE",
            ClientError::StaleReceiptHandle(_) => "STALE_RECEIPT_HANDLE",
            ClientError::InvalidArgument(_) => "INVALID_ARGUMENT",
            ClientError::ProducerGroupRequired(_) => "PRODUCER_GROUP_REQUIRED",
            ClientError::TooManyGroups { .. } => "TOO_MANY_GROUPS",
            ClientError::TooManyTopics { .. } => "TOO_MANY_TOPICS",
            ClientError::NotConsumable(_) => "NOT_CONSUMABLE",
            ClientError::NotMaster => "NOT_MASTER",
            ClientError::DiskFull(_) => "DISK_FULL",
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::InvalidTopic(why) => write!(f, "invalid topic: {why}"),
            ClientError::ReservedTopic(t) => write!(f, "topic `{t}` is reserved for the broker"),
            ClientError::UnknownTopic(t) => write!(
                f,
                "topic `{t}` does not exist (only a send creates one, and only with auto-create on)"
            ),
            ClientError::InvalidGroup(why) => write!(f, "invalid group: {why}"),
            ClientError::InvalidQueue {
                topic,
                queue_id,
                queues,
            } => {
                write!(
                    f,
                    "queue {queue_id} does not exist in topic `{topic}` ({queues} queues)"
                )
            }
            ClientError::EmptyBody => f.write_str("message body is empty"),
            ClientError::MessageTooLarge { size, max } => {
                write!(
                    f,
                    "message body of {size} bytes exceeds the maximum of {max}"
                )
            }
            ClientError::BatchTooLarge { size, max } => {
                write!(f, "batch of {size} bytes exceeds the maximum of {max}")
            }
            ClientError::EmptyBatch => f.write_str("batch holds no message"),
            ClientError::MixedBatch(why) => write!(
                f,
                "messages of a batch must share one topic and flags: {why}"
            ),
            ClientError::DelayInBatch => f.write_str("a batch cannot hold delayed messages"),
            ClientError::BatchToRetryTopic => {
                f.write_str("a batch cannot be sent to a %RETRY% topic")
            }
            ClientError::InvalidDelay(why) => write!(f, "invalid delay: {why}"),
            ClientError::DelayOnTransaction => {
                f.write_str("a transactional message cannot be delayed")
            }
            ClientError::InvalidProperty(why) => write!(f, "invalid property: {why}"),
            ClientError::PropertiesTooLarge(n) => {
                write!(f, "properties of {n} bytes exceed the maximum of 32767")
            }
            ClientError::UnknownTransaction(t) => write!(f, "no transaction {t}"),
            ClientError::MalformedTransactionId(s) => {
                write!(f, "`{s}` is not a transaction id (16 hex digits)")
            }
            ClientError::TransactionAlreadyResolved {
                txn,
                resolution: Some(r),
            } => {
                write!(f, "transaction {txn} was already resolved ({})", r.as_str())
            }
            ClientError::TransactionAlreadyResolved {
                txn,
                resolution: None,
            } => {
                write!(f, "transaction {txn} was already resolved")
            }
            ClientError::WrongProducerGroup { txn, expected, got } => {
                write!(
                    f,
                    "transaction {txn} belongs to producer group `{expected}`, not `{got}`"
                )
            }
            ClientError::InvalidReceiptHandle(why) => write!(f, "invalid receipt handle: {why}"),
            ClientError::StaleReceiptHandle(why) => write!(f, "stale receipt handle: {why}"),
            ClientError::InvalidArgument(why) => write!(f, "invalid argument: {why}"),
            ClientError::ProducerGroupRequired(txn) => write!(
                f,
                "END_TRANSACTION of {txn} names no producer group: a transaction is ended only by its own group"
            ),
            ClientError::TooManyGroups { max } => write!(
                f,
                "the broker holds the maximum of {max} groups (max_groups); no new group is created"
            ),
            ClientError::TooManyTopics { max } => write!(
                f,
                "the broker holds the maximum of {max} topics (max_topics); no new topic is created"
            ),
            ClientError::NotConsumable(why) => write!(f, "not a message this group can consume: {why}"),
            ClientError::NotMaster => f.write_str("this broker is a replica; send to the master"),
            ClientError::DiskFull(d) => write!(
                f,
                "the disk holding the log is {} full; new messages are refused from {} on \
                 (disk_space_warning_level_ratio) until retention or the operator frees space; \
                 reads, acks and transaction ends go on",
                Percent(d.used_permille),
                Percent(d.limit_permille)
            ),
        }
    }
}

impl core::error::Error for ClientError {}
