//! The segmented commit log over a [`Storage`]: placement, appends, reads and recovery.

use alloc::collections::VecDeque;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use crate::record::{self, Decoded, RecordView, BLANK_LEN};
use crate::storage::Storage;

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
    /// Bytes cut off a torn tail (or after a damaged record).
    pub bytes_truncated: u64,
    /// Where and why the log was cut.
    pub cuts: Vec<Cut>,
}

/// One cut made on open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cut {
    /// Log offset of the first byte cut.
    pub offset: u64,
    /// Bytes cut.
    pub bytes: u64,
    /// Why.
    pub reason: String,
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
        }
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

    /// An append to a segment that holds `len` bytes. When it fails, the segment must still
    /// hold exactly `len` (a storage removes what it wrote of a failed append); when it does
    /// not, or cannot say, the log is torn: bytes nobody will overwrite sit where the next
    /// record goes, and [`Log::torn`] says so.
    fn storage_append(&mut self, base: u64, len: u64, bytes: &[u8]) -> Result<(), S::Error> {
        let Err(e) = self.storage.append(base, bytes) else {
            return Ok(());
        };
        if !matches!(self.storage.len(base), Ok(l) if l == len) {
            self.torn = true;
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

    /// Starts recovery: reads the segment list.
    pub(crate) fn start_recovery(&mut self) -> Result<Recovery, S::Error> {
        self.segments = self.storage.segments()?;
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
            end: 0,
            report,
        })
    }

    /// Ends recovery: sets the append point.
    pub(crate) fn finish_recovery(&mut self, rec: Recovery) -> RecoveryReport {
        let mut end = rec.end;
        if self.segments.is_empty() {
            end = 0;
        }
        self.end = end;
        self.synced = end;
        if let Some(&last) = self.segments.last() {
            if end > last {
                // The last segment was closed by a blank: appends go to the next one.
                self.segments.push(end);
            }
        }
        rec.report
    }
}

/// A recovery in progress: yields each valid record in log order (an atomic group only
/// once all of it is there) and cuts what is torn or damaged.
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
}

/// An atomic group being read: (segment position of its start, records left, the records).
type Group = (u64, u32, Vec<(u64, Vec<u8>)>);

enum Step {
    /// A record at buf[start..start+len] (already consumed).
    Record(u64, usize, usize),
    Ready,
    Done,
}

impl Recovery {
    /// The next valid record, as (offset, bytes).
    pub(crate) fn next<S: Storage>(
        &mut self,
        log: &mut Log<S>,
    ) -> Result<Option<(u64, &[u8])>, S::Error> {
        match self.step(log)? {
            Step::Record(off, at, len) => Ok(Some((off, &self.buf[at..at + len]))),
            Step::Ready => {
                self.current = self.ready.pop_front();
                Ok(self.current.as_ref().map(|(o, b)| (*o, b.as_slice())))
            }
            Step::Done => Ok(None),
        }
    }

    fn step<S: Storage>(&mut self, log: &mut Log<S>) -> Result<Step, S::Error> {
        loop {
            if !self.ready.is_empty() {
                return Ok(Step::Ready);
            }
            let Some(&base) = self.segs.get(self.si) else {
                return Ok(Step::Done);
            };
            let seg_len = match self.seg_len {
                Some(l) => l,
                None => {
                    let l = log.storage.len(base)?;
                    self.seg_len = Some(l);
                    self.start = 0;
                    self.filled = 0;
                    self.pos = 0;
                    self.group = None;
                    l
                }
            };
            let last = self.si + 1 == self.segs.len();
            let avail = &self.buf[self.start..self.filled];
            let cut: Option<String> = match record::decode(avail, log.max_record) {
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
                Ok(Decoded::Blank { len }) => {
                    if self.group.is_some() {
                        Some("segment ends inside an atomic group".into())
                    } else {
                        self.end = base + self.pos + u64::from(len);
                        self.si += 1;
                        self.seg_len = None;
                        None
                    }
                }
                Ok(Decoded::Incomplete { needed }) => {
                    if self.pos + ((self.filled - self.start) as u64) >= seg_len {
                        if self.filled == self.start && self.group.is_none() {
                            // The segment ends here, cleanly.
                            self.end = base + self.pos;
                            self.si += 1;
                            self.seg_len = None;
                            None
                        } else if self.group.is_some() && self.filled == self.start {
                            Some("atomic group torn by the end of the log".into())
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
            if let Some(reason) = cut {
                let cut_at = self.group.as_ref().map_or(self.pos, |g| g.0);
                let bytes = seg_len.saturating_sub(cut_at);
                log.storage.truncate(base, cut_at)?;
                self.report.bytes_truncated += bytes;
                self.report.cuts.push(Cut {
                    offset: base + cut_at,
                    bytes,
                    reason,
                });
                self.end = base + cut_at;
                if !last {
                    // A damaged older segment: close it with a blank so the intact segments
                    // after it stay where they are.
                    let mut blank = Vec::new();
                    // Segments from a damaged directory may overlap (a cut past the next
                    // base): the blank then takes its minimum size, never a wrapped one.
                    let rest = self.segs[self.si + 1]
                        .saturating_sub(base.saturating_add(cut_at))
                        .clamp(BLANK_LEN as u64, u64::from(u32::MAX));
                    record::encode_blank(&mut blank, rest as u32);
                    log.storage.append(base, &blank)?;
                }
                self.group = None;
                self.si += 1;
                self.seg_len = None;
            }
        }
    }
}
