//! Prometheus metrics: the broker's own counters and latency histograms ([`Metrics`]), which
//! every module counts into, and [`render`], which writes them with the core's
//! [`Stats`](rocklet_core::Stats) and backlogs read at scrape time and serves the text over
//! HTTP.
//!
//! **Dependency direction.** This file is a leaf: it imports nothing of the modules that
//! count into it, only the plain types its fields are made of, which live below it
//! ([`crate::auth::failure`], [`crate::disk::usage`], [`crate::rates::ring`], remoting's and
//! the cluster's stats). The renderer ([`render`]) reads every module and may import any of
//! them; nothing but the server imports the renderer. `tests/ci/tools/module_cycles.py`
//! (run by `tests/ci/rust.sh`) keeps every import circle in `broker/src` at three files or
//! fewer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub mod render;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// A latency histogram.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        for (i, b) in BUCKETS.iter().enumerate() {
            if s <= *b {
                self.buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// (count, sum in ns, (bucket bound in s, cumulative count) per bucket), for the
    /// console's time series.
    pub fn snapshot(&self) -> (u64, u64, Vec<(f64, u64)>) {
        (
            self.count(),
            self.sum_ns.load(Ordering::Relaxed),
            BUCKETS
                .iter()
                .zip(&self.buckets)
                .map(|(b, c)| (*b, c.load(Ordering::Relaxed)))
                .collect(),
        )
    }
}

/// The RPCs counted by name.
pub const RPCS: [&str; 12] = [
    "QueryRoute",
    "Heartbeat",
    "SendMessage",
    "QueryAssignment",
    "ReceiveMessage",
    "AckMessage",
    "ForwardMessageToDeadLetterQueue",
    "EndTransaction",
    "Telemetry",
    "NotifyClientTermination",
    "ChangeInvisibleDuration",
    "Admin",
];

/// The request limits whose refusals are counted by name
/// (`rocklet_requests_over_limit_total{limit=…}`), each a field of the broker's config.
pub const LIMITS: [&str; 9] = [
    "max_batch_messages",
    "max_filter_expression_bytes",
    "max_name_bytes",
    "remoting_max_header_bytes",
    // A remoting body larger than its request kind carries (none for most).
    "remoting_request_body",
    "max_connections",
    // Connections closed after nothing was read from them (gRPC) or no request came (remoting).
    "idle_timeout_ms",
    "request_read_timeout_ms",
    // Requests refused because the request bytes held broker-wide would pass the budget.
    REQUEST_BUDGET,
];

/// The limit of the broker-wide request budget ([`crate::budget::RequestBudget`]): its
/// config field, named in its refusals and counted under it.
pub const REQUEST_BUDGET: &str = "max_inflight_request_bytes";

/// The broker's own metrics (the core's counters are read at scrape time).
#[derive(Debug, Default)]
pub struct Metrics {
    pub requests: [AtomicU64; RPCS.len()],
    /// Requests answered with a non-OK RocketMQ status.
    pub request_errors: AtomicU64,
    pub end_transaction_latency: Histogram,
    pub fsync_latency: Histogram,
    /// The core thread's part of each checkpoint (the state copied; its encoding, sync and
    /// write run on the sync thread).
    pub checkpoint_pause: Histogram,
    pub send_latency: Histogram,
    pub long_polls_waiting: AtomicU64,
    /// Topics the core thread keeps long-poll wake-ups for (gRPC receives, remoting pulls
    /// and pops that found nothing); bounded by the polls waiting, not by the topics ever
    /// polled.
    pub long_poll_topics: AtomicU64,
    pub telemetry_streams: AtomicU64,
    pub producers_online: AtomicU64,
    pub checks_pushed: AtomicU64,
    pub checks_unroutable: AtomicU64,
    /// Bytes of ReceiveMessage responses built and not yet written out or dropped.
    pub receive_bytes_in_flight: AtomicU64,
    /// Receives refused (`TOO_MANY_REQUESTS`) because those bytes used up the budget.
    pub receives_over_budget: AtomicU64,
    /// Connections open (gRPC, remoting and name server together).
    pub connections_open: AtomicU64,
    /// Request bytes held under the broker-wide budget ([`crate::budget::RequestBudget`]).
    pub request_bytes_in_flight: AtomicU64,
    /// Requests (both protocols) refused by one of the [`LIMITS`], by limit.
    pub over_limit: [AtomicU64; LIMITS.len()],
    /// RocketMQ 4 remoting request counters, once remoting serves.
    pub remoting: std::sync::OnceLock<Arc<crate::remoting::stats::RemotingStats>>,
    /// Cluster mode: the node's view of its group (elections, fencing, replica lag).
    pub cluster: std::sync::OnceLock<crate::cluster::View>,
    /// Requests refused by authentication or the ACL, by protocol and reason
    /// ([`crate::auth::failure::Protocol::ALL`] x [`crate::auth::failure::Failure::ALL`]).
    pub auth_failures: [[AtomicU64; crate::auth::failure::Failure::ALL.len()];
        crate::auth::failure::Protocol::ALL.len()],
    /// Where the core thread hands the core's trace events when the console is on.
    pub stories: std::sync::OnceLock<Arc<crate::console::story::Stories>>,
    /// Messages handed out by remoting PULL_MESSAGE (receives and pops are the core's
    /// `received`).
    pub pulled: AtomicU64,
    /// The log's disk usage, measured at most every [`crate::disk::MAX_AGE`].
    pub disk: crate::disk::usage::DiskGauge,
    /// New messages are refused: the disk is past `disk_space_warning_level_ratio`
    /// ([`crate::disk_full`]).
    pub disk_full: std::sync::atomic::AtomicBool,
    /// Put and get counters sampled each second (`putTps`, `getTransferredTps`).
    pub rates: crate::rates::ring::Rates,
    /// Commands handed to the core thread and not yet run (requests, inspections, control),
    /// counted by the senders and the core thread, so it grows while the core thread is stuck.
    pub core_commands_waiting: Arc<AtomicU64>,
}

impl Metrics {
    /// Counts one request of an RPC.
    pub fn request(&self, rpc: &str) {
        if let Some(i) = RPCS.iter().position(|r| *r == rpc) {
            self.requests[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts one request refused by the limit named `limit` (one of [`LIMITS`]).
    pub fn over_limit(&self, limit: &str) {
        debug_assert!(LIMITS.contains(&limit), "unknown limit {limit}");
        if let Some(i) = LIMITS.iter().position(|l| *l == limit) {
            self.over_limit[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a request refused by authentication or the ACL.
    pub fn auth_failure(
        &self,
        p: crate::auth::failure::Protocol,
        f: crate::auth::failure::Failure,
    ) {
        let (Some(i), Some(j)) = (
            crate::auth::failure::Protocol::ALL
                .iter()
                .position(|x| *x == p),
            crate::auth::failure::Failure::ALL
                .iter()
                .position(|x| *x == f),
        ) else {
            return;
        };
        self.auth_failures[i][j].fetch_add(1, Ordering::Relaxed);
    }

    /// Refusals counted by authentication or the ACL for a protocol and reason.
    pub fn auth_failure_count(
        &self,
        p: crate::auth::failure::Protocol,
        f: crate::auth::failure::Failure,
    ) -> u64 {
        match (
            crate::auth::failure::Protocol::ALL
                .iter()
                .position(|x| *x == p),
            crate::auth::failure::Failure::ALL
                .iter()
                .position(|x| *x == f),
        ) {
            (Some(i), Some(j)) => self.auth_failures[i][j].load(Ordering::Relaxed),
            _ => 0,
        }
    }

    /// Refusals counted for the limit named `limit`.
    pub fn over_limit_count(&self, limit: &str) -> u64 {
        LIMITS
            .iter()
            .position(|l| *l == limit)
            .map_or(0, |i| self.over_limit[i].load(Ordering::Relaxed))
    }
}
