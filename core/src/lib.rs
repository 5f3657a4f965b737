//! # rocklet-core
//!
//! RocketMQ's transactional message store as one sans-IO state machine: half messages,
//! commit and rollback, check-back, delay levels and delivery times, batches, consumer
//! offsets and receive-with-invisibility, over RocketMQ's commit-log record format.
//!
//! The core never reads a clock, never spawns and does no I/O of its own beyond the
//! [`Storage`] trait; time is passed in as milliseconds. See [`Broker`] for how a host drives
//! it. `#![no_std]` + `alloc`; the `std` feature adds [`FileStorage`], the `testing` feature
//! crash-injecting storage and a virtual-time simulator.
//!
//! ## Memory: what is live, not what is stored
//!
//! Per-message indexes live in files beside the log, through the [`Storage`]'s side files,
//! rebuilt from the log on an open without a checkpoint, cut back to it on an open from one
//! ([`Broker::checkpoint`]: the state at a durable log offset, so an open replays only the
//! log after it) — derived data: a crash never loses anything they hold that the log does
//! not:
//! - consume queues: RocketMQ's 20-byte units in `consumequeue/<topic>/<queue id>/<20-digit
//!   byte offset>`, files of [`CQ_FILE_UNITS`] units; read back through a cache of
//!   [`Config::cq_cache_blocks`] blocks of 1,000 units (16,000 bytes a block);
//! - the key index (KEYS, UNIQ_KEY): `index/<20-digit file number>`, files of
//!   [`INDEX_SLOTS`] slots and [`INDEX_ENTRIES`] entries.
//!
//! What stays in memory, each bounded per item (figures for a 64-bit host):
//! - per queue: ~100 bytes plus a tail of at most 256 units not yet written (16 bytes
//!   each: 4 KiB once the queue has had messages); the cache above, shared;
//! - the key index: the newest file's slots (2 MiB), at most 512 entries not yet written
//!   (8 KiB), 16 bytes per index file (one per 2,097,152 keys);
//! - pending transactions and pending delays: ~50 bytes each ([`Broker::pending_table_bytes`]),
//!   until committed, rolled back or delivered;
//! - in-flight receipts and FIFO holds: an entry of the group's in-flight map (~40 bytes)
//!   and a timer (40 bytes) per message out on receive, until acked or its invisible time
//!   ends; each receive is bounded by its `max`;
//! - committed offsets: ~24 bytes per (group, queue); topics and groups: their names and a
//!   few words each, at most [`Config::max_topics`] and [`Config::max_groups`];
//! - `Moved`: 24 bytes per committed half or delivered delay whose record is not in its
//!   queue's topic (where the unit's record sits), dropped by retention with the segment
//!   holding the record: this one grows with history between retention runs;
//! - messages carried forward by retention: ~40 bytes each, until the next run drops them.
//!
//! [`Broker::queue_bytes`] and [`Broker::index_bytes`] report the first two.
#![no_std]
#![warn(clippy::std_instead_of_core, clippy::alloc_instead_of_core)]
#![warn(missing_docs)]
#![allow(missing_docs)] // field-level docs are on the types that matter; see module docs

extern crate alloc;
#[cfg(any(feature = "std", test))]
extern crate std;

pub mod broker;
#[cfg(test)]
mod checkpoint_tests;
pub mod config;
#[cfg(test)]
mod cq_tests;
mod crc;
pub mod error;
pub mod filter;
mod log;
pub mod record;
#[cfg(test)]
mod retention_tests;
pub mod storage;
mod table;
#[cfg(any(feature = "testing", test))]
pub mod testing;
#[cfg(test)]
mod tests;
pub mod topic;
#[cfg(test)]
mod topic_tests;
pub mod types;

/// Milliseconds, on the host's clock.
pub type Millis = u64;

pub use broker::{
    common_prefix, offset_msg_id, parse_order_conf, tag_hash, Broker, CheckpointDraft, CqUnit,
    GroupLag, Page, PendingDelayInfo, PendingTxnInfo, ReplicationError, Retention, RetentionHold,
    Role, Stats, TopicInfo, TopicOrder, CQ_FILE_UNITS, INDEX_ENTRIES, INDEX_SLOTS, MAX_CARRY_BYTES,
    MAX_ORDER_CONF, MAX_PAGE, MAX_QUEUES,
};
pub use config::{Config, ConfigError, FlushMode};
pub use error::Error;
pub use log::{Cut, Quarantined, RecoveryReport};
pub use storage::{check_side_name, LogEnd, MemStorage, Storage, QUARANTINE_DIR};
#[cfg(feature = "std")]
pub use storage::{
    AnyStorage, CheckpointWrite, DetachedSync, FileStorage, CHECKPOINT_FILE, LOG_END_FILE,
    LOG_START_FILE,
};
pub use types::*;
