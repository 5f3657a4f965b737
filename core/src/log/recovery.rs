//! Recovery: reading a log back on open, record by record, cutting a torn tail and
//! refusing (or, repairing, quarantining) any other damage.

use super::*;

/// A recovery in progress: yields each valid record in log order (an atomic group only
/// once all of it is there).
///
/// Only a torn tail is cut: invalid bytes at the end of the last segment with no valid
/// record after them, no more of them than one record, and not a whole record of some other
/// format. Anything else is damage: a plain open refuses it (and changes nothing), a repair
/// moves the damaged bytes to quarantine and leaves a blank over their start, so every valid
/// record after them stays at its offset.
pub(crate) struct Recovery {
    pub(super) segs: Vec<u64>,
    pub(super) si: usize,
    pub(super) seg_len: Option<u64>,
    pub(super) buf: Vec<u8>,
    /// Valid bytes are buf[start..filled]; buf[start] is at segment position `pos`.
    pub(super) start: usize,
    pub(super) filled: usize,
    pub(super) pos: u64,
    /// An atomic group in progress: (segment position of its start, records left, records).
    pub(super) group: Option<Group>,
    pub(super) ready: VecDeque<(u64, Vec<u8>)>,
    pub(super) current: Option<(u64, Vec<u8>)>,
    pub(super) end: u64,
    pub(super) report: RecoveryReport,
    pub(super) repair: bool,
    /// The segment last read ended with an end-of-segment blank.
    pub(super) closed: bool,
    /// How far the log reached, as the storage recorded it.
    pub(super) mark: Option<LogEnd>,
    /// The last run stopped on a storage failure when everything below this was durable
    /// ([`Storage::failed_at`]): the log is cut here.
    pub(super) failed_at: Option<u64>,
    /// The log was cut at a recorded failure: the storage's record of its end follows it.
    pub(super) settle: bool,
    /// The end of the segments was held to `mark`.
    pub(super) end_checked: bool,
    /// Where the log starts (see [`Log::start_recovery`]).
    pub(super) log_start: u64,
    /// The checkpoint it started from ([`Log::start_recovery_at`]).
    pub(super) from_checkpoint: Option<u64>,
}

/// A recovered record: (log offset, bytes).
pub(crate) type Recovered<'a> = (u64, &'a [u8]);

/// An atomic group being read: (segment position of its start, records left, the records).
type Group = (u64, u32, Vec<(u64, Vec<u8>)>);

enum Step {
    /// A record at buf[start..start+len] (already consumed).
    Record(u64, usize, usize),
    Ready,
    Done,
}

/// What follows bad bytes in a segment.
#[derive(Clone, Copy)]
enum After {
    /// A valid record (or a blank that fits) starts at this segment position.
    Valid(u64),
    /// Nothing valid up to the end of the segment; the last non-zero byte ends here.
    Nothing { nonzero_end: u64 },
}

/// Bytes read at a time while looking past damage.
const SCAN_WINDOW: usize = 1 << 20;

impl Recovery {
    /// The offset of the checkpoint this recovery started from, if it did.
    pub(crate) fn checkpoint(&self) -> Option<u64> {
        self.from_checkpoint
    }

    /// The next valid record, as (offset, bytes).
    pub(crate) fn next<S: Storage>(
        &mut self,
        log: &mut Log<S>,
    ) -> Result<Option<Recovered<'_>>, RecoveryError<S::Error>> {
        match self.step(log)? {
            Step::Record(off, at, len) => Ok(Some((off, &self.buf[at..at + len]))),
            Step::Ready => {
                self.current = self.ready.pop_front();
                Ok(self.current.as_ref().map(|(o, b)| (*o, b.as_slice())))
            }
            Step::Done => Ok(None),
        }
    }

    /// Goes on reading the current segment at segment position `pos`.
    fn seek(&mut self, pos: u64) {
        self.pos = pos;
        self.start = 0;
        self.filled = 0;
        self.group = None;
    }

    fn next_segment(&mut self) {
        self.group = None;
        self.si += 1;
        self.seg_len = None;
    }

    fn step<S: Storage>(&mut self, log: &mut Log<S>) -> Result<Step, RecoveryError<S::Error>> {
        loop {
            if !self.ready.is_empty() {
                return Ok(Step::Ready);
            }
            let Some(&base) = self.segs.get(self.si) else {
                if !self.end_checked {
                    self.end_checked = true;
                    self.check_end(log)?;
                    continue;
                }
                return Ok(Step::Done);
            };
            let seg_len = match self.seg_len {
                Some(l) => l,
                None => {
                    // Segments follow each other: the one before ended (its end blank, or
                    // the end of its data) where this one begins.
                    if self.si == 0 && self.log_start > 0 && base != self.log_start {
                        // Retention left the log starting at `start`: its first segment
                        // must be that one.
                        let what = alloc::format!(
                            "segment file {:020} is missing: the log starts there (LOG_START: \
                             retention retired the segments before it), but the first segment \
                             file is {base:020}",
                            self.log_start
                        );
                        let (from, to) = (self.log_start.min(base), self.log_start.max(base));
                        self.gap(log, from, to, what, base > self.log_start)?;
                    }
                    if self.si > 0 && self.end < base {
                        let prev = self.segs[self.si - 1];
                        let what = alloc::format!(
                            "log offsets {}..{base} are missing: segment {prev:020} ends at log \
                             offset {}, the next segment file is {base:020} (segment file \
                             {:020} missing?)",
                            self.end,
                            self.end,
                            self.end
                        );
                        self.gap(log, self.end, base, what, true)?;
                    }
                    let l = log.storage.len(base)?;
                    self.seg_len = Some(l);
                    self.closed = false;
                    self.seek(0);
                    l
                }
            };
            if let Some(d) = self.failed_at {
                if self.group.is_none() && base + self.pos >= d {
                    self.cut_unsynced(log, base, seg_len)?;
                    continue;
                }
            }
            let last = self.si + 1 == self.segs.len();
            let avail = &self.buf[self.start..self.filled];
            let bad: Option<String> = match record::decode(avail, log.max_record) {
                Ok(Decoded::Record(r)) => {
                    let len = r.total_size as usize;
                    let off = base + self.pos;
                    if r.header.phys_offset != off {
                        Some(
                            record::Corruption::PhysOffsetMismatch {
                                stored: r.header.phys_offset,
                                actual: off,
                            }
                            .to_string(),
                        )
                    } else {
                        let n = r.prop(BATCH_LEN).and_then(|v| v.parse::<u32>().ok());
                        let at = self.start;
                        self.start += len;
                        self.pos += len as u64;
                        match (&mut self.group, n) {
                            (None, Some(n)) if n > 1 => {
                                self.group = Some((
                                    off - base,
                                    n - 1,
                                    vec![(off, self.buf[at..at + len].to_vec())],
                                ));
                            }
                            (Some((_, left, recs)), _) => {
                                recs.push((off, self.buf[at..at + len].to_vec()));
                                *left -= 1;
                                if *left == 0 {
                                    let (_, _, recs) = self.group.take().expect("group");
                                    self.report.records += recs.len() as u64;
                                    self.ready.extend(recs);
                                }
                            }
                            (None, _) => {
                                self.report.records += 1;
                                return Ok(Step::Record(off, at, len));
                            }
                        }
                        None
                    }
                }
                Ok(Decoded::Repaired { len }) => {
                    // A repair blank over damage a repair moved out: the records of an
                    // atomic group it cut stay, as the repair kept them; the log goes on
                    // after it, or the segment ends there.
                    if let Some((_, _, recs)) = self.group.take() {
                        self.report.records += recs.len() as u64;
                        self.ready.extend(recs);
                    }
                    if self.pos + u64::from(len) < seg_len {
                        self.seek(self.pos + u64::from(len));
                    } else {
                        self.end = base + self.pos + u64::from(len);
                        self.closed = true;
                        self.next_segment();
                    }
                    None
                }
                Ok(Decoded::Blank { len }) => {
                    if self.group.is_some() {
                        Some("segment ends inside an atomic group".into())
                    } else {
                        self.end = base + self.pos + u64::from(len);
                        self.closed = true;
                        self.next_segment();
                        None
                    }
                }
                Ok(Decoded::Incomplete { needed }) => {
                    if self.pos + ((self.filled - self.start) as u64) >= seg_len {
                        if self.filled == self.start && self.group.is_none() {
                            // The segment ends here, cleanly.
                            self.end = base + self.pos;
                            self.next_segment();
                            None
                        } else if self.group.is_some() && self.filled == self.start {
                            Some("atomic group torn by the end of the segment".into())
                        } else {
                            Some("record torn by the end of the segment".into())
                        }
                    } else {
                        // Read more: keep the partial record, refill behind it.
                        self.buf.copy_within(self.start..self.filled, 0);
                        self.filled -= self.start;
                        self.start = 0;
                        let need = needed.unwrap_or(BLANK_LEN).max(self.filled + 1);
                        if self.buf.len() < need {
                            self.buf.resize(need, 0);
                        }
                        let filled = self.filled;
                        let n = log.storage.read(
                            base,
                            self.pos + filled as u64,
                            &mut self.buf[filled..],
                        )?;
                        if n == 0 {
                            Some("segment is shorter than its length says".into())
                        } else {
                            self.report.bytes_scanned += n as u64;
                            self.filled += n;
                            None
                        }
                    }
                }
                Err(c) => Some(c.to_string()),
            };
            if let Some(reason) = bad {
                self.damaged(log, base, seg_len, last, reason)?;
            }
        }
    }

    /// The last run failed on storage with everything below the current position durable
    /// ([`Storage::failed_at`]): nothing from here on was acknowledged. What reached the
    /// disk of it (after a failed writeback, any blocks of it, in any order) is cut: kept in
    /// quarantine (`<offset>-<end>.unsynced`), zeros from here in this segment, later
    /// segments (created by then) moved to quarantine whole and removed.
    fn cut_unsynced<S: Storage>(
        &mut self,
        log: &mut Log<S>,
        base: u64,
        seg_len: u64,
    ) -> Result<(), RecoveryError<S::Error>> {
        let from = self.pos;
        self.failed_at = None;
        let reason = "the last run stopped on a storage failure with everything before this \
                      durable (SYNC_FAILED): nothing from here on was acknowledged";
        let mut cut = |log: &mut Log<S>, seg: u64, from: u64, len: u64| {
            let upto = nonzero_end(log, seg, from, len)?;
            let kept_as = if upto > from {
                let name = alloc::format!("{:020}-{:020}.unsynced", seg + from, seg + upto);
                quarantine(log, seg, from, upto, &name)?;
                Some(name)
            } else {
                None
            };
            self.report.bytes_truncated += upto - from;
            self.report.cuts.push(Cut {
                offset: seg + from,
                bytes: upto - from,
                reason: reason.into(),
                kept_as,
            });
            Ok::<_, S::Error>(())
        };
        cut(log, base, from, seg_len)?;
        log.storage.truncate(base, from)?;
        for &later in &self.segs[self.si + 1..] {
            let len = log.storage.len(later)?;
            cut(log, later, 0, len)?;
            log.storage.remove(later)?;
        }
        log.storage.sync()?;
        self.segs.truncate(self.si + 1);
        log.segments.retain(|&b| b <= base);
        self.report.segments = self.segs.len();
        self.end = base + from;
        // The newest segment named in the storage's record may be one just removed: the
        // log now ends here, and the record follows (check_end).
        self.settle = true;
        self.next_segment();
        Ok(())
    }

    /// After the last segment: the log must reach what the storage recorded as durable
    /// ([`Storage::log_end`]), and its newest segment file must be there.
    fn check_end<S: Storage>(&mut self, log: &mut Log<S>) -> Result<(), RecoveryError<S::Error>> {
        let end = if self.segs.is_empty() { 0 } else { self.end };
        if let Some(d) = self.failed_at {
            if end < d {
                // The failure's durable point is not reached: acknowledged bytes are gone.
                let what = alloc::format!(
                    "log offsets {end}..{d} are missing: the last run had them durable when it \
                     stopped on a storage failure (SYNC_FAILED), but the log ends at {end}"
                );
                return self.gap(log, end, d, what, false);
            }
            self.failed_at = None;
            self.settle = true;
        }
        if self.settle {
            // The recorded failure is settled: the record follows the log (and clears it).
            log.storage.record_log_end(end, false)?;
            return Ok(());
        }
        let Some(mark) = self.mark else {
            return Ok(());
        };
        let newest = self.segs.last().copied();
        if let Some(want) = mark.segment {
            if newest.is_none_or(|n| n < want) {
                let from = end.min(want);
                let to = mark.end.max(want);
                let what = alloc::format!(
                    "segment file {want:020} is missing: the log reached log offset {} \
                     durably and had that segment, but its segments end at log offset {end} \
                     (offsets {from}..{to} and whatever followed in {want:020} are gone)",
                    mark.end
                );
                return self.gap(log, from, to, what, false);
            }
        }
        if end < mark.end {
            let what = alloc::format!(
                "log offsets {end}..{} are missing: the log reached log offset {} durably, but \
                 its last segment{} ends at {end}",
                mark.end,
                mark.end,
                newest.map_or(String::new(), |n| alloc::format!(" {n:020}"))
            );
            return self.gap(log, end, mark.end, what, false);
        }
        Ok(())
    }

    /// Log offsets `from..to` no segment holds. A plain open refuses them; a repair records
    /// them in the report and in the quarantine (a note, `<from>-<to>.missing`: there are no
    /// bytes to keep) and goes on: a gap between segments is filled with a segment holding a
    /// repair blank (so the next plain open finds the segments contiguous); a missing end
    /// lowers the storage's record of the log's end to where the log now ends.
    fn gap<S: Storage>(
        &mut self,
        log: &mut Log<S>,
        from: u64,
        to: u64,
        what: String,
        between: bool,
    ) -> Result<(), RecoveryError<S::Error>> {
        if !self.repair {
            return Err(RecoveryError::Corrupt {
                offset: from,
                reason: what,
            });
        }
        let name = alloc::format!("{from:020}-{to:020}.missing");
        let note = alloc::format!(
            "rocklet repair: no segment held these log offsets; nothing of them remains\n{what}\n"
        );
        log.storage.quarantine(&name, note.as_bytes())?;
        self.report.quarantined.push(Quarantined {
            offset: from,
            bytes: to - from,
            reason: what,
            name,
        });
        if between {
            // One filler segment per 2 GiB (a blank's length is 32 bits).
            let mut at = from;
            while at < to {
                let len = (to - at).clamp(BLANK_LEN as u64, 1 << 31);
                let mut blank = Vec::with_capacity(BLANK_LEN);
                record::encode_repair_blank(&mut blank, len as u32);
                log.storage.write(at, 0, &blank)?;
                at += len;
            }
            log.storage.sync()?;
        } else {
            log.storage.record_log_end(from, false)?;
        }
        Ok(())
    }

    /// Bad bytes at the current position: cuts a torn tail, or refuses / repairs damage.
    fn damaged<S: Storage>(
        &mut self,
        log: &mut Log<S>,
        base: u64,
        seg_len: u64,
        last: bool,
        reason: String,
    ) -> Result<(), RecoveryError<S::Error>> {
        // An atomic group is kept whole or not at all: what goes starts with the group.
        let cut_at = self.group.as_ref().map_or(self.pos, |g| g.0);
        let bad_at = self.pos;
        let next_base = self.segs.get(self.si + 1).copied();
        let after = scan_after(log, base, bad_at, seg_len, next_base)?;
        // A torn write leaves a prefix of one record, then zeros or nothing. Two whole
        // records in a row (another program's log, RocketMQ's own records without Rocklet's
        // CRC) or more non-zero bytes than one record are not that.
        let foreign = match whole_record_at(log, base, bad_at, seg_len)? {
            Some(len) => whole_record_at(log, base, bad_at + len, seg_len)?.is_some(),
            None => false,
        };
        let torn_limit = u64::from(log.max_record);
        if let After::Nothing { nonzero_end } = after {
            if nonzero_end <= bad_at && self.group.is_none() {
                // Zeros to the end: the end of the data (a preallocated segment, or one
                // extended and never written). Nothing is cut; the next record goes here.
                self.end = base + bad_at;
                self.next_segment();
                return Ok(());
            }
        }
        if let (After::Nothing { nonzero_end }, true) = (&after, last) {
            if !foreign && nonzero_end.saturating_sub(bad_at) <= torn_limit {
                // A torn tail: cut it. Its bytes cannot hold anything acknowledged (a sync
                // would have covered them whole); what is not zero is kept in quarantine all
                // the same, so no byte of the log is ever lost to a misjudgement.
                let bytes = (*nonzero_end).max(bad_at) - cut_at;
                let mut kept_as = None;
                if *nonzero_end > cut_at {
                    let name =
                        alloc::format!("{:020}-{:020}.torn", base + cut_at, base + nonzero_end);
                    quarantine(log, base, cut_at, *nonzero_end, &name)?;
                    kept_as = Some(name);
                }
                log.storage.truncate(base, cut_at)?;
                self.report.bytes_truncated += bytes;
                self.report.cuts.push(Cut {
                    offset: base + cut_at,
                    bytes,
                    reason,
                    kept_as,
                });
                self.end = base + cut_at;
                self.next_segment();
                return Ok(());
            }
        }
        // Damage, not a torn write: it starts at the bad record (the valid records of an
        // atomic group before it are valid records like any other).
        let cut_at = bad_at;
        let what = match (&after, last) {
            (After::Valid(q), _) => alloc::format!(
                "{reason}, followed by valid records from log offset {}",
                base + q
            ),
            (After::Nothing { nonzero_end }, _) if foreign => alloc::format!(
                "{reason}, in whole records (another program's log?), not a torn write \
                 ({} bytes up to the segment's end)",
                nonzero_end.saturating_sub(bad_at)
            ),
            (After::Nothing { nonzero_end }, true) => alloc::format!(
                "{reason}, then {} bytes that are not zero: more than a torn write leaves",
                nonzero_end.saturating_sub(bad_at)
            ),
            (After::Nothing { .. }, false) => {
                alloc::format!("{reason}, in a segment that later segments follow")
            }
        };
        let what = alloc::format!(
            "segment {base:020} at position {cut_at} (log offset {}): {what}",
            base + cut_at
        );
        if !self.repair {
            return Err(RecoveryError::Corrupt {
                offset: base + cut_at,
                reason: what,
            });
        }
        // Repair: the damaged bytes go to quarantine first (durably), then the log skips them.
        let kept_group = self.group.is_some();
        if let Some((_, _, recs)) = self.group.take() {
            self.report.records += recs.len() as u64;
            self.ready.extend(recs);
        }
        // A repair blank takes BLANK_LEN bytes: a valid record that starts closer than that
        // to the damage cannot stay in place, so the range goes on to the next valid record
        // after the blank's room, and that record's bytes are kept in quarantine with the rest.
        let after = match after {
            After::Valid(q) if q - cut_at < BLANK_LEN as u64 => {
                scan_after(log, base, cut_at + BLANK_LEN as u64 - 1, seg_len, next_base)?
            }
            a => a,
        };
        // Up to the next valid record, or to the segment's end; a range that ends in zeros
        // is kept up to its last byte that is not (the name says the whole range).
        let (upto, kept_to) = match after {
            After::Valid(q) => (q, q),
            After::Nothing { nonzero_end } => (seg_len, nonzero_end.clamp(cut_at, seg_len)),
        };
        let name = alloc::format!("{:020}-{:020}.damaged", base + cut_at, base + upto);
        quarantine(log, base, cut_at, kept_to, &name)?;
        self.report.quarantined.push(Quarantined {
            offset: base + cut_at,
            bytes: upto - cut_at,
            reason: what,
            name,
        });
        let mut blank = Vec::with_capacity(BLANK_LEN);
        match after {
            After::Valid(q) => {
                record::encode_repair_blank(&mut blank, (q - cut_at) as u32);
                log.storage.write(base, cut_at, &blank)?;
                log.storage.sync()?;
                self.seek(q);
            }
            After::Nothing { .. } if last && kept_group => {
                // The valid records of an atomic group the damage cut stay, as after any
                // repair: a repair blank after them ends their group for every later open
                // (without it the next open would find the group torn at the tail and cut
                // it, with whatever was appended after this repair). The log goes on after it.
                log.storage.truncate(base, cut_at)?;
                record::encode_repair_blank(&mut blank, BLANK_LEN as u32);
                log.storage.write(base, cut_at, &blank)?;
                log.storage.sync()?;
                self.end = base + cut_at + BLANK_LEN as u64;
                self.next_segment();
            }
            After::Nothing { .. } if last => {
                log.storage.truncate(base, cut_at)?;
                self.end = base + cut_at;
                self.next_segment();
            }
            After::Nothing { .. } => {
                // A damaged older segment: it ends here (its bytes are in quarantine), closed
                // by a blank, so the segments after it stay where they are. (Segments of a
                // damaged directory may overlap: the blank then takes its minimum size, never
                // a wrapped one.)
                let rest = next_base
                    .unwrap_or(base)
                    .saturating_sub(base.saturating_add(cut_at))
                    .clamp(BLANK_LEN as u64, u64::from(u32::MAX));
                record::encode_repair_blank(&mut blank, rest as u32);
                log.storage.truncate(base, cut_at)?;
                log.storage.write(base, cut_at, &blank)?;
                log.storage.sync()?;
                self.end = base + cut_at + rest;
                self.next_segment();
            }
        }
        Ok(())
    }
}

/// Where the bytes of a segment that are not zero end, from segment position `from` on
/// (`from` when only zeros follow).
fn nonzero_end<S: Storage>(
    log: &mut Log<S>,
    base: u64,
    from: u64,
    seg_len: u64,
) -> Result<u64, S::Error> {
    let mut window = vec![0u8; SCAN_WINDOW];
    let mut end = from;
    let mut at = from;
    while at < seg_len {
        match log.storage.data_from(base, at)? {
            None => break,
            Some(next) if next > at => {
                at = next;
                continue;
            }
            Some(_) => {}
        }
        let n = log.storage.read(base, at, &mut window)?;
        if n == 0 {
            break;
        }
        if let Some(i) = window[..n].iter().rposition(|&b| b != 0) {
            end = at + i as u64 + 1;
        }
        at += n as u64;
    }
    Ok(end)
}

/// Looks past bad bytes at segment position `from`: the first position after it where a
/// valid record starts (its CRCs right and its PHYSICALOFFSET naming that very position, so a
/// body that happens to hold record-like bytes does not count), or a blank that ends the
/// segment where the next one begins; else how far the non-zero bytes go.
fn scan_after<S: Storage>(
    log: &mut Log<S>,
    base: u64,
    from: u64,
    seg_len: u64,
    next_base: Option<u64>,
) -> Result<After, S::Error> {
    let mut window = vec![0u8; SCAN_WINDOW + 36];
    let mut nonzero_end = from;
    let mut at = from;
    while at < seg_len {
        // Skip a hole (a preallocated file's unwritten rest) at once.
        match log.storage.data_from(base, at)? {
            None => break,
            Some(next) if next > at => {
                at = next;
                continue;
            }
            Some(_) => {}
        }
        let n = log.storage.read(base, at, &mut window)?;
        if n == 0 {
            break;
        }
        let w = &window[..n];
        let Some(last_nonzero) = w.iter().rposition(|&b| b != 0) else {
            // Zeros only: nothing starts here.
            if n <= SCAN_WINDOW {
                break;
            }
            at += SCAN_WINDOW as u64;
            continue;
        };
        nonzero_end = nonzero_end.max(at + last_nonzero as u64 + 1);
        // Candidates start in this window's first SCAN_WINDOW bytes; the rest is overlap.
        let limit = n.min(SCAN_WINDOW);
        for i in 0..limit {
            let q = at + i as u64;
            if q == from || i + 8 > n {
                continue;
            }
            let magic = u32::from_be_bytes([w[i + 4], w[i + 5], w[i + 6], w[i + 7]]);
            let total = u64::from(u32::from_be_bytes([w[i], w[i + 1], w[i + 2], w[i + 3]]));
            if (magic == record::BLANK_MAGIC || magic == record::REPAIR_MAGIC)
                && total >= BLANK_LEN as u64
            {
                let closes = match next_base {
                    Some(nb) => base + q + total == nb,
                    None => q + BLANK_LEN as u64 == seg_len,
                };
                let skips = magic == record::REPAIR_MAGIC
                    && q + total < seg_len
                    && valid_record_at(log, base, q + total)?;
                if closes || skips {
                    return Ok(After::Valid(q));
                }
            } else if (magic == record::MESSAGE_MAGIC || magic == record::MESSAGE_MAGIC_V2)
                && i + 36 <= n
                && u64::from_be_bytes(w[i + 28..i + 36].try_into().expect("8 bytes")) == base + q
                && valid_record_at(log, base, q)?
            {
                return Ok(After::Valid(q));
            }
        }
        if n <= SCAN_WINDOW {
            break;
        }
        at += SCAN_WINDOW as u64;
    }
    Ok(After::Nothing { nonzero_end })
}

/// Whether a valid record starts at segment position `q`.
fn valid_record_at<S: Storage>(log: &mut Log<S>, base: u64, q: u64) -> Result<bool, S::Error> {
    let mut head = [0u8; 4];
    if log.storage.read(base, q, &mut head)? < 4 {
        return Ok(false);
    }
    let len = u32::from_be_bytes(head);
    if len > log.max_record || (len as usize) < record::FIXED_LEN_V4 {
        return Ok(false);
    }
    let mut buf = vec![0u8; len as usize];
    if log.storage.read(base, q, &mut buf)? < buf.len() {
        return Ok(false);
    }
    Ok(matches!(
        record::decode(&buf, log.max_record),
        Ok(Decoded::Record(r)) if r.header.phys_offset == base + q
    ))
}

/// Copies segment bytes `from..to` to the storage's quarantine under `name`.
pub(super) fn quarantine<S: Storage>(
    log: &mut Log<S>,
    base: u64,
    from: u64,
    to: u64,
    name: &str,
) -> Result<(), S::Error> {
    let mut chunk = vec![0u8; ((to - from) as usize).min(SCAN_WINDOW)];
    let mut at = from;
    while at < to {
        let n = ((to - at) as usize).min(SCAN_WINDOW);
        let got = log.storage.read(base, at, &mut chunk[..n])?;
        if got == 0 {
            break;
        }
        log.storage.quarantine(name, &chunk[..got])?;
        at += got as u64;
    }
    Ok(())
}

/// The length of a whole record of RocketMQ's layout at segment position `pos`, whatever
/// its CRCs say: the lengths add up, the record fits in the segment and its PHYSICALOFFSET
/// names this position. Rocklet's own records and RocketMQ's (with or without Rocklet's CRC
/// property, v1 or v2) qualify; a torn prefix does not.
fn whole_record_at<S: Storage>(
    log: &mut Log<S>,
    base: u64,
    pos: u64,
    seg_len: u64,
) -> Result<Option<u64>, S::Error> {
    let mut head = [0u8; 36];
    if log.storage.read(base, pos, &mut head)? < head.len() {
        return Ok(None);
    }
    let len = u64::from(u32::from_be_bytes([head[0], head[1], head[2], head[3]]));
    let magic = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
    let phys = u64::from_be_bytes([
        head[28], head[29], head[30], head[31], head[32], head[33], head[34], head[35],
    ]);
    if len < record::FIXED_LEN_V4 as u64
        || len > u64::from(log.max_record)
        || pos + len > seg_len
        || phys != base + pos
    {
        return Ok(None);
    }
    let topic_len_bytes = match magic {
        record::MESSAGE_MAGIC => 1,
        record::MESSAGE_MAGIC_V2 => 2,
        _ => return Ok(None),
    };
    let mut buf = vec![0u8; len as usize];
    if log.storage.read(base, pos, &mut buf)? < buf.len() {
        return Ok(None);
    }
    Ok(layout_adds_up(&buf, topic_len_bytes).then_some(len))
}

/// Whether the length fields of a record in RocketMQ's layout add up to its TOTALSIZE
/// (`buf` is exactly TOTALSIZE long).
fn layout_adds_up(b: &[u8], topic_len_bytes: usize) -> bool {
    let be32 = |at: usize| {
        b.get(at..at + 4)
            .map(|x| u32::from_be_bytes([x[0], x[1], x[2], x[3]]))
    };
    let Some(sys) = be32(36) else { return false };
    let born = if sys & record::sys_flag::BORNHOST_V6 != 0 {
        20
    } else {
        8
    };
    let store = if sys & record::sys_flag::STOREHOST_V6 != 0 {
        20
    } else {
        8
    };
    // BORNTIMESTAMP at 40, BORNHOST, STORETIMESTAMP, STOREHOST, RECONSUMETIMES, PREPARED, BODY.
    let body_len_at = 48 + born + 8 + store + 4 + 8;
    let Some(body_len) = be32(body_len_at) else {
        return false;
    };
    let topic_len_at = body_len_at + 4 + body_len as usize;
    let topic_len = match (topic_len_bytes, b.get(topic_len_at..topic_len_at + 2)) {
        (1, Some(x)) => usize::from(x[0]),
        (2, Some(x)) => usize::from(u16::from_be_bytes([x[0], x[1]])),
        _ => return false,
    };
    let props_len_at = topic_len_at + topic_len_bytes + topic_len;
    let Some(x) = b.get(props_len_at..props_len_at + 2) else {
        return false;
    };
    props_len_at + 2 + usize::from(u16::from_be_bytes([x[0], x[1]])) == b.len()
}
