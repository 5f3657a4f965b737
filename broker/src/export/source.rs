//! The export's source, read only: a stopped broker's data directory or a backup directory
//! (`rocklet admin backup`), opened as a [`Storage`] that never writes to it.
//!
//! Every file is opened read only. What the core writes while it opens the log (consume
//! queues and the key index rebuilt or brought up to date, a torn tail cut, bytes
//! quarantined) stays in memory and is dropped with the storage; an append to a segment is
//! refused. A data directory's `LOCK` is taken shared for as long as the export runs: a
//! running broker holds it exclusively, so its directory is refused, and no broker starts
//! on the directory meanwhile. A backup directory has no lock; its manifest says where its
//! log ends.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rocklet_core::storage::{list_segments, list_side_files, read_failures, read_log_end};
use rocklet_core::{LogEnd, Storage, LOG_START_FILE};

use super::MoveError;
use crate::backup;

/// A data or backup directory, read only.
#[derive(Debug)]
pub struct Source {
    dir: PathBuf,
    /// Segment files held open (read only), by base.
    open: BTreeMap<u64, File>,
    /// Where recovery cut a segment's data: bytes from there on read as zeros.
    cut: BTreeMap<u64, u64>,
    /// Side files as the core left them in this run (`None`: removed); read through to the
    /// directory for any other.
    side: BTreeMap<String, Option<Vec<u8>>>,
    /// Bytes recovery set aside, by quarantine name (kept in memory, never written).
    pub quarantined: BTreeMap<String, u64>,
    log_end: Option<LogEnd>,
    failed_at: Option<u64>,
    /// Held shared while the export runs (a data directory's `LOCK`).
    _lock: Option<File>,
    /// The directory is a backup (it has a manifest).
    pub backup: bool,
}

impl Source {
    /// Opens `dir` read only: a backup directory (it has a manifest, which must check out) or
    /// a data directory no broker holds.
    pub fn open(dir: &Path) -> Result<Source, MoveError> {
        let meta = fs::metadata(dir).map_err(|e| MoveError::io(dir, e))?;
        if !meta.is_dir() {
            return Err(MoveError::refused(format!(
                "{} is not a directory: --from takes a Rocklet data directory or a backup directory",
                dir.display()
            )));
        }
        let mut s = Source {
            dir: dir.to_path_buf(),
            open: BTreeMap::new(),
            cut: BTreeMap::new(),
            side: BTreeMap::new(),
            quarantined: BTreeMap::new(),
            log_end: None,
            failed_at: None,
            _lock: None,
            backup: false,
        };
        if dir.join(backup::MANIFEST).exists() {
            let m = backup::read_manifest(dir).map_err(MoveError::Refused)?;
            s.backup = true;
            let segments = s.segments().map_err(|e| MoveError::io(dir, e))?;
            s.log_end = Some(LogEnd {
                segment: segments.last().copied(),
                end: m.log_offset,
                clean: true,
            });
        } else {
            let lock_path = dir.join("LOCK");
            match OpenOptions::new().read(true).open(&lock_path) {
                Ok(lock) => {
                    match lock.try_lock_shared() {
                        Ok(()) => {}
                        Err(fs::TryLockError::WouldBlock) => {
                            return Err(MoveError::refused(format!(
                                "{} is in use by a running broker (its LOCK is held): stop the broker first, or export a backup of it (rocklet admin backup --to DIR)",
                                dir.display()
                            )))
                        }
                        Err(fs::TryLockError::Error(e)) => {
                            return Err(MoveError::io(&lock_path, e))
                        }
                    }
                    s._lock = Some(lock);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(MoveError::io(&lock_path, e)),
            }
            if s.segments().map_err(|e| MoveError::io(dir, e))?.is_empty() {
                return Err(MoveError::refused(format!(
                    "{} holds no log segment: --from takes a Rocklet data directory (or a backup of one){}",
                    dir.display(),
                    if dir.join("commitlog").is_dir() {
                        "; this looks like an Apache RocketMQ store, which needs no export"
                    } else {
                        ""
                    }
                )));
            }
            s.log_end = read_log_end(dir).map_err(|e| MoveError::io(dir, e))?;
            s.failed_at = read_failures(dir)
                .map_err(|e| MoveError::io(dir, e))?
                .into_iter()
                .max();
        }
        Ok(s)
    }

    fn path(&self, base: u64) -> PathBuf {
        self.dir.join(format!("{base:020}"))
    }

    fn file(&mut self, base: u64) -> io::Result<Option<&File>> {
        if !self.open.contains_key(&base) {
            match File::open(self.path(base)) {
                Ok(f) => {
                    self.open.insert(base, f);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        Ok(self.open.get(&base))
    }

    fn side_disk(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        rocklet_core::check_side_name(name).map_err(|why| read_only(&format!("{name}: {why}")))?;
        match fs::read(self.dir.join(name)) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The side file's bytes in this run's copy, read from the directory when first changed.
    fn side_mut(&mut self, name: &str) -> io::Result<&mut Vec<u8>> {
        if !self.side.contains_key(name) {
            let bytes = self.side_disk(name)?;
            self.side.insert(name.to_string(), bytes);
        }
        let slot = self.side.get_mut(name).expect("inserted");
        Ok(slot.get_or_insert_with(Vec::new))
    }
}

fn read_only(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("the export opens its source read only, and the core asked to write: {what}; start a broker on the data directory once (it repairs what it must), stop it, and export again"),
    )
}

impl Storage for Source {
    type Error = io::Error;

    fn segments(&mut self) -> io::Result<Vec<u64>> {
        list_segments(&self.dir)
    }

    fn len(&mut self, base: u64) -> io::Result<u64> {
        match self.file(base)? {
            Some(f) => Ok(f.metadata()?.len()),
            None => Ok(0),
        }
    }

    fn read(&mut self, base: u64, pos: u64, buf: &mut [u8]) -> io::Result<usize> {
        let cut = self.cut.get(&base).copied();
        let Some(f) = self.file(base)? else {
            return Ok(0);
        };
        let mut done = 0;
        while done < buf.len() {
            match f.read_at(&mut buf[done..], pos + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if let Some(cut) = cut {
            // Bytes recovery cut read as zeros (as a preallocated file's would).
            let from = cut.saturating_sub(pos).min(done as u64) as usize;
            buf[from..done].fill(0);
        }
        Ok(done)
    }

    fn write(&mut self, base: u64, pos: u64, data: &[u8]) -> io::Result<()> {
        Err(read_only(&format!(
            "{} bytes at {pos} of segment {base:020}",
            data.len()
        )))
    }

    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn truncate(&mut self, base: u64, len: u64) -> io::Result<()> {
        let cut = self.cut.entry(base).or_insert(len);
        *cut = (*cut).min(len);
        Ok(())
    }

    fn remove(&mut self, base: u64) -> io::Result<()> {
        Err(read_only(&format!("remove segment {base:020}")))
    }

    fn quarantine(&mut self, name: &str, data: &[u8]) -> io::Result<()> {
        *self.quarantined.entry(name.to_string()).or_default() += data.len() as u64;
        Ok(())
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

    fn side_len(&mut self, name: &str) -> io::Result<Option<u64>> {
        if let Some(b) = self.side.get(name) {
            return Ok(b.as_ref().map(|b| b.len() as u64));
        }
        rocklet_core::check_side_name(name).map_err(|why| read_only(&format!("{name}: {why}")))?;
        match fs::metadata(self.dir.join(name)) {
            Ok(m) if m.is_file() => Ok(Some(m.len())),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn side_read(&mut self, name: &str, pos: u64, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(b) = self.side.get(name) {
            let Some(b) = b else { return Ok(0) };
            let from = (pos as usize).min(b.len());
            let n = buf.len().min(b.len() - from);
            buf[..n].copy_from_slice(&b[from..from + n]);
            return Ok(n);
        }
        rocklet_core::check_side_name(name).map_err(|why| read_only(&format!("{name}: {why}")))?;
        let f = match File::open(self.dir.join(name)) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
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

    fn side_write(&mut self, name: &str, pos: u64, data: &[u8]) -> io::Result<()> {
        let b = self.side_mut(name)?;
        let end = pos as usize + data.len();
        if b.len() < end {
            b.resize(end, 0);
        }
        b[pos as usize..end].copy_from_slice(data);
        Ok(())
    }

    fn side_truncate(&mut self, name: &str, len: u64) -> io::Result<()> {
        if self.side_len(name)?.is_some() {
            self.side_mut(name)?.truncate(len as usize);
        }
        Ok(())
    }

    fn side_remove(&mut self, name: &str) -> io::Result<()> {
        self.side.insert(name.to_string(), None);
        Ok(())
    }

    fn side_list(&mut self, dir: &str) -> io::Result<Vec<String>> {
        let mut out: std::collections::BTreeSet<String> =
            list_side_files(&self.dir.join(dir), dir)?
                .into_iter()
                .collect();
        let prefix = format!("{dir}/");
        for (name, bytes) in &self.side {
            if name.starts_with(&prefix) {
                if bytes.is_some() {
                    out.insert(name.clone());
                } else {
                    out.remove(name);
                }
            }
        }
        Ok(out.into_iter().collect())
    }
}
