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
#![no_std]
#![warn(clippy::std_instead_of_core, clippy::alloc_instead_of_core)]
#![warn(missing_docs)]
#![allow(missing_docs)] // field-level docs are on the types that matter; see module docs

extern crate alloc;
#[cfg(any(feature = "std", test))]
extern crate std;

pub mod broker;
pub mod config;
#[cfg(test)]
mod cq_tests;
mod crc;
pub mod error;
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
pub mod types;

/// Milliseconds, on the host's clock.
pub type Millis = u64;

pub use broker::{
    common_prefix, offset_msg_id, tag_hash, Broker, CqUnit, GroupLag, Page, PendingDelayInfo,
    PendingTxnInfo, ReplicationError, Retention, RetentionHold, Role, Stats, TopicInfo,
    MAX_CARRY_BYTES, MAX_PAGE, MAX_QUEUES,
};
pub use config::{Config, ConfigError, FlushMode};
pub use error::Error;
pub use log::{Cut, Quarantined, RecoveryReport};
pub use storage::{check_side_name, LogEnd, MemStorage, Storage, QUARANTINE_DIR};
#[cfg(feature = "std")]
pub use storage::{AnyStorage, DetachedSync, FileStorage, LOG_END_FILE, LOG_START_FILE};
pub use types::*;
