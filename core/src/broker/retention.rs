//! Log retention: retiring the oldest sealed segments without losing anything owed.
//!
//! A run ([`Broker::retain`]) picks a cut — a segment base: every segment below it goes —
//! and then, in this order:
//!
//! 1. **Carry forward.** Every pending half message and undelivered delayed message whose
//!    record is below the cut is written again at the end of the log, with
//!    [`prop::CARRIED`] naming the record it carries: the transaction keeps its id (a
//!    commit, rollback or check answer naming the old offset still finds it) and its check
//!    count, the delay its key and due time.
//! 2. **Sync** the log.
//! 3. **Record where the log starts** ([`Storage::record_log_start`], atomically): the cut,
//!    and what replaying only the segments from there on cannot rebuild — every topic with
//!    its queues, declared groups, committed offsets, each queue's first retained offset,
//!    the replication epochs.
//! 4. The core drops the retired segments from its list and the state that pointed into
//!    them; the host deletes their files (off the core's thread: [`Retention::retired`]).
//!
//! A crash before 3 leaves the whole log and records that carry what is still there (a
//! replay keeps one pending entry per key); after 3, an open starts at the cut, removes the
//! segments below it that are still there, and refuses (as ever) a segment missing from the
//! cut on.
//!
//! Committed and delivered messages a queue keeps (at or after its first retained offset)
//! whose record goes are carried forward too: their record is written again with
//! [`prop::CARRIED_UNIT`] naming the transaction or delay they were, and their unit reads
//! the copy; the record of where the log starts lists them, so replaying from there puts
//! each in its queue when the op that committed or delivered it comes by.
//!
//! What is not carried holds the cut back instead ([`RetentionHold`]): messages out on
//! receive (in flight, ready again, FIFO holds) — their invisible time ends, so the hold
//! does too. A replica writes nothing of its own, so it carries nothing: pending halves and
//! delays and such committed messages hold its cut until its master carried them.

use super::*;

/// What a retention run did ([`Broker::retain`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    /// Where the log starts now.
    pub start: u64,
    /// Bases of the segments retired by this run: the core no longer reads them and the
    /// storage let go of them. Delete them (a host deletes files off its core thread; a
    /// simple host calls [`Storage::remove`] on each).
    pub retired: Vec<u64>,
    /// Records carried forward (pending halves and delays, committed and delivered messages
    /// the queues keep).
    pub carried: u64,
    /// Bytes of them.
    pub carried_bytes: u64,
    /// Why the cut stopped below where it was asked to go, if it did.
    pub held: Option<RetentionHold>,
}

/// What held a retention run's cut below the offset asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RetentionHold {
    /// Only what is durable (and, under replicated acks, replicated) may go, and never the
    /// segment taking appends.
    NotDurable { upto: u64 },
    /// A message out on receive (in flight or ready again) has its record here.
    InFlight { offset: u64 },
    /// A committed or delivered message a queue still holds after its first retained
    /// message has its record here.
    Moved { offset: u64 },
    /// A replica carries nothing: a pending half or delay has its record here.
    Pending { offset: u64 },
    /// The storage keeps no record of where the log starts.
    Unsupported,
    /// The run carried what it may ([`MAX_CARRY_BYTES`]); the next one goes on from the
    /// record here.
    CarryBudget { offset: u64 },
}

/// Most bytes of owed records one retention run carries forward (it runs on the core's
/// thread); what is left holds the cut for the next run.
pub const MAX_CARRY_BYTES: u64 = 4 << 20;

/// A record a run carries forward.
#[derive(Clone, Copy)]
enum Owed {
    /// A pending half: its transaction id and checks.
    Half(u64, u16),
    /// An undelivered delay: its key.
    Delay(u64),
    /// A committed or delivered message a queue keeps: its transaction or delay key.
    Unit(u64),
}

/// The durable record of where the log starts ([`Storage::log_start`]), postcard-encoded.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct LogStart {
    /// [`LOG_START_VERSION`].
    pub(super) version: u32,
    /// The base of the oldest segment kept.
    pub(super) start: u64,
    /// Topics with their queue counts.
    pub(super) topics: Vec<(String, u32)>,
    /// Declared groups: (name, FIFO).
    pub(super) groups: Vec<(String, bool)>,
    /// Committed offsets: (group, topic, queue id, offset).
    pub(super) offsets: Vec<(String, String, u32, u64)>,
    /// Consume queues: (topic, queue id, first retained queue offset).
    pub(super) queues: Vec<(String, u32, u64)>,
    /// Replication epochs: (epoch, offset of its first record).
    pub(super) epochs: Vec<(u64, u64)>,
    /// Carried-forward committed or delivered messages the queues keep: (key of the
    /// transaction or delay, topic, queue id, record, size, tag hash, queue offset). Those
    /// at the head of their queue's retained part go back in on open, before replay: the op
    /// that committed or delivered them may be below the cut, never to be replayed. (A
    /// version 1 record has no queue offset: [`UNPLACED`].)
    pub(super) units: Vec<(u64, String, u32, u64, u32, i32, u64)>,
    /// Segments retired and bytes carried forward, all runs together.
    pub(super) retired_total: u64,
    pub(super) carried_total: u64,
    /// Receiving groups (pop): (group, topic, queue id, next queue offset to hand out). Their
    /// receive records below the cut go with it, so a reopen would start them again at the
    /// queue's first offset and deliver what they acked once more (version 2 on).
    pub(super) pops: Vec<(String, String, u32, u64)>,
    /// Topics' order settings: (topic, order, conf) (version 3 on: their records below the
    /// cut go with it).
    pub(super) orders: Vec<(String, bool, String)>,
}

/// The queue offset of a carried unit a version 1 record names (it kept none): replay puts
/// the unit in, as that version's builds did.
const UNPLACED: u64 = u64::MAX;

/// Version 2 of [`LogStart`]: the same fields but `orders`.
#[derive(serde::Deserialize)]
struct LogStartV2 {
    version: u32,
    start: u64,
    topics: Vec<(String, u32)>,
    groups: Vec<(String, bool)>,
    offsets: Vec<(String, String, u32, u64)>,
    queues: Vec<(String, u32, u64)>,
    epochs: Vec<(u64, u64)>,
    units: Vec<(u64, String, u32, u64, u32, i32, u64)>,
    retired_total: u64,
    carried_total: u64,
    pops: Vec<(String, String, u32, u64)>,
}

impl From<LogStartV2> for LogStart {
    fn from(v: LogStartV2) -> Self {
        LogStart {
            version: v.version,
            start: v.start,
            topics: v.topics,
            groups: v.groups,
            offsets: v.offsets,
            queues: v.queues,
            epochs: v.epochs,
            units: v.units,
            retired_total: v.retired_total,
            carried_total: v.carried_total,
            pops: v.pops,
            orders: Vec::new(),
        }
    }
}

/// Version 1 of [`LogStart`]: the same fields but `pops` and `orders`.
#[derive(serde::Deserialize)]
struct LogStartV1 {
    version: u32,
    start: u64,
    topics: Vec<(String, u32)>,
    groups: Vec<(String, bool)>,
    offsets: Vec<(String, String, u32, u64)>,
    queues: Vec<(String, u32, u64)>,
    epochs: Vec<(u64, u64)>,
    units: Vec<(u64, String, u32, u64, u32, i32)>,
    retired_total: u64,
    carried_total: u64,
}

impl From<LogStartV1> for LogStart {
    fn from(v: LogStartV1) -> Self {
        LogStart {
            version: v.version,
            start: v.start,
            topics: v.topics,
            groups: v.groups,
            offsets: v.offsets,
            queues: v.queues,
            epochs: v.epochs,
            units: v
                .units
                .into_iter()
                .map(|(k, t, q, o, n, h)| (k, t, q, o, n, h, UNPLACED))
                .collect(),
            retired_total: v.retired_total,
            carried_total: v.carried_total,
            pops: Vec::new(),
            orders: Vec::new(),
        }
    }
}

/// Reads a [`LogStart`] of any version this build knows.
pub(super) fn decode_log_start(bytes: &[u8]) -> Result<LogStart, String> {
    let unreadable =
        |e| format!("the record of where the log starts (LOG_START) is unreadable: {e}");
    let (version, _) = postcard::take_from_bytes::<u32>(bytes).map_err(unreadable)?;
    match version {
        1 => Ok(postcard::from_bytes::<LogStartV1>(bytes)
            .map_err(unreadable)?
            .into()),
        2 => Ok(postcard::from_bytes::<LogStartV2>(bytes)
            .map_err(unreadable)?
            .into()),
        LOG_START_VERSION => postcard::from_bytes(bytes).map_err(unreadable),
        v => Err(format!(
            "the record of where the log starts (LOG_START) is version {v}; this build reads \
             versions 1 to {LOG_START_VERSION}"
        )),
    }
}

/// The [`LogStart`] layout this build writes; it reads this one and versions 1 and 2.
pub(super) const LOG_START_VERSION: u32 = 3;

impl<S: Storage> Broker<S> {
    /// Where the log starts: the base of its oldest segment once retention retired the ones
    /// before it, else 0.
    #[must_use]
    pub fn log_start(&self) -> u64 {
        self.log.start()
    }

    /// Bases of the log's segments, oldest first (the last one takes appends).
    #[must_use]
    pub fn segment_bases(&self) -> &[u64] {
        self.log.segment_bases()
    }

    /// Segments retention retired and bytes it carried forward, since the log's first
    /// retention (kept in the record of where the log starts).
    #[must_use]
    pub fn retention_totals(&self) -> (u64, u64) {
        (self.retired_total, self.carried_total)
    }

    /// Retires the oldest segments, every one that ends at or below `before` (a segment
    /// base; the host picks it by age or disk use), or fewer when something holds the cut
    /// ([`Retention::held`]). Carries forward first what is still owed (see the module
    /// doc); returns the segments to delete. Nothing happens when no whole segment can go.
    pub fn retain(&mut self, now: Millis, before: u64) -> Res<Retention, S> {
        self.check_failed()?;
        self.tick(now);
        // What is appended may go once durable: make it so first.
        self.sync()?;
        let mut out = Retention {
            start: self.log.start(),
            ..Retention::default()
        };
        let (cut, held) = self.retention_cut(before)?;
        out.held = held;
        if cut <= self.log.start() {
            return Ok(out);
        }
        // Where each queue starts after the cut, read before anything is carried: carrying
        // a moved message points its unit at the new copy (past the cut), and a scan after
        // that would stop at it and keep the retired units behind it.
        let starts = self.queue_starts(cut)?;
        // 1. Carry forward what is owed below the cut, oldest first (a master only: a
        // replica's cut stopped below it). A run carries at most MAX_CARRY_BYTES (it runs on
        // the core's thread): past that the cut stops at the oldest record left, which the
        // next run carries (a backlog larger than a segment goes over several runs).
        if self.role == Role::Master {
            let by_record: BTreeMap<u64, u64> = self
                .carried_units
                .iter()
                .map(|(&k, &(_, u))| (u.offset, k))
                .collect();
            let moved = self.moved_after_starts(cut, &starts)?;
            let mut owed: Vec<(u64, u32, Owed)> = self
                .txns
                .iter()
                .filter(|t| t.record < cut)
                .map(|t| (t.record, t.size, Owed::Half(t.offset, t.checks)))
                .chain(
                    self.delays
                        .iter()
                        .filter(|d| d.record < cut)
                        .map(|d| (d.record, d.size, Owed::Delay(d.offset))),
                )
                .chain(moved.into_iter().map(|(r, _, _, n)| {
                    let key = self
                        .carried_keys
                        .get(&r)
                        .or_else(|| by_record.get(&r))
                        .copied()
                        .unwrap_or(r);
                    (r, n, Owed::Unit(key))
                }))
                .collect();
            owed.sort_unstable_by_key(|o| o.0);
            let mut sum = 0u64;
            let mut take = owed.len();
            for (i, o) in owed.iter().enumerate() {
                sum += u64::from(o.1);
                if sum > MAX_CARRY_BYTES && i > 0 {
                    take = i;
                    out.held = Some(RetentionHold::CarryBudget { offset: o.0 });
                    break;
                }
            }
            for &(record, size, what) in &owed[..take] {
                let bytes = match what {
                    Owed::Half(key, checks) => self.carry(key, record, size, Some(checks))?,
                    Owed::Delay(key) => self.carry(key, record, size, None)?,
                    Owed::Unit(key) => self.carry_unit(key, record, size)?,
                };
                out.carried += 1;
                out.carried_bytes += bytes;
            }
        }
        if matches!(out.held, Some(RetentionHold::CarryBudget { .. })) {
            // Carried what it could: the next run goes on (and retires). Nothing is retired
            // now: the queues' starts above were read for this cut with all of it carried.
            self.sync()?;
            return Ok(out);
        }
        // 2. Durable.
        self.sync()?;
        // 3. The record of where the log starts.
        let record = self.log_start_record(cut, &starts, out.carried_bytes)?;
        let bytes = postcard::to_allocvec(&record).expect("postcard to a Vec cannot fail");
        match self.log.storage.record_log_start(&bytes) {
            Ok(true) => {}
            Ok(false) => {
                out.held = Some(RetentionHold::Unsupported);
                return Ok(out);
            }
            Err(e) => {
                self.fail(format!("recording where the log starts failed: {e}"));
                return Err(Error::Storage(e));
            }
        }
        // 4. Let go of the retired segments and of what pointed into them.
        out.retired = self.log.retire(cut);
        out.start = self.log.start();
        self.retired_total = record.retired_total;
        self.carried_total = record.carried_total;
        for (q, first) in starts {
            // The log start is recorded: a failure here leaves files a reopen rebuilds.
            if let Err(e) = self.drop_units_below(q, first) {
                self.fail(format!("dropping consume queue files failed: {e}"));
                return Err(e);
            }
        }
        if let Err(e) = self.retire_index(cut) {
            self.fail(format!("dropping message index files failed: {e}"));
            return Err(e);
        }
        self.moved.ascending.retain(|e| e.0 >= cut);
        self.moved.rest.retain(|&o, _| o >= cut);
        self.carried_keys.retain(|&r, _| r >= cut);
        let kept: BTreeSet<u64> = record.units.iter().map(|u| u.0).collect();
        self.carried_units.retain(|k, _| kept.contains(k));
        Ok(out)
    }

    /// Where a retention run asked to go to `before` may cut: a segment base, at most the
    /// durable (and replicated) point, never the segment taking appends, below every record
    /// that is not carried and still read.
    fn retention_cut(&mut self, before: u64) -> Res<(u64, Option<RetentionHold>), S> {
        // Messages out on receive: redelivered after their invisible time, so still read.
        let out_on_receive: Vec<(u32, u64)> = self
            .pops
            .iter()
            .flat_map(|(&(_, q), pq)| {
                pq.inflight
                    .keys()
                    .chain(pq.ready.iter())
                    .map(move |&qoff| (q, qoff))
            })
            .collect();
        let mut still_read = Vec::with_capacity(out_on_receive.len());
        for (q, qoff) in out_on_receive {
            if let Some(u) = self.unit_at(q, qoff)? {
                still_read.push(u.offset);
            }
        }
        let bases = self.log.segment_bases().to_vec();
        let floor = |at: u64| -> u64 {
            let i = bases.partition_point(|&b| b <= at);
            if i == 0 {
                0
            } else {
                bases[i - 1]
            }
        };
        let mut held = None;
        let mut limit = before;
        let mut hold = |limit: &mut u64, at: u64, why: RetentionHold| {
            if at < *limit {
                *limit = at;
                held = Some(why);
            }
        };
        let mut durable = self.log.synced();
        if self.cfg.replicated_acks && self.role == Role::Master {
            durable = durable.min(self.replicated);
        }
        let active = bases.last().copied().unwrap_or(0);
        hold(
            &mut limit,
            durable.min(active),
            RetentionHold::NotDurable { upto: durable },
        );
        for offset in still_read {
            hold(&mut limit, offset, RetentionHold::InFlight { offset });
        }
        if self.role == Role::Replica {
            for t in self.txns.iter() {
                hold(
                    &mut limit,
                    t.record,
                    RetentionHold::Pending { offset: t.record },
                );
            }
            for d in self.delays.iter() {
                hold(
                    &mut limit,
                    d.record,
                    RetentionHold::Pending { offset: d.record },
                );
            }
        }
        // A replica carries nothing: a committed or delivered message a queue holds after
        // its first retained one keeps its record (until its master carried it). Lowering the
        // cut only moves queues' first retained offsets down, so this settles.
        let mut cut = floor(limit);
        if self.role == Role::Replica {
            // Each step lowers the cut below the record found: it ends.
            while let Some(&(o, ..)) = self.moved_to_carry(cut)?.first() {
                hold(&mut limit, o, RetentionHold::Moved { offset: o });
                cut = floor(limit);
            }
        }
        Ok((cut, held))
    }

    /// Committed or delivered messages a queue holds at or after its first retained offset
    /// whose record is below `cut`: (record, queue, queue offset, size), oldest record first.
    fn moved_to_carry(&mut self, cut: u64) -> Res<Vec<(u64, u32, u64, u32)>, S> {
        let starts = self.queue_starts(cut)?;
        self.moved_after_starts(cut, &starts)
    }

    /// [`Self::moved_to_carry`] with the queues' starts for `cut` already read.
    fn moved_after_starts(
        &mut self,
        cut: u64,
        starts: &[(u32, u64)],
    ) -> Res<Vec<(u64, u32, u64, u32)>, S> {
        let first = |q: u32| starts.iter().find(|s| s.0 == q).map_or(0, |s| s.1);
        let candidates: Vec<(u64, u32, u64)> = self
            .moved
            .ascending
            .iter()
            .map(|&(o, q, qo)| (o, q, qo))
            .take_while(|e| e.0 < cut)
            .chain(
                self.moved
                    .rest
                    .range(..cut)
                    .map(|(&o, &(q, qo))| (o, q, qo)),
            )
            .filter(|&(_, q, qo)| qo >= first(q))
            .collect();
        let mut out = Vec::with_capacity(candidates.len());
        for (o, q, qo) in candidates {
            // Stale entries (a unit that reads a newer copy now) are skipped.
            if let Some(u) = self.unit_at(q, qo)? {
                if u.offset == o {
                    out.push((o, q, qo, u.size));
                }
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// Per queue that holds messages below `cut`: its new first queue offset, just after
    /// the last message retired with its record.
    ///
    /// The units before the first one at or after the cut all read records below it; of
    /// those, a message sent to the queue went with its segment, but a moved one (a
    /// committed half, a delivered delay: its record was written before it became visible)
    /// may have become visible after the cut's records were written — RocketMQ, which
    /// writes a commit copy, would keep it. So the queue starts after the last sent message
    /// below the cut; the moved ones after it are carried forward ([`Self::moved_to_carry`]),
    /// and a moved message made visible last in its queue is never retired unread.
    ///
    /// Reads each such queue's units from its first to the first at or after the cut: the
    /// units retention drops, and one more.
    fn queue_starts(&mut self, cut: u64) -> Res<Vec<(u32, u64)>, S> {
        let mut out = Vec::new();
        for q in 0..self.queues.len() as u32 {
            let (base, end) = (self.queues[q as usize].base, self.queues[q as usize].end);
            let (mut at, mut start) = (base, base);
            while at < end {
                let Some(u) = self.unit_at(q, at)? else {
                    break;
                };
                let moved = self.moved.get(u.offset) == Some((q, at));
                if u.offset < cut && !moved {
                    start = at + 1;
                } else if !moved {
                    // The first message sent to the queue at or after the cut: every later
                    // one is too.
                    break;
                }
                // A moved message (its record below the cut, or a copy carried past it by
                // an earlier run) sets no start: sent messages below the cut may follow it.
                at += 1;
            }
            if start > base {
                out.push((q, start));
            }
        }
        Ok(out)
    }

    fn log_start_record(
        &mut self,
        cut: u64,
        starts: &[(u32, u64)],
        carried: u64,
    ) -> Res<LogStart, S> {
        // Carried-forward messages still in their queue's retained part: their unit (found
        // through `moved`, which names every unit reading a moved record) reads their record.
        let mut kept_units = Vec::new();
        let carried_units: Vec<(u64, u32, CqUnit)> = self
            .carried_units
            .iter()
            .map(|(&k, &(q, u))| (k, q, u))
            .collect();
        for (k, q, u) in carried_units {
            let first = starts
                .iter()
                .find(|s| s.0 == q)
                .map_or(self.queues[q as usize].base, |s| s.1);
            let Some((mq, qo)) = self.moved.get(u.offset) else {
                continue;
            };
            if u.offset >= cut
                && mq == q
                && qo >= first
                && self.unit_at(q, qo)?.is_some_and(|x| x.offset == u.offset)
            {
                kept_units.push((k, q, u, qo));
            }
        }
        let retired = self
            .log
            .segment_bases()
            .iter()
            .take_while(|&&b| b < cut)
            .count() as u64;
        let topics = self
            .topics
            .iter()
            .filter(|t| !t.deleted)
            .map(|t| (t.name.clone(), t.queues.len() as u32))
            .collect();
        // Deleted groups (no longer known by name) are not carried.
        let groups = self
            .groups
            .iter()
            .enumerate()
            .filter(|&(i, g)| self.group_ids.get(&g.name) == Some(&(i as u32)))
            .map(|(_, g)| (g.name.clone(), g.fifo))
            .collect();
        let offsets = self
            .offsets
            .iter()
            .map(|(&(g, q), &o)| {
                let queue = &self.queues[q as usize];
                (
                    self.groups[g as usize].name.clone(),
                    self.topics[queue.topic as usize].name.clone(),
                    queue.queue_id,
                    o,
                )
            })
            .collect();
        // Every queue of a topic that is not internal: where replay starts numbering it.
        let queues = self
            .queues
            .iter()
            .enumerate()
            .filter(|(_, q)| !self.topics[q.topic as usize].deleted && q.next > 0)
            .filter(|(_, q)| {
                matches!(
                    self.topics[q.topic as usize].kind,
                    TopicKind::User
                        | TopicKind::Retry
                        | TopicKind::DeadLetter
                        | TopicKind::CheckMax
                )
            })
            .map(|(i, q)| {
                let first = starts
                    .iter()
                    .find(|s| s.0 == i as u32)
                    .map_or(q.base, |s| s.1);
                (
                    self.topics[q.topic as usize].name.clone(),
                    q.queue_id,
                    first,
                )
            })
            .collect();
        // Only those still in their queue's retained part.
        let units = kept_units
            .into_iter()
            .map(|(k, q, u, qo)| {
                let queue = &self.queues[q as usize];
                (
                    k,
                    self.topics[queue.topic as usize].name.clone(),
                    queue.queue_id,
                    u.offset,
                    u.size,
                    u.tag_hash,
                    qo,
                )
            })
            .collect();
        let pops = self
            .pops
            .iter()
            .filter(|(_, pq)| pq.next > 0)
            .map(|(&(g, q), pq)| {
                let queue = &self.queues[q as usize];
                (
                    self.groups[g as usize].name.clone(),
                    self.topics[queue.topic as usize].name.clone(),
                    queue.queue_id,
                    pq.next,
                )
            })
            .collect();
        Ok(LogStart {
            version: LOG_START_VERSION,
            pops,
            orders: self.order_rows(),
            start: cut,
            topics,
            groups,
            offsets,
            queues,
            units,
            epochs: self.epochs.clone(),
            retired_total: self.retired_total + retired,
            carried_total: self.carried_total + carried,
        })
    }

    /// Writes the record at `record` (a half or delayed message of key `key`) again at the
    /// end of the log, naming the key; returns its length.
    fn carry(&mut self, key: u64, record: u64, size: u32, checks: Option<u16>) -> Res<u64, S> {
        let strip = [prop::CARRIED, prop::TRANSACTION_CHECK_TIMES];
        self.rewrite(record, size, &strip, (prop::CARRIED, key), checks, None)
    }

    /// Writes the record at `record` (a committed or delivered message of key `key`, read by
    /// a unit) again at the end of the log; the unit reads the copy from then on (applied as
    /// every record is). Returns its length.
    fn carry_unit(&mut self, key: u64, record: u64, size: u32) -> Res<u64, S> {
        let strip = [prop::CARRIED, prop::CARRIED_UNIT];
        // The record it replaces: the unit that reads that one reads this one.
        self.rewrite(
            record,
            size,
            &strip,
            (prop::CARRIED_UNIT, key),
            None,
            Some(record),
        )
    }

    /// The one rewrite both carries make: the record's header, body and properties (less
    /// the group and CRC properties, and `strip`) appended again, with `mark` naming the key
    /// (and `checks` the check count, `prepared` the prepared offset, when given). Returns its
    /// length; 0 for a record unreadable since it was written (nothing to carry: a check
    /// drops such a half).
    fn rewrite(
        &mut self,
        record: u64,
        size: u32,
        strip: &[&str],
        mark: (&str, u64),
        checks: Option<u16>,
        prepared: Option<u64>,
    ) -> Res<u64, S> {
        let Some(r) = self
            .log
            .read(record, size as usize)
            .map_err(Error::Storage)?
        else {
            return Ok(0);
        };
        let topic_name = String::from(r.topic);
        let body = r.body.to_vec();
        let h = r.header;
        let mut props = Vec::with_capacity(r.properties.len() + 32);
        for (k, v) in r.props() {
            if k == BATCH_LEN || k == "__CRC32#" || strip.contains(&k) {
                continue;
            }
            record::push_prop(&mut props, k, v);
        }
        record::push_prop(&mut props, mark.0, itoa(mark.1).as_str());
        if let Some(c) = checks {
            record::push_prop(
                &mut props,
                prop::TRANSACTION_CHECK_TIMES,
                itoa(u64::from(c)).as_str(),
            );
        }
        let spec = Spec {
            topic: &topic_name,
            queue_id: h.queue_id,
            sys_flag: h.sys_flag,
            flag: h.flag,
            born_timestamp: h.born_timestamp,
            born_host: h.born_host,
            reconsume_times: h.reconsume_times,
            prepared_offset: prepared.unwrap_or(h.prepared_offset),
            body: &body,
            props,
        };
        let (at, _) = self.write(core::slice::from_ref(&spec))?;
        Ok(self.log.end() - at)
    }

    /// On open: what the record of where the log starts says, before the segments from
    /// there on are replayed. `Err`: a record this build cannot read.
    /// The queue a record of where the log starts names, created as the record says
    /// (`None`: a queue id no topic may have).
    fn recorded_queue(&mut self, topic: &str, queue_id: u32) -> Option<u32> {
        if queue_id >= MAX_QUEUES {
            return None;
        }
        let t = self.topic_with(topic, queue_id + 1, false);
        Some(self.queue_of(t, queue_id))
    }

    pub(super) fn apply_log_start(&mut self, bytes: &[u8]) -> Result<u64, String> {
        let rec = decode_log_start(bytes)?;
        for (name, queues) in &rec.topics {
            if *queues <= MAX_QUEUES {
                self.topic_with(name, *queues, false);
            }
        }
        for (name, order, conf) in &rec.orders {
            self.apply_topic_order(name, *order, conf);
        }
        for (name, fifo) in &rec.groups {
            let g = self.group(name);
            self.groups[g as usize].fifo = *fifo;
        }
        for (name, queue_id, first) in &rec.queues {
            if let Some(q) = self.recorded_queue(name, *queue_id) {
                self.queues[q as usize].start_at(*first);
            }
        }
        for (group, name, queue_id, offset) in &rec.offsets {
            if let Some(q) = self.recorded_queue(name, *queue_id) {
                let g = self.group(group);
                self.offsets.insert((g, q), *offset);
            }
        }
        let mut places = Vec::new();
        for (key, name, queue_id, offset, size, tag_hash, qo) in &rec.units {
            if let Some(q) = self.recorded_queue(name, *queue_id) {
                let unit = CqUnit {
                    offset: *offset,
                    size: *size,
                    tag_hash: *tag_hash,
                };
                self.carried_units.insert(*key, (q, unit));
                places.push((*qo, q, unit));
            }
        }
        // Carried units at the head of their queue's retained part go back in now, in queue
        // order (replay puts in the others, when it meets the op that made them visible).
        places.sort_unstable_by_key(|p| p.0);
        for (qo, q, unit) in places {
            if self.queues[q as usize].next == qo {
                self.push_moved(q, unit);
            }
        }
        for (group, name, queue_id, next) in &rec.pops {
            if let Some(q) = self.recorded_queue(name, *queue_id) {
                let g = self.group(group);
                let pq = self.pops.entry((g, q)).or_default();
                pq.next = pq.next.max(*next);
            }
        }
        self.epochs.clone_from(&rec.epochs);
        self.retired_total = rec.retired_total;
        self.carried_total = rec.carried_total;
        Ok(rec.start)
    }
}

#[cfg(test)]
mod log_start_tests {
    use super::*;

    #[test]
    fn a_version_1_record_still_reads_and_an_unknown_version_is_named() {
        // Version 1's fields in order, as a build before `pops` wrote them.
        let v1 = postcard::to_allocvec(&(
            1u32,
            1024u64,
            alloc::vec![(String::from("T"), 4u32)],
            alloc::vec![(String::from("G"), true)],
            alloc::vec![(String::from("G"), String::from("T"), 0u32, 7u64)],
            alloc::vec![(String::from("T"), 0u32, 5u64)],
            alloc::vec![(1u64, 0u64)],
            Vec::<(u64, String, u32, u64, u32, i32)>::new(),
            1u64,
            0u64,
        ))
        .unwrap();
        let r = decode_log_start(&v1).unwrap();
        assert_eq!((r.version, r.start, r.offsets.len()), (1, 1024, 1));
        assert!(r.pops.is_empty());
        let mut v9 = v1.clone();
        v9[0] = 9;
        let e = decode_log_start(&v9).err().unwrap();
        assert!(e.contains("version 9"), "{e}");
    }
}
