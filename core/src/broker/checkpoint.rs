//! Checkpoints: the core's state at a durable log offset, so an open replays only the log
//! after it instead of the whole retained log.
//!
//! A checkpoint is taken in two phases. [`Broker::begin_checkpoint`], on the thread that
//! drives the broker (the host calls it on its schedule: every so many bytes of log or
//! seconds), writes the consume queues' tails and the index's pending entries to their
//! files (buffered writes, no sync) and copies, as a [`CheckpointDraft`], what the log
//! below its end `C` built (encoded off that thread, by whoever writes it). The host then detaches a sync of everything written so far that
//! carries the draft (`FileStorage::detach_checkpoint`); off that thread it runs the sync
//! and, only when it succeeded, replaces the storage's checkpoint with the draft (atomic
//! replace, fsynced, directory fsynced). A failed sync fails the broker as any failed
//! detached sync ([`Broker::sync_failed`]: never retried) and the draft is dropped.
//! [`Broker::checkpoint`] does both phases on the calling thread (a clean stop: nothing
//! waits on it). What the draft holds: topics, queues (their ends and unwritten tails), groups,
//! committed offsets, pending transactions and delays, in-flight receipts and FIFO holds
//! with their timers, pop cursors, the moved-record map, carried units and keys, epochs,
//! deleted topic names, the replayed counters and the newest index file's slots.
//!
//! Why the writes between the phases are safe. The checkpoint file names `C` only once a
//! sync *started after* the draft was taken succeeded, so everything the draft depends on
//! is durable by then: the log below `C` (appends only; a new segment file is created only
//! after everything before it is durable) and every side-file byte written up to the
//! draft. That sync also covers whatever was written after the draft, and the core keeps
//! writing meanwhile — but a checkpoint never depended on the state of any byte written
//! after `C` (the synchronous checkpoint had the same exposure: later syncs and the page
//! cache make such writes durable before a crash too). Side file by side file:
//!
//! - Consume-queue files (`consumequeue/<topic>/<queue>/<first offset>`) are append-only
//!   units at fixed positions: units after the draft's flushed count are cut by the open
//!   from `C` ([`Broker::restore`]) and rewritten by replaying the log after `C`, the same
//!   bytes a full replay writes. A file created after `C` is removed by the open.
//! - The index: entries of the newest file after the draft's count are cut, files numbered
//!   after the draft's newest are removed, and replay adds them again. The one write in
//!   place is a file's slot table (its first 2 MiB), written when the file is sealed — if
//!   that happened after `C`, the newest file at `C` holds slots pointing at entries the
//!   open cut. The snapshot does not depend on them: the newest file's slots are read from
//!   memory (the draft holds them), never from its file, and sealing it again writes all
//!   of them over — which the replay after `C` does, as the sync that made the seal durable
//!   made the log records behind it durable too.
//! - Deletions after `C` (a topic deleted, its queue files removed; retention): a file the
//!   draft counts on that is gone fails the open's length checks and the whole log is
//!   replayed; retention changes `LOG_START`, which the draft names by CRC, so a draft
//!   taken before it is never used.
//! - `CHECKPOINT` itself: the host replaces or removes it only through the storage, which
//!   makes a detached draft taken before write nothing (a clean stop's checkpoint, a
//!   replica cutting its log below `C`), so an older draft never lands over a newer one.
//!
//! The checkpoint proptest (`checkpoint_tests.rs`) takes drafts, runs requests, time and
//! retention before completing (or failing) their syncs, and crashes between the phases,
//! with syncs that make the bytes written after the draft durable or not
//! (`CrashStorage::complete_checkpoint`): every open from a checkpoint equals a full replay.
//!
//! Only what replaying the log would rebuild is kept: state a run holds without a record
//! (producers online, outstanding checks, round-robin positions, held replies, counters of
//! requests) starts as a full replay leaves it, so an open from a checkpoint and an open that
//! replays everything give the same broker.
//!
//! On open ([`Broker::open`]) the newest checkpoint is used when it is whole (magic,
//! version, CRC) and still names this log: the record of where the log starts is the one
//! it was taken under (retention after it changes that record: the checkpoint is not
//! used), `C` is at or above the log start and below any recorded storage failure, every
//! segment below `C` is there (the segment list from the log start must be the one the
//! checkpoint names, and the one holding `C` must reach it), and every side file it covers
//! is as long as it says. Then the side files are cut back to what it covers (units and
//! entries after `C` come back from replay) and recovery reads only the log from `C` on:
//! a torn tail after it is cut and damage refused as ever. Otherwise the whole log is
//! replayed, as before checkpoints, and [`RecoveryReport::checkpoint_unused`] says why. A
//! repair ([`Broker::open_repairing`]) always replays everything.
//!
//! [`RecoveryReport::checkpoint_unused`]: crate::RecoveryReport::checkpoint_unused

use super::index::{file_name as index_file_name, ENTRY_BYTES, SLOTS_BYTES};
use super::*;

#[cfg(test)]
mod digest;
mod format;

pub(crate) use format::covered_offset;
#[cfg(test)]
pub(super) use format::encode_version;
#[cfg(feature = "std")]
pub(crate) use format::whole_covers;
pub(super) use format::{decode, encode};

/// The version this build writes; it reads this one and version 1. Version 2's body is
/// version 1's followed by the topics' order settings ([`Snapshot::orders`]).
pub(super) const CHECKPOINT_VERSION: u32 = 2;

/// A queue: (topic, queue id, base, end, next, directory, tail units as (record, size, tag
/// hash)).
type QueueRow = (u32, u32, u64, u64, u64, String, Vec<(u64, u32, i32)>);
/// A pending transaction: (id, record, deadline, size, queue, tag hash, checks, group).
type TxnRow = (u64, u64, Millis, u32, u32, i32, u16, u32);
/// A pending delay: (key, record, due, size, queue, tag hash).
type DelayRow = (u64, u64, Millis, u32, u32, i32);
/// A receiving group's queue: (group, queue, next, in flight as (queue offset, attempt,
/// generation, since), ready).
type PopRow = (u32, u32, u64, Vec<(u64, u32, u64, u64)>, Vec<u64>);
/// Where moved records sit: (record, queue, queue offset).
type MovedRows = Vec<(u64, u32, u64)>;

/// What a checkpoint holds (postcard-encoded after its header).
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq)]
pub(super) struct Snapshot {
    /// The log offset it covers: every record below it is applied, nothing at or after.
    pub(super) covers: u64,
    /// The segment before `covers` ends there (closed by its blank): appends go to a new one.
    pub(super) closed: bool,
    /// Bases of the segments below `covers`, from the log start.
    pub(super) segments: Vec<u64>,
    pub(super) log_start: u64,
    /// CRC of the record of where the log starts it was taken under (`None`: there was none).
    pub(super) log_start_crc: Option<u32>,
    /// The latest store time of a record below `covers`.
    pub(super) applied_at: Millis,
    /// Topics: (name, queues, deleted).
    pub(super) topics: Vec<(String, Vec<u32>, bool)>,
    pub(super) topic_ids: Vec<(String, u32)>,
    pub(super) queues: Vec<QueueRow>,
    /// Groups: (name, FIFO).
    pub(super) groups: Vec<(String, bool)>,
    pub(super) group_ids: Vec<(String, u32)>,
    pub(super) txns: Vec<TxnRow>,
    pub(super) delays: Vec<DelayRow>,
    /// Committed offsets: (group, queue, offset).
    pub(super) offsets: Vec<(u32, u32, u64)>,
    /// [`Moved`]: its ascending part and the rest, (record, queue, queue offset).
    pub(super) moved: (MovedRows, MovedRows),
    pub(super) pops: Vec<PopRow>,
    /// Live redelivery timers: (until, group, queue, queue offset, generation).
    pub(super) pop_timers: Vec<PopTimer>,
    pub(super) resolved: Vec<(u64, bool)>,
    /// The counters replay counts ([`replayed_stats`]).
    pub(super) stats: Vec<u64>,
    pub(super) epochs: Vec<(u64, u64)>,
    pub(super) retired_total: u64,
    pub(super) carried_total: u64,
    /// Carried units: (key, queue, record, size, tag hash).
    pub(super) carried_units: Vec<(u64, u32, u64, u32, i32)>,
    pub(super) carried_keys: Vec<(u64, u64)>,
    pub(super) deleted_names: Vec<(String, u32)>,
    /// The index: its files (number, newest offset), the newest file's slots and entry
    /// count, and its entries not yet written.
    pub(super) index_files: Vec<(u64, u64)>,
    pub(super) index_slots: Vec<u32>,
    pub(super) index_count: u32,
    pub(super) index_pending: Vec<(u32, u32, u64)>,
    /// Topics' order settings: (topic, order, conf). Encoded after the rest (version 2 on):
    /// a version 1 body has none.
    #[serde(skip)]
    pub(super) orders: Vec<(String, bool, String)>,
}

impl Snapshot {
    /// Whether every number in it that names a topic, queue or group names one it holds
    /// (a checkpoint whose CRC is right but whose contents are not, from a faulty build, is
    /// refused rather than trusted).
    fn consistent(&self) -> Result<(), String> {
        let (topics, queues, groups) = (
            self.topics.len() as u32,
            self.queues.len() as u32,
            self.groups.len() as u32,
        );
        let q_ok = |q: u32| q < queues;
        let g_ok = |g: u32| g < groups;
        let bad = |what: &str| Err(alloc::format!("{what} names no such entry"));
        if self.topics.iter().any(|t| !t.1.iter().all(|&q| q_ok(q))) {
            return bad("a topic's queue");
        }
        if self.topic_ids.iter().any(|t| t.1 >= topics) || self.group_ids.iter().any(|g| !g_ok(g.1))
        {
            return bad("a name");
        }
        for (t, _, base, end, next, _, tail) in &self.queues {
            if *t >= topics || base > end || end - base < tail.len() as u64 || next < base {
                return Err("a queue's bounds do not add up".into());
            }
        }
        if self.txns.iter().any(|t| !q_ok(t.4) || !g_ok(t.7))
            || self.delays.iter().any(|d| !q_ok(d.4))
            || self.offsets.iter().any(|o| !g_ok(o.0) || !q_ok(o.1))
            || self.pops.iter().any(|p| !g_ok(p.0) || !q_ok(p.1))
            || self.pop_timers.iter().any(|t| !g_ok(t.1) || !q_ok(t.2))
            || self.carried_units.iter().any(|c| !q_ok(c.1))
            || self.moved.0.iter().chain(&self.moved.1).any(|m| !q_ok(m.1))
        {
            return bad("a pending, offset, delivery or moved record");
        }
        let slots_ok =
            self.index_slots.is_empty() || self.index_slots.len() == INDEX_SLOTS as usize;
        if !slots_ok
            || (self.index_pending.len() as u64) > u64::from(self.index_count)
            || self.index_count > INDEX_ENTRIES
            || (!self.index_files.is_empty() && self.index_slots.is_empty())
        {
            return Err("the index's counts do not add up".into());
        }
        Ok(())
    }
}

/// The counters a replay of the log counts (the others count requests of a run).
fn replayed_stats(s: &Stats) -> Vec<u64> {
    alloc::vec![
        s.messages_stored,
        s.halves_stored,
        s.committed,
        s.rolled_back,
        s.check_max_reached,
        s.halves_expired,
        s.delayed_stored,
        s.delayed_delivered,
        s.acked,
    ]
}

fn restore_stats(v: &[u64]) -> Stats {
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    Stats {
        messages_stored: at(0),
        halves_stored: at(1),
        committed: at(2),
        rolled_back: at(3),
        check_max_reached: at(4),
        halves_expired: at(5),
        delayed_stored: at(6),
        delayed_delivered: at(7),
        acked: at(8),
        ..Stats::default()
    }
}

/// The consume-queue file holding queue offset `o` of the queue in `dir`, and how many of
/// its bytes hold units below `upto`.
fn cq_file(dir: &str, o: u64, upto: u64) -> (String, u64) {
    let first = o / CQ_FILE_UNITS * CQ_FILE_UNITS;
    let name = alloc::format!("{dir}/{:020}", first * CQ_UNIT_BYTES);
    let units = upto.min(first + CQ_FILE_UNITS).saturating_sub(first);
    (name, units * CQ_UNIT_BYTES)
}

/// A checkpoint taken ([`Broker::begin_checkpoint`]) and not yet recorded: a copy of the
/// state, encoded by whoever writes it ([`CheckpointDraft::encode`], off the core's thread),
/// and recorded only after a sync started after it was taken succeeded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointDraft {
    snap: Snapshot,
}

impl CheckpointDraft {
    /// The log offset it covers: a sync must make the log durable below it.
    #[must_use]
    pub fn covers(&self) -> u64 {
        self.snap.covers
    }
    /// Its bytes, for [`Storage::record_checkpoint`] (the header, then the postcard body).
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        encode(&self.snap)
    }
}

impl<S: Storage> Broker<S> {
    /// Records a checkpoint of the core's state, all of it on this thread (see the module
    /// doc of [`crate::broker`]'s `checkpoint`): [`Broker::begin_checkpoint`], a sync of the
    /// log and every side file, then the storage's checkpoint replaced by the draft
    /// ([`Storage::record_checkpoint`]). The next open replays only what is appended after
    /// it. Returns the offset it covers; `None` when there was nothing to cover (an empty
    /// log) or the storage keeps no checkpoint. For a clean stop, and hosts with nothing to
    /// run a sync elsewhere; a server detaches the sync and the write instead (see the
    /// module doc).
    ///
    /// A failed sync fails the broker, as [`Broker::sync`]; a failed write of the checkpoint
    /// only returns the error (the previous checkpoint stays whole).
    pub fn checkpoint(&mut self) -> Res<Option<u64>, S> {
        let draft = self.begin_checkpoint()?;
        self.sync()?;
        // The side files' writes, whether or not the log had anything to sync.
        if let Err(e) = self.log.storage.sync() {
            self.fail(alloc::format!("sync failed: {e}"));
            return Err(Error::Storage(e));
        }
        let Some(draft) = draft else {
            return Ok(None);
        };
        match self.log.storage.record_checkpoint(&draft.encode()) {
            Ok(true) => Ok(Some(draft.covers())),
            Ok(false) => Ok(None),
            Err(e) => Err(Error::Storage(e)),
        }
    }

    /// The part of a checkpoint that runs on the thread that drives the broker: writes
    /// the consume queues' tails and the index's pending entries to their files (buffered
    /// writes, no sync) and copies the state below the log's end (encoded later, by the
    /// writer). Its cost is copying what is live (bounded as the crate doc says; the
    /// index's newest slots, 2 MiB, the largest part), never the log's size, and no sync.
    ///
    /// The draft may be recorded only once a sync started after this call succeeded
    /// (everything written so far, log and side files, durable): the host detaches one
    /// (`FileStorage::detach_checkpoint` carries the draft and writes it after its sync),
    /// and on success reports the sync with [`Broker::synced_to`]`(draft.covers())`. A
    /// failed sync is reported with [`Broker::sync_failed`] and the draft dropped. `None`:
    /// an empty log, nothing to cover.
    pub fn begin_checkpoint(&mut self) -> Res<Option<CheckpointDraft>, S> {
        self.check_failed()?;
        self.flush_tails();
        // A failed write (a full disk) keeps the entries: they go in the checkpoint.
        let _ = self.index.flush(&mut self.log.storage);
        let covers = self.log.end();
        if covers == 0 || covers <= self.log.start() {
            return Ok(None);
        }
        let log_start_crc = self
            .log
            .storage
            .log_start()
            .map_err(Error::Storage)?
            .map(|b| crc32fast::hash(&b));
        Ok(Some(CheckpointDraft {
            snap: self.snapshot(log_start_crc),
        }))
    }

    /// The state below the log's end, as a checkpoint holds it.
    pub(super) fn snapshot(&self, log_start_crc: Option<u32>) -> Snapshot {
        let covers = self.log.end();
        let bases = self.log.segment_bases();
        let mut topic_ids: Vec<(String, u32)> = self
            .topic_ids
            .iter()
            .map(|(k, &v)| (k.clone(), v))
            .collect();
        topic_ids.sort_unstable();
        let mut group_ids: Vec<(String, u32)> = self
            .group_ids
            .iter()
            .map(|(k, &v)| (k.clone(), v))
            .collect();
        group_ids.sort_unstable();
        // A parked transaction is due at the deadline it was parked at (no record says it
        // was parked: replay gives it that one).
        let mut parked: BTreeMap<u64, Millis> = BTreeMap::new();
        for g in &self.groups {
            parked.extend(g.parked.iter().copied());
        }
        let txns = self
            .txns
            .iter()
            .map(|t| {
                let deadline = match t.deadline {
                    // (Never without its group's entry; were it so, due now: a check parks
                    // it again while no producer is online.)
                    PARKED => parked.get(&t.offset).copied().unwrap_or(self.now),
                    d => d,
                };
                (
                    t.offset, t.record, deadline, t.size, t.queue, t.tag_hash, t.checks, t.group,
                )
            })
            .collect();
        let delays = self
            .delays
            .iter()
            .map(|d| (d.offset, d.record, d.due, d.size, d.queue, d.tag_hash))
            .collect();
        let mut offsets: Vec<(u32, u32, u64)> =
            self.offsets.iter().map(|(&(g, q), &o)| (g, q, o)).collect();
        offsets.sort_unstable();
        let mut pops: Vec<PopRow> = self
            .pops
            .iter()
            .map(|(&(g, q), p)| {
                (
                    g,
                    q,
                    p.next,
                    p.inflight
                        .iter()
                        .map(|(&o, i)| (o, i.attempt, i.generation, i.since))
                        .collect(),
                    p.ready.iter().copied().collect(),
                )
            })
            .collect();
        pops.sort_unstable_by_key(|p| (p.0, p.1));
        let mut pop_timers: Vec<PopTimer> = self
            .pop_timers
            .iter()
            .map(|Reverse(t)| *t)
            .filter(|&(_, g, q, qoff, gen)| {
                self.pops
                    .get(&(g, q))
                    .and_then(|p| p.inflight.get(&qoff))
                    .is_some_and(|i| i.generation == gen)
            })
            .collect();
        pop_timers.sort_unstable();
        let mut deleted_names: Vec<(String, u32)> = self
            .deleted_names
            .iter()
            .map(|(k, &v)| (k.clone(), v))
            .collect();
        deleted_names.sort_unstable();
        Snapshot {
            covers,
            closed: covers > 0 && bases.last() == Some(&covers) && bases.len() > 1,
            segments: bases.iter().copied().filter(|&b| b < covers).collect(),
            log_start: self.log.start(),
            log_start_crc,
            applied_at: self.applied_at,
            topics: self
                .topics
                .iter()
                .map(|t| (t.name.clone(), t.queues.clone(), t.deleted))
                .collect(),
            topic_ids,
            queues: self
                .queues
                .iter()
                .map(|q| {
                    (
                        q.topic,
                        q.queue_id,
                        q.base,
                        q.end,
                        q.next,
                        q.dir.clone(),
                        q.tail
                            .iter()
                            .map(|u| (u.offset, u.size, u.tag_hash))
                            .collect(),
                    )
                })
                .collect(),
            groups: self
                .groups
                .iter()
                .map(|g| (g.name.clone(), g.fifo))
                .collect(),
            group_ids,
            txns,
            delays,
            offsets,
            moved: (
                self.moved.ascending.clone(),
                self.moved
                    .rest
                    .iter()
                    .map(|(&o, &(q, qo))| (o, q, qo))
                    .collect(),
            ),
            pops,
            pop_timers,
            resolved: self.resolved.iter().copied().collect(),
            stats: replayed_stats(&self.stats),
            epochs: self.epochs.clone(),
            retired_total: self.retired_total,
            carried_total: self.carried_total,
            carried_units: self
                .carried_units
                .iter()
                .map(|(&k, &(q, u))| (k, q, u.offset, u.size, u.tag_hash))
                .collect(),
            carried_keys: self.carried_keys.iter().map(|(&a, &b)| (a, b)).collect(),
            deleted_names,
            index_files: self.index.files.clone(),
            index_slots: self.index.slots.clone(),
            index_count: self.index.count,
            index_pending: self.index.pending.clone(),
            orders: self.order_rows(),
        }
    }

    /// On open: whether the checkpoint `bytes` can be used for this log, read-only (see the
    /// module doc). `Ok(Err(why))`: it cannot, and why.
    pub(super) fn usable_checkpoint(
        &mut self,
        bytes: &[u8],
        log_start: Option<&[u8]>,
    ) -> Res<Result<Snapshot, String>, S> {
        let snap = match decode(bytes) {
            Ok(s) => s,
            Err(why) => return Ok(Err(why)),
        };
        if let Err(why) = snap.consistent() {
            return Ok(Err(alloc::format!("checkpoint inconsistent: {why}")));
        }
        let crc = log_start.map(crc32fast::hash);
        if crc != snap.log_start_crc {
            return Ok(Err(alloc::format!(
                "the record of where the log starts (LOG_START) changed after the checkpoint \
                 at log offset {} was taken (retention ran since)",
                snap.covers
            )));
        }
        let st = &mut self.log.storage;
        if let Some(failed) = st.failed_at().map_err(Error::Storage)? {
            if failed < snap.covers {
                return Ok(Err(alloc::format!(
                    "the last run recorded a storage failure at log offset {failed}, below \
                     the checkpoint's {}",
                    snap.covers
                )));
            }
        }
        let segments: Vec<u64> = st
            .segments()
            .map_err(Error::Storage)?
            .into_iter()
            .filter(|&b| b >= snap.log_start && b < snap.covers)
            .collect();
        if segments != snap.segments {
            return Ok(Err(alloc::format!(
                "the segment files below log offset {} are not the ones the checkpoint names \
                 ({} of them, {} expected)",
                snap.covers,
                segments.len(),
                snap.segments.len()
            )));
        }
        if let Some(&last) = segments.last() {
            let len = st.len(last).map_err(Error::Storage)?;
            if !snap.closed && len < snap.covers - last {
                return Ok(Err(alloc::format!(
                    "segment {last:020} holds {len} bytes, but the checkpoint covers it up to \
                     position {}",
                    snap.covers - last
                )));
            }
        }
        // Every side file it covers is there, as long as it says.
        for (_, _, base, end, _, dir, tail) in &snap.queues {
            let flushed = end - tail.len() as u64;
            if flushed <= *base {
                continue;
            }
            let mut o = *base;
            while o < flushed {
                let (name, need) = cq_file(dir, o, flushed);
                let have = st.side_len(&name).map_err(Error::Storage)?.unwrap_or(0);
                if have < need {
                    return Ok(Err(alloc::format!(
                        "consume queue file {name} holds {have} bytes, the checkpoint covers \
                         {need}"
                    )));
                }
                o = (o / CQ_FILE_UNITS + 1) * CQ_FILE_UNITS;
            }
        }
        let newest = snap.index_files.last().map(|f| f.0);
        let flushed = snap.index_count - snap.index_pending.len() as u32;
        for &(n, _) in &snap.index_files {
            let need = if Some(n) == newest {
                if flushed == 0 {
                    continue;
                }
                SLOTS_BYTES + u64::from(flushed) * ENTRY_BYTES
            } else {
                SLOTS_BYTES
            };
            let name = index_file_name(n);
            let have = st.side_len(&name).map_err(Error::Storage)?.unwrap_or(0);
            if have < need {
                return Ok(Err(alloc::format!(
                    "index file {name} holds {have} bytes, the checkpoint covers {need}"
                )));
            }
        }
        Ok(Ok(snap))
    }

    /// On open, with a checkpoint [`Broker::usable_checkpoint`] accepted: cuts the side
    /// files back to what it covers and takes its state. The log from `covers` on is replayed
    /// after this.
    pub(super) fn restore(&mut self, snap: Snapshot) -> Res<(), S> {
        let st = &mut self.log.storage;
        // Consume queues: units after the checkpoint go (replay writes them again); files of
        // queues it does not know go.
        let flushed_of: BTreeMap<&str, u64> = snap
            .queues
            .iter()
            .map(|(_, _, _, end, _, dir, tail)| (dir.as_str(), end - tail.len() as u64))
            .collect();
        for name in st.side_list(CQ_DIR).map_err(Error::Storage)? {
            let (dir, file) = name.rsplit_once('/').unwrap_or(("", ""));
            let first = file.parse::<u64>().ok().map(|b| b / CQ_UNIT_BYTES);
            match (flushed_of.get(dir), first) {
                (Some(&flushed), Some(first)) if first < flushed => {
                    let keep = (flushed - first).min(CQ_FILE_UNITS) * CQ_UNIT_BYTES;
                    if st.side_len(&name).map_err(Error::Storage)?.unwrap_or(0) > keep {
                        st.side_truncate(&name, keep).map_err(Error::Storage)?;
                    }
                }
                _ => st.side_remove(&name).map_err(Error::Storage)?,
            }
        }
        // The index: entries after the checkpoint go from its newest file; newer files go.
        let newest = snap.index_files.last().map(|f| f.0);
        let flushed = snap.index_count - snap.index_pending.len() as u32;
        for name in st.side_list(INDEX_DIR).map_err(Error::Storage)? {
            let n = name.rsplit('/').next().and_then(|f| f.parse::<u64>().ok());
            match n {
                Some(n) if Some(n) == newest => {
                    let keep = SLOTS_BYTES + u64::from(flushed) * ENTRY_BYTES;
                    if st.side_len(&name).map_err(Error::Storage)?.unwrap_or(0) > keep {
                        st.side_truncate(&name, keep).map_err(Error::Storage)?;
                    }
                }
                Some(n) if snap.index_files.iter().any(|f| f.0 == n) => {}
                _ => st.side_remove(&name).map_err(Error::Storage)?,
            }
        }

        self.applied_at = snap.applied_at;
        self.now = self.now.max(snap.applied_at);
        self.topics = snap
            .topics
            .into_iter()
            .map(|(name, queues, deleted)| Topic {
                kind: topic::classify(&name),
                name,
                queues,
                round_robin: 0,
                deleted,
                order: false,
                order_conf: String::new(),
            })
            .collect();
        self.topic_ids = snap.topic_ids.into_iter().collect();
        self.queues = snap
            .queues
            .into_iter()
            .map(|(topic, queue_id, base, end, next, dir, tail)| {
                let mut tail: Vec<CqUnit> = tail
                    .into_iter()
                    .map(|(offset, size, tag_hash)| CqUnit {
                        offset,
                        size,
                        tag_hash,
                    })
                    .collect();
                tail.reserve(CQ_TAIL_UNITS.saturating_sub(tail.len()));
                Queue {
                    topic,
                    queue_id,
                    base,
                    end,
                    tail,
                    next,
                    visible: end - base,
                    notify: false,
                    dir,
                }
            })
            .collect();
        self.groups = snap
            .groups
            .into_iter()
            .map(|(name, fifo)| Group {
                name,
                online: false,
                parked: Vec::new(),
                fifo,
            })
            .collect();
        self.group_ids = snap.group_ids.into_iter().collect();
        for (offset, record, deadline, size, queue, tag_hash, checks, group) in snap.txns {
            self.txns.insert(PendingTxn {
                offset,
                record,
                deadline,
                size,
                queue,
                tag_hash,
                checks,
                group,
                // No check of this run is outstanding.
                answered: true,
            });
        }
        for (offset, record, due, size, queue, tag_hash) in snap.delays {
            self.delays.insert(PendingDelay {
                offset,
                record,
                due,
                size,
                queue,
                tag_hash,
            });
        }
        self.offsets = snap
            .offsets
            .into_iter()
            .map(|(g, q, o)| ((g, q), o))
            .collect();
        self.moved = Moved {
            ascending: snap.moved.0,
            rest: snap
                .moved
                .1
                .into_iter()
                .map(|(o, q, qo)| (o, (q, qo)))
                .collect(),
        };
        self.pops = snap
            .pops
            .into_iter()
            .map(|(g, q, next, inflight, ready)| {
                let pq = PopQueue {
                    next,
                    inflight: inflight
                        .into_iter()
                        .map(|(o, attempt, generation, since)| {
                            (
                                o,
                                Inflight {
                                    attempt,
                                    generation,
                                    since,
                                },
                            )
                        })
                        .collect(),
                    ready: ready.into_iter().collect(),
                };
                ((g, q), pq)
            })
            .collect();
        self.pop_timers = snap.pop_timers.into_iter().map(Reverse).collect();
        self.resolved.clear();
        for r in snap
            .resolved
            .into_iter()
            .rev()
            .take(self.resolved.capacity())
            .rev()
        {
            let _ = self.resolved.push_back(r);
        }
        self.stats = restore_stats(&snap.stats);
        self.epochs = snap.epochs;
        self.retired_total = snap.retired_total;
        self.carried_total = snap.carried_total;
        self.carried_units = snap
            .carried_units
            .into_iter()
            .map(|(k, q, offset, size, tag_hash)| {
                (
                    k,
                    (
                        q,
                        CqUnit {
                            offset,
                            size,
                            tag_hash,
                        },
                    ),
                )
            })
            .collect();
        self.carried_keys = snap.carried_keys.into_iter().collect();
        self.deleted_names = snap.deleted_names.into_iter().collect();
        self.index.files = snap.index_files;
        self.index.slots = snap.index_slots;
        self.index.count = snap.index_count;
        self.index.pending = snap.index_pending;
        for (name, order, conf) in &snap.orders {
            self.apply_topic_order(name, *order, conf);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MemStorage;

    #[test]
    fn a_checkpoint_whose_crc_is_right_but_whose_numbers_are_not_is_not_used() {
        let cfg = Config::default();
        let mut b = Broker::open(cfg.clone(), MemStorage::new(), 0).unwrap();
        for i in 0..10 {
            let m = NewMessage::new("T", alloc::format!("m{i}"));
            b.execute(
                1,
                Request::Send {
                    messages: alloc::vec![m],
                },
            )
            .unwrap();
        }
        b.checkpoint().unwrap().unwrap();
        let mut snap = b.snapshot(None);
        snap.queues[0].0 = 9_999;
        let mut storage = b.into_storage();
        storage.record_checkpoint(&encode(&snap)).unwrap();
        let b = Broker::open(cfg, storage, 0).unwrap();
        let r = b.recovery_report();
        assert_eq!(r.checkpoint, None);
        let why = r.checkpoint_unused.clone().unwrap();
        assert!(why.contains("checkpoint inconsistent"), "{why}");
        assert_eq!(
            b.topic_info("T")
                .unwrap()
                .queues
                .iter()
                .map(|q| q.1)
                .sum::<u64>(),
            10
        );
    }
}
