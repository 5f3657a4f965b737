//! The segmented commit log over a [`Storage`]: placement, appends, reads and recovery.

use alloc::collections::VecDeque;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use crate::record::{self, Decoded, RecordView, BLANK_LEN};
use crate::storage::{LogEnd, Storage};

/// Property on the first record of an atomic group (a batch, or a record written together
/// with the record that moves it): how many records the group holds. Recovery keeps a group
/// only when all of it was written.
pub const BATCH_LEN: &str = "__BATCH_LEN";

/// What recovery found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segments read.
    pub segments: usize,
    /// Valid records kept.
    pub records: u64,
    /// Bytes read.
    pub bytes_scanned: u64,
    /// Bytes cut off a torn tail.
    pub bytes_truncated: u64,
    /// Torn tails cut (at most one: the end of the last segment).
    pub cuts: Vec<Cut>,
    /// Damaged ranges a repair moved out of the log ([`Broker::open_repairing`]); empty after
    /// a plain open, which refuses a damaged log instead.
    ///
    /// [`Broker::open_repairing`]: crate::Broker::open_repairing
    pub quarantined: Vec<Quarantined>,
}

impl RecoveryReport {
    /// Bytes a repair moved to quarantine.
    #[must_use]
    pub fn bytes_quarantined(&self) -> u64 {
        self.quarantined.iter().map(|q| q.bytes).sum()
    }
}

/// One cut made on open: a torn tail, which nothing acknowledged can be in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cut {
    /// Log offset of the first byte cut.
    pub offset: u64,
    /// Bytes cut.
    pub bytes: u64,
    /// Why.
    pub reason: String,
    /// The quarantine entry holding the cut bytes (up to the last one that is not zero);
    /// `None` when they were all zero.
    pub kept_as: Option<String>,
}

/// A damaged range a repair took out of the log. Its bytes are kept, unchanged, in the
/// storage's quarantine under `name`; the log skips the range from then on, so every valid
/// record before and after it stays where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quarantined {
    /// Log offset of the first damaged byte.
    pub offset: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// What was wrong.
    pub reason: String,
    /// Where the bytes are (for files: `quarantine/<name>` in the data directory). The name
    /// is the range, `<offset>-<end>`; an entry shorter than its range ends where the rest of
    /// the range was zeros.
    pub name: String,
}

/// Why recovery stopped.
pub(crate) enum RecoveryError<E> {
    Storage(E),
    /// Damage that is not a torn tail, found by a plain open: nothing was changed.
    Corrupt {
        offset: u64,
        reason: String,
    },
}

impl<E> From<E> for RecoveryError<E> {
    fn from(e: E) -> Self {
        RecoveryError::Storage(e)
    }
}

pub(crate) struct Log<S> {
    pub(crate) storage: S,
    seg_size: u64,
    /// Bases of the segments, ascending; the last one takes appends.
    segments: Vec<u64>,
    /// Next append offset.
    end: u64,
    /// Everything below this is durable.
    synced: u64,
    /// Largest record recovery accepts.
    max_record: u32,
    read_buf: Vec<u8>,
    /// A failed append left bytes behind.
    torn: bool,
    /// Where the log starts: retention retired every segment below it (0: none retired).
    start: u64,
}

pub(crate) enum LogError<E> {
    Storage(E),
    TooLarge,
}

impl<E> From<E> for LogError<E> {
    fn from(e: E) -> Self {
        LogError::Storage(e)
    }
}

impl<S: Storage> Log<S> {
    pub(crate) fn new(storage: S, seg_size: u64, max_record: u32) -> Self {
        Log {
            storage,
            seg_size,
            segments: Vec::new(),
            end: 0,
            synced: 0,
            max_record,
            read_buf: Vec::new(),
            torn: false,
            start: 0,
        }
    }

    /// Where the log starts: the base of its oldest segment once retention retired the ones
    /// before it (0 before any was).
    pub(crate) fn start(&self) -> u64 {
        self.start
    }

    /// Bases of the segments, ascending (the last one takes appends).
    pub(crate) fn segment_bases(&self) -> &[u64] {
        &self.segments
    }

    /// The log now starts at `start` (a segment base, never the one taking appends): the
    /// segments below it leave the list and the storage lets go of them. Returns their bases,
    /// for the host to delete. Call it only once the record of the new start is durable.
    pub(crate) fn retire(&mut self, start: u64) -> Vec<u64> {
        let keep_from = self
            .segments
            .partition_point(|&b| b < start)
            .min(self.segments.len().saturating_sub(1));
        let gone: Vec<u64> = self.segments.drain(..keep_from).collect();
        for &b in &gone {
            self.storage.close_segment(b);
        }
        if let Some(&first) = self.segments.first() {
            self.start = self.start.max(first);
        }
        gone
    }

    pub(crate) fn end(&self) -> u64 {
        self.end
    }

    pub(crate) fn synced(&self) -> u64 {
        self.synced
    }

    /// A sync the host ran made everything below `upto` durable.
    pub(crate) fn mark_synced(&mut self, upto: u64) {
        self.synced = self.synced.max(upto.min(self.end));
    }

    pub(crate) fn max_record(&self) -> u32 {
        self.max_record
    }

    pub(crate) fn segment_count(&self) -> usize {
        self.segments.len()
    }

    fn base_of(&self, offset: u64) -> Option<u64> {
        let i = self.segments.partition_point(|&b| b <= offset);
        if i == 0 {
            None
        } else {
            Some(self.segments[i - 1])
        }
    }

    /// The offset where `len` bytes written now would start, rolling to a new segment (with
    /// an end-of-segment blank) when the current one cannot hold them.
    pub(crate) fn place(&mut self, len: usize) -> Result<u64, LogError<S::Error>> {
        let len = len as u64;
        if len + BLANK_LEN as u64 > self.seg_size {
            return Err(LogError::TooLarge);
        }
        let Some(&base) = self.segments.last() else {
            self.segments.push(0);
            self.end = 0;
            return Ok(0);
        };
        let pos = self.end - base;
        // Always leave room for the blank after the record.
        if pos + len + BLANK_LEN as u64 <= self.seg_size {
            return Ok(self.end);
        }
        let mut blank = Vec::with_capacity(BLANK_LEN);
        record::encode_blank(
            &mut blank,
            (self.seg_size.max(pos + BLANK_LEN as u64) - pos) as u32,
        );
        self.storage_append(base, pos, &blank)?;
        let next = base + self.seg_size.max(pos + BLANK_LEN as u64);
        self.segments.push(next);
        self.end = next;
        Ok(next)
    }

    /// Appends bytes placed by [`Log::place`] at `at`.
    pub(crate) fn append(&mut self, at: u64, bytes: &[u8]) -> Result<(), S::Error> {
        debug_assert_eq!(at, self.end);
        let base = *self.segments.last().expect("placed");
        self.storage_append(base, at - base, bytes)?;
        self.end = at + bytes.len() as u64;
        Ok(())
    }

    /// Appends at `at` (placed by [`Log::place`]) what `encode` writes into the storage's
    /// own buffer, when the storage offers one ([`Storage::append_buffer`]); `None` when it
    /// does not (use [`Log::append`]). When `encode` fails, nothing stays appended.
    pub(crate) fn append_with<R, E>(
        &mut self,
        at: u64,
        encode: impl FnOnce(&mut Vec<u8>) -> Result<R, E>,
    ) -> Option<Result<R, E>> {
        debug_assert_eq!(at, self.end);
        let base = *self.segments.last()?;
        let buf = self.storage.append_buffer(base, at - base)?;
        let start = buf.len();
        let r = encode(buf);
        if r.is_err() {
            buf.truncate(start);
        } else {
            self.end = at + (buf.len() - start) as u64;
        }
        Some(r)
    }

    /// A write at the end of a segment's data, at `pos`. When it fails, the bytes at `pos`
    /// must read as before (zeros, or nothing: a storage undoes what it wrote of a failed
    /// write); when they do not, or the storage cannot say, the log is torn: a partial record
    /// sits where the next one goes, and [`Log::torn`] says so.
    fn storage_append(&mut self, base: u64, pos: u64, bytes: &[u8]) -> Result<(), S::Error> {
        let Err(e) = self.storage.write(base, pos, bytes) else {
            return Ok(());
        };
        let mut head = [0u8; 8];
        match self.storage.read(base, pos, &mut head) {
            Ok(n) if head[..n].iter().all(|&b| b == 0) => {}
            _ => self.torn = true,
        }
        Err(e)
    }

    /// Whether a failed append left bytes behind (see [`Log::append`]).
    pub(crate) fn torn(&self) -> bool {
        self.torn
    }

    pub(crate) fn sync(&mut self) -> Result<u64, S::Error> {
        if self.synced < self.end {
            self.storage.sync()?;
            self.synced = self.end;
        }
        Ok(self.synced)
    }

    /// Reads the record at `offset` of `len` bytes.
    pub(crate) fn read(
        &mut self,
        offset: u64,
        len: usize,
    ) -> Result<Option<RecordView<'_>>, S::Error> {
        // Offsets come from clients too (transaction ids, send-backs): past the end of the
        // log there is nothing, and the storage is never asked.
        if offset
            .checked_add(len as u64)
            .is_none_or(|end| end > self.end)
        {
            return Ok(None);
        }
        let Some(base) = self.base_of(offset) else {
            return Ok(None);
        };
        if self.read_buf.len() < len {
            self.read_buf.resize(len, 0);
        }
        let n = self
            .storage
            .read(base, offset - base, &mut self.read_buf[..len])?;
        if n < len {
            return Ok(None);
        }
        match record::decode(&self.read_buf[..len], u32::MAX) {
            Ok(Decoded::Record(r)) if r.header.phys_offset == offset => Ok(Some(r)),
            _ => Ok(None),
        }
    }

    /// Reads the record at `offset` when its length is not known.
    pub(crate) fn read_any(&mut self, offset: u64) -> Result<Option<RecordView<'_>>, S::Error> {
        if offset >= self.end {
            return Ok(None);
        }
        let Some(base) = self.base_of(offset) else {
            return Ok(None);
        };
        let mut head = [0u8; 4];
        if self.storage.read(base, offset - base, &mut head)? < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes(head);
        if len > self.max_record || (len as usize) < record::FIXED_LEN_V4 {
            return Ok(None);
        }
        self.read(offset, len as usize)
    }

    /// For readers that walk the log: where reading goes on after the position `offset`
    /// that holds no record — past a blank a repair laid over damage (the segment goes on
    /// after it), else the next segment's base; `None` past the last segment.
    pub(crate) fn skip_from(&mut self, offset: u64) -> Result<Option<u64>, S::Error> {
        let Some(base) = self.base_of(offset) else {
            return Ok(None);
        };
        let mut head = [0u8; BLANK_LEN];
        if self.storage.read(base, offset - base, &mut head)? == BLANK_LEN {
            if let Ok(Decoded::Repaired { len }) = record::decode(&head, u32::MAX) {
                if offset - base + u64::from(len) < self.storage.len(base)? {
                    return Ok(Some(offset + u64::from(len)));
                }
            }
        }
        Ok(self.segments.iter().copied().find(|&b| b > offset))
    }

    /// Raw bytes of the log from `from` on, for a replica: whole records of one segment, at
    /// most about `max` bytes (an atomic group whole, however large), ending with the
    /// segment's end blank when it is reached. `None` when nothing is there yet.
    pub(crate) fn read_raw(&mut self, from: u64, max: usize) -> Result<Option<Vec<u8>>, S::Error> {
        if from >= self.end {
            return Ok(None);
        }
        let Some(base) = self.base_of(from) else {
            return Ok(None);
        };
        let seg_end = self
            .segments
            .iter()
            .copied()
            .find(|&b| b > base)
            .unwrap_or(self.end)
            .min(self.end);
        let mut out = Vec::new();
        let mut at = from;
        let mut group_left = 0u32;
        while at < seg_end && (out.len() < max || group_left > 0) {
            let mut head = [0u8; BLANK_LEN];
            if self.storage.read(base, at - base, &mut head)? < BLANK_LEN {
                break;
            }
            let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
            let magic = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
            if magic == record::BLANK_MAGIC || magic == record::REPAIR_MAGIC {
                // A blank: only its eight bytes are written; its length says where the log
                // goes on.
                out.extend_from_slice(&head);
                if magic == record::BLANK_MAGIC {
                    break;
                }
                at += len as u64;
                continue;
            }
            if len < record::FIXED_LEN_V4 || len > self.max_record as usize {
                break;
            }
            let start = out.len();
            out.resize(start + len, 0);
            if self.storage.read(base, at - base, &mut out[start..])? < len {
                out.truncate(start);
                break;
            }
            match record::decode_trusted(&out[start..]) {
                Ok(Decoded::Record(r)) => {
                    if group_left > 0 {
                        group_left -= 1;
                    } else if let Some(n) = r.prop(BATCH_LEN).and_then(|v| v.parse::<u32>().ok()) {
                        group_left = n.saturating_sub(1);
                    }
                }
                _ => {
                    out.truncate(start);
                    break;
                }
            }
            at += len as u64;
        }
        Ok((!out.is_empty()).then_some(out))
    }

    /// For a replica: writes bytes the master wrote at `at`, the end of this log (records
    /// checked by the caller). `next_segment`: they end with the segment's end blank, and
    /// the log goes on at that base.
    pub(crate) fn write_replicated(
        &mut self,
        at: u64,
        bytes: &[u8],
        next_segment: Option<u64>,
    ) -> Result<(), S::Error> {
        debug_assert_eq!(at, self.end);
        let base = match self.segments.last() {
            Some(&b) => b,
            None => {
                self.segments.push(at);
                at
            }
        };
        self.storage_append(base, at - base, bytes)?;
        self.end = at + bytes.len() as u64;
        if let Some(next) = next_segment {
            self.segments.push(next);
            self.end = next;
        }
        Ok(())
    }

    /// Starts recovery: reads the segment list. `repair`: damage that is not a torn tail is
    /// moved to quarantine instead of refused.
    ///
    /// `start`: where the log starts (retention retired the segments before it; 0 when
    /// none was). Segments below it are what a deletion left half done: they are removed
    /// now, never read. The segment at `start` must be there (else the log is missing data).
    pub(crate) fn start_recovery(
        &mut self,
        repair: bool,
        start: u64,
    ) -> Result<Recovery, S::Error> {
        self.start = start;
        self.segments = self.storage.segments()?;
        let stale = self.segments.partition_point(|&b| b < start);
        for b in self.segments.drain(..stale) {
            self.storage.remove(b)?;
        }
        let mark = self.storage.log_end()?;
        let failed_at = self.storage.failed_at()?;
        let report = RecoveryReport {
            segments: self.segments.len(),
            ..RecoveryReport::default()
        };
        Ok(Recovery {
            segs: self.segments.clone(),
            si: 0,
            seg_len: None,
            buf: vec![0; 1 << 20],
            start: 0,
            filled: 0,
            pos: 0,
            group: None,
            ready: VecDeque::new(),
            current: None,
            end: start,
            report,
            repair,
            closed: false,
            mark,
            failed_at,
            settle: false,
            end_checked: false,
            log_start: start,
        })
    }

    /// A clean stop: everything is synced, and the storage records where the log ends and
    /// that it was closed cleanly.
    pub(crate) fn close(&mut self) -> Result<(), S::Error> {
        self.sync()?;
        self.storage.sync()?;
        self.storage.record_log_end(self.end, true)
    }

    /// Ends recovery: sets the append point.
    pub(crate) fn finish_recovery(&mut self, rec: Recovery) -> RecoveryReport {
        let mut end = rec.end;
        if self.segments.is_empty() {
            end = 0;
        }
        self.end = end;
        self.synced = end;
        if rec.closed && !self.segments.is_empty() {
            // The last segment was closed by a blank: appends go to the next one (on the
            // grid: the blank took the segment to its size). Otherwise they continue in it.
            self.segments.push(end);
        }
        rec.report
    }
}

/// A recovery in progress: yields each valid record in log order (an atomic group only
/// once all of it is there).
///
/// Only a torn tail is cut: invalid bytes at the end of the last segment with no valid
/// record after them, no more of them than one record, and not a whole record of some other
/// format. Anything else is damage: a plain open refuses it (and changes nothing), a repair
/// moves the damaged bytes to quarantine and leaves a blank over their start, so every valid
/// record after them stays at its offset.
pub(crate) struct Recovery {
    segs: Vec<u64>,
    si: usize,
    seg_len: Option<u64>,
    buf: Vec<u8>,
    /// Valid bytes are buf[start..filled]; buf[start] is at segment position `pos`.
    start: usize,
    filled: usize,
    pos: u64,
    /// An atomic group in progress: (segment position of its start, records left, records).
    group: Option<Group>,
    ready: VecDeque<(u64, Vec<u8>)>,
    current: Option<(u64, Vec<u8>)>,
    end: u64,
    report: RecoveryReport,
    repair: bool,
    /// The segment last read ended with an end-of-segment blank.
    closed: bool,
    /// How far the log reached, as the storage recorded it.
    mark: Option<LogEnd>,
    /// The last run stopped on a storage failure when everything below this was durable
    /// ([`Storage::failed_at`]): the log is cut here.
    failed_at: Option<u64>,
    /// The log was cut at a recorded failure: the storage's record of its end follows it.
    settle: bool,
    /// The end of the segments was held to `mark`.
    end_checked: bool,
    /// Where the log starts (see [`Log::start_recovery`]).
    log_start: u64,
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
fn quarantine<S: Storage>(
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

/// Cuts a log's storage at `offset`: every byte from there on goes (segments after it are
/// removed). For a replica that rejoins with records a new master never had; open the
/// broker again afterwards (recovery rebuilds the state).
pub(crate) fn truncate_storage<S: Storage>(storage: &mut S, offset: u64) -> Result<(), S::Error> {
    let segments = storage.segments()?;
    for (i, &base) in segments.iter().enumerate() {
        let next = segments.get(i + 1).copied().unwrap_or(u64::MAX);
        if base >= offset {
            storage.remove(base)?;
        } else if offset < next {
            storage.truncate(base, offset - base)?;
        }
    }
    storage.sync()?;
    // The log is shorter now: the record of how far it reached follows it down.
    if let Some(mark) = storage.log_end()? {
        storage.record_log_end(mark.end.min(offset), false)?;
    }
    Ok(())
}
