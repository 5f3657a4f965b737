//! The renderer and server of the metrics: writes [`Metrics`], the core's
//! [`Stats`](rocklet_core::Stats) and backlogs, the disk, remoting and cluster numbers in the
//! Prometheus text format, and serves it over HTTP. It reads every module (it sits above
//! them); the counters it reads ([`super`]) import none of them.
//!
//! Served without credentials, so the listener obeys the rule of every listener (no
//! non-loopback address while authentication is off, `BrokerConfig::client_listeners`), and
//! answers only requests whose `Host` (and `Origin`, when present) names it (its address,
//! `localhost` on loopback, or an entry of `metrics_allowed_hosts`: [`crate::http::hosts`]),
//! so a page of another site cannot read it through DNS rebinding.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::net::TcpListener;

use super::{Histogram, Metrics, BUCKETS, LIMITS, RPCS};
use crate::driver::CoreHandle;
use crate::http::hosts::AllowedHosts;
use crate::http::{self, HttpRequest, Response};

fn histogram(out: &mut String, h: &Histogram, name: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    for (i, b) in BUCKETS.iter().enumerate() {
        let _ = writeln!(
            out,
            "{name}_bucket{{le=\"{b}\"}} {}",
            h.buckets[i].load(Ordering::Relaxed)
        );
    }
    let count = h.count();
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
    let _ = writeln!(
        out,
        "{name}_sum {}",
        h.sum_ns.load(Ordering::Relaxed) as f64 / 1e9
    );
    let _ = writeln!(out, "{name}_count {count}");
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
    histogram(
        &mut out,
        &m.end_transaction_latency,
        "rocklet_end_transaction_seconds",
        "END_TRANSACTION latency, request to reply",
    );
    histogram(
        &mut out,
        &m.send_latency,
        "rocklet_send_seconds",
        "SendMessage latency, request to reply",
    );
    histogram(
        &mut out,
        &m.fsync_latency,
        "rocklet_fsync_seconds",
        "Latency of one fsync of the log",
    );
    histogram(
        &mut out,
        &m.checkpoint_pause,
        "rocklet_checkpoint_pause_seconds",
        "Time the core thread spends on one checkpoint (its sync and write run off it)",
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
