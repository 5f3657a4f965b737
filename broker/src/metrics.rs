//! Prometheus metrics: the broker's own counters and latency histograms, plus the core's
//! [`Stats`](rocklet_core::Stats) and backlogs read at scrape time, served as text over HTTP.
//!
//! Served without credentials, so the listener obeys the rule of every listener (no
//! non-loopback address while authentication is off, `BrokerConfig::client_listeners`), and
//! answers only requests whose `Host` (and `Origin`, when present) names it (its address,
//! `localhost` on loopback, or an entry of `metrics_allowed_hosts`: [`crate::http::hosts`]),
//! so a page of another site cannot read it through DNS rebinding.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::driver::CoreHandle;
use crate::http::hosts::AllowedHosts;
use crate::http::{self, HttpRequest, Response};

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

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{b}\"}} {}",
                self.buckets[i].load(Ordering::Relaxed)
            );
        }
        let count = self.count();
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(
            out,
            "{name}_sum {}",
            self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9
        );
        let _ = writeln!(out, "{name}_count {count}");
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
    crate::budget::LIMIT_NAME,
];

/// The broker's own metrics (the core's counters are read at scrape time).
#[derive(Debug, Default)]
pub struct Metrics {
    pub requests: [AtomicU64; RPCS.len()],
    /// Requests answered with a non-OK RocketMQ status.
    pub request_errors: AtomicU64,
    pub end_transaction_latency: Histogram,
    pub fsync_latency: Histogram,
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
    /// ([`crate::auth::Protocol::ALL`] x [`crate::auth::Failure::ALL`]).
    pub auth_failures:
        [[AtomicU64; crate::auth::Failure::ALL.len()]; crate::auth::Protocol::ALL.len()],
    /// Where the core thread hands the core's trace events when the console is on.
    pub stories: std::sync::OnceLock<Arc<crate::console::story::Stories>>,
    /// Messages handed out by remoting PULL_MESSAGE (receives and pops are the core's
    /// `received`).
    pub pulled: AtomicU64,
    /// The log's disk usage, measured at most every [`crate::disk::MAX_AGE`].
    pub disk: crate::disk::DiskGauge,
    /// New messages are refused: the disk is past `disk_space_warning_level_ratio`
    /// ([`crate::disk_full`]).
    pub disk_full: std::sync::atomic::AtomicBool,
    /// Put and get counters sampled each second (`putTps`, `getTransferredTps`).
    pub rates: crate::rates::Rates,
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
    pub fn auth_failure(&self, p: crate::auth::Protocol, f: crate::auth::Failure) {
        let (Some(i), Some(j)) = (
            crate::auth::Protocol::ALL.iter().position(|x| *x == p),
            crate::auth::Failure::ALL.iter().position(|x| *x == f),
        ) else {
            return;
        };
        self.auth_failures[i][j].fetch_add(1, Ordering::Relaxed);
    }

    /// Refusals counted by authentication or the ACL for a protocol and reason.
    pub fn auth_failure_count(&self, p: crate::auth::Protocol, f: crate::auth::Failure) -> u64 {
        match (
            crate::auth::Protocol::ALL.iter().position(|x| *x == p),
            crate::auth::Failure::ALL.iter().position(|x| *x == f),
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

fn counter(out: &mut String, name: &str, help: &str, v: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
    );
}

fn gauge(out: &mut String, name: &str, help: &str, v: u64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
}

fn gauge_f64(out: &mut String, name: &str, help: &str, v: f64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
}

/// Renders every metric in the Prometheus text format.
pub async fn render(core: &CoreHandle, m: &Metrics) -> String {
    let snap = core
        .inspect(|b| {
            (
                b.stats(),
                b.pending_transaction_count() as u64,
                b.pending_delay_count() as u64,
                b.log_end(),
                b.log_synced(),
                b.retention_totals(),
            )
        })
        .await
        .ok();
    let mut out = String::with_capacity(8192);
    let _ = writeln!(
        out,
        "# HELP rocklet_requests_total gRPC requests by RPC\n# TYPE rocklet_requests_total counter"
    );
    for (i, rpc) in RPCS.iter().enumerate() {
        let _ = writeln!(
            out,
            "rocklet_requests_total{{rpc=\"{rpc}\"}} {}",
            m.requests[i].load(Ordering::Relaxed)
        );
    }
    counter(
        &mut out,
        "rocklet_request_errors_total",
        "Requests answered with a non-OK status",
        m.request_errors.load(Ordering::Relaxed),
    );
    let _ = writeln!(
        out,
        "# HELP rocklet_requests_over_limit_total Requests (gRPC and remoting) refused by a configured limit, by the config field\n# TYPE rocklet_requests_over_limit_total counter"
    );
    for (i, limit) in LIMITS.iter().enumerate() {
        let _ = writeln!(
            out,
            "rocklet_requests_over_limit_total{{limit=\"{limit}\"}} {}",
            m.over_limit[i].load(Ordering::Relaxed)
        );
    }
    let _ = writeln!(
        out,
        "# HELP rocklet_auth_failures_total Requests refused by authentication or the ACL, by protocol and reason\n# TYPE rocklet_auth_failures_total counter"
    );
    for (i, p) in crate::auth::Protocol::ALL.iter().enumerate() {
        for (j, f) in crate::auth::Failure::ALL.iter().enumerate() {
            let _ = writeln!(
                out,
                "rocklet_auth_failures_total{{protocol=\"{}\",reason=\"{}\"}} {}",
                p.label(),
                f.label(),
                m.auth_failures[i][j].load(Ordering::Relaxed)
            );
        }
    }
    if let Some(r) = m.remoting.get() {
        r.render(&mut out);
    }
    if let Some(v) = m.cluster.get() {
        crate::cluster::render_metrics(v, &mut out);
    }
    if let Some((s, halves, delays, end, synced, (retired, carried))) = snap {
        counter(
            &mut out,
            "rocklet_messages_stored_total",
            "Messages that became readable in user, retry and dead-letter topics: sends, committed transactions, delivered delayed messages (counted over the whole log: a restart counts what recovery replays)",
            s.messages_stored,
        );
        counter(
            &mut out,
            "rocklet_transactions_prepared_total",
            "Half messages stored",
            s.halves_stored,
        );
        counter(
            &mut out,
            "rocklet_transactions_committed_total",
            "Transactions committed",
            s.committed,
        );
        counter(
            &mut out,
            "rocklet_transactions_rolled_back_total",
            "Transactions rolled back",
            s.rolled_back,
        );
        counter(
            &mut out,
            "rocklet_transactions_unknown_total",
            "END_TRANSACTION answers of UNKNOWN",
            s.unknown_answers,
        );
        counter(
            &mut out,
            "rocklet_transaction_checks_sent_total",
            "Transaction checks issued by the core",
            s.checks_sent,
        );
        counter(
            &mut out,
            "rocklet_transaction_checks_answered_total",
            "Transaction checks answered",
            s.checks_answered,
        );
        let _ = writeln!(
            out,
            "# HELP rocklet_transaction_check_failures_total Transaction checks that did not resolve their transaction, by reason: no_answer (no answer came before its next check was due, its checks ran out or it expired; checks no producer could be reached for, rocklet_checks_unroutable_total, end here too), unknown (answered UNKNOWN)\n# TYPE rocklet_transaction_check_failures_total counter\nrocklet_transaction_check_failures_total{{reason=\"no_answer\"}} {}\nrocklet_transaction_check_failures_total{{reason=\"unknown\"}} {}",
            s.checks_unanswered, s.checks_unknown
        );
        counter(
            &mut out,
            "rocklet_transaction_check_max_total",
            "Transactions whose checks ran out",
            s.check_max_reached,
        );
        counter(
            &mut out,
            "rocklet_transactions_expired_total",
            "Half messages expired unchecked",
            s.halves_expired,
        );
        counter(
            &mut out,
            "rocklet_delayed_stored_total",
            "Delayed messages stored",
            s.delayed_stored,
        );
        counter(
            &mut out,
            "rocklet_delayed_delivered_total",
            "Delayed messages delivered",
            s.delayed_delivered,
        );
        counter(
            &mut out,
            "rocklet_received_total",
            "Messages handed out by ReceiveMessage",
            s.received,
        );
        counter(
            &mut out,
            "rocklet_acked_total",
            "Messages acknowledged",
            s.acked,
        );
        counter(
            &mut out,
            "rocklet_redelivered_total",
            "Messages delivered again after their invisible time",
            s.redelivered,
        );
        counter(
            &mut out,
            "rocklet_dead_lettered_total",
            "Messages moved to a dead-letter queue",
            s.dead_lettered,
        );
        counter(
            &mut out,
            "rocklet_fsyncs_total",
            "fsyncs of the log",
            s.syncs,
        );
        counter(
            &mut out,
            "rocklet_client_errors_total",
            "Requests refused by the core as the client's mistake",
            s.client_errors,
        );
        gauge(
            &mut out,
            "rocklet_half_backlog",
            "Pending (unresolved) transactions",
            halves,
        );
        gauge(
            &mut out,
            "rocklet_delay_backlog",
            "Delayed messages not yet delivered",
            delays,
        );
        gauge(
            &mut out,
            "rocklet_log_end_bytes",
            "Bytes appended to the log",
            end,
        );
        gauge(
            &mut out,
            "rocklet_log_synced_bytes",
            "Bytes of the log known durable",
            synced,
        );
        counter(
            &mut out,
            "rocklet_log_segments_deleted_total",
            "Segments retention retired (kept across restarts, in LOG_START)",
            retired,
        );
        counter(
            &mut out,
            "rocklet_log_carried_forward_bytes_total",
            "Bytes retention carried forward (pending halves and delays re-written before their segment went; kept across restarts)",
            carried,
        );
    }
    counter(
        &mut out,
        "rocklet_pulled_total",
        "Messages handed out by remoting PULL_MESSAGE",
        m.pulled.load(Ordering::Relaxed),
    );
    if let Ok(d) = m.disk.read(core).await {
        gauge_f64(
            &mut out,
            "rocklet_disk_used_ratio",
            "Share of the data directory's file system in use: used / (used + available to the broker), statvfs, as RocketMQ reckons commitLogDiskRatio (unrounded here); 0 when the log is in memory",
            d.fs.map_or(0.0, |f| f.used_ratio()),
        );
        if let Some(f) = d.fs {
            gauge(
                &mut out,
                "rocklet_disk_available_bytes",
                "Bytes of the data directory's file system the broker may still fill (statvfs f_bavail)",
                f.avail,
            );
        }
        gauge(
            &mut out,
            "rocklet_disk_writes_refused",
            "1 while new messages are refused (DISK_FULL) because the data directory's file system is past disk_space_warning_level_ratio; 0 otherwise",
            u64::from(m.disk_full.load(Ordering::Relaxed)),
        );
        gauge(
            &mut out,
            "rocklet_log_retained_bytes",
            "Bytes of log data held: from the oldest segment's first byte to the log's end (the preallocated zeros after the end are not counted)",
            d.retained_bytes,
        );
        gauge(
            &mut out,
            "rocklet_log_segments",
            "Segments of the log",
            d.segments,
        );
        if let Some(t) = d.oldest_store_ms {
            gauge(
                &mut out,
                "rocklet_log_oldest_message_timestamp_ms",
                "Store time (ms since the epoch) of the first record of the oldest segment",
                t,
            );
        }
    }
    counter(
        &mut out,
        "rocklet_checks_pushed_total",
        "Transaction checks pushed to a producer's telemetry stream",
        m.checks_pushed.load(Ordering::Relaxed),
    );
    counter(
        &mut out,
        "rocklet_checks_unroutable_total",
        "Transaction checks with no connected producer of the topic",
        m.checks_unroutable.load(Ordering::Relaxed),
    );
    gauge(
        &mut out,
        "rocklet_core_commands_waiting",
        "Commands (requests, inspections, control) handed to the core thread and not yet run: grows while the core thread is stuck or overloaded",
        m.core_commands_waiting.load(Ordering::Relaxed),
    );
    gauge(
        &mut out,
        "rocklet_long_polls_waiting",
        "ReceiveMessage calls waiting for a message",
        m.long_polls_waiting.load(Ordering::Relaxed),
    );
    gauge(
        &mut out,
        "rocklet_long_poll_topics",
        "Topics with long polls (receives, pulls, pops) waiting to be woken by a message",
        m.long_poll_topics.load(Ordering::Relaxed),
    );
    gauge(
        &mut out,
        "rocklet_receive_bytes_in_flight",
        "Bytes of ReceiveMessage responses not yet written to their clients",
        m.receive_bytes_in_flight.load(Ordering::Relaxed),
    );
    counter(
        &mut out,
        "rocklet_receives_over_budget_total",
        "ReceiveMessage calls refused with TOO_MANY_REQUESTS (max_inflight_receive_bytes used up)",
        m.receives_over_budget.load(Ordering::Relaxed),
    );
    gauge(
        &mut out,
        "rocklet_request_bytes_in_flight",
        "Bytes of requests (gRPC and remoting) held from when they are declared until handled (max_inflight_request_bytes)",
        m.request_bytes_in_flight.load(Ordering::Relaxed),
    );
    gauge(
        &mut out,
        "rocklet_connections_open",
        "Connections open (gRPC, remoting and name server together)",
        m.connections_open.load(Ordering::Relaxed),
    );
    gauge(
        &mut out,
        "rocklet_telemetry_streams",
        "Open telemetry streams",
        m.telemetry_streams.load(Ordering::Relaxed),
    );
    gauge(
        &mut out,
        "rocklet_producers_online",
        "Producer telemetry streams declaring topics",
        m.producers_online.load(Ordering::Relaxed),
    );
    m.end_transaction_latency.render(
        &mut out,
        "rocklet_end_transaction_seconds",
        "END_TRANSACTION latency, request to reply",
    );
    m.send_latency.render(
        &mut out,
        "rocklet_send_seconds",
        "SendMessage latency, request to reply",
    );
    m.fsync_latency.render(
        &mut out,
        "rocklet_fsync_seconds",
        "Latency of one fsync of the log",
    );
    out
}

/// The metrics listener's routes: `GET` of any path answers the metrics.
#[derive(Debug)]
struct Scrape {
    core: CoreHandle,
    metrics: Arc<Metrics>,
    hosts: AllowedHosts,
}

/// Prometheus's text format.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4";

impl http::Handler for Scrape {
    const NAME: &'static str = "metrics";

    async fn respond(&self, req: HttpRequest, peer: SocketAddr, local: SocketAddr) -> Response {
        if let Err((status, msg)) = self.hosts.check(&req, local) {
            tracing::info!(%peer, host = ?req.header("host"), origin = ?req.header("origin"), "metrics request refused: its Host or Origin names another site");
            return self.refusal(status, &msg);
        }
        if req.method == "GET" {
            Response::new(200, CONTENT_TYPE, render(&self.core, &self.metrics).await)
        } else {
            self.refusal(405, "only GET /metrics is served")
        }
    }

    fn refusal(&self, status: u16, msg: &str) -> Response {
        Response::new(status, CONTENT_TYPE, format!("{msg}\n"))
    }
}

/// Serves `GET /metrics` (any path answers the same) over plain HTTP/1.1 ([`crate::http`])
/// until the task is dropped.
pub async fn serve(
    listener: TcpListener,
    core: CoreHandle,
    metrics: Arc<Metrics>,
    hosts: AllowedHosts,
) {
    let scrape = Scrape {
        core,
        metrics,
        hosts,
    };
    http::serve(listener, Arc::new(scrape), None).await;
}

/// Binds the metrics port.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}
