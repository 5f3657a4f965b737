//! Broker configuration, with RocketMQ's defaults.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::Millis;

/// When appended records become durable, and so acknowledged and visible.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlushMode {
    /// RocketMQ's ASYNC_FLUSH: acknowledged and visible at once; the host syncs at an interval.
    #[default]
    Async,
    /// RocketMQ's SYNC_FLUSH: a write's reply is held, and its message invisible, until a
    /// [`Broker::sync`](crate::Broker::sync) covers it. One sync releases every write before it.
    Sync,
}

/// RocketMQ's `messageDelayLevel`, in milliseconds.
pub const DEFAULT_DELAY_LEVELS: [Millis; 18] = [
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000, 420_000,
    480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
];

/// Everything a broker can be told. [`Config::default`] is RocketMQ 5's defaults.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Bytes per log segment (RocketMQ's mappedFileSizeCommitLog: 1 GiB).
    pub segment_size: u64,
    /// Flush mode.
    pub flush: FlushMode,
    /// Largest message body (RocketMQ's maxMessageSize: 4 MiB).
    pub max_message_size: u32,
    /// Largest batch, all bodies together (4 MiB).
    pub max_batch_size: u32,
    /// Bytes of stored messages one pull or receive returns at most; the first message
    /// always goes, however large (RocketMQ's maxTransferBytesOnMessageInMemory: 256 KiB).
    /// Bounds the memory of a reply.
    pub max_transfer_bytes: u32,
    /// Queues of an auto-created topic (RocketMQ's defaultTopicQueueNums: 4).
    pub default_queues: u32,
    /// Create a topic on its first send (RocketMQ's autoCreateTopicEnable).
    pub auto_create_topics: bool,
    /// How old a half message must be before its first check (transactionTimeOut: 6 s).
    pub transaction_timeout_ms: Millis,
    /// Time between checks of one transaction (transactionCheckInterval: 30 s in RocketMQ 5).
    pub transaction_check_interval_ms: Millis,
    /// Checks before a half message is moved to TRANS_CHECK_MAX_TIME_TOPIC (transactionCheckMax: 15).
    pub transaction_check_max: u32,
    /// Half messages older than this are dropped unchecked (72 h, as RocketMQ's file reserved time).
    pub half_reserve_ms: Millis,
    /// Delay levels 1..=N in ms (messageDelayLevel "1s 5s 10s 30s 1m … 2h").
    pub delay_levels: Vec<Millis>,
    /// Deliveries before a message goes to `%DLQ%<group>` (maxReconsumeTimes: 16).
    pub max_delivery_attempts: u32,
    /// Largest invisible duration a receive may ask for (12 h, as RocketMQ's pop).
    pub max_invisible_ms: Millis,
    /// Invisible duration for hosts whose API lets a consumer leave it out (30 s).
    pub default_invisible_ms: Millis,
    /// Under async flush, how long appended bytes may wait for an fsync
    /// (RocketMQ's flushIntervalCommitLog: 500 ms). The broker schedules it itself:
    /// [`Broker::poll_timeout`](crate::Broker::poll_timeout) includes it.
    pub flush_interval_ms: Millis,
    /// Emit [`Output::Available`](crate::Output::Available) when a queue gets a visible message
    /// (hosts with long polling set this).
    pub notify_available: bool,
    /// Emit [`Output::Trace`](crate::Output::Trace) events for every state change.
    pub trace: bool,
    /// This broker's address as written in STOREHOST.
    pub store_host: StoreHost,
    /// Most consumer and producer groups the broker holds; a request that would create one
    /// more is refused (`TOO_MANY_GROUPS`). Every group costs memory for as long as the
    /// broker runs, and any client can name new ones.
    pub max_groups: u32,
    /// Most topics (user, retry and dead-letter topics together); a send or send-back that
    /// would create one more is refused (`TOO_MANY_TOPICS`).
    pub max_topics: u32,
    /// Consume-queue units one pull or receive with a tag filter looks at, at most (RocketMQ
    /// scans at most 16,000 bytes of consume queue, 800 units, per pull). A filter that
    /// matches little answers with what it found and where to go on, so one request never
    /// scans a whole topic.
    pub max_scan_units: u32,
    /// Replies and visibility also wait until the host reports, with
    /// [`Broker::replicated_to`](crate::Broker::replicated_to), that enough replicas hold the
    /// bytes (RocketMQ's SYNC_MASTER). Off for a single broker. Set by a host that
    /// replicates, never from a configuration file or a binding's options (a broker with no
    /// replicas would hold every reply): not (de)serialized.
    #[serde(skip)]
    pub replicated_acks: bool,
    /// Index messages by key (KEYS) and message id (UNIQ_KEY) for
    /// [`Broker::messages_by_key`](crate::Broker::messages_by_key), as RocketMQ's
    /// messageIndexEnable (the index is in files beside the log: `index/`).
    pub index_keys: bool,
    /// Blocks of consume-queue units (1,000 units, 20,000 bytes of file, a block) the
    /// broker keeps in memory to serve reads below each queue's recent tail: 16,000 bytes
    /// a block. The units themselves live in files beside the log (`consumequeue/`).
    pub cq_cache_blocks: u32,
}

/// STOREHOST as configured: an IPv4 or IPv6 address and a port (RocketMQ's brokerIP1 and
/// listenPort). Records carry it, and offset message ids name it: 32 hex digits for IPv4,
/// 56 for IPv6 ([`OffsetMsgId`](crate::types::OffsetMsgId)).
///
/// In a config file it is `{ ip = [127, 0, 0, 1], port = 10911 }`: 4 address bytes for
/// IPv4, 16 for IPv6.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "StoreHostFields", into = "StoreHostFields")]
pub enum StoreHost {
    V4([u8; 4], u16),
    V6([u8; 16], u16),
}

/// [`StoreHost`] as config files write it.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoreHostFields {
    ip: Vec<u8>,
    port: u16,
}

impl TryFrom<StoreHostFields> for StoreHost {
    type Error = &'static str;
    fn try_from(f: StoreHostFields) -> Result<Self, Self::Error> {
        if let Ok(ip) = <[u8; 4]>::try_from(f.ip.as_slice()) {
            Ok(StoreHost::V4(ip, f.port))
        } else if let Ok(ip) = <[u8; 16]>::try_from(f.ip.as_slice()) {
            Ok(StoreHost::V6(ip, f.port))
        } else {
            Err("store_host.ip must have 4 bytes (IPv4) or 16 (IPv6)")
        }
    }
}

impl From<StoreHost> for StoreHostFields {
    fn from(h: StoreHost) -> Self {
        match h {
            StoreHost::V4(ip, port) => StoreHostFields {
                ip: ip.to_vec(),
                port,
            },
            StoreHost::V6(ip, port) => StoreHostFields {
                ip: ip.to_vec(),
                port,
            },
        }
    }
}

impl StoreHost {
    /// As records write it.
    #[must_use]
    pub fn host(self) -> crate::record::Host {
        match self {
            StoreHost::V4(ip, port) => crate::record::Host::V4(ip, port),
            StoreHost::V6(ip, port) => crate::record::Host::V6(ip, port),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            segment_size: 1 << 30,
            flush: FlushMode::Async,
            max_message_size: 4 << 20,
            max_batch_size: 4 << 20,
            max_transfer_bytes: 256 << 10,
            default_queues: 4,
            auto_create_topics: true,
            transaction_timeout_ms: 6_000,
            transaction_check_interval_ms: 30_000,
            transaction_check_max: 15,
            half_reserve_ms: 72 * 3_600_000,
            delay_levels: DEFAULT_DELAY_LEVELS.to_vec(),
            max_delivery_attempts: 16,
            max_invisible_ms: 12 * 3_600_000,
            default_invisible_ms: 30_000,
            flush_interval_ms: 500,
            notify_available: false,
            trace: false,
            store_host: StoreHost::V4([127, 0, 0, 1], 10911),
            max_groups: 100_000,
            max_topics: 100_000,
            max_scan_units: 800,
            replicated_acks: false,
            index_keys: true,
            cq_cache_blocks: 64,
        }
    }
}

/// A configuration value that cannot work.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The field.
    pub field: &'static str,
    /// Why.
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid config `{}`: {}", self.field, self.reason)
    }
}

impl core::error::Error for ConfigError {}

impl Config {
    /// Checks that the values work together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        use alloc::format;
        let err = |field, reason: String| Err(ConfigError { field, reason });
        if self.segment_size < 4096 {
            return err(
                "segment_size",
                format!("{} is below the minimum of 4096 bytes", self.segment_size),
            );
        }
        if self.max_message_size == 0 {
            return err("max_message_size", "must be at least 1 byte".into());
        }
        if self.max_transfer_bytes == 0 {
            return err("max_transfer_bytes", "must be at least 1 byte".into());
        }
        // A record holds the body plus at most ~33 KiB of header, topic and properties.
        let largest = u64::from(self.max_message_size.max(self.max_batch_size)) + 40_000;
        if self.segment_size < largest {
            return err(
                "segment_size",
                format!(
                    "{} cannot hold the largest message or batch (needs at least {largest} bytes)",
                    self.segment_size
                ),
            );
        }
        if self.default_queues == 0 || self.default_queues > 1024 {
            return err(
                "default_queues",
                format!("{} is not within 1..=1024", self.default_queues),
            );
        }
        if self.transaction_check_interval_ms == 0 {
            return err("transaction_check_interval_ms", "must be above 0".into());
        }
        if self.transaction_check_max > u32::from(u16::MAX) {
            return err(
                "transaction_check_max",
                format!("{} is above {}", self.transaction_check_max, u16::MAX),
            );
        }
        if self.delay_levels.is_empty() || self.delay_levels.len() > 255 {
            return err(
                "delay_levels",
                format!("needs 1..=255 levels, got {}", self.delay_levels.len()),
            );
        }
        if self.delay_levels.windows(2).any(|w| w[0] > w[1]) {
            return err("delay_levels", "levels must not decrease".into());
        }
        if self.default_invisible_ms == 0 || self.default_invisible_ms > self.max_invisible_ms {
            return err(
                "default_invisible_ms",
                format!(
                    "{} is not within 1..=max_invisible_ms",
                    self.default_invisible_ms
                ),
            );
        }
        if self.max_delivery_attempts == 0 {
            return err("max_delivery_attempts", "must be at least 1".into());
        }
        if self.max_groups == 0 {
            return err("max_groups", "must be at least 1".into());
        }
        if self.max_topics == 0 {
            return err("max_topics", "must be at least 1".into());
        }
        if self.cq_cache_blocks == 0 {
            return err("cq_cache_blocks", "must be at least 1".into());
        }
        if self.max_scan_units == 0 {
            return err("max_scan_units", "must be at least 1".into());
        }
        Ok(())
    }
}
