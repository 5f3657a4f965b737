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
    /// The log offset of the checkpoint this open started from: only the log from there on
    /// was read (`records`, `bytes_scanned` and `segments` count that part). `None`: the
    /// whole log was replayed.
    pub checkpoint: Option<u64>,
    /// Why a checkpoint the storage holds was not used (damaged, unreadable, or no longer
    /// matching the log), when it was not: the whole log was replayed instead.
    pub checkpoint_unused: Option<String>,
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
            from_checkpoint: None,
        })
    }

    /// Starts recovery from a checkpoint covering the log below `covers` (`closed`: the
    /// segment before it ends there): reads the segment list as
    /// [`Log::start_recovery`] does (the caller checked the segments below `covers`), then
    /// only the log from `covers` on.
    pub(crate) fn start_recovery_at(
        &mut self,
        start: u64,
        covers: u64,
        closed: bool,
    ) -> Result<Recovery, S::Error> {
        let mut rec = self.start_recovery(false, start)?;
        // The segment holding the byte before `covers`.
        let si = rec.segs.partition_point(|&b| b < covers).saturating_sub(1);
        if let Some(&base) = rec.segs.get(si) {
            rec.si = si;
            rec.seg_len = Some(self.storage.len(base)?);
            rec.pos = covers - base;
            rec.end = covers;
            rec.closed = closed;
            rec.from_checkpoint = Some(covers);
        }
        Ok(rec)
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

mod recovery;
pub(crate) use recovery::Recovery;

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
    // A checkpoint of state past the cut no longer describes this log.
    if let Some(c) = storage.checkpoint()? {
        if crate::broker::checkpoint_covers(&c).is_none_or(|covers| covers > offset) {
            storage.remove_checkpoint()?;
        }
    }
    // The log is shorter now: the record of how far it reached follows it down.
    if let Some(mark) = storage.log_end()? {
        storage.record_log_end(mark.end.min(offset), false)?;
    }
    Ok(())
}
