//! Segment files in a directory ([`FileStorage`]), the host's storage for servers.

use super::{check_side_name, LogEnd, Storage, QUARANTINE_DIR};
use crate::CheckpointDraft;
use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

mod any;
mod detached;
mod markers;
pub use any::AnyStorage;
use detached::{write_checkpoint, DetachedCheckpoint};
pub use detached::{CheckpointWrite, DetachedSync};
pub use markers::{
    list_segments, list_side_files, read_failures, read_log_end, CHECKPOINT_FILE, LOG_END_FILE,
    LOG_START_FILE,
};
use markers::{LOG_END_HEADER, LOG_END_TMP, LOG_START_TMP, SYNC_FAILED};

/// Segment files in a directory, named by their base offset in 20 digits as RocketMQ's
/// commit-log files (`00000000000000000000`, `00000000001073741824`, …).
///
/// Every append is written to the operating system at once (so a killed process loses
/// nothing it appended); [`Storage::sync`] fsyncs the segments written since the last sync.
/// A lock file (`LOCK`) holds the directory for one process at a time.
///
/// A new segment file is created only once everything before it is durable, and then
/// named in `LOG_END` ([`LogEnd`]), so a segment never exists ahead of a hole a crash
/// left, and recovery can tell a missing newest segment. A clean stop marks `LOG_END`
/// clean; every open clears the mark before anything is appended. An open after a stop
/// that was not clean first drops the segments' cached pages (after an fsync that must
/// succeed), so recovery reads what the disk holds: after a failed writeback Linux marks
/// the pages it could not write clean, and a read through the cache would serve bytes
/// the disk never got.
#[derive(Debug)]
pub struct FileStorage {
    dir: PathBuf,
    open: Vec<(u64, File)>,
    /// Segments written since their last sync, with the write count of their last append
    /// (a detached sync clears only what no later append touched).
    dirty: Vec<(u64, u64)>,
    /// Write count when the directory itself last changed (0: nothing to sync).
    dir_dirty: u64,
    /// Appends, creations and removals so far.
    writes: u64,
    /// New segments are created this long (zeros after the data), as RocketMQ's mapped
    /// files are; 0: as long as their data.
    preallocate: u64,
    /// What `LOG_END` says (`None`: there is no such file yet).
    log_end: Option<LogEnd>,
    /// The last run's storage failure, recorded by [`FileStorage::record_failure`].
    failed_at: Option<u64>,
    /// `LOG_END` said the last stop was clean.
    was_clean: bool,
    /// Side files held open, least recently used first (at most [`SIDE_HANDLES`]).
    pub(super) side_open: Vec<(String, File)>,
    /// Side files written since their last sync, with the write count of their last write.
    pub(super) side_dirty: Vec<(String, u64)>,
    /// Directories under this one whose entries changed (a side file or directory created
    /// or removed) since their last sync, with the write count then.
    pub(super) side_dirs: Vec<(PathBuf, u64)>,
    /// Bumped (under its lock) whenever this thread replaces or removes `CHECKPOINT`: a
    /// detached checkpoint taken before writes nothing after that ([`CheckpointWrite`]).
    checkpoint_gen: Arc<Mutex<u64>>,
    _lock: File,
}

/// Side files a [`FileStorage`] holds open at most; others are opened when used.
pub const SIDE_HANDLES: usize = 32;

impl FileStorage {
    /// Opens (creating it if needed) a data directory. Fails with `WouldBlock` when another
    /// process holds it.
    pub fn open(dir: impl AsRef<Path>) -> io::Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir)?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(dir.join("LOCK"))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!(
                        "data directory {} is in use by another process (LOCK is held)",
                        dir.display()
                    ),
                ))
            }
            Err(fs::TryLockError::Error(e)) => return Err(e),
        }
        let log_end = read_log_end(&dir)?;
        let failed_at = read_failures(&dir)?.into_iter().max();
        let was_clean = log_end.is_some_and(|e| e.clean) && failed_at.is_none();
        let mut s = FileStorage {
            dir,
            open: Vec::new(),
            dirty: Vec::new(),
            dir_dirty: 0,
            writes: 0,
            preallocate: 0,
            log_end,
            failed_at,
            was_clean,
            side_open: Vec::new(),
            side_dirty: Vec::new(),
            side_dirs: Vec::new(),
            checkpoint_gen: Arc::new(Mutex::new(0)),
            _lock: lock,
        };
        match log_end {
            // From now on appends may come: the stop after them is clean only if it says so.
            Some(e) if was_clean => s.write_log_end(LogEnd { clean: false, ..e })?,
            _ => s.drop_cached_segments()?,
        }
        Ok(s)
    }

    /// After a storage failure, before the process stops: records (an empty file named
    /// `SYNC_FAILED.<offset>`, and the directory fsynced: no data block, only what the
    /// file system journals) that everything this run wrote below `durable` was
    /// durable and nothing after it was acknowledged, so the next start cuts the log
    /// there ([`Storage::failed_at`]). Fails when the file system refuses even that.
    pub fn record_failure(&mut self, durable: u64) -> io::Result<()> {
        File::create(self.dir.join(format!("{SYNC_FAILED}{durable:020}")))?;
        File::open(&self.dir)?.sync_all()
    }

    /// Whether the last stop was clean (`LOG_END` said so when this storage opened).
    #[must_use]
    pub fn was_clean(&self) -> bool {
        self.was_clean
    }

    /// After a stop that was not clean: makes every segment's cached pages what the disk
    /// holds. An fsync first writes the pages still dirty (the last run's appends the
    /// kernel had not written yet: they are good data); if it fails, the open fails
    /// (a write of the last run failed and nobody was told yet). Then every page is
    /// clean, those a failed writeback left behind included, and `DONTNEED` drops them:
    /// recovery reads from the disk.
    ///
    /// Not the segments wholly below the offset a whole checkpoint covers (its header,
    /// length and CRC right): the core synced them before it wrote the checkpoint, and
    /// nothing writes them again, so their cached pages are what the disk holds — and a
    /// start from the checkpoint does not read them. Its cost then follows the log after
    /// the checkpoint, not the retained log.
    fn drop_cached_segments(&mut self) -> io::Result<()> {
        let synced_below = match self.checkpoint()? {
            Some(bytes) => crate::broker::whole_checkpoint_covers(&bytes).unwrap_or(0),
            None => 0,
        };
        let segments = self.segments()?;
        for (i, &base) in segments.iter().enumerate() {
            if segments
                .get(i + 1)
                .is_some_and(|&next| next <= synced_below)
            {
                continue;
            }
            let path = self.path(base);
            let f = match File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            f.sync_data().map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "fsync of segment {} failed: {e} (a write of the last run never \
                         reached the disk)",
                        path.display()
                    ),
                )
            })?;
            rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed)
                .map_err(io::Error::from)?;
        }
        Ok(())
    }

    /// Writes `LOG_END` crash-safe: a temporary file, fsynced, renamed over it, and the
    /// directory fsynced.
    fn write_log_end(&mut self, e: LogEnd) -> io::Result<()> {
        let tmp = self.dir.join(LOG_END_TMP);
        let segment = e.segment.map_or(String::from("none"), |s| format!("{s}"));
        let text = format!(
            "{LOG_END_HEADER}\nsegment {segment}\nend {}\nclean {}\n",
            e.end, e.clean
        );
        let mut f = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, self.dir.join(LOG_END_FILE))?;
        File::open(&self.dir)?.sync_all()?;
        self.log_end = Some(e);
        // A failure recorded before is settled: recovery cut the log where it said.
        let failures = read_failures(&self.dir)?;
        for at in &failures {
            fs::remove_file(self.dir.join(format!("{SYNC_FAILED}{at:020}")))?;
        }
        if !failures.is_empty() {
            File::open(&self.dir)?.sync_all()?;
        }
        self.failed_at = None;
        Ok(())
    }

    /// Creates new segment files `bytes` long, zeros after their data, as RocketMQ
    /// preallocates its commit-log files (pass the segment size). Files are sparse until
    /// written.
    #[must_use]
    pub fn preallocate(mut self, bytes: u64) -> Self {
        self.preallocate = bytes;
        self
    }

    /// The directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, base: u64) -> PathBuf {
        self.dir.join(format!("{base:020}"))
    }

    /// A sync of everything appended so far that runs without `self` (see
    /// [`DetachedSync`]); `None` when nothing waits to be synced.
    pub fn detach_sync(&mut self) -> io::Result<Option<DetachedSync>> {
        let mut files = Vec::with_capacity(self.dirty.len());
        for (base, at) in self.dirty.clone() {
            if let Some(f) = self.file(base, false)? {
                files.push((base, at, f.try_clone()?));
            }
        }
        let dir = (self.dir_dirty > 0).then(|| (self.dir_dirty, self.dir.clone()));
        let mut side = Vec::with_capacity(self.side_dirty.len());
        for (name, at) in self.side_dirty.clone() {
            if let Some(f) = self.side_file(&name, false)? {
                side.push((name, at, f.try_clone()?));
            }
        }
        let side_dirs = self.side_dirs.clone();
        if files.is_empty() && dir.is_none() && side.is_empty() && side_dirs.is_empty() {
            return Ok(None);
        }
        Ok(Some(DetachedSync {
            files,
            dir,
            side,
            side_dirs,
            checkpoint: None,
        }))
    }

    /// A detached sync of everything written so far, as [`FileStorage::detach_sync`], that
    /// then writes `draft` as the checkpoint ([`DetachedSync::run`]) — unless this storage
    /// records or removes a checkpoint itself first ([`CheckpointWrite::Superseded`]).
    /// Take the draft ([`crate::Broker::begin_checkpoint`]) before detaching: the sync must
    /// cover everything the draft depends on.
    pub fn detach_checkpoint(&mut self, draft: CheckpointDraft) -> io::Result<DetachedSync> {
        let mut job = self.detach_sync()?.unwrap_or(DetachedSync {
            files: Vec::new(),
            dir: None,
            side: Vec::new(),
            side_dirs: Vec::new(),
            checkpoint: None,
        });
        let at = *self
            .checkpoint_gen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        job.checkpoint = Some(Box::new(DetachedCheckpoint {
            dir: self.dir.clone(),
            draft,
            gen: self.checkpoint_gen.clone(),
            at,
        }));
        Ok(job)
    }

    /// Runs `f` (a write or removal of `CHECKPOINT`) with no detached checkpoint writing,
    /// and makes every detached one taken before it write nothing.
    fn replacing_checkpoint<T>(&mut self, f: impl FnOnce(&Path) -> io::Result<T>) -> io::Result<T> {
        let mut gen = self
            .checkpoint_gen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *gen += 1;
        f(&self.dir)
    }

    /// Takes back a detached sync: when it succeeded, what it covered and no append has
    /// touched since is clean; when it failed, everything stays dirty for the next sync.
    pub fn detached_done(&mut self, job: &DetachedSync, succeeded: bool) {
        if !succeeded {
            return;
        }
        for (base, at, _) in &job.files {
            self.dirty.retain(|(b, w)| !(b == base && w == at));
        }
        for (name, at, _) in &job.side {
            self.side_dirty.retain(|(n, w)| !(n == name && w == at));
        }
        for (dir, at) in &job.side_dirs {
            self.side_dirs.retain(|(d, w)| !(d == dir && w == at));
        }
        if let Some((at, _)) = &job.dir {
            if self.dir_dirty == *at {
                self.dir_dirty = 0;
            }
        }
    }

    /// The path of a side file, once its name is checked ([`check_side_name`]).
    fn side_path(&self, name: &str) -> io::Result<PathBuf> {
        check_side_name(name).map_err(|why| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{}` is not a side file name: {why}", name.escape_debug()),
            )
        })?;
        Ok(self.dir.join(name))
    }

    /// A directory's entries changed: it is synced with the next sync.
    fn touch_side_dir(&mut self, dir: PathBuf) {
        self.writes += 1;
        let at = self.writes;
        match self.side_dirs.iter_mut().find(|(d, _)| *d == dir) {
            Some(d) => d.1 = at,
            None => self.side_dirs.push((dir, at)),
        }
    }

    /// A side file's handle, opened (and with `create`, created with the directories it is
    /// in) when it is not held; `None` when there is no such file and not `create`.
    fn side_file(&mut self, name: &str, create: bool) -> io::Result<Option<&File>> {
        if let Some(i) = self.side_open.iter().position(|(n, _)| n == name) {
            let held = self.side_open.remove(i);
            self.side_open.push(held);
            return Ok(self.side_open.last().map(|(_, f)| f));
        }
        let path = self.side_path(name)?;
        let file = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !create => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // Every directory created, and the one that held the first of them, has a
                // new entry to sync.
                let parent = path.parent().unwrap_or(&self.dir).to_path_buf();
                let mut missing = Vec::new();
                let mut p = parent.as_path();
                while !p.exists() && p != self.dir {
                    missing.push(p.to_path_buf());
                    p = p.parent().unwrap_or(&self.dir);
                }
                let existing = p.to_path_buf();
                fs::create_dir_all(&parent)?;
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&path)?;
                if missing.is_empty() {
                    self.touch_side_dir(parent);
                } else {
                    for d in missing {
                        self.touch_side_dir(d);
                    }
                }
                if existing == self.dir {
                    self.touch_dir();
                } else {
                    self.touch_side_dir(existing);
                }
                f
            }
            Err(e) => return Err(e),
        };
        if self.side_open.len() >= SIDE_HANDLES {
            self.side_open.remove(0);
        }
        self.side_open.push((String::from(name), file));
        Ok(self.side_open.last().map(|(_, f)| f))
    }

    fn side_written(&mut self, name: &str) {
        self.writes += 1;
        match self.side_dirty.iter_mut().find(|(n, _)| n == name) {
            Some(d) => d.1 = self.writes,
            None => self.side_dirty.push((String::from(name), self.writes)),
        }
    }

    fn touch_dir(&mut self) {
        self.writes += 1;
        self.dir_dirty = self.writes;
    }

    fn file(&mut self, base: u64, create: bool) -> io::Result<Option<&File>> {
        if let Some(i) = self.open.iter().position(|(b, _)| *b == base) {
            return Ok(Some(&self.open[i].1));
        }
        let path = self.path(base);
        let existed = create && path.exists();
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !create => return Ok(None),
            Err(e) => return Err(e),
        };
        if create && !existed {
            if self.preallocate > 0 {
                file.set_len(self.preallocate)?;
            }
            self.touch_dir();
            // A new newest segment: durable, with everything before it, before anything
            // is appended to it (see the type's doc), then named in LOG_END.
            if self
                .log_end
                .is_none_or(|e| e.segment.is_none_or(|s| base > s))
            {
                file.sync_all()?;
                self.sync()?;
                let end = self.log_end.map_or(base, |e| e.end.max(base));
                self.write_log_end(LogEnd {
                    segment: Some(base),
                    end,
                    clean: false,
                })?;
            }
        }
        // Keep the few newest segments open: appends go to the last one, reads mostly near it.
        if self.open.len() >= 8 {
            self.open.remove(0);
        }
        self.open.push((base, file));
        Ok(self.open.last().map(|(_, f)| f))
    }
}

impl Storage for FileStorage {
    type Error = io::Error;

    fn segments(&mut self) -> io::Result<Vec<u64>> {
        list_segments(&self.dir)
    }

    fn len(&mut self, base: u64) -> io::Result<u64> {
        match self.file(base, false)? {
            Some(f) => Ok(f.metadata()?.len()),
            None => Ok(0),
        }
    }

    fn read(&mut self, base: u64, pos: u64, buf: &mut [u8]) -> io::Result<usize> {
        let Some(f) = self.file(base, false)? else {
            return Ok(0);
        };
        read_full_at(f, pos, buf)
    }

    fn write(&mut self, base: u64, pos: u64, data: &[u8]) -> io::Result<()> {
        let preallocated = self.preallocate > 0;
        let f = self.file(base, true)?.expect("created");
        if let Err(e) = f.write_all_at(data, pos) {
            // Leave no partial record behind: the caller reports the failure and goes on
            // (a full disk), and the next record goes to the same place.
            let len = f.metadata()?.len();
            if len <= pos + data.len() as u64 && !preallocated {
                let _ = f.set_len(pos.min(len));
            } else {
                let zeros = alloc::vec![0u8; data.len()];
                let _ = f.write_all_at(&zeros, pos);
            }
            return Err(e);
        }
        self.writes += 1;
        match self.dirty.iter_mut().find(|(b, _)| *b == base) {
            Some(d) => d.1 = self.writes,
            None => self.dirty.push((base, self.writes)),
        }
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        while let Some(&(base, _)) = self.dirty.first() {
            if let Some(f) = self.file(base, false)? {
                f.sync_data()?;
            }
            self.dirty.remove(0);
        }
        while let Some((name, _)) = self.side_dirty.first().cloned() {
            if let Some(f) = self.side_file(&name, false)? {
                f.sync_data()?;
            }
            self.side_dirty.remove(0);
        }
        while let Some((dir, _)) = self.side_dirs.first() {
            File::open(dir)?.sync_all()?;
            self.side_dirs.remove(0);
        }
        if self.dir_dirty > 0 {
            File::open(&self.dir)?.sync_all()?;
            self.dir_dirty = 0;
        }
        Ok(())
    }

    fn truncate(&mut self, base: u64, len: u64) -> io::Result<()> {
        let preallocate = self.preallocate;
        if let Some(f) = self.file(base, false)? {
            // Cutting and growing back leaves zeros, and the length RocketMQ expects.
            f.set_len(len)?;
            if preallocate > len {
                f.set_len(preallocate)?;
            }
            f.sync_all()?;
        }
        Ok(())
    }

    fn remove(&mut self, base: u64) -> io::Result<()> {
        self.open.retain(|(b, _)| *b != base);
        self.dirty.retain(|(b, _)| *b != base);
        match fs::remove_file(self.path(base)) {
            Ok(()) => {
                self.touch_dir();
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn log_end(&mut self) -> io::Result<Option<LogEnd>> {
        Ok(self.log_end)
    }

    fn failed_at(&mut self) -> io::Result<Option<u64>> {
        Ok(self.failed_at)
    }

    fn log_start(&mut self) -> io::Result<Option<Vec<u8>>> {
        match fs::read(self.dir.join(LOG_START_FILE)) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn record_log_start(&mut self, record: &[u8]) -> io::Result<bool> {
        // A temporary file, fsynced, renamed over the record, and the directory fsynced:
        // a crash leaves the old record or the new one.
        let tmp = self.dir.join(LOG_START_TMP);
        {
            let mut f = File::create(&tmp)?;
            f.write_all(record)?;
            f.sync_all()?;
        }
        fs::rename(&tmp, self.dir.join(LOG_START_FILE))?;
        File::open(&self.dir)?.sync_all()?;
        Ok(true)
    }

    fn checkpoint(&mut self) -> io::Result<Option<Vec<u8>>> {
        match fs::read(self.dir.join(CHECKPOINT_FILE)) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn record_checkpoint(&mut self, checkpoint: &[u8]) -> io::Result<bool> {
        self.replacing_checkpoint(|dir| write_checkpoint(dir, checkpoint))?;
        Ok(true)
    }

    fn remove_checkpoint(&mut self) -> io::Result<()> {
        self.replacing_checkpoint(|dir| {
            match fs::remove_file(dir.join(CHECKPOINT_FILE)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e),
            }
            File::open(dir)?.sync_all()
        })
    }

    fn close_segment(&mut self, base: u64) {
        self.open.retain(|(b, _)| *b != base);
        self.dirty.retain(|(b, _)| *b != base);
    }

    fn record_log_end(&mut self, end: u64, clean: bool) -> io::Result<()> {
        let segment = self.segments()?.last().copied();
        self.write_log_end(LogEnd {
            segment,
            end,
            clean,
        })
    }

    fn data_from(&mut self, base: u64, pos: u64) -> io::Result<Option<u64>> {
        let Some(f) = self.file(base, false)? else {
            return Ok(None);
        };
        match rustix::fs::seek(f, rustix::fs::SeekFrom::Data(pos)) {
            Ok(at) => Ok(Some(at)),
            // ENXIO: no data at or after `pos`, only a hole to the end.
            Err(rustix::io::Errno::NXIO) => Ok(None),
            // A file system without SEEK_DATA: everything may be data.
            Err(_) => Ok(Some(pos)),
        }
    }

    fn side_len(&mut self, name: &str) -> io::Result<Option<u64>> {
        match self.side_file(name, false)? {
            Some(f) => Ok(Some(f.metadata()?.len())),
            None => Ok(None),
        }
    }

    fn side_read(&mut self, name: &str, pos: u64, buf: &mut [u8]) -> io::Result<usize> {
        let Some(f) = self.side_file(name, false)? else {
            return Ok(0);
        };
        read_full_at(f, pos, buf)
    }

    fn side_write(&mut self, name: &str, pos: u64, data: &[u8]) -> io::Result<()> {
        let f = self.side_file(name, true)?.expect("created");
        f.write_all_at(data, pos)?;
        self.side_written(name);
        Ok(())
    }

    fn side_truncate(&mut self, name: &str, len: u64) -> io::Result<()> {
        if let Some(f) = self.side_file(name, false)? {
            f.set_len(len)?;
            self.side_written(name);
        }
        Ok(())
    }

    fn side_remove(&mut self, name: &str) -> io::Result<()> {
        let path = self.side_path(name)?;
        self.side_open.retain(|(n, _)| n != name);
        self.side_dirty.retain(|(n, _)| n != name);
        match fs::remove_file(&path) {
            Ok(()) => {
                self.touch_side_dir(path.parent().unwrap_or(&self.dir).to_path_buf());
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn side_list(&mut self, dir: &str) -> io::Result<Vec<String>> {
        // A directory name is checked as a side file in it would be.
        let file = self.side_path(&format!("{dir}/x"))?;
        let mut out = list_side_files(file.parent().unwrap_or(&self.dir), dir)?;
        out.sort_unstable();
        Ok(out)
    }

    fn quarantine(&mut self, name: &str, data: &[u8]) -> io::Result<()> {
        if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{name}` is not a quarantine file name"),
            ));
        }
        let dir = self.dir.join(QUARANTINE_DIR);
        let created = !dir.exists();
        fs::create_dir_all(&dir)?;
        let path = dir.join(name);
        let new = !path.exists();
        let mut f = OpenOptions::new().create(true).append(true).open(&path)?;
        f.write_all(data)?;
        f.sync_data()?;
        if new {
            File::open(&dir)?.sync_all()?;
        }
        if created {
            File::open(&self.dir)?.sync_all()?;
        }
        Ok(())
    }
}

/// Reads up to `buf.len()` bytes at `pos`, fewer only at the file's end.
fn read_full_at(f: &File, pos: u64, buf: &mut [u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], pos + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}
