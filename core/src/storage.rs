//! Where the log's bytes live: a pluggable, segmented store.
//!
//! A segment is named by the log offset of its first byte (its *base*), as RocketMQ names
//! its commit-log files. The core writes only at the end of the newest segment's data (a
//! repair on open also lays a blank over damage), reads anywhere, cuts a torn tail on open
//! and syncs when the host asks it to. A segment may be longer than its data: a file
//! preallocated to the segment size, as RocketMQ's are, holds zeros after it, and recovery
//! takes zeros as the end of the data.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// Byte storage for the commit log.
pub trait Storage {
    /// What can go wrong (an I/O error for files; nothing for memory).
    type Error: fmt::Debug + fmt::Display;

    /// Bases of every segment, ascending.
    fn segments(&mut self) -> Result<Vec<u64>, Self::Error>;
    /// Length in bytes of a segment (its data, and any preallocated zeros after it).
    fn len(&mut self, base: u64) -> Result<u64, Self::Error>;
    /// Reads up to `buf.len()` bytes at `pos` within a segment; returns how many were read
    /// (fewer only at the segment's end).
    fn read(&mut self, base: u64, pos: u64, buf: &mut [u8]) -> Result<usize, Self::Error>;
    /// Writes bytes at `pos` of a segment, creating it if it does not exist. When it fails,
    /// the bytes at `pos` must read as before (zero, or nothing): the storage undoes what it
    /// wrote of them.
    fn write(&mut self, base: u64, pos: u64, data: &[u8]) -> Result<(), Self::Error>;
    /// Makes every written byte durable: the segments' and the side files' (their
    /// creation and removal included).
    fn sync(&mut self) -> Result<(), Self::Error>;
    /// Cuts a segment's data at `len` bytes: nothing after it reads as data any more (a
    /// preallocated file keeps its length and holds zeros from there on).
    fn truncate(&mut self, base: u64, len: u64) -> Result<(), Self::Error>;
    /// Deletes a segment.
    fn remove(&mut self, base: u64) -> Result<(), Self::Error>;
    /// Lets go of a segment the log no longer reads (retention retired it): a storage that
    /// holds it open closes it, so whoever deletes it (the host, off the core's thread) frees
    /// its space. The default holds nothing.
    fn close_segment(&mut self, base: u64) {
        let _ = base;
    }
    /// Where bytes that may not be zero start again at or after `pos`, or `None` when only
    /// zeros follow: a storage that knows its holes (a sparse, preallocated file) lets
    /// recovery skip them. The default knows none.
    fn data_from(&mut self, base: u64, pos: u64) -> Result<Option<u64>, Self::Error> {
        let _ = base;
        Ok(Some(pos))
    }
    /// Appends `data` to the quarantine entry `name` (created if new), durably before it
    /// returns. Quarantine holds bytes recovery took out of the log; the log never reads it.
    fn quarantine(&mut self, name: &str, data: &[u8]) -> Result<(), Self::Error>;
    /// For a storage that holds a segment's bytes in a buffer of its own (memory): that
    /// buffer, creating the segment if it does not exist, when its data ends at `pos`, so a
    /// record can be encoded straight into it (what is appended to it is written, as by
    /// [`Storage::write`] at `pos`). `None`, the default: the caller uses [`Storage::write`].
    fn append_buffer(&mut self, base: u64, pos: u64) -> Option<&mut Vec<u8>> {
        let _ = (base, pos);
        None
    }
    /// The durable record of how far the log reached ([`LogEnd`]), which recovery holds the
    /// segments to: `None` when the storage keeps none (memory, or a data directory written
    /// before it was kept). The default keeps none.
    fn log_end(&mut self) -> Result<Option<LogEnd>, Self::Error> {
        Ok(None)
    }
    /// Records, durably before it returns, that every byte of the log below `end` is
    /// durable, with the newest segment there is; `clean`: the log is closed (a clean stop:
    /// nothing is appended until the next open). May lower what was recorded (a repair that
    /// went on past missing data, a replica cutting its log). The default keeps nothing.
    fn record_log_end(&mut self, end: u64, clean: bool) -> Result<(), Self::Error> {
        let _ = (end, clean);
        Ok(())
    }
    /// When the last run stopped on a storage failure and recorded it: the log offset below
    /// which everything it wrote was durable. Nothing at or after it was acknowledged, so
    /// recovery cuts the log there, whatever of it reached the disk (after a failed
    /// writeback, blocks land out of order: later records can sit behind a hole). Cleared
    /// by the next [`Storage::record_log_end`]. The default records none.
    fn failed_at(&mut self) -> Result<Option<u64>, Self::Error> {
        Ok(None)
    }
    /// Where the log starts after retention retired its oldest segments: the core's own
    /// record of it (opaque bytes, written by [`Storage::record_log_start`]), or `None` when
    /// nothing was ever retired (every log from before retention). The default keeps none.
    fn log_start(&mut self) -> Result<Option<Vec<u8>>, Self::Error> {
        Ok(None)
    }
    /// Replaces the record of where the log starts, durably and atomically before it
    /// returns: after a crash the storage holds either the old record or this one, whole.
    /// The default cannot keep one and refuses retention with `Ok(false)`.
    fn record_log_start(&mut self, record: &[u8]) -> Result<bool, Self::Error> {
        let _ = record;
        Ok(false)
    }

    /// The newest checkpoint of the core's state (opaque bytes, written by
    /// [`Storage::record_checkpoint`]), or `None` when there is none. The default keeps none.
    fn checkpoint(&mut self) -> Result<Option<Vec<u8>>, Self::Error> {
        Ok(None)
    }
    /// Replaces the checkpoint, durably and atomically before it returns: after a crash the
    /// storage holds either the old checkpoint or this one, whole. The default cannot keep
    /// one and says so with `Ok(false)` (every open then replays the whole log).
    fn record_checkpoint(&mut self, checkpoint: &[u8]) -> Result<bool, Self::Error> {
        let _ = checkpoint;
        Ok(false)
    }
    /// Deletes the checkpoint (nothing when there is none), durably before it returns: a
    /// replica cutting its log below what the checkpoint covers. The default keeps none.
    fn remove_checkpoint(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }

    // ---- side files ---------------------------------------------------------------------
    //
    // Files the core keeps beside the log: data derived from it (consume queues, the key
    // index) that it reads back instead of holding in memory. A side file is named by a
    // relative `/`-separated path of at least two parts ([`check_side_name`]), as
    // `consumequeue/<topic>/<queue id>/<20-digit offset>`. Its writes become durable at the
    // next [`Storage::sync`], as the segments' do.

    /// Length in bytes of a side file; `None` when there is none.
    fn side_len(&mut self, name: &str) -> Result<Option<u64>, Self::Error>;
    /// Reads up to `buf.len()` bytes at `pos` of a side file; returns how many were read
    /// (fewer only at its end; 0 when there is no such file).
    fn side_read(&mut self, name: &str, pos: u64, buf: &mut [u8]) -> Result<usize, Self::Error>;
    /// Writes bytes at `pos` of a side file, creating it (and the directories it is in) if
    /// it does not exist; a gap before `pos` reads as zeros.
    fn side_write(&mut self, name: &str, pos: u64, data: &[u8]) -> Result<(), Self::Error>;
    /// Cuts a side file to `len` bytes (nothing when there is no such file).
    fn side_truncate(&mut self, name: &str, len: u64) -> Result<(), Self::Error>;
    /// Deletes a side file (nothing when there is none).
    fn side_remove(&mut self, name: &str) -> Result<(), Self::Error>;
    /// Names of every side file under the directory `dir` (a side-file path without its
    /// last part, as `consumequeue` or `consumequeue/T/0`), at any depth, ascending.
    fn side_list(&mut self, dir: &str) -> Result<Vec<String>, Self::Error>;
}

/// Why `name` is not a side-file name, or `Ok`: a relative path of at least two
/// `/`-separated parts (a side file always lives in a directory of its own, never beside
/// the segments and the storage's own files), each of 1..=255 bytes, none `.` or `..`,
/// no `\\` or NUL, and not under [`QUARANTINE_DIR`].
pub fn check_side_name(name: &str) -> Result<(), &'static str> {
    if name.starts_with('/') {
        return Err("an absolute path");
    }
    if name.contains(['\\', '\0']) {
        return Err("a backslash or NUL in it");
    }
    let mut parts = 0;
    for part in name.split('/') {
        if part.is_empty() || part.len() > 255 {
            return Err("an empty or over-long path part");
        }
        if part == "." || part == ".." {
            return Err("a `.` or `..` path part");
        }
        if parts == 0 && part == QUARANTINE_DIR {
            return Err("under the quarantine directory");
        }
        parts += 1;
    }
    if parts < 2 {
        return Err("not in a directory (a side file is `<dir>/<name>` at least)");
    }
    Ok(())
}

/// Where a storage keeps what recovery took out of the log (for files: a directory of
/// that name beside the segments).
pub const QUARANTINE_DIR: &str = "quarantine";

/// How far the log reached, kept durably beside the segments (for files: `LOG_END`), so
/// recovery can tell a log that ends where it should from one whose newest segment went
/// missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogEnd {
    /// The newest segment there was (`None`: none yet): its file must still be there.
    pub segment: Option<u64>,
    /// Every byte below this log offset was durable: the log must reach it.
    pub end: u64,
    /// Written at a clean stop: nothing was appended after it, and no write failed.
    pub clean: bool,
}

/// Storage in memory: a map of segments. Never fails.
#[derive(Clone, Default)]
pub struct MemStorage {
    segments: BTreeMap<u64, Vec<u8>>,
    quarantine: BTreeMap<String, Vec<u8>>,
    /// Empty buffers with resident memory, taken by the next new segments
    /// ([`MemStorage::prepare_segments`]).
    spare: Vec<Vec<u8>>,
    /// [`Storage::log_start`].
    log_start: Option<Vec<u8>>,
    /// Side files: name → bytes.
    side: BTreeMap<String, Vec<u8>>,
    /// [`Storage::checkpoint`].
    checkpoint: Option<Vec<u8>>,
}

impl fmt::Debug for MemStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemStorage")
            .field("segments", &self.segments.len())
            .field("bytes", &self.total_bytes())
            .field("spare_segments", &self.spare.len())
            .finish()
    }
}

impl MemStorage {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }
    /// Bytes held, all segments together.
    #[must_use]
    pub fn total_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.len() as u64).sum()
    }
    /// Bytes allocated for the segments (capacity, for memory accounting), spare buffers
    /// included.
    #[must_use]
    pub fn capacity_bytes(&self) -> u64 {
        self.segments
            .values()
            .chain(&self.spare)
            .map(|s| s.capacity() as u64)
            .sum()
    }
    /// Makes `count` buffers of `bytes` ready for the next new segments (pass the segment
    /// size): allocated and written over with zeros once, so their memory is resident. The
    /// appends that fill a prepared segment then cost no allocation and no page fault —
    /// RocketMQ warms its commit-log files ahead of use the same way. Without a spare buffer
    /// a new segment grows as it is written, as usual. Call it off the hot path: before a
    /// burst, or when [`MemStorage::spare_segments`] runs low.
    // Not `vec![0; bytes]`: that asks for zeroed memory, which the kernel maps lazily; the
    // point is to write every page now.
    #[allow(clippy::slow_vector_initialization)]
    pub fn prepare_segments(&mut self, bytes: usize, count: usize) {
        for _ in 0..count {
            let mut buf = Vec::with_capacity(bytes);
            buf.resize(bytes, 0);
            buf.clear();
            self.spare.push(buf);
        }
    }
    /// Prepared buffers not yet taken by a segment.
    #[must_use]
    pub fn spare_segments(&self) -> usize {
        self.spare.len()
    }
    /// The bytes of one segment.
    #[must_use]
    pub fn segment(&self, base: u64) -> Option<&[u8]> {
        self.segments.get(&base).map(Vec::as_slice)
    }
    /// Replaces a segment's bytes (tests use this to corrupt a log).
    pub fn set_segment(&mut self, base: u64, bytes: Vec<u8>) {
        self.segments.insert(base, bytes);
    }
    /// The bytes of a side file.
    #[must_use]
    pub fn side_file(&self, name: &str) -> Option<&[u8]> {
        self.side.get(name).map(Vec::as_slice)
    }
    /// Bytes the side files hold, all together.
    #[must_use]
    pub fn side_bytes(&self) -> u64 {
        self.side.values().map(|s| s.len() as u64).sum()
    }
    /// Replaces (or, with `None`, deletes) a side file's bytes: tests use this to damage
    /// one, and the crash storage to copy what a sync made durable.
    pub fn set_side_file(&mut self, name: &str, bytes: Option<Vec<u8>>) {
        match bytes {
            Some(b) => {
                self.side.insert(String::from(name), b);
            }
            None => {
                self.side.remove(name);
            }
        }
    }
    /// Every side file: name → bytes.
    #[must_use]
    pub fn side_files(&self) -> &BTreeMap<String, Vec<u8>> {
        &self.side
    }
    /// The quarantine: entry name → bytes.
    #[must_use]
    pub fn quarantined(&self) -> &BTreeMap<String, Vec<u8>> {
        &self.quarantine
    }
}

/// The error of a store that cannot fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Infallible {}

impl fmt::Display for Infallible {
    fn fmt(&self, _: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {}
    }
}

impl core::error::Error for Infallible {}

impl Storage for MemStorage {
    type Error = Infallible;
    fn segments(&mut self) -> Result<Vec<u64>, Infallible> {
        Ok(self.segments.keys().copied().collect())
    }
    fn len(&mut self, base: u64) -> Result<u64, Infallible> {
        Ok(self.segments.get(&base).map_or(0, |s| s.len() as u64))
    }
    fn read(&mut self, base: u64, pos: u64, buf: &mut [u8]) -> Result<usize, Infallible> {
        let Some(seg) = self.segments.get(&base) else {
            return Ok(0);
        };
        let pos = (pos as usize).min(seg.len());
        let n = buf.len().min(seg.len() - pos);
        buf[..n].copy_from_slice(&seg[pos..pos + n]);
        Ok(n)
    }
    fn write(&mut self, base: u64, pos: u64, data: &[u8]) -> Result<(), Infallible> {
        let spare = &mut self.spare;
        let seg = self
            .segments
            .entry(base)
            .or_insert_with(|| spare.pop().unwrap_or_default());
        let pos = pos as usize;
        if pos == seg.len() {
            // The common case: at the end of the data.
            seg.extend_from_slice(data);
            return Ok(());
        }
        if seg.len() < pos + data.len() {
            seg.resize(pos + data.len(), 0);
        }
        seg[pos..pos + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn sync(&mut self) -> Result<(), Infallible> {
        Ok(())
    }
    fn truncate(&mut self, base: u64, len: u64) -> Result<(), Infallible> {
        if let Some(seg) = self.segments.get_mut(&base) {
            seg.truncate(len as usize);
        }
        Ok(())
    }
    fn remove(&mut self, base: u64) -> Result<(), Infallible> {
        self.segments.remove(&base);
        Ok(())
    }
    fn quarantine(&mut self, name: &str, data: &[u8]) -> Result<(), Infallible> {
        self.quarantine
            .entry(String::from(name))
            .or_default()
            .extend_from_slice(data);
        Ok(())
    }
    fn append_buffer(&mut self, base: u64, pos: u64) -> Option<&mut Vec<u8>> {
        let spare = &mut self.spare;
        let seg = self
            .segments
            .entry(base)
            .or_insert_with(|| spare.pop().unwrap_or_default());
        (seg.len() as u64 == pos).then_some(seg)
    }
    fn log_start(&mut self) -> Result<Option<Vec<u8>>, Infallible> {
        Ok(self.log_start.clone())
    }
    fn record_log_start(&mut self, record: &[u8]) -> Result<bool, Infallible> {
        self.log_start = Some(record.to_vec());
        Ok(true)
    }
    fn checkpoint(&mut self) -> Result<Option<Vec<u8>>, Infallible> {
        Ok(self.checkpoint.clone())
    }
    fn record_checkpoint(&mut self, checkpoint: &[u8]) -> Result<bool, Infallible> {
        self.checkpoint = Some(checkpoint.to_vec());
        Ok(true)
    }
    fn remove_checkpoint(&mut self) -> Result<(), Infallible> {
        self.checkpoint = None;
        Ok(())
    }
    fn side_len(&mut self, name: &str) -> Result<Option<u64>, Infallible> {
        Ok(self.side.get(name).map(|f| f.len() as u64))
    }
    fn side_read(&mut self, name: &str, pos: u64, buf: &mut [u8]) -> Result<usize, Infallible> {
        let Some(f) = self.side.get(name) else {
            return Ok(0);
        };
        let pos = usize::try_from(pos).unwrap_or(usize::MAX).min(f.len());
        let n = buf.len().min(f.len() - pos);
        buf[..n].copy_from_slice(&f[pos..pos + n]);
        Ok(n)
    }
    fn side_write(&mut self, name: &str, pos: u64, data: &[u8]) -> Result<(), Infallible> {
        debug_assert!(check_side_name(name).is_ok(), "side file name {name}");
        // No key allocated for a file that exists (the consume queues' appends).
        if !self.side.contains_key(name) {
            self.side.insert(String::from(name), Vec::new());
        }
        let f = self.side.get_mut(name).expect("inserted");
        let pos = pos as usize;
        if f.len() < pos + data.len() {
            f.resize(pos + data.len(), 0);
        }
        f[pos..pos + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn side_truncate(&mut self, name: &str, len: u64) -> Result<(), Infallible> {
        if let Some(f) = self.side.get_mut(name) {
            f.truncate(len as usize);
        }
        Ok(())
    }
    fn side_remove(&mut self, name: &str) -> Result<(), Infallible> {
        self.side.remove(name);
        Ok(())
    }
    fn side_list(&mut self, dir: &str) -> Result<Vec<String>, Infallible> {
        let prefix = alloc::format!("{dir}/");
        Ok(self
            .side
            .range(prefix.clone()..)
            .map(|(k, _)| k)
            .take_while(|k| k.starts_with(&prefix))
            .cloned()
            .collect())
    }
}

#[cfg(feature = "std")]
pub use file::{
    list_segments, list_side_files, read_failures, read_log_end, AnyStorage, CheckpointWrite,
    DetachedSync, FileStorage, CHECKPOINT_FILE, LOG_END_FILE, LOG_START_FILE,
};

#[cfg(feature = "std")]
mod file;

#[cfg(test)]
#[path = "storage/side_tests.rs"]
mod side_tests;
