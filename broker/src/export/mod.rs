//! `rocklet export --to-rocketmq DIR --from DATA_DIR`: a stopped broker's data directory (or
//! a backup directory) becomes an Apache RocketMQ 5.x store (`storePathRootDir`) whose
//! broker serves what Rocklet would have served.
//!
//! The source is opened read only ([`source`]) and replayed by the core as a broker start
//! would; the export then reads the core's state and writes RocketMQ's records
//! ([`apache`]), in this order in the new commit log:
//!
//! 1. **Half messages** (`RMQ_SYS_TRANS_HALF_TOPIC`, queue 0): every transaction's half,
//!    resolved ones first, then the pending ones (with `TRANSACTION_CHECK_TIMES`, the checks
//!    Rocklet made, and `PGROUP`, so RocketMQ's checker reaches the producer group). As
//!    TransactionalMessageBridge stores a half: sys flag TRANSACTION_NOT_TYPE (RocketMQ's
//!    dispatch leaves a prepared-type record out of every consume queue, so its checker would
//!    never see the half), TRAN_MSG, REAL_TOPIC and REAL_QID in the properties.
//! 2. **Op records** (`RMQ_SYS_TRANS_OP_HALF_TOPIC`, tag `d`, body: the half's queue offset)
//!    for every resolved half: committed, rolled back, or given up (check maximum, expired).
//!    The checker's offsets (group `CID_RMQ_SYS_TRANS`) start after the resolved halves and
//!    their ops, so RocketMQ checks the pending halves only.
//! 3. **Every queue of every topic** (user, retry, dead-letter), unit by unit from its first
//!    queue offset, each at the queue offset it had in Rocklet (consumer offsets stay
//!    valid): a message as sent; a committed transaction as EndTransactionProcessor writes
//!    its commit copy (the half's body and properties without REAL_TOPIC/REAL_QID, sys flag
//!    TRANSACTION_COMMIT_TYPE, PREPARED_TRANSACTION_OFFSET naming the half); a delivered
//!    delayed message as delivered (into its real topic, REAL_TOPIC/REAL_QID kept, as
//!    RocketMQ's ScheduleMessageService and TimerMessageStore leave them).
//! 4. **Delayed messages not yet delivered**, with their remaining time: a delay level in
//!    `SCHEDULE_TOPIC_XXXX` (queue level − 1), where RocketMQ 5.5.0 puts a level send and its
//!    ScheduleMessageService delivers it at store time + the level's delay (the store time is
//!    set so that this is Rocklet's due time under RocketMQ's default `messageDelayLevel`);
//!    a delivery time (and a level past RocketMQ's 18) in its timer topic
//!    `rmq_sys_wheel_timer` with `TIMER_OUT_MS` = the due time, which TimerMessageStore
//!    reads into its wheel from queue offset 0 (no `timercheck` is written).
//!
//! Then `config/topics.json`, `config/subscriptionGroup.json` (FIFO groups with
//! `consumeMessageOrderly`) and `config/consumerOffset.json`. No consume queue, index or
//! checkpoint is written: RocketMQ rebuilds its consume queues from the commit log at start.
//!
//! Pop state (messages received and not acked) has no RocketMQ form here: such a group's
//! offset is its first message not acked, so they are delivered again (noted in the report).
//! What cannot be represented is named in the report with its count, never dropped
//! silently: a unit whose record is not a message of its queue, a half without resolution
//! that is not pending.

mod apache;
pub mod source;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use rocklet_core::broker::prop as rprop;
use rocklet_core::record::{self, sys_flag, Decoded, Header, RecordView};
use rocklet_core::{topic, Broker, Config, Millis};

use crate::clock::Clock as _;
use source::Source;

/// RocketMQ's default commit-log file size (mappedFileSizeCommitLog).
pub const DEFAULT_COMMITLOG_FILE_SIZE: u64 = 1 << 30;

/// RocketMQ's default `messageDelayLevel` ("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m
/// 20m 30m 1h 2h"), in ms.
const APACHE_DELAY_LEVELS: [Millis; 18] = [
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000, 420_000,
    480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
];

/// RocketMQ's transaction checker group (MixAll.CID_SYS_RMQ_TRANS).
const CHECKER_GROUP: &str = "CID_RMQ_SYS_TRANS";

/// What to export.
#[derive(Debug, Clone)]
pub struct Options {
    /// The data directory of a stopped broker, or a backup directory.
    pub from: PathBuf,
    /// The new RocketMQ store root (must not exist, or be empty).
    pub to: PathBuf,
    /// The core configuration the broker ran with.
    pub core: Config,
    /// The RocketMQ broker's mappedFileSizeCommitLog.
    pub commitlog_file_size: u64,
}

/// Why the export did not happen: the import's error (one for moving a store either way).
pub use crate::import::MoveError;
/// A pending transaction as exported (`checks`: those Rocklet sent so far, the
/// TRANSACTION_CHECK_TIMES of the exported half).
pub use crate::import::PendingTransaction;

/// What the export wrote, counted by kind; `not_exported` names everything left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    /// Records of the source's log read.
    pub records: u64,
    /// Topics (user, retry, dead-letter) in topics.json, and their queues.
    pub topics: u64,
    pub queues: u64,
    /// Consumer groups in subscriptionGroup.json, and of them FIFO (consumeMessageOrderly).
    pub groups: u64,
    pub fifo_groups: u64,
    /// Consumer offsets in consumerOffset.json (one per group and queue).
    pub consumer_offsets: u64,
    /// Messages written as sent (retry and dead-letter topics included).
    pub messages: u64,
    pub retry: u64,
    pub dead_letter: u64,
    /// Transactions: committed (half, op record and commit copy), rolled back (half and op
    /// record), given up by Rocklet's checker (check maximum, expired: half and op record).
    pub committed: u64,
    pub rolled_back: u64,
    pub given_up: u64,
    /// Pending transactions (halves RocketMQ checks).
    pub pending: Vec<PendingTransaction>,
    /// Delayed messages delivered (in their real topics).
    pub delivered_delays: u64,
    /// Delayed messages not delivered yet: by level (SCHEDULE_TOPIC_XXXX), by timer.
    pub pending_level_delays: u64,
    pub pending_timers: u64,
    /// The commit log written.
    pub commitlog_bytes: u64,
    pub commitlog_files: u64,
    /// Left out, by reason.
    pub not_exported: BTreeMap<String, u64>,
    /// Things an operator should know.
    pub notes: Vec<String>,
}

impl Report {
    fn leave_out(&mut self, why: impl Into<String>, n: u64) {
        *self.not_exported.entry(why.into()).or_default() += n;
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "read {} records of the log", self.records)?;
        writeln!(
            f,
            "topics {} ({} queues), consumer groups {} ({} FIFO), consumer offsets {}",
            self.topics, self.queues, self.groups, self.fifo_groups, self.consumer_offsets
        )?;
        writeln!(
            f,
            "messages {} (retry {}, dead-letter {}), delivered delays {}",
            self.messages, self.retry, self.dead_letter, self.delivered_delays
        )?;
        writeln!(
            f,
            "transactions: committed {}, rolled back {}, given up by the checker {}, pending {}",
            self.committed,
            self.rolled_back,
            self.given_up,
            self.pending.len()
        )?;
        for p in &self.pending {
            writeln!(
                f,
                "  pending {} of group {} to {}: {} checks so far",
                p.id, p.group, p.topic, p.checks
            )?;
        }
        writeln!(
            f,
            "delayed, not yet delivered: by level {} (SCHEDULE_TOPIC_XXXX), by time {} (rmq_sys_wheel_timer)",
            self.pending_level_delays, self.pending_timers
        )?;
        writeln!(
            f,
            "commit log: {} bytes in {} files",
            self.commitlog_bytes, self.commitlog_files
        )?;
        for (why, n) in &self.not_exported {
            writeln!(f, "not exported {n}: {why}")?;
        }
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        Ok(())
    }
}

/// Exports `opts.from` into a new RocketMQ store at `opts.to`. On any error nothing is left
/// behind: the directory is removed if this call created it (emptied if it existed empty).
pub fn run(opts: &Options) -> Result<Report, MoveError> {
    if opts.commitlog_file_size < 4096 || opts.commitlog_file_size > i32::MAX as u64 {
        return Err(MoveError::refused(format!(
            "--commitlog-file-size {} is outside 4096..=2147483647 (RocketMQ's mapped files are at most 2 GiB)",
            opts.commitlog_file_size
        )));
    }
    let from = opts
        .from
        .canonicalize()
        .map_err(|e| MoveError::io(&opts.from, e))?;
    // The source first: a running broker's directory is refused before anything is created.
    let source = Source::open(&from)?;
    let created = prepare_target(&opts.to, &from)?;
    let result = export(source, opts);
    if result.is_err() {
        crate::import::clean_data_dir(&opts.to, created);
    }
    result
}

/// Checks that `dir` is new or empty and neither inside the source nor holding it; creates
/// it. Returns whether it was created.
fn prepare_target(dir: &Path, from: &Path) -> Result<bool, MoveError> {
    let canon = crate::import::resolve(dir).map_err(|e| MoveError::io(dir, e))?;
    if canon.starts_with(from) || from.starts_with(&canon) {
        return Err(MoveError::refused(format!(
            "the store {} and the source {} overlap: the export never writes into its source",
            dir.display(),
            from.display()
        )));
    }
    crate::import::new_target(
        dir,
        "the export writes a new RocketMQ store and never adds to one",
    )
}

/// How a half ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Committed,
    RolledBack,
    GivenUp,
}

/// A half message of the source.
#[derive(Debug)]
struct Half {
    /// The transaction's id in Rocklet (the offset of its first half record).
    key: u64,
    /// Where its record is now (a carried copy after retention).
    at: u64,
    /// The op record that resolved it: how, and when.
    fate: Option<(Fate, Millis)>,
}

type Res<T> = Result<T, MoveError>;

struct Exporter {
    broker: Broker<Source>,
    log: apache::CommitLog,
    report: Report,
}

fn core_err(e: impl fmt::Display) -> MoveError {
    MoveError::Io(format!("reading the source: {e}"))
}

/// The record at `offset` of the source's log, decoded.
fn read_at(broker: &mut Broker<Source>, offset: u64) -> Res<Vec<u8>> {
    let mut v = broker.raw_records(offset, 1).map_err(core_err)?;
    match v.pop() {
        Some((at, bytes)) if at == offset => Ok(bytes),
        _ => Err(MoveError::Io(format!(
            "no record at log offset {offset} of the source"
        ))),
    }
}

fn view(bytes: &[u8]) -> Res<RecordView<'_>> {
    match record::decode_trusted(bytes) {
        Ok(Decoded::Record(r)) => Ok(r),
        other => Err(MoveError::Io(format!(
            "a record of the source does not decode: {other:?}"
        ))),
    }
}

/// The record's properties without `drop` and the CRC pair, with `set` added (replacing).
fn props(r: &RecordView<'_>, drop: &[&str], set: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(r.properties.len() + 64);
    for (k, v) in r.props() {
        if k == record::CRC_KEY || drop.contains(&k) || set.iter().any(|(s, _)| *s == k) {
            continue;
        }
        record::push_prop(&mut out, k, v);
    }
    for (k, v) in set {
        record::push_prop(&mut out, k, v);
    }
    out
}

/// Rocklet's bookkeeping properties that are not RocketMQ's (retention's carried marks, the
/// batch length).
const ROCKLET_ONLY: [&str; 3] = [rprop::CARRIED, rprop::CARRIED_UNIT, "__BATCH_LEN"];

fn export(source: Source, opts: &Options) -> Res<Report> {
    let now = crate::clock::SystemClock.now();
    let backup = source.backup;
    let broker = Broker::open(opts.core.clone(), source, now).map_err(|e| {
        MoveError::refused(format!(
            "{} cannot be opened as a Rocklet log: {e}",
            opts.from.display()
        ))
    })?;
    let mut x = Exporter {
        broker,
        log: apache::CommitLog::create(&opts.to, opts.commitlog_file_size)?,
        report: Report::default(),
    };
    if backup {
        x.report
            .notes
            .push("the source is a backup directory: exported as of its point".into());
    }
    let halves = x.scan()?;
    let mut offsets: BTreeMap<(String, String), BTreeMap<u32, u64>> = BTreeMap::new();
    let half_places = x.halves(&halves, &mut offsets)?;
    let topics = x.queues(&half_places)?;
    x.delays()?;
    let groups = x.offsets(&topics, &mut offsets)?;
    for (name, q) in x.broker.storage().quarantined.iter() {
        x.report.notes.push(format!(
            "recovery set aside {q} bytes ({name}) when it opened the source (kept in memory, not written anywhere)"
        ));
    }
    x.report.commitlog_bytes = x.log.next;
    x.report.commitlog_files = x.log.files;
    let Exporter { log, report, .. } = x;
    log.finish()?;
    apache::write_config(&opts.to, "topics.json", &apache::topics_json(&topics))?;
    apache::write_config(
        &opts.to,
        "subscriptionGroup.json",
        &apache::groups_json(&groups),
    )?;
    apache::write_config(
        &opts.to,
        "consumerOffset.json",
        &apache::offsets_json(&offsets),
    )?;
    let mut report = report;
    report.notes.push(
        "message ids (UNIQ_KEY) are kept; offset message ids change with the new commit log's offsets".into(),
    );
    Ok(report)
}

impl Exporter {
    /// One pass over the source's log: its halves and how each ended.
    fn scan(&mut self) -> Res<Vec<Half>> {
        let mut halves: Vec<Half> = Vec::new();
        let mut by_key: HashMap<u64, usize> = HashMap::new();
        let mut at = self.broker.log_start();
        let end = self.broker.log_end();
        while at < end {
            let chunk = self.broker.raw_records(at, 256).map_err(core_err)?;
            let Some(last) = chunk.last() else { break };
            at = last.0 + last.1.len() as u64;
            for (off, bytes) in &chunk {
                self.report.records += 1;
                let r = view(bytes)?;
                if r.topic == topic::HALF {
                    let key = r
                        .prop(rprop::CARRIED)
                        .and_then(|c| c.parse().ok())
                        .unwrap_or(*off);
                    match by_key.get(&key) {
                        Some(&i) => halves[i].at = *off,
                        None => {
                            by_key.insert(key, halves.len());
                            halves.push(Half {
                                key,
                                at: *off,
                                fate: None,
                            });
                        }
                    }
                } else if r.topic == topic::OP {
                    let fate = match r.prop(rprop::TAGS) {
                        Some("d") => match r.header.sys_flag & sys_flag::TRANSACTION_TYPE_MASK {
                            sys_flag::TRANSACTION_COMMIT_TYPE => Fate::Committed,
                            _ => Fate::RolledBack,
                        },
                        Some("x" | "e") => Fate::GivenUp,
                        _ => continue,
                    };
                    if let Some(&i) = by_key.get(&r.header.prepared_offset) {
                        halves[i].fate = Some((fate, r.header.store_timestamp));
                    }
                }
            }
        }
        Ok(halves)
    }

    /// Writes the halves (resolved, then pending) and the op records of the resolved ones.
    /// Returns where each half went: by Rocklet record offset, its new log offset.
    fn halves(
        &mut self,
        halves: &[Half],
        offsets: &mut BTreeMap<(String, String), BTreeMap<u32, u64>>,
    ) -> Res<HashMap<u64, u64>> {
        let pending: HashMap<u64, rocklet_core::PendingTxnInfo> = self
            .broker
            .pending_transactions(usize::MAX)
            .into_iter()
            .map(|p| (p.txn.0, p))
            .collect();
        let mut places = HashMap::new();
        let mut queue_offset = 0u64;
        let mut resolved = Vec::new();
        for h in halves {
            match (h.fate, pending.contains_key(&h.key)) {
                (Some((fate, when)), false) => {
                    let bytes = read_at(&mut self.broker, h.at)?;
                    let r = view(&bytes)?;
                    let p = props(&r, &ROCKLET_ONLY, &[]);
                    let header = Header {
                        queue_id: 0,
                        queue_offset,
                        sys_flag: r.header.sys_flag & !sys_flag::TRANSACTION_TYPE_MASK,
                        prepared_offset: 0,
                        ..r.header
                    };
                    let new = self.log.append(&header, r.body, topic::HALF, &p)?;
                    places.insert(h.at, new);
                    places.insert(h.key, new);
                    resolved.push((queue_offset, when));
                    queue_offset += 1;
                    match fate {
                        Fate::Committed => {}
                        Fate::RolledBack => self.report.rolled_back += 1,
                        Fate::GivenUp => self.report.given_up += 1,
                    }
                }
                (_, true) => {}
                (None, false) => self.report.leave_out(
                    "half messages neither resolved nor pending in the source (no op record names them)",
                    1,
                ),
            }
        }
        let checked_from = queue_offset;
        for h in halves {
            let Some(p) = pending.get(&h.key) else {
                continue;
            };
            let bytes = read_at(&mut self.broker, h.at)?;
            let r = view(&bytes)?;
            let checks = p.checks.to_string();
            let set: Vec<(&str, &str)> = if p.checks > 0 {
                vec![(rprop::TRANSACTION_CHECK_TIMES, checks.as_str())]
            } else {
                Vec::new()
            };
            let props_ = props(&r, &ROCKLET_ONLY, &set);
            let header = Header {
                queue_id: 0,
                queue_offset,
                sys_flag: r.header.sys_flag & !sys_flag::TRANSACTION_TYPE_MASK,
                prepared_offset: 0,
                ..r.header
            };
            self.log.append(&header, r.body, topic::HALF, &props_)?;
            queue_offset += 1;
            self.report.pending.push(PendingTransaction {
                id: r
                    .prop(rprop::UNIQ_KEY)
                    .map_or_else(|| format!("@{}", h.key), String::from),
                group: p.group.clone(),
                topic: p.topic.clone(),
                checks: p.checks,
            });
        }
        for (op_offset, (half_queue_offset, when)) in resolved.iter().enumerate() {
            let mut p = Vec::new();
            record::push_prop(&mut p, rprop::TAGS, "d");
            let body = half_queue_offset.to_string();
            let header = Header {
                queue_id: 0,
                queue_offset: op_offset as u64,
                born_timestamp: *when,
                store_timestamp: *when,
                ..Header::default()
            };
            self.log.append(&header, body.as_bytes(), topic::OP, &p)?;
        }
        if !halves.is_empty() {
            // RocketMQ's checker resumes from its group's offsets: past the resolved halves
            // and their op records, at the first pending half.
            offsets
                .entry((topic::HALF.to_string(), CHECKER_GROUP.to_string()))
                .or_default()
                .insert(0, checked_from);
            offsets
                .entry((topic::OP.to_string(), CHECKER_GROUP.to_string()))
                .or_default()
                .insert(0, resolved.len() as u64);
        }
        Ok(places)
    }

    /// Writes every queue of every topic, unit by unit. Returns the topics and their queue
    /// counts.
    fn queues(&mut self, halves: &HashMap<u64, u64>) -> Res<BTreeMap<String, u32>> {
        let mut topics = BTreeMap::new();
        for t in self.broker.topics() {
            let count = t.queues.iter().map(|q| q.0 + 1).max().unwrap_or(1);
            topics.insert(t.name.clone(), count);
            self.report.topics += 1;
            self.report.queues += u64::from(count);
            let kind = topic::classify(&t.name);
            for &(qid, next, visible) in &t.queues {
                if next > visible {
                    self.report.leave_out(
                        "units past a queue's visible end (not durable when the broker stopped)",
                        next - visible,
                    );
                }
                let mut at = self.broker.queue_min_offset(&t.name, qid).unwrap_or(0);
                while at < visible {
                    let units = self
                        .broker
                        .consume_queue(&t.name, qid, at, 256)
                        .map_err(core_err)?;
                    if units.is_empty() {
                        return Err(MoveError::Io(format!(
                            "queue {}:{qid} of the source has no unit at queue offset {at} (its end is {visible})",
                            t.name
                        )));
                    }
                    for u in units {
                        if at >= visible {
                            break;
                        }
                        self.unit(&t.name, qid, at, u.offset, halves, kind)?;
                        at += 1;
                    }
                }
            }
        }
        Ok(topics)
    }

    fn unit(
        &mut self,
        name: &str,
        qid: u32,
        queue_offset: u64,
        offset: u64,
        halves: &HashMap<u64, u64>,
        kind: topic::TopicKind,
    ) -> Res<()> {
        let bytes = read_at(&mut self.broker, offset)?;
        let r = view(&bytes)?;
        let base = Header {
            queue_id: qid,
            queue_offset,
            ..r.header
        };
        if r.topic == name {
            let p = props(&r, &rprop::INTERNAL, &[]);
            self.log.append(&base, r.body, name, &p)?;
            self.report.messages += 1;
            match kind {
                topic::TopicKind::Retry => self.report.retry += 1,
                topic::TopicKind::DeadLetter => self.report.dead_letter += 1,
                _ => {}
            }
        } else if r.topic == topic::HALF {
            let key = r
                .prop(rprop::CARRIED)
                .and_then(|c| c.parse().ok())
                .unwrap_or(offset);
            let Some(&half) = halves.get(&offset).or_else(|| halves.get(&key)) else {
                self.report
                    .leave_out("committed messages whose half record was not found", 1);
                return Ok(());
            };
            // EndTransactionProcessor: the half's properties without REAL_TOPIC/REAL_QID,
            // its sys flag with the commit type, PREPARED_TRANSACTION_OFFSET = the half.
            let p = props(
                &r,
                &[
                    rprop::REAL_TOPIC,
                    rprop::REAL_QID,
                    ROCKLET_ONLY[0],
                    ROCKLET_ONLY[1],
                    ROCKLET_ONLY[2],
                ],
                &[],
            );
            let header = Header {
                sys_flag: (r.header.sys_flag & !sys_flag::TRANSACTION_TYPE_MASK)
                    | sys_flag::TRANSACTION_COMMIT_TYPE,
                prepared_offset: half,
                ..base
            };
            self.log.append(&header, r.body, name, &p)?;
            self.report.committed += 1;
        } else if r.topic == topic::SCHEDULE || r.topic == topic::TIMER {
            // Delivered: REAL_TOPIC/REAL_QID stay, as RocketMQ's delivered copies keep them.
            let mut drop = vec![rprop::TIMER_OUT_MS];
            drop.extend(ROCKLET_ONLY);
            let p = props(&r, &drop, &[]);
            self.log.append(&base, r.body, name, &p)?;
            self.report.delivered_delays += 1;
        } else {
            self.report.leave_out(
                format!(
                    "units of {name} whose record is in topic {} (neither a message of the queue, a committed half nor a delivered delay)",
                    r.topic
                ),
                1,
            );
        }
        Ok(())
    }

    /// Writes the delayed messages not yet delivered, with their due times.
    fn delays(&mut self) -> Res<()> {
        let pending = self.broker.pending_delays(usize::MAX);
        let mut level_next: HashMap<u32, u64> = HashMap::new();
        let mut timer_next = 0u64;
        for d in pending {
            let bytes = read_at(&mut self.broker, d.offset)?;
            let r = view(&bytes)?;
            let level = (r.topic == topic::SCHEDULE).then_some(r.header.queue_id + 1);
            let mut drop = vec![rprop::TIMER_OUT_MS];
            drop.extend(ROCKLET_ONLY);
            match level.filter(|&l| l as usize <= APACHE_DELAY_LEVELS.len()) {
                Some(l) => {
                    // ScheduleMessageService delivers at store time + the level's delay.
                    let delay = APACHE_DELAY_LEVELS[l as usize - 1];
                    let q = level_next.entry(l).or_default();
                    let header = Header {
                        queue_id: l - 1,
                        queue_offset: *q,
                        store_timestamp: d.due.saturating_sub(delay),
                        ..r.header
                    };
                    *q += 1;
                    let p = props(&r, &drop, &[]);
                    self.log.append(&header, r.body, topic::SCHEDULE, &p)?;
                    self.report.pending_level_delays += 1;
                }
                None => {
                    if let Some(l) = level {
                        self.report.notes.push(format!(
                            "a message of delay level {l} (past RocketMQ's 18 levels) goes to the timer at its due time"
                        ));
                    }
                    let due = d.due.to_string();
                    let p = props(&r, &drop, &[(rprop::TIMER_OUT_MS, due.as_str())]);
                    let header = Header {
                        queue_id: 0,
                        queue_offset: timer_next,
                        ..r.header
                    };
                    timer_next += 1;
                    self.log.append(&header, r.body, topic::TIMER, &p)?;
                    self.report.pending_timers += 1;
                }
            }
        }
        if level_next
            .keys()
            .any(|&l| opts_levels_differ(self.broker.config(), l))
        {
            self.report.notes.push(
                "delay levels: the broker's delay_levels differ from RocketMQ's default messageDelayLevel; waiting level messages keep their due time under RocketMQ's default levels".into(),
            );
        }
        Ok(())
    }

    /// The groups and their committed offsets.
    fn offsets(
        &mut self,
        topics: &BTreeMap<String, u32>,
        offsets: &mut BTreeMap<(String, String), BTreeMap<u32, u64>>,
    ) -> Res<BTreeMap<String, bool>> {
        let mut groups = BTreeMap::new();
        for (g, fifo) in self.broker.group_list() {
            self.report.groups += 1;
            if fifo {
                self.report.fifo_groups += 1;
            }
            groups.insert(g, fifo);
        }
        let names: Vec<&str> = topics.keys().map(String::as_str).collect();
        for lag in self.broker.group_lags(&names) {
            let mut at = lag.consumed;
            if lag.pop && lag.inflight > 0 {
                // RocketMQ's pop state is not written: the group resumes at its first message
                // not acked, so those in flight are delivered again (and with them the ones
                // after it that were acked: at least once, never lost).
                if let Some((first, _)) =
                    self.broker
                        .pop_position(&lag.group, &lag.topic, lag.queue_id)
                {
                    at = first;
                    let again = lag.consumed.saturating_sub(first);
                    self.report.notes.push(format!(
                        "group {} had {} messages received (pop) and not acked in {}:{}: it resumes at queue offset {first}, so they and {} acked after them are delivered again",
                        lag.group,
                        lag.inflight,
                        lag.topic,
                        lag.queue_id,
                        again.saturating_sub(lag.inflight)
                    ));
                }
            }
            let e = offsets.entry((lag.topic, lag.group)).or_default();
            let o = e.entry(lag.queue_id).or_insert(at);
            *o = (*o).min(at);
        }
        self.report.consumer_offsets = offsets
            .iter()
            .filter(|((_, g), _)| g != CHECKER_GROUP)
            .map(|(_, q)| q.len() as u64)
            .sum();
        Ok(groups)
    }
}

fn opts_levels_differ(cfg: &Config, level: u32) -> bool {
    cfg.delay_levels.get(level as usize - 1).copied()
        != APACHE_DELAY_LEVELS.get(level as usize - 1).copied()
}
