//! [`AnyStorage`]: memory or files, chosen at run time.

use super::super::{LogEnd, Storage};
use super::{DetachedSync, FileStorage};
use crate::CheckpointDraft;
use alloc::string::String;
use alloc::vec::Vec;
use std::io;
use std::path::Path;

/// Memory or files, chosen at run time: what hosts that offer both (Python, Node) hold.
#[derive(Debug)]
pub enum AnyStorage {
    /// In memory.
    Mem(super::super::MemStorage),
    /// In a directory.
    File(FileStorage),
}

impl AnyStorage {
    /// Files in `dir` when given, else memory.
    pub fn open(dir: Option<&Path>) -> io::Result<Self> {
        Ok(match dir {
            Some(d) => AnyStorage::File(FileStorage::open(d)?),
            None => AnyStorage::Mem(super::super::MemStorage::new()),
        })
    }

    /// [`FileStorage::detach_sync`]; `None` for memory, which needs no sync.
    pub fn detach_sync(&mut self) -> io::Result<Option<DetachedSync>> {
        match self {
            AnyStorage::Mem(_) => Ok(None),
            AnyStorage::File(f) => f.detach_sync(),
        }
    }

    /// [`FileStorage::detach_checkpoint`]; memory, which needs no sync, records the
    /// draft at once and returns `None`.
    pub fn detach_checkpoint(
        &mut self,
        draft: CheckpointDraft,
    ) -> io::Result<Option<DetachedSync>> {
        match self {
            AnyStorage::Mem(m) => {
                m.record_checkpoint(&draft.encode()).map_err(never)?;
                Ok(None)
            }
            AnyStorage::File(f) => f.detach_checkpoint(draft).map(Some),
        }
    }

    /// [`FileStorage::detached_done`].
    pub fn detached_done(&mut self, job: &DetachedSync, succeeded: bool) {
        if let AnyStorage::File(f) = self {
            f.detached_done(job, succeeded);
        }
    }
}

fn never(e: super::super::Infallible) -> io::Error {
    match e {}
}

impl Storage for AnyStorage {
    type Error = io::Error;
    fn segments(&mut self) -> io::Result<Vec<u64>> {
        match self {
            AnyStorage::Mem(m) => m.segments().map_err(never),
            AnyStorage::File(f) => f.segments(),
        }
    }
    fn len(&mut self, base: u64) -> io::Result<u64> {
        match self {
            AnyStorage::Mem(m) => m.len(base).map_err(never),
            AnyStorage::File(f) => f.len(base),
        }
    }
    fn read(&mut self, base: u64, pos: u64, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            AnyStorage::Mem(m) => m.read(base, pos, buf).map_err(never),
            AnyStorage::File(f) => f.read(base, pos, buf),
        }
    }
    fn write(&mut self, base: u64, pos: u64, data: &[u8]) -> io::Result<()> {
        match self {
            AnyStorage::Mem(m) => m.write(base, pos, data).map_err(never),
            AnyStorage::File(f) => f.write(base, pos, data),
        }
    }
    fn sync(&mut self) -> io::Result<()> {
        match self {
            AnyStorage::Mem(m) => m.sync().map_err(never),
            AnyStorage::File(f) => f.sync(),
        }
    }
    fn truncate(&mut self, base: u64, len: u64) -> io::Result<()> {
        match self {
            AnyStorage::Mem(m) => m.truncate(base, len).map_err(never),
            AnyStorage::File(f) => f.truncate(base, len),
        }
    }
    fn remove(&mut self, base: u64) -> io::Result<()> {
        match self {
            AnyStorage::Mem(m) => m.remove(base).map_err(never),
            AnyStorage::File(f) => f.remove(base),
        }
    }
    fn data_from(&mut self, base: u64, pos: u64) -> io::Result<Option<u64>> {
        match self {
            AnyStorage::Mem(m) => m.data_from(base, pos).map_err(never),
            AnyStorage::File(f) => f.data_from(base, pos),
        }
    }
    fn quarantine(&mut self, name: &str, data: &[u8]) -> io::Result<()> {
        match self {
            AnyStorage::Mem(m) => m.quarantine(name, data).map_err(never),
            AnyStorage::File(f) => f.quarantine(name, data),
        }
    }
    fn log_end(&mut self) -> io::Result<Option<LogEnd>> {
        match self {
            AnyStorage::Mem(m) => m.log_end().map_err(never),
            AnyStorage::File(f) => f.log_end(),
        }
    }
    fn record_log_end(&mut self, end: u64, clean: bool) -> io::Result<()> {
        match self {
            AnyStorage::Mem(m) => m.record_log_end(end, clean).map_err(never),
            AnyStorage::File(f) => f.record_log_end(end, clean),
        }
    }
    fn failed_at(&mut self) -> io::Result<Option<u64>> {
        match self {
            AnyStorage::Mem(m) => m.failed_at().map_err(never),
            AnyStorage::File(f) => f.failed_at(),
        }
    }
    fn log_start(&mut self) -> io::Result<Option<Vec<u8>>> {
        match self {
            AnyStorage::Mem(m) => m.log_start().map_err(never),
            AnyStorage::File(f) => f.log_start(),
        }
    }
    fn record_log_start(&mut self, record: &[u8]) -> io::Result<bool> {
        match self {
            AnyStorage::Mem(m) => m.record_log_start(record).map_err(never),
            AnyStorage::File(f) => f.record_log_start(record),
        }
    }
    fn checkpoint(&mut self) -> io::Result<Option<Vec<u8>>> {
        match self {
            AnyStorage::Mem(m) => m.checkpoint().map_err(never),
            AnyStorage::File(f) => f.checkpoint(),
        }
    }
    fn record_checkpoint(&mut self, checkpoint: &[u8]) -> io::Result<bool> {
        match self {
            AnyStorage::Mem(m) => m.record_checkpoint(checkpoint).map_err(never),
            AnyStorage::File(f) => f.record_checkpoint(checkpoint),
        }
    }
    fn remove_checkpoint(&mut self) -> io::Result<()> {
        match self {
            AnyStorage::Mem(m) => m.remove_checkpoint().map_err(never),
            AnyStorage::File(f) => f.remove_checkpoint(),
        }
    }
    fn close_segment(&mut self, base: u64) {
        match self {
            AnyStorage::Mem(m) => m.close_segment(base),
            AnyStorage::File(f) => f.close_segment(base),
        }
    }
    fn side_len(&mut self, name: &str) -> io::Result<Option<u64>> {
        match self {
            AnyStorage::Mem(m) => m.side_len(name).map_err(never),
            AnyStorage::File(f) => f.side_len(name),
        }
    }
    fn side_read(&mut self, name: &str, pos: u64, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            AnyStorage::Mem(m) => m.side_read(name, pos, buf).map_err(never),
            AnyStorage::File(f) => f.side_read(name, pos, buf),
        }
    }
    fn side_write(&mut self, name: &str, pos: u64, data: &[u8]) -> io::Result<()> {
        match self {
            AnyStorage::Mem(m) => m.side_write(name, pos, data).map_err(never),
            AnyStorage::File(f) => f.side_write(name, pos, data),
        }
    }
    fn side_truncate(&mut self, name: &str, len: u64) -> io::Result<()> {
        match self {
            AnyStorage::Mem(m) => m.side_truncate(name, len).map_err(never),
            AnyStorage::File(f) => f.side_truncate(name, len),
        }
    }
    fn side_remove(&mut self, name: &str) -> io::Result<()> {
        match self {
            AnyStorage::Mem(m) => m.side_remove(name).map_err(never),
            AnyStorage::File(f) => f.side_remove(name),
        }
    }
    fn side_list(&mut self, dir: &str) -> io::Result<Vec<String>> {
        match self {
            AnyStorage::Mem(m) => m.side_list(dir).map_err(never),
            AnyStorage::File(f) => f.side_list(dir),
        }
    }
}
