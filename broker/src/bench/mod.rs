//! `rocklet bench`: throughput, latency and a correctness check for sends, transactions,
//! delayed messages and consumption.
//!
//! Three targets: a running broker at `--endpoint` (any RocketMQ 5 gRPC endpoint: the bench is
//! a plain RocketMQ 5 client), a broker started in-process on a scratch directory and reached
//! over gRPC loopback (no `--endpoint`), or `--embedded`: the core driven directly in this
//! process (memory or file storage, group commit like the broker's driver).
//!
//! Every message carries a 16-byte header (`RKLB`, run id, sequence number) so the consumer
//! side can tell exactly which message it got. At the end the ledger must show every
//! committed (or plain) message consumed exactly once, no rolled-back message consumed and no
//! delayed message consumed before its time; otherwise the run is reported as FAILED.

pub mod cpu;
mod embedded;
mod grpc;
mod ledger;
mod remoting;
mod report;
mod rss;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rocklet_core::FlushMode;

pub use ledger::{Ledger, Verdict};
use report::report;
pub use report::Report;

/// What to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Transactions: prepare, then commit / rollback / nothing (answered on check).
    Txn,
    /// Normal messages, one per request.
    Send,
    /// Delayed messages spread over delay levels and arbitrary times.
    Delay,
    /// Consumption (receive + ack) of messages loaded before the clock starts.
    Consume,
    /// Embedded only: fill a file log, then time reopening it (recovery scan).
    Recover,
}

impl Mode {
    /// The word used in reports.
    #[must_use]
    pub fn noun(self) -> &'static str {
        match self {
            Mode::Txn => "transactions",
            Mode::Send => "sends",
            Mode::Delay => "delayed sends",
            Mode::Consume => "consumed messages",
            Mode::Recover => "recovered messages",
        }
    }
    fn name(self) -> &'static str {
        match self {
            Mode::Txn => "txn",
            Mode::Send => "send",
            Mode::Delay => "delay",
            Mode::Consume => "consume",
            Mode::Recover => "recover",
        }
    }
}

/// Where the bench sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The core in this process; `Some(dir)`: file storage there, `None`: memory.
    Embedded(Option<PathBuf>),
    /// A broker started in-process on a scratch directory, over gRPC loopback.
    InProcess,
    /// A running RocketMQ 5 endpoint (`host:port`).
    Endpoint(String),
    /// A running broker's RocketMQ 4 remoting listener (`host:port`).
    Remoting(String),
}

/// Transaction outcomes in parts (e.g. 8:1:1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mix {
    pub commit: u32,
    pub rollback: u32,
    /// The producer answers nothing; the check's answer decides (even sequence: commit).
    pub unknown: u32,
}

impl Mix {
    /// Parses `commit:rollback:unknown`, e.g. `8:1:1`.
    ///
    /// # Errors
    /// Names the problem when the text is not three non-negative integers with a positive sum.
    pub fn parse(s: &str) -> Result<Mix, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let bad = || format!("--mix `{s}`: expected commit:rollback:unknown parts, e.g. 8:1:1");
        if parts.len() != 3 {
            return Err(bad());
        }
        let n: Vec<u32> = parts
            .iter()
            .map(|p| p.trim().parse::<u32>().map_err(|_| bad()))
            .collect::<Result<_, _>>()?;
        if n.iter().map(|&x| u64::from(x)).sum::<u64>() == 0 {
            return Err(format!("--mix `{s}`: the parts add up to 0"));
        }
        Ok(Mix {
            commit: n[0],
            rollback: n[1],
            unknown: n[2],
        })
    }

    /// The producer's decision for a sequence number (deterministic, evenly spread).
    #[must_use]
    pub fn outcome(&self, seq: u64) -> Outcome {
        let total = u64::from(self.commit) + u64::from(self.rollback) + u64::from(self.unknown);
        let r = spread(seq) % total;
        if r < u64::from(self.commit) {
            Outcome::Commit
        } else if r < u64::from(self.commit) + u64::from(self.rollback) {
            Outcome::Rollback
        } else {
            Outcome::Unknown
        }
    }
}

/// What the producer does after a prepare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Commit,
    Rollback,
    Unknown,
}

/// The checker's answer for a transaction left unknown: commit even sequences.
#[must_use]
pub fn check_answer(seq: u64) -> bool {
    seq.is_multiple_of(2)
}

/// Whether a check of `seq` is answered commit. A producer that decided (commit or
/// rollback) answers its decision, as an application answers from its local transaction: a
/// check can arrive before the producer's own end when the prepare's reply is slower than
/// the check timeout, and the two answers must agree. Otherwise [`check_answer`] decides
/// (backlog transactions are rolled back).
#[must_use]
pub fn checked_commit(mix: &Mix, backlog: u64, seq: u64) -> bool {
    if seq < backlog {
        return false;
    }
    match mix.outcome(seq) {
        Outcome::Commit => true,
        Outcome::Rollback => false,
        Outcome::Unknown => check_answer(seq),
    }
}

/// A cheap, well-spread hash of a sequence number (splitmix64).
#[must_use]
pub fn spread(seq: u64) -> u64 {
    let mut z = seq.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Everything `rocklet bench` takes.
#[derive(Debug, Clone)]
pub struct BenchArgs {
    pub mode: Mode,
    pub target: Target,
    /// Concurrent clients (gRPC: one connection and task each; embedded: requests in flight
    /// per group commit).
    pub clients: usize,
    /// Consumers (gRPC tasks; embedded: one receive in flight).
    pub consumers: usize,
    /// Messages (or transactions) in all, unless `duration` is given.
    pub count: u64,
    /// Run for this long instead of a count.
    pub duration: Option<Duration>,
    /// Start at most this many operations per second, all clients together (`None`: as fast
    /// as replies come). Spreads check deadlines out for punctuality runs.
    pub rate: Option<f64>,
    /// Body size in bytes (at least the 16-byte header).
    pub size: usize,
    /// Flush mode of the embedded or in-process broker.
    pub flush: FlushMode,
    pub mix: Mix,
    /// Transactions left pending before the measured part (checks answered with rollback).
    pub backlog: u64,
    /// When the backlog's checks may start, after its prepare (ms); `None`: with the
    /// broker's transaction timeout (so their checks fire during the run).
    pub backlog_check_after_ms: Option<u64>,
    /// The broker's transaction timeout (embedded and in-process: set to this; endpoint: what
    /// the remote broker uses, for check punctuality and how long to wait for checks).
    pub check_after_ms: u64,
    /// Delay mode: delays spread up to this (ms).
    pub delay_max_ms: u64,
    /// How long to wait, after the producers stop, for consumption and checks to finish.
    pub drain_timeout: Duration,
    /// After a drain that timed out, how much longer to wait for the messages still due
    /// (a failover's redelivery): those that come are reported late, not missing.
    pub late_wait: Duration,
    /// Topic (default per mode); consumer group.
    pub topic: Option<String>,
    pub group: String,
    /// Consume mode: the group is declared FIFO and message `seq` is of message group
    /// `seq % message_groups`; the check also wants each message group in order.
    pub fifo: bool,
    /// Message groups of a FIFO run.
    pub message_groups: u64,
    /// Print the live line each second (to stderr).
    pub live: bool,
    /// Sign every gRPC call with this access key and secret key (the in-process broker gets
    /// it as a super user, so authentication is on).
    pub credentials: Option<(String, String)>,
    /// Talk TLS (the in-process broker serves it in enforcing mode with the cert and key).
    pub tls: Option<BenchTls>,
    /// With `--endpoint`: the broker's process id on this machine. Its CPU time (user +
    /// system, from `/proc/<pid>/stat`) from the start of the measured part to the end of
    /// the drain is reported per operation, a figure that does not depend on how loaded the
    /// shared machine is.
    pub broker_pid: Option<u32>,
    /// Embedded runs: every this many stored messages, print the messages stored so far and
    /// the process's resident set, and at the end the bytes of it per stored message.
    pub rss_every: Option<u64>,
    /// With `rss_every`: the run fails when the resident set grows by more than this many
    /// bytes per million stored messages (the slope without the bench's ledger).
    pub rss_max_per_million: Option<u64>,
    /// Embedded runs on file storage: every this many stored messages, retire every sealed
    /// segment (`Broker::retain`, as a retention run does; the files are deleted on another
    /// thread), so the latencies include retention's cost.
    pub retain_every: Option<u64>,
    /// Embedded runs: the core's segment size (default 1 GiB).
    pub segment_size: Option<u64>,
    /// `recover`: record a checkpoint of the core's state each time the log grew by this many
    /// bytes while filling, as the broker's schedule does (`checkpoint_bytes`); the reopen
    /// then reads the newest one and replays only the log after it, and the run fails when
    /// it replays any other record.
    pub checkpoint_every: Option<u64>,
}

/// TLS of a gRPC bench run.
#[derive(Debug, Clone)]
pub struct BenchTls {
    /// CA certificate (PEM) the broker's certificate is verified against.
    pub ca: std::path::PathBuf,
    /// Name the certificate must have.
    pub domain: String,
    /// The in-process broker's certificate chain and key (PEM).
    pub cert: Option<std::path::PathBuf>,
    pub key: Option<std::path::PathBuf>,
}

impl BenchArgs {
    /// Defaults for a mode and target (what the CLI starts from).
    #[must_use]
    pub fn new(mode: Mode, target: Target) -> Self {
        BenchArgs {
            mode,
            target,
            clients: 16,
            consumers: 2,
            count: 20_000,
            duration: None,
            rate: None,
            size: 1024,
            flush: FlushMode::Sync,
            mix: Mix {
                commit: 1,
                rollback: 0,
                unknown: 0,
            },
            backlog: 0,
            backlog_check_after_ms: None,
            check_after_ms: 6_000,
            delay_max_ms: 5_000,
            drain_timeout: Duration::from_secs(30),
            late_wait: Duration::from_secs(60),
            topic: None,
            group: "RockletBenchConsumer".into(),
            fifo: false,
            message_groups: 32,
            live: true,
            credentials: None,
            tls: None,
            broker_pid: None,
            rss_every: None,
            rss_max_per_million: None,
            retain_every: None,
            segment_size: None,
            checkpoint_every: None,
        }
    }

    fn topic(&self) -> String {
        self.topic.clone().unwrap_or_else(|| {
            match self.mode {
                Mode::Txn => "RockletBenchTxn",
                Mode::Delay => "RockletBenchDelay",
                _ => "RockletBenchNormal",
            }
            .into()
        })
    }

    fn validate(&self) -> Result<(), String> {
        if self.size < HEADER {
            return Err(format!(
                "--size {}: bodies carry a {HEADER}-byte header, so at least {HEADER}",
                self.size
            ));
        }
        if self.clients == 0 {
            return Err("--clients must be at least 1".into());
        }
        if self.consumers == 0 {
            return Err("--consumers must be at least 1".into());
        }
        if self.duration.is_none() && self.count == 0 {
            return Err("--count must be at least 1 (or give --duration)".into());
        }
        if self.mode == Mode::Recover && !matches!(self.target, Target::Embedded(Some(_))) {
            return Err(
                "recover runs embedded with file storage: --embedded --storage file".into(),
            );
        }
        if self.fifo && self.mode != Mode::Consume {
            return Err("--fifo measures FIFO consumption: use it with the consume mode".into());
        }
        if self.fifo && self.message_groups == 0 {
            return Err("--message-groups must be at least 1".into());
        }
        if self.broker_pid.is_some()
            && !matches!(self.target, Target::Endpoint(_) | Target::Remoting(_))
        {
            return Err(
                "--broker-pid measures a broker process: use it with --endpoint or --remoting"
                    .into(),
            );
        }
        if let Some(n) = self.rss_every {
            if n == 0 {
                return Err("--rss-every must be at least 1 (stored messages)".into());
            }
            if !matches!(self.target, Target::Embedded(_)) {
                return Err(
                    "--rss-every measures this process's memory: use it with --embedded".into(),
                );
            }
        }
        if self.rss_max_per_million.is_some() && self.rss_every.is_none() {
            return Err("--rss-max-per-million bounds what --rss-every measures: give both".into());
        }
        if let Some(n) = self.retain_every {
            if n == 0 {
                return Err("--retain-every must be at least 1 (stored messages)".into());
            }
            if !matches!(self.target, Target::Embedded(Some(_))) {
                return Err(
                    "--retain-every retires segment files: use it with --embedded --storage file"
                        .into(),
                );
            }
        }
        if let Some(n) = self.checkpoint_every {
            if n == 0 || self.mode != Mode::Recover {
                return Err("--checkpoint-every BYTES (at least 1) is for the recover mode".into());
            }
        }
        if (self.segment_size.is_some()) && !matches!(self.target, Target::Embedded(_)) {
            return Err("--segment-size sets the embedded core's: use it with --embedded".into());
        }
        if matches!(self.target, Target::Remoting(_)) && self.mode != Mode::Send {
            return Err("--remoting measures sends (send + pull): use the send mode".into());
        }
        if let Some(pid) = self.broker_pid {
            cpu::of_pid(pid).map_err(|e| format!("--broker-pid {pid}: {e}"))?;
        }
        if self.mode == Mode::Consume && self.duration.is_some() {
            return Err("consume measures a loaded count: give --count, not --duration".into());
        }
        Ok(())
    }
}

/// Bytes of the header every bench body starts with.
pub const HEADER: usize = 16;

/// A body of `size` bytes carrying `run` and `seq`.
#[must_use]
pub fn body(run: u32, seq: u64, size: usize) -> Vec<u8> {
    let mut b = vec![b'r'; size.max(HEADER)];
    b[..4].copy_from_slice(b"RKLB");
    b[4..8].copy_from_slice(&run.to_le_bytes());
    b[8..16].copy_from_slice(&seq.to_le_bytes());
    b
}

/// The run and sequence number of a bench body; `None` for anything else.
#[must_use]
pub fn parse_body(b: &[u8]) -> Option<(u32, u64)> {
    if b.len() < HEADER || &b[..4] != b"RKLB" {
        return None;
    }
    let run = u32::from_le_bytes(b[4..8].try_into().ok()?);
    let seq = u64::from_le_bytes(b[8..16].try_into().ok()?);
    Some((run, seq))
}

/// Wall-clock ms since the epoch (the broker's clock on this machine).
#[must_use]
pub fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn hist() -> Histogram<u64> {
    Histogram::new(3).expect("3 significant figures is valid")
}

/// Latency and lateness recorders (µs for latencies, ms for lateness).
#[derive(Debug)]
pub struct Recorder {
    /// One operation end to end (send; prepare + end; receive batch for consume).
    pub op: Histogram<u64>,
    /// END_TRANSACTION alone.
    pub end: Histogram<u64>,
    /// First checks: ms past their deadline.
    pub check_late: Histogram<u64>,
    /// Delayed messages: ms past their delivery time when consumed.
    pub delay_late: Histogram<u64>,
    pub errors: u64,
    pub first_error: Option<String>,
    /// Operations done (messages for consume).
    pub done: u64,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            op: hist(),
            end: hist(),
            check_late: hist(),
            delay_late: hist(),
            errors: 0,
            first_error: None,
            done: 0,
        }
    }
}

impl Recorder {
    fn error(&mut self, e: impl Into<String>) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(e.into());
        }
    }
}

fn us(d: Duration) -> u64 {
    d.as_micros().min(u128::from(u64::MAX)) as u64
}

/// The live line, printed once a second.
#[derive(Debug)]
struct Live {
    on: bool,
    start: Instant,
    next: Instant,
    last_done: u64,
    tty: bool,
}

impl Live {
    fn new(on: bool) -> Self {
        let now = Instant::now();
        Live {
            on,
            start: now,
            next: now + Duration::from_secs(1),
            last_done: 0,
            tty: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        }
    }
    fn due(&self) -> bool {
        self.on && Instant::now() >= self.next
    }
    fn print(&mut self, noun: &str, r: &Recorder, consumed: u64, pending_checks: u64) {
        let now = Instant::now();
        let secs = now.duration_since(self.start).as_secs();
        let rate = r.done - self.last_done;
        self.last_done = r.done;
        self.next += Duration::from_secs(1);
        if self.next < now {
            self.next = now + Duration::from_secs(1);
        }
        let line = format!(
            "[{secs:>4}s] {noun}: {rate:>8}/s  total {:>9}  p50 {:.3} ms  p99 {:.3} ms  consumed {consumed}  checks waiting {pending_checks}  errors {}",
            r.done,
            r.op.value_at_quantile(0.5) as f64 / 1e3,
            r.op.value_at_quantile(0.99) as f64 / 1e3,
            r.errors
        );
        if self.tty {
            eprint!("\r{line}\x1b[K");
        } else {
            eprintln!("{line}");
        }
    }
    fn finish(&self) {
        if self.on && self.tty {
            eprintln!();
        }
    }
}

/// What a finished run measured, before formatting.
#[derive(Debug, Default)]
pub struct Outcomes {
    pub rec: Recorder,
    pub elapsed: Duration,
    pub consumed: u64,
    pub fsyncs: Option<u64>,
    pub log_bytes: Option<u64>,
    pub verdict: Verdict,
    /// Extra lines (recovery, backlog preparation).
    pub notes: Vec<String>,
    /// Extra result fields (`key=value`).
    pub fields: Vec<(String, String)>,
    /// CPU time of the broker process (`--broker-pid`) and of this bench process over the
    /// measured part and the drain.
    pub cpu: Option<RunCpu>,
}

/// CPU time used while a run was measured (its operations and their drain).
#[derive(Debug, Clone, Copy)]
pub struct RunCpu {
    pub broker: cpu::CpuTime,
    pub bench: cpu::CpuTime,
    /// Wall time of the same interval.
    pub wall: Duration,
}

/// CPU times of the broker and of this process, and when they were read.
#[derive(Debug, Clone, Copy)]
pub struct CpuMark {
    broker: cpu::CpuTime,
    bench: cpu::CpuTime,
    at: std::time::Instant,
}

impl CpuMark {
    /// Reads the CPU times of the broker (`--broker-pid`) and of this process; none without
    /// a broker pid.
    pub fn now(broker_pid: Option<u32>) -> Result<Option<Self>, String> {
        let Some(pid) = broker_pid else {
            return Ok(None);
        };
        Ok(Some(CpuMark {
            broker: cpu::of_pid(pid).map_err(|e| format!("--broker-pid {pid}: {e}"))?,
            bench: cpu::of_pid(std::process::id())?,
            at: std::time::Instant::now(),
        }))
    }
}

impl RunCpu {
    /// What was used from `start` to `end` (none when either was not read).
    pub fn between(start: Option<CpuMark>, end: Option<CpuMark>) -> Option<Self> {
        let (a, b) = (start?, end?);
        Some(RunCpu {
            broker: b.broker.since(&a.broker),
            bench: b.bench.since(&a.bench),
            wall: b.at - a.at,
        })
    }
}

/// Runs the benchmark described by `args`.
///
/// # Errors
/// Bad arguments, a broker that cannot be started or reached, or a storage failure. A run
/// that finished but lost data is not an error here: its [`Report`] has `ok: false`.
pub async fn run(args: BenchArgs) -> Result<Report, String> {
    args.validate()?;
    let o = match &args.target {
        Target::Embedded(_) => {
            let a = args.clone();
            tokio::task::spawn_blocking(move || embedded::run(&a))
                .await
                .map_err(|e| format!("bench thread failed: {e}"))??
        }
        Target::InProcess | Target::Endpoint(_) => grpc::run(&args).await?,
        Target::Remoting(addr) => remoting::run(&args, addr).await?,
    };
    Ok(report(&args, &o))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_answers_the_producers_decision_where_it_made_one() {
        let mix = Mix::parse("6:2:2").expect("mix");
        let (mut seen_rollback_even, mut seen_commit_odd, mut seen_unknown) = (false, false, false);
        for seq in 10..10_000 {
            let commit = checked_commit(&mix, 10, seq);
            match mix.outcome(seq) {
                Outcome::Commit => {
                    assert!(commit, "seq {seq}: decided commit, check said rollback");
                    seen_commit_odd |= !check_answer(seq);
                }
                Outcome::Rollback => {
                    assert!(!commit, "seq {seq}: decided rollback, check said commit");
                    seen_rollback_even |= check_answer(seq);
                }
                Outcome::Unknown => {
                    assert_eq!(commit, check_answer(seq));
                    seen_unknown = true;
                }
            }
        }
        // The cases where the parity answer would disagree with the decision occur.
        assert!(seen_rollback_even && seen_commit_odd && seen_unknown);
        for seq in 0..10 {
            assert!(
                !checked_commit(&mix, 10, seq),
                "backlog seq {seq} is rolled back"
            );
        }
    }
}
