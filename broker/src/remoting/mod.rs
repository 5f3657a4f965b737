//! RocketMQ 4 remoting: the TCP protocol of the v4 clients (Java `DefaultMQProducer`,
//! `TransactionMQProducer`, push and pull consumers; the C++, Python 0.x, Go 2.x and Rust
//! remoting clients), served beside gRPC over the same core.
//!
//! - [`codec`]: frames and the JSON / RocketMQ binary headers, with strict size limits.
//! - [`server`]: the broker listener (default 127.0.0.1:10911) and the name-server role
//!   (default 127.0.0.1:9876, answering routes that point at the broker listener).
//! - [`admin`]: the request codes behind mqadmin (topics, groups, offsets, messages, cluster).
//! - [`clients`]: consumer and producer groups from heartbeats; membership changes notified.
//! - [`compression`]: zlib bodies of v4 producers inflated (bounded) before the core sees them.
//! - [`locks`]: queue locks of orderly consumers (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ).
//! - [`pop`]: pop consumers' extraInfo receipts mapped onto the core's receipt handles.
//! - [`stats`]: requests counted by code name, and their errors.
//! - [`codes`]: every request and response code and the names of request codes.
//! - [`conn`]: what the connections share and each one's state.
//! - [`handlers`]: requests mapped onto the core's requests through the driver, one module
//!   per kind of client (clients and routes, producers, pull consumers, pop consumers).
//! - [`message`]: messages as v4 clients carry them (records, offset ids, send headers, batches).
//! - [`reply`]: answers, header fields, and refusals before a request is handled.
//!
//! Transactions: a half message carries its producer group (PGROUP); the core checks that
//! group, and the driver routes the check to a remoting connection whose heartbeat (or
//! transactional send) named the group, as CHECK_TRANSACTION_STATE.

pub mod admin;
pub mod clients;
pub mod close_log;
pub mod codec;
pub mod codes;
pub mod compression;
pub mod conn;
pub mod handlers;
pub mod locks;
pub mod message;
pub mod pop;
pub mod reply;
pub mod server;
pub mod stats;

/// The broker name in routes (and the cluster name).
pub(crate) const BROKER_NAME: &str = "rocklet";
