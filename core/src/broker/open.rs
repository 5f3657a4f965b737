//! Opening a broker: recovery of the log, then the state from a checkpoint or a replay.

use super::*;

impl<S: Storage> Broker<S> {
    /// Opens a broker over `storage`, recovering every record in it.
    ///
    /// Only a torn tail is cut (invalid bytes at the end of the last segment, with no valid
    /// record after them): a crash can leave one, and nothing acknowledged is in it. Any
    /// other damage — bad bytes followed by valid records, damage in an older segment,
    /// another program's log — is [`Error::Corrupted`], naming the segment and offset, and
    /// the storage is left as it was. [`Broker::open_repairing`] opens such a log.
    pub fn open(cfg: Config, storage: S, now: Millis) -> Res<Self, S> {
        Self::open_with(cfg, storage, now, false)
    }

    /// Opens a broker over `storage` as [`Broker::open`] does, repairing damage instead of
    /// refusing it: every valid record stays where it is, and each damaged range is moved to
    /// the storage's quarantine (for files, `quarantine/` in the data directory) and skipped
    /// from then on. [`RecoveryReport::quarantined`] lists what was moved.
    pub fn open_repairing(cfg: Config, storage: S, now: Millis) -> Res<Self, S> {
        Self::open_with(cfg, storage, now, true)
    }

    pub(super) fn open_with(cfg: Config, storage: S, now: Millis, repair: bool) -> Res<Self, S> {
        cfg.validate()?;
        let max_record = cfg.max_message_size.max(4 << 20).saturating_add(1 << 16);
        let cq_cache = CqCache::new(cfg.cq_cache_blocks as usize);
        let mut b = Broker {
            log: Log::new(storage, cfg.segment_size, max_record),
            cfg,
            now,
            topic_ids: HashMap::new(),
            topics: Vec::new(),
            recent_topics: [u32::MAX; RECENT_TOPICS],
            recent_next: 0,
            queues: Vec::new(),
            group_ids: HashMap::new(),
            groups: Vec::new(),
            txns: PendingTable::new(),
            delays: PendingTable::new(),
            offsets: HashMap::new(),
            moved: Moved::default(),
            pops: HashMap::new(),
            pop_timers: BinaryHeap::new(),
            pop_cursor: HashMap::new(),
            resolved: heapless::Deque::new(),
            outputs: VecDeque::new(),
            held: VecDeque::new(),
            unsynced: VecDeque::new(),
            notify: Vec::new(),
            rescan_now: Vec::new(),
            rescans: VecDeque::new(),
            buf: Vec::new(),
            recovering: true,
            applied_at: 0,
            flush_due: None,
            failed: None,
            report: RecoveryReport::default(),
            stats: Stats::default(),
            next_id: 1 << 63,
            role: Role::Master,
            replicated: 0,
            epochs: Vec::new(),
            props_pool: Vec::new(),
            index: index::KeyIndex::default(),
            disk_full: None,
            retired_total: 0,
            carried_total: 0,
            carried_units: BTreeMap::new(),
            carried_keys: BTreeMap::new(),
            deleted_names: HashMap::new(),
            cq_cache,
            cq_buf: Vec::new(),
            cq_name: String::new(),
            side_error: None,
        };
        // Retention retired the oldest segments: the log starts where its record says, with
        // what replaying from there cannot rebuild.
        let log_start = b.log.storage.log_start().map_err(Error::Storage)?;
        // The newest checkpoint, when it still names this log: replay starts after it.
        let mut unused = None;
        let snap = match b.log.storage.checkpoint().map_err(Error::Storage)? {
            Some(_) if repair => {
                unused = Some(String::from("a repair replays the whole log"));
                None
            }
            Some(bytes) => match b.usable_checkpoint(&bytes, log_start.as_deref())? {
                Ok(snap) => Some(snap),
                Err(why) => {
                    unused = Some(why);
                    None
                }
            },
            None => None,
        };
        let mut rec = match snap {
            Some(snap) => {
                let (start, covers, closed) = (snap.log_start, snap.covers, snap.closed);
                b.restore(snap)?;
                b.log.start_recovery_at(start, covers, closed)
            }
            None => {
                // The consume queues and the index are rebuilt from the log (see `Queue`):
                // their old files go.
                b.clear_consume_queues()?;
                b.clear_index()?;
                let start = match log_start {
                    Some(bytes) => b
                        .apply_log_start(&bytes)
                        .map_err(|reason| Error::Corrupted { offset: 0, reason })?,
                    None => 0,
                };
                b.log.start_recovery(repair, start)
            }
        }
        .map_err(Error::Storage)?;
        let recovery_err = |e| match e {
            RecoveryError::Storage(e) => Error::Storage(e),
            RecoveryError::Corrupt { offset, reason } => Error::Corrupted { offset, reason },
        };
        while let Some((off, bytes)) = rec.next(&mut b.log).map_err(recovery_err)? {
            // Recovery verified the record already.
            if let Ok(Decoded::Record(r)) = record::decode_trusted(bytes) {
                b.apply(off, &r);
            }
        }
        let covers = rec.checkpoint();
        b.report = b.log.finish_recovery(rec);
        b.report.checkpoint = covers;
        b.report.checkpoint_unused = unused;
        if let Some(e) = b.side_error.take() {
            return Err(e);
        }
        b.recovering = false;
        // What a previous run of this master acknowledged was replicated then.
        b.replicated = b.log.end();
        for q in &mut b.queues {
            q.visible = q.len();
        }
        b.unsynced.clear();
        b.notify.clear();
        Ok(b)
    }
}
