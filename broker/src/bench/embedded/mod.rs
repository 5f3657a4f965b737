//! `rocklet bench --embedded`: the core driven in this thread, the way the broker's driver
//! does it (every client's request handled, one `sync` for the round, outputs drained).
//!
//! The folder: `mod.rs` (the run: the clients' requests issued, the rounds synced, the
//! measurement), `replies.rs` (the core's outputs drained, each reply matched to what its
//! client asked and recorded in the ledger), `recover.rs` (`rocklet bench recover`). A round
//! flows: `Run::issue` (a request per client) → the round's `sync` → `drain_replies` → the
//! ledger's verdict at the end.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rocklet_core::{
    AnyStorage, Broker, Config, Delay, DetachedSync, FlushMode, NewMessage, ReceiptHandle, Request,
    Resolution, TagFilter, TxnId,
};

use super::ledger::{Fate, Ledger};
use super::{
    body, epoch_ms, spread, us, BenchArgs, Live, Mode, Outcome, Outcomes, Recorder, Target,
};
use crate::clock::Clock;

mod recover;
mod replies;

use recover::recover;

const GROUP: &str = "RockletBenchProducers";
const CHECK_ID: u64 = 1 << 62;
const RECV_ID: u64 = 1 << 61;
const ACK_ID: u64 = 1 << 60;
const BACKLOG_ID: u64 = 1 << 59;
const LOAD_ID: u64 = 1 << 58;
/// Messages per receive.
const RECV_MAX: u32 = 32;
/// Invisible time of received messages: longer than any run, so no redelivery.
const INVISIBLE_MS: u64 = 600_000;

type Core = Broker<AnyStorage>;

/// The core's clock in a run: epoch based, monotonic within the run (a host clock of the
/// one [`Clock`] trait).
#[derive(Debug)]
struct MonotonicClock {
    start: Instant,
    base: u64,
}

impl MonotonicClock {
    fn new() -> Self {
        MonotonicClock {
            start: Instant::now(),
            base: epoch_ms(),
        }
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> u64 {
        self.base + self.start.elapsed().as_millis() as u64
    }
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    Idle,
    Sending {
        seq: u64,
        t0: Instant,
    },
    Preparing {
        seq: u64,
        t0: Instant,
    },
    ToEnd {
        seq: u64,
        txn: TxnId,
        t0: Instant,
    },
    Ending {
        seq: u64,
        t0: Instant,
        t_end: Instant,
    },
}

/// A scratch directory under the one given, removed at the end.
#[derive(Debug)]
struct Scratch(PathBuf);

impl Scratch {
    fn new(parent: &Path) -> Result<Self, String> {
        let d = parent.join(format!("rocklet-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
        Ok(Scratch(d))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn config(args: &BenchArgs) -> Config {
    let d = Config::default();
    let segment_size = args.segment_size.unwrap_or(1 << 30);
    // A small --segment-size: the largest message shrinks to fit (the core needs ~40 KB of
    // room beyond it; the bench's bodies are far smaller).
    let largest = u32::try_from(segment_size.saturating_sub(40_000)).unwrap_or(u32::MAX);
    Config {
        flush: args.flush,
        segment_size,
        max_message_size: d.max_message_size.min(largest),
        max_batch_size: d.max_batch_size.min(largest),
        transaction_timeout_ms: args.check_after_ms,
        ..d
    }
}

fn open(cfg: Config, dir: Option<&Path>, now: u64) -> Result<Core, String> {
    let storage = AnyStorage::open(dir).map_err(|e| format!("cannot open the storage: {e}"))?;
    Broker::open(cfg, storage, now).map_err(|e| format!("cannot open the core: {e}"))
}

struct Run<'a> {
    args: &'a BenchArgs,
    b: Core,
    clock: MonotonicClock,
    topic: String,
    run_id: u32,
    ledger: Ledger,
    rec: Recorder,
    /// Core time each half was prepared at, and its check deadline.
    deadline: Vec<u64>,
    backlog: u64,
    receiving: bool,
    to_ack: Vec<ReceiptHandle>,
    /// Consumption counts as the measured operation (consume mode).
    consume_is_op: bool,
    recv_t0: Instant,
    syncer: Syncer,
    /// `--rss-every`: resident memory per stored message.
    rss: Option<super::rss::RssProbe>,
    /// `--retain-every`: stored messages at which the next retention run is due, runs so
    /// far, segments retired, bytes carried forward, and the threads deleting files.
    retain_at: u64,
    retain_runs: u64,
    retired: u64,
    carried_bytes: u64,
    /// Time the runs took on the loop's thread, all together and the longest.
    retain_time: Duration,
    retain_max: Duration,
    unlinks: Vec<std::thread::JoinHandle<()>>,
}

/// The fsync thread of a sync-flush run. As in the broker's driver, the measured loop
/// detaches a sync of what is appended (`sync_target`, `detach_sync`) and goes on handling
/// requests while it runs; `synced_to` then releases the replies it covered.
struct Syncer {
    jobs: std::sync::mpsc::Sender<DetachedSync>,
    done: std::sync::mpsc::Receiver<(DetachedSync, std::io::Result<()>)>,
    /// The log offset the sync in flight covers.
    in_flight: Option<u64>,
}

impl Syncer {
    fn new() -> Result<Self, String> {
        let (jobs, rx) = std::sync::mpsc::channel::<DetachedSync>();
        let (tx, done) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("bench-sync".into())
            .spawn(move || {
                for job in rx {
                    let r = job.run().map(drop);
                    if tx.send((job, r)).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| format!("cannot start the sync thread: {e}"))?;
        Ok(Syncer {
            jobs,
            done,
            in_flight: None,
        })
    }
}

/// Runs the embedded bench.
pub fn run(args: &BenchArgs) -> Result<Outcomes, String> {
    let Target::Embedded(dir) = &args.target else {
        return Err("not an embedded target".into());
    };
    let scratch = match dir {
        Some(d) => Some(Scratch::new(d)?),
        None => None,
    };
    let path = scratch.as_ref().map(|s| s.0.clone());
    if args.mode == Mode::Recover {
        return recover(args, path.as_deref().ok_or("recover needs file storage")?);
    }
    let clock = MonotonicClock::new();
    let mut b = open(config(args), path.as_deref(), clock.now())?;
    b.set_producer_online(clock.now(), GROUP, true);
    let mut ledger = Ledger::default();
    if args.fifo {
        b.declare_group(&args.group, true)
            .map_err(|e| format!("cannot declare the group: {e}"))?
            .map_err(|e| format!("cannot declare the group: {e}"))?;
        ledger.expect_fifo(args.message_groups);
    }
    let mut r = Run {
        args,
        b,
        clock,
        topic: args.topic(),
        run_id: (epoch_ms() as u32) ^ std::process::id().rotate_left(16),
        ledger,
        rec: Recorder::default(),
        deadline: Vec::new(),
        backlog: args.backlog,
        receiving: false,
        to_ack: Vec::new(),
        consume_is_op: args.mode == Mode::Consume,
        recv_t0: Instant::now(),
        syncer: Syncer::new()?,
        rss: args.rss_every.map(super::rss::RssProbe::new),
        retain_at: args.retain_every.unwrap_or(u64::MAX),
        retain_runs: 0,
        retired: 0,
        carried_bytes: 0,
        retain_time: Duration::ZERO,
        retain_max: Duration::ZERO,
        unlinks: Vec::new(),
    };
    let mut notes = Vec::new();
    if let Some(r) = args.rate {
        notes.push(format!(
            "paced: at most {r} operations started per second (--rate)"
        ));
    }
    let mut fields = Vec::new();
    if args.backlog > 0 {
        let t = Instant::now();
        r.prepare_backlog()?;
        let s = t.elapsed().as_secs_f64();
        notes.push(format!(
            "backlog: {} pending transactions prepared in {s:.2} s ({} pending in the core, {} bytes of pending tables)",
            args.backlog,
            r.b.pending_transaction_count(),
            r.b.pending_table_bytes()
        ));
        fields.push(("backlog".into(), args.backlog.to_string()));
    }
    if args.mode == Mode::Consume {
        r.load(args.count)?;
    }
    let syncs0 = r.b.stats().syncs;
    let t0 = Instant::now();
    r.measure()?;
    let elapsed = t0.elapsed();
    let syncs1 = r.b.stats().syncs;
    r.drain()?;
    r.sample_rss()?;
    if let Some(p) = &r.rss {
        match (p.summary(), p.per_message()) {
            (Some(line), Some((all, broker))) => {
                notes.push(line);
                let per_million = broker * 1e6;
                notes.push(format!(
                    "rss per million stored messages: {:.2} MiB ({per_million:.0} bytes, without the bench's own ledger)",
                    per_million / f64::from(1 << 20)
                ));
                fields.push(("rss_bytes_per_message".into(), format!("{all:.2}")));
                fields.push((
                    "rss_bytes_per_message_without_ledger".into(),
                    format!("{broker:.2}"),
                ));
                fields.push((
                    "rss_bytes_per_million_messages".into(),
                    format!("{per_million:.0}"),
                ));
                if let Some(max) = args.rss_max_per_million {
                    if per_million > max as f64 {
                        return Err(format!(
                            "resident memory grows by {per_million:.0} bytes per million stored messages, above --rss-max-per-million {max}: memory grows with the log's history"
                        ));
                    }
                }
            }
            _ => notes.push(format!(
                "rss per stored message: fewer than three samples of --rss-every {} (store more messages)",
                args.rss_every.unwrap_or(0)
            )),
        }
        if let Some(s) = p.samples.last() {
            fields.push(("rss_bytes".into(), s.rss_bytes.to_string()));
        }
    }
    if args.retain_every.is_some() {
        for t in r.unlinks.drain(..) {
            let _ = t.join();
        }
        notes.push(format!(
            "retention: {} runs, {} segments retired, {} bytes carried forward; the log starts at {}; \
             the runs took {:.3} ms on the loop's thread (longest {:.3} ms)",
            r.retain_runs,
            r.retired,
            r.carried_bytes,
            r.b.log_start(),
            r.retain_time.as_secs_f64() * 1e3,
            r.retain_max.as_secs_f64() * 1e3
        ));
        fields.push(("segments_retired".into(), r.retired.to_string()));
    }
    let log_bytes = r.b.log_end();
    drop(r.b);
    drop(scratch);
    Ok(Outcomes {
        consumed: r.ledger.consumed_total(),
        verdict: r.ledger.verdict(),
        rec: r.rec,
        elapsed,
        fsyncs: path.map(|_| syncs1 - syncs0),
        log_bytes: Some(log_bytes),
        notes,
        fields,
        cpu: None,
    })
}

impl Run<'_> {
    /// `--retain-every`: when the stored messages reached the next multiple, retires every
    /// sealed segment as a retention run does, inline (its cost lands on the requests
    /// waiting, as on the broker's core thread); the files go on another thread.
    fn retain_if_due(&mut self) -> Result<(), String> {
        let (Some(every), stored) = (self.args.retain_every, self.b.stats().messages_stored) else {
            return Ok(());
        };
        if stored < self.retain_at {
            return Ok(());
        }
        self.retain_at = stored + every;
        let Some(&newest) = self.b.segment_bases().last() else {
            return Ok(());
        };
        let t0 = Instant::now();
        let r = self
            .b
            .retain(self.clock.now(), newest)
            .map_err(|e| format!("retention failed: {e}"))?;
        let took = t0.elapsed();
        self.retain_time += took;
        self.retain_max = self.retain_max.max(took);
        self.retain_runs += 1;
        self.retired += r.retired.len() as u64;
        self.carried_bytes += r.carried_bytes;
        if let AnyStorage::File(f) = self.b.storage_mut() {
            let paths: Vec<std::path::PathBuf> = r
                .retired
                .iter()
                .map(|b| f.dir().join(format!("{b:020}")))
                .collect();
            self.unlinks.push(std::thread::spawn(move || {
                for p in paths {
                    let _ = std::fs::remove_file(p);
                }
            }));
        }
        Ok(())
    }

    /// `--rss-every`: a sample when the stored messages reached the next multiple.
    fn sample_rss(&mut self) -> Result<(), String> {
        if let Some(p) = &mut self.rss {
            p.observe(self.b.stats().messages_stored, self.ledger.entry_bytes())?;
        }
        Ok(())
    }

    fn err(&mut self, what: &str, e: impl std::fmt::Display) {
        self.rec.error(format!("{what}: {e}"));
    }

    fn message(&self, seq: u64) -> NewMessage {
        let mut m = NewMessage::new(self.topic.clone(), body(self.run_id, seq, self.args.size));
        if self.args.fifo {
            // The core picks the group's queue by its hash.
            m.message_group = Some(format!("g{}", seq % self.args.message_groups));
        }
        m
    }

    /// Under sync flush, syncs here (after the sync in flight, if any).
    fn sync_if_needed(&mut self) -> Result<(), String> {
        if self.args.flush == FlushMode::Sync {
            if self.syncer.in_flight.is_some() {
                self.sync_overlapped(true)?;
            }
            self.b.sync().map_err(|e| format!("sync failed: {e}"))?;
        }
        Ok(())
    }

    /// Under sync flush: takes the result of the sync in flight (waiting for it when
    /// `wait`, i.e. when the loop has nothing else to do), then starts the next one if
    /// anything waits.
    fn sync_overlapped(&mut self, wait: bool) -> Result<(), String> {
        if self.args.flush != FlushMode::Sync {
            return Ok(());
        }
        if let Some(upto) = self.syncer.in_flight {
            let done = if wait {
                self.syncer.done.recv().ok()
            } else {
                self.syncer.done.try_recv().ok()
            };
            let Some((job, result)) = done else {
                return Ok(());
            };
            self.syncer.in_flight = None;
            let ok = result.is_ok();
            self.b.storage_mut().detached_done(&job, ok);
            result.map_err(|e| format!("sync failed: {e}"))?;
            self.b.synced_to(upto);
        }
        let Some(upto) = self.b.sync_target() else {
            return Ok(());
        };
        match self.b.storage_mut().detach_sync() {
            Ok(Some(job)) => {
                self.syncer
                    .jobs
                    .send(job)
                    .map_err(|_| "the sync thread stopped".to_string())?;
                self.syncer.in_flight = Some(upto);
                Ok(())
            }
            // Memory storage: nothing to wait for.
            Ok(None) => self.b.sync().map_err(|e| format!("sync failed: {e}")),
            Err(e) => Err(format!("sync failed: {e}")),
        }
    }

    fn prepare_backlog(&mut self) -> Result<(), String> {
        let immunity = self.args.backlog_check_after_ms;
        let after = self
            .args
            .check_after_ms
            .max(immunity.map_or(0, |ms| ms.div_ceil(1000) * 1000));
        for seq in 0..self.backlog {
            let now = self.clock.now();
            let req = Request::Prepare {
                group: GROUP.into(),
                message: self.message(seq),
                check_immunity_ms: immunity,
            };
            self.b
                .handle(now, BACKLOG_ID, req)
                .map_err(|e| format!("prepare failed: {e}"))?;
            self.ledger.set(seq, Fate::Backlog);
            self.deadline.push(now + after);
            if seq % 1024 == 1023 {
                self.sync_if_needed()?;
                self.drain_outputs()?;
            }
        }
        self.sync_if_needed()?;
        self.drain_outputs()
    }

    /// Consume mode: the messages to consume, stored before the clock starts.
    fn load(&mut self, n: u64) -> Result<(), String> {
        let mut seq = 0;
        while seq < n {
            let k = (n - seq).min(64);
            let messages = (seq..seq + k).map(|s| self.message(s)).collect();
            let now = self.clock.now();
            self.b
                .handle(now, LOAD_ID, Request::Send { messages })
                .map_err(|e| format!("load failed: {e}"))?;
            for s in seq..seq + k {
                self.ledger.set(s, Fate::Once);
            }
            seq += k;
            self.sync_if_needed()?;
            self.drain_outputs()?;
        }
        self.b.sync().map_err(|e| format!("sync failed: {e}"))?;
        self.drain_outputs()
    }

    fn issue(&mut self, c: usize, seq: u64, now: u64) -> Result<Phase, String> {
        let t0 = Instant::now();
        let args = self.args;
        let (req, phase) = match args.mode {
            Mode::Txn => {
                self.deadline.resize(seq as usize + 1, 0);
                self.deadline[seq as usize] = now + args.check_after_ms;
                (
                    Request::Prepare {
                        group: GROUP.into(),
                        message: self.message(seq),
                        check_immunity_ms: None,
                    },
                    Phase::Preparing { seq, t0 },
                )
            }
            Mode::Delay => {
                let levels = &self.b.config().delay_levels;
                let max = args.delay_max_ms.max(1);
                let pick = spread(seq);
                let (delay, ms) = match pick % 4 {
                    0 if levels.first().is_some_and(|&l| l <= max) => (Delay::Level(1), levels[0]),
                    1 if levels.get(1).is_some_and(|&l| l <= max) => (Delay::Level(2), levels[1]),
                    _ => {
                        let ms = 1 + (pick >> 8) % max;
                        (Delay::At(now + ms), ms)
                    }
                };
                self.ledger.set_deliver_at(seq, now + ms);
                (
                    Request::Send {
                        messages: vec![self.message(seq).with_delay(delay)],
                    },
                    Phase::Sending { seq, t0 },
                )
            }
            _ => (
                Request::Send {
                    messages: vec![self.message(seq)],
                },
                Phase::Sending { seq, t0 },
            ),
        };
        self.b
            .handle(now, c as u64, req)
            .map_err(|e| format!("request failed: {e}"))?;
        Ok(phase)
    }

    /// The measured part: clients keep requests in flight until the count or time is done.
    fn measure(&mut self) -> Result<(), String> {
        let args = self.args;
        let mut phases = vec![Phase::Idle; args.clients];
        let mut next = self.backlog;
        let end_seq = self.backlog + args.count;
        let stop_at = args.duration.map(|d| Instant::now() + d);
        let mut live = Live::new(args.live);
        let producing_mode = args.mode != Mode::Consume;
        let paced_from = Instant::now();
        loop {
            let now = self.clock.now();
            // --rate: the operations that may have started by now.
            let allowed = args.rate.map_or(u64::MAX, |r| {
                self.backlog + (r * paced_from.elapsed().as_secs_f64()) as u64 + 1
            });
            if self.b.poll_timeout().is_some_and(|t| t <= now) {
                self.b
                    .handle_timeout(now)
                    .map_err(|e| format!("timers failed: {e}"))?;
            }
            let more = producing_mode
                && match stop_at {
                    Some(t) => Instant::now() < t,
                    None => next < end_seq,
                };
            let mut busy = false;
            for (c, p) in phases.iter_mut().enumerate() {
                match *p {
                    Phase::Idle
                        if more && (stop_at.is_some() || next < end_seq) && next < allowed =>
                    {
                        *p = self.issue(c, next, now)?;
                        next += 1;
                        busy = true;
                    }
                    Phase::ToEnd { seq, txn, t0 } => {
                        let (resolution, fate) = match args.mix.outcome(seq) {
                            Outcome::Commit => (Resolution::Commit, Fate::Committed),
                            Outcome::Rollback => (Resolution::Rollback, Fate::RolledBack),
                            Outcome::Unknown => {
                                self.ledger.set(seq, Fate::AwaitingCheck);
                                let _ = self.rec.op.record(us(t0.elapsed()));
                                self.rec.done += 1;
                                *p = Phase::Idle;
                                continue;
                            }
                        };
                        let req = Request::EndTransaction {
                            txn,
                            resolution,
                            group: Some(GROUP.into()),
                            from_check: false,
                        };
                        self.b
                            .handle(now, c as u64, req)
                            .map_err(|e| format!("end failed: {e}"))?;
                        // Consumers may see it before the reply: the fate is known now.
                        self.ledger.set(seq, fate);
                        *p = Phase::Ending {
                            seq,
                            t0,
                            t_end: Instant::now(),
                        };
                        busy = true;
                    }
                    _ => {}
                }
            }
            self.consume_step(now)?;
            // Wait for the fsync only when no client had anything to send.
            self.sync_overlapped(!busy && !self.receiving)?;
            self.drain_replies(&mut phases)?;
            self.sample_rss()?;
            self.retain_if_due()?;
            if live.due() {
                let waiting = self.ledger.awaiting_checks();
                live.print(
                    self.args.mode.noun(),
                    &self.rec,
                    self.ledger.consumed_total(),
                    waiting,
                );
            }
            let idle = phases.iter().all(|p| matches!(p, Phase::Idle));
            if !more && idle {
                if args.mode == Mode::Consume {
                    let (left, _) = self.ledger.outstanding();
                    if left == 0 || self.rec.errors > 0 {
                        break;
                    }
                } else {
                    break;
                }
            }
            if !busy && !self.receiving && (args.mode == Mode::Consume || args.rate.is_some()) {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        live.finish();
        Ok(())
    }

    /// After the producers: consume what is left, wait for checks, then one more empty
    /// receive so a duplicate would show.
    fn drain(&mut self) -> Result<(), String> {
        let until = Instant::now() + self.args.drain_timeout;
        let mut last_count = Instant::now();
        let mut phases: Vec<Phase> = Vec::new();
        let mut live = Live::new(self.args.live);
        loop {
            let now = self.clock.now();
            if self.b.poll_timeout().is_some_and(|t| t <= now) {
                self.b
                    .handle_timeout(now)
                    .map_err(|e| format!("timers failed: {e}"))?;
            }
            self.consume_step(now)?;
            self.sync_if_needed()?;
            self.drain_replies(&mut phases)?;
            if live.due() {
                let waiting = self.ledger.awaiting_checks();
                live.print("drain", &self.rec, self.ledger.consumed_total(), waiting);
            }
            if last_count.elapsed() > Duration::from_millis(50) {
                last_count = Instant::now();
                let (left, checks) = self.ledger.outstanding();
                let backlog_waiting = self.backlog > 0
                    && self.args.backlog_check_after_ms.is_none()
                    && self.b.pending_transaction_count() > 0;
                if left == 0 && checks == 0 && !backlog_waiting && self.to_ack.is_empty() {
                    break;
                }
                if Instant::now() >= until {
                    self.rec.error(format!(
                        "drain timed out after {:?}: {left} messages not consumed, {checks} checks not answered",
                        self.args.drain_timeout
                    ));
                    break;
                }
            }
            if !self.receiving {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        live.finish();
        // Anything still coming is a duplicate or a rolled-back message.
        for _ in 0..3 {
            let now = self.clock.now();
            self.consume_step(now)?;
            self.sync_if_needed()?;
            self.drain_replies(&mut phases)?;
        }
        Ok(())
    }

    fn consume_step(&mut self, now: u64) -> Result<(), String> {
        for handle in std::mem::take(&mut self.to_ack) {
            let req = Request::Ack {
                group: self.args.group.clone(),
                handle,
            };
            self.b
                .handle(now, ACK_ID, req)
                .map_err(|e| format!("ack failed: {e}"))?;
        }
        if !self.receiving {
            let req = Request::Receive {
                group: self.args.group.clone(),
                topic: self.topic.clone(),
                queue_id: None,
                max: RECV_MAX,
                invisible_ms: INVISIBLE_MS,
                filter: TagFilter::All,
            };
            self.recv_t0 = Instant::now();
            self.b
                .handle(now, RECV_ID, req)
                .map_err(|e| format!("receive failed: {e}"))?;
            self.receiving = true;
        }
        Ok(())
    }
}
