//! [`Digest`]: what a broker holds that replaying its log builds, comparable (tests).

use super::*;

/// A queue in a [`Digest`]: (directory, topic, queue id, base, end, next, visible, units).
type QueueDigest = (String, String, u32, u64, u64, u64, u64, Vec<CqUnit>);

/// Everything a broker holds that replaying its log builds, in a form two brokers can be
/// compared by (tests): topics, queues and groups by name (their numbering follows the
/// order a run met them in, which differs from the log's order: a delayed send names its
/// topic before its timer record is written), each queue's units read back whole (where
/// the file ends and the tail begins differs by how it was opened), the index's newest
/// entries likewise.
#[derive(Debug, PartialEq, Eq)]
#[allow(clippy::type_complexity)]
pub(crate) struct Digest {
    covers: u64,
    closed: bool,
    segments: Vec<u64>,
    log_start: u64,
    applied_at: Millis,
    /// (name, deleted, queue directories)
    topics: Vec<(String, bool, Vec<String>)>,
    /// (directory, topic, queue id, base, end, next, visible, units)
    queues: Vec<QueueDigest>,
    /// Groups something refers to, or declared FIFO.
    groups: Vec<(String, bool)>,
    txns: Vec<(u64, u64, Millis, u32, String, i32, u16, String)>,
    delays: Vec<(u64, u64, Millis, u32, String, i32)>,
    offsets: Vec<(String, String, u64)>,
    moved: Vec<(u64, String, u64)>,
    pops: Vec<(String, String, u64, Vec<(u64, u32, u64, u64)>, Vec<u64>)>,
    pop_timers: Vec<(Millis, String, String, u64, u64)>,
    resolved: Vec<(u64, bool)>,
    epochs: Vec<(u64, u64)>,
    totals: (u64, u64),
    carried_units: Vec<(u64, String, u64, u32, i32)>,
    carried_keys: Vec<(u64, u64)>,
    deleted_names: Vec<(String, u32)>,
    index_files: Vec<(u64, u64)>,
    index_slots: Vec<u32>,
    index_count: u32,
    index_entries: Vec<(u32, u32, u64)>,
    stats: Stats,
    now: Millis,
    log_end: u64,
    pending_txns: Vec<PendingTxnInfo>,
    pending_delays: Vec<PendingDelayInfo>,
    poll_timeout: Option<Millis>,
    /// Topics' order settings: (topic, order, conf).
    orders: Vec<(String, bool, String)>,
}

impl Digest {
    /// The queues of topics whose names start with `prefix`, as [`Digest`] lists them.
    pub(crate) fn queues_of(&self, prefix: &str) -> Vec<&QueueDigest> {
        self.queues
            .iter()
            .filter(|q| q.1.starts_with(prefix))
            .collect()
    }
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

impl Digest {
    /// Without the counters (a run counts its requests, an open what it replays).
    pub(crate) fn forget_stats(&mut self) {
        self.stats = Stats::default();
    }
}

impl<S: Storage> Broker<S> {
    pub(crate) fn digest(&mut self) -> Digest {
        let snap = self.snapshot(None);
        let dir = |q: u32| snap.queues[q as usize].5.clone();
        let gname = |g: u32| snap.groups[g as usize].0.clone();
        let mut queues = Vec::new();
        for (q, row) in snap.queues.iter().enumerate() {
            let (base, end) = (row.2, row.3);
            let mut us = Vec::new();
            for o in base..end {
                us.push(self.unit_at(q as u32, o).unwrap().unwrap());
            }
            let t = &snap.topics[row.0 as usize];
            queues.push((
                row.5.clone(),
                t.0.clone(),
                row.1,
                base,
                end,
                row.4,
                self.queues[q].visible,
                us,
            ));
        }
        queues.sort_by(|a, b| a.0.cmp(&b.0));
        let flushed = self.index.count - self.index.pending.len() as u32;
        let mut index_entries = Vec::new();
        if let Some(&(n, _)) = self.index.files.last() {
            let name = index_file_name(n);
            for i in 0..flushed {
                let mut b = [0u8; 16];
                let pos = SLOTS_BYTES + u64::from(i) * ENTRY_BYTES;
                let got = self.log.storage.side_read(&name, pos, &mut b).unwrap();
                assert_eq!(got, 16, "index entry {i} of {name}");
                let be = |at: usize| u32::from_be_bytes(b[at..at + 4].try_into().unwrap());
                let off = u64::from_be_bytes(b[8..].try_into().unwrap());
                index_entries.push((be(0), be(4), off));
            }
            index_entries.extend(self.index.pending.iter().copied());
        }
        let mut referred: BTreeSet<u32> = BTreeSet::new();
        referred.extend(snap.txns.iter().map(|t| t.7));
        referred.extend(snap.offsets.iter().map(|o| o.0));
        referred.extend(snap.pops.iter().map(|p| p.0));
        let mut groups: Vec<(String, bool)> = snap
            .groups
            .iter()
            .enumerate()
            .filter(|(g, (_, fifo))| *fifo || referred.contains(&(*g as u32)))
            .map(|(_, g)| g.clone())
            .collect();
        groups.sort();
        let mut topics: Vec<(String, bool, Vec<String>)> = snap
            .topics
            .iter()
            .map(|(n, qs, d)| (n.clone(), *d, qs.iter().map(|&q| dir(q)).collect()))
            .collect();
        topics.sort();
        let mut moved: Vec<(u64, String, u64)> = snap
            .moved
            .0
            .iter()
            .chain(&snap.moved.1)
            .map(|&(o, q, qo)| (o, dir(q), qo))
            .collect();
        moved.sort();
        Digest {
            orders: snap.orders.clone(),
            covers: snap.covers,
            closed: snap.closed,
            segments: snap.segments.clone(),
            log_start: snap.log_start,
            applied_at: snap.applied_at,
            topics,
            queues,
            groups,
            txns: snap
                .txns
                .iter()
                .map(|t| (t.0, t.1, t.2, t.3, dir(t.4), t.5, t.6, gname(t.7)))
                .collect(),
            delays: snap
                .delays
                .iter()
                .map(|d| (d.0, d.1, d.2, d.3, dir(d.4), d.5))
                .collect(),
            offsets: sorted(
                snap.offsets
                    .iter()
                    .map(|o| (gname(o.0), dir(o.1), o.2))
                    .collect(),
            ),
            moved,
            pops: sorted(
                snap.pops
                    .iter()
                    .map(|p| (gname(p.0), dir(p.1), p.2, p.3.clone(), p.4.clone()))
                    .collect(),
            ),
            pop_timers: sorted(
                snap.pop_timers
                    .iter()
                    .map(|t| (t.0, gname(t.1), dir(t.2), t.3, t.4))
                    .collect(),
            ),
            resolved: snap.resolved.clone(),
            epochs: snap.epochs.clone(),
            totals: (snap.retired_total, snap.carried_total),
            carried_units: snap
                .carried_units
                .iter()
                .map(|c| (c.0, dir(c.1), c.2, c.3, c.4))
                .collect(),
            carried_keys: snap.carried_keys.clone(),
            deleted_names: snap.deleted_names.clone(),
            index_files: snap.index_files.clone(),
            index_slots: snap.index_slots.clone(),
            index_count: snap.index_count,
            index_entries,
            stats: self.stats,
            now: self.now,
            log_end: self.log.end(),
            pending_txns: self.pending_transactions(usize::MAX),
            pending_delays: self.pending_delays(usize::MAX),
            poll_timeout: self.poll_timeout(),
        }
    }
}
