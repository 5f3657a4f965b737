//! A device that can be told to fail: a FUSE file system (the `fuser` crate, mounted by this
//! test process as root, no libfuse needed) holding one file, `disk.img`, passed through to
//! a real file. While [`FaultyFile::fail`] is set, every write and fsync of it fails with
//! EIO. A loop device over `disk.img` is then a block device whose writes fail on demand,
//! and ext4 on it sees what it sees on a dying disk: failed writeback, an aborted journal,
//! fsync returning EIO.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    LockOwner, MountOption, OpenFlags, ReplyAttr, ReplyData, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyWrite, Request, WriteFlags,
};

/// The one file's name.
pub const IMAGE: &str = "disk.img";
const FILE: INodeNo = INodeNo(2);
const TTL: Duration = Duration::from_secs(1);

/// The switch and counters shared with the test.
#[derive(Debug, Default)]
pub struct Faults {
    /// Fail every write and fsync with EIO.
    pub fail: AtomicBool,
    /// Writes and fsyncs failed so far.
    pub failed: AtomicU64,
    /// Writes passed through so far.
    pub writes: AtomicU64,
    /// Byte ranges of the image whose writes never fail, even while `fail` is set (a write
    /// that overlaps one passes), and then fsyncs never fail either: ext4's journal. A journal write that fails aborts the file system (read-only from then on);
    /// a disk whose data blocks fail while the journal holds leaves it writable, so a broker
    /// restarted at once on the same mount can write again (and meet what the failed
    /// writeback left in the page cache).
    pub spared: Mutex<Vec<(u64, u64)>>,
}

struct FaultyFile {
    backing: File,
    size: u64,
    faults: Arc<Faults>,
}

fn attr(ino: INodeNo, size: u64) -> FileAttr {
    let dir = ino == INodeNo::ROOT;
    FileAttr {
        ino,
        size,
        blocks: size.div_ceil(512),
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: if dir {
            FileType::Directory
        } else {
            FileType::RegularFile
        },
        perm: if dir { 0o755 } else { 0o600 },
        nlink: if dir { 2 } else { 1 },
        uid: 0,
        gid: 0,
        rdev: 0,
        flags: 0,
        blksize: 4096,
    }
}

impl FaultyFile {
    fn spared(&self, offset: u64, len: u64) -> bool {
        self.faults
            .spared
            .lock()
            .unwrap()
            .iter()
            .any(|&(from, to)| offset < to && offset + len > from)
    }

    fn failing(&self) -> bool {
        if self.faults.fail.load(Ordering::SeqCst) {
            self.faults.failed.fetch_add(1, Ordering::SeqCst);
            true
        } else {
            false
        }
    }
}

impl Filesystem for FaultyFile {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent == INodeNo::ROOT && name == IMAGE {
            reply.entry(&TTL, &attr(FILE, self.size), Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match ino {
            INodeNo::ROOT => reply.attr(&TTL, &attr(ino, 0)),
            FILE => reply.attr(&TTL, &attr(ino, self.size)),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if ino == FILE {
            reply.opened(FileHandle(0), FopenFlags::empty());
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let end = (offset + u64::from(size)).min(self.size);
        let mut buf = vec![0; end.saturating_sub(offset) as usize];
        match self.backing.read_exact_at(&mut buf, offset) {
            Ok(()) => reply.data(&buf),
            Err(_) => reply.error(Errno::EIO),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if (!self.spared(offset, data.len() as u64) && self.failing())
            || offset + data.len() as u64 > self.size
        {
            return reply.error(Errno::EIO);
        }
        match self.backing.write_all_at(data, offset) {
            Ok(()) => {
                self.faults.writes.fetch_add(1, Ordering::Relaxed);
                reply.written(data.len() as u32);
            }
            Err(_) => reply.error(Errno::EIO),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // Writes reached the backing file when they were answered; the host's power is not
        // what this device simulates, so its page cache counts as the platter. With spared
        // ranges only the writes outside them fail (each answered EIO at once): a flush the
        // journal's commit asks for goes through.
        if self.faults.spared.lock().unwrap().is_empty() && self.failing() {
            reply.error(Errno::EIO);
        } else {
            reply.ok();
        }
    }
}

/// The mounted file system; unmounted when dropped.
pub struct FaultyMount {
    session: Option<fuser::BackgroundSession>,
    pub faults: Arc<Faults>,
}

impl FaultyMount {
    /// Mounts at `mnt` a file system whose `disk.img` passes through to `backing` (made
    /// `size_mib` MiB long).
    pub fn mount(mnt: &Path, backing: &Path, size_mib: u64) -> Result<FaultyMount, String> {
        std::fs::create_dir_all(mnt).map_err(|e| e.to_string())?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(backing)
            .map_err(|e| e.to_string())?;
        let size = size_mib << 20;
        file.set_len(size).map_err(|e| e.to_string())?;
        let faults = Arc::new(Faults::default());
        let fs = FaultyFile {
            backing: file,
            size,
            faults: faults.clone(),
        };
        let mut cfg = Config::default();
        cfg.mount_options.extend([
            MountOption::FSName("rocklet-faulty".into()),
            MountOption::NoAtime,
        ]);
        let session = fuser::spawn_mount(fs, mnt, &cfg)
            .map_err(|e| format!("cannot mount a FUSE file system at {}: {e}", mnt.display()))?;
        Ok(FaultyMount {
            session: Some(session),
            faults,
        })
    }
}

impl Drop for FaultyMount {
    fn drop(&mut self) {
        // Unmounting a FUSE mount something still uses (a loop device) would fail: the
        // caller detaches it first.
        drop(self.session.take());
    }
}
