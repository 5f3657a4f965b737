//! A sync run off the thread that owns the storage, and the checkpoint it may carry.

use super::markers::{CHECKPOINT_FILE, CHECKPOINT_TMP};
use crate::CheckpointDraft;
use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A sync of what a [`FileStorage`] holds now, to run off the thread that owns the
/// storage (`fdatasync` on duplicated handles), so appends go on while it runs. Take it
/// with [`FileStorage::detach_sync`], run it anywhere, and give it back with
/// [`FileStorage::detached_done`]. A [`Storage::sync`] meanwhile still syncs everything.
///
/// One taken with [`FileStorage::detach_checkpoint`] also carries a checkpoint, written
/// (atomically, as [`Storage::record_checkpoint`]) only after the sync succeeded.
#[derive(Debug)]
pub struct DetachedSync {
    pub(super) files: Vec<(u64, u64, File)>,
    pub(super) dir: Option<(u64, PathBuf)>,
    pub(in crate::storage) side: Vec<(String, u64, File)>,
    pub(in crate::storage) side_dirs: Vec<(PathBuf, u64)>,
    pub(super) checkpoint: Option<Box<DetachedCheckpoint>>,
}

/// A checkpoint a detached sync writes once it succeeded.
#[derive(Debug)]
pub(super) struct DetachedCheckpoint {
    pub(super) dir: PathBuf,
    pub(super) draft: CheckpointDraft,
    /// The storage's checkpoint generation, and what it was when detached.
    pub(super) gen: Arc<Mutex<u64>>,
    pub(super) at: u64,
}

/// What a detached sync did with the checkpoint it carried.
#[derive(Debug)]
pub enum CheckpointWrite {
    /// It carried none.
    None,
    /// Written: `CHECKPOINT` holds it, durably.
    Written,
    /// Not written: the owner replaced or removed `CHECKPOINT` after it was detached (a
    /// clean stop's checkpoint, a replica cutting its log below it).
    Superseded,
    /// Its write failed (the previous checkpoint stays whole): a full disk, say. The data
    /// it covers was synced; only the checkpoint is missing.
    Failed(io::Error),
}

impl DetachedSync {
    /// Makes durable every byte written before the sync was detached (and, as fsync does,
    /// whatever was written to those files since); then, only when that succeeded, writes
    /// the checkpoint it carries. `Err`: the sync failed, and no checkpoint was written.
    pub fn run(&self) -> io::Result<CheckpointWrite> {
        for (_, _, f) in &self.files {
            f.sync_data()?;
        }
        for (_, _, f) in &self.side {
            f.sync_data()?;
        }
        for (d, _) in &self.side_dirs {
            File::open(d)?.sync_all()?;
        }
        if let Some((_, d)) = &self.dir {
            File::open(d)?.sync_all()?;
        }
        let Some(c) = &self.checkpoint else {
            return Ok(CheckpointWrite::None);
        };
        let bytes = c.draft.encode();
        // Under the lock: the owner cannot replace or remove `CHECKPOINT` meanwhile.
        let gen = c
            .gen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *gen != c.at {
            return Ok(CheckpointWrite::Superseded);
        }
        Ok(match write_checkpoint(&c.dir, &bytes) {
            Ok(()) => CheckpointWrite::Written,
            Err(e) => CheckpointWrite::Failed(e),
        })
    }

    /// Whether it carries a checkpoint.
    #[must_use]
    pub fn has_checkpoint(&self) -> bool {
        self.checkpoint.is_some()
    }
}

/// Replaces `CHECKPOINT` in `dir` crash-safe, as `LOG_START`: a temporary file, fsynced,
/// renamed over it, and the directory fsynced.
pub(super) fn write_checkpoint(dir: &Path, checkpoint: &[u8]) -> io::Result<()> {
    let tmp = dir.join(CHECKPOINT_TMP);
    {
        let mut f = File::create(&tmp)?;
        f.write_all(checkpoint)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, dir.join(CHECKPOINT_FILE))?;
    File::open(dir)?.sync_all()
}
