//! # rocklet-broker
//!
//! The `rocklet` broker: a thin host around [`rocklet_core`] (../shared/STYLE.md §6). It owns
//! the sockets, the clock, the data directory and the routing of outputs; every messaging
//! decision is the core's.
//!
//! - [`driver`]: the core thread, group commit, routing of replies, checks and wake-ups.
//! - [`grpc`]: RocketMQ 5 gRPC (`apache.rocketmq.v2.MessagingService`): the service, its
//!   conversions and status codes, the gate every call passes before it is decoded, and the
//!   leases of push consumers' deliveries.
//! - [`admin`]: rocklet's admin gRPC service and the client `rocklet admin` uses.
//! - [`backup`]: `rocklet admin backup` (online, incremental, sparse) and `restore`.
//! - [`auth`]: authentication, ACLs (RocketMQ 5's ACL 2.0 model) and TLS.
//! - [`budget`]: the broker-wide budget of request bytes held.
//! - [`metrics`]: Prometheus text over HTTP.
//! - [`http`]: the one HTTP/1.1 server of the metrics, the console and the playground: its
//!   limits, the request reader and the `Host`/`Origin` check.
//! - [`console`]: the operator console (a web page and its JSON API, `--console-listen`).
//! - [`net`]: the connection cap, descriptor limits and accept loops.
//! - [`remoting`]: RocketMQ 4 remoting (v4 clients) and the name-server role.
//! - [`cluster`]: broker groups on etcd: election, fencing, replication, the SyncStateSet.
//! - [`server`]: opening the data directory and running everything until a signal.
//! - [`bench`]: `rocklet bench`, end-to-end throughput and latency over gRPC.
//! - [`client`]: `rocklet send`, `consume` and `tail`, quick checks against a running broker.
//! - [`playground`]: `rocklet playground`, the browser playground built into the binary.
//! - [`import`]: `rocklet import`, an Apache RocketMQ store into a new data directory.

pub mod admin;
pub mod auth;
pub mod backup;
pub mod bench;
pub mod budget;
pub mod checkpoint;
pub mod client;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod console;
pub mod disk;
pub mod disk_full;
pub mod driver;
pub mod export;
pub mod grpc;
pub mod http;
pub mod import;
pub mod metrics;
pub mod net;
pub mod ops;
pub mod playground;
pub mod rates;
pub mod remoting;
pub mod retention;
pub mod server;

/// Generated protocol types and services.
#[allow(
    missing_docs,
    missing_debug_implementations,
    clippy::all,
    clippy::pedantic
)]
pub mod pb {
    /// RocketMQ 5 (`apache.rocketmq.v2`).
    pub mod v2 {
        tonic::include_proto!("apache.rocketmq.v2");
    }
    /// etcd's KV and Lease services (`etcdserverpb`), for cluster mode.
    pub mod etcd {
        tonic::include_proto!("etcdserverpb");
    }
    /// Rocklet's admin service (`rocklet.admin.v1`).
    pub mod admin {
        tonic::include_proto!("rocklet.admin.v1");
    }
}
