//! Online backup and restore (issue 31, item 4): `rocklet admin backup --to DIR` against a
//! running broker, `rocklet admin restore --from DIR --to DATA_DIR` without one.
//!
//! The folder: `mod.rs` (the point and the `Backups` service: one backup at a time, the
//! target's checks), `copy.rs` (the sparse and incremental copy), `manifest.rs` (the manifest,
//! written last), `restore.rs`. A backup flows: the admin service → `Backups::run` (the point
//! from the core thread, the wait until it is durable) → `copy.rs` `write_backup` (each file,
//! then the manifest); a restore: `restore` → `read_manifest` → the copy into the data directory.
//!
//! **The point.** Everything the broker knows is in its log (half and op records, delays,
//! offsets, topics, groups), so a prefix of the log that ends at a record boundary is a
//! consistent state: the one a broker had when its log ended there. A backup asks the core
//! thread, in one inspection (microseconds: no I/O), for the log's end and its segment bases;
//! that end is the backup's *point*. It then waits (without the core thread) until the log
//! is durable up to the point ([`rocklet_core::Broker::log_durable`]) — under `--flush sync`
//! at once, under `--flush async` within a flush interval, on a cluster master under sync
//! replication once the SyncStateSet holds it — so every record the backup holds was durable
//! as the broker promises, and every write acknowledged before the backup started is below
//! the point. A cluster replica's point is what it holds synced (what replication brought
//! it).
//!
//! **The copy** runs on a blocking thread, reading the segment files while the broker goes
//! on appending after the point (bytes below a durable end never change). A segment's data
//! runs from its base to the next one's (the newest one's: to the point); only that is read,
//! and only its data ranges (`SEEK_DATA` / `SEEK_HOLE`): a preallocated 1 GiB segment
//! holding 10 MB costs 10 MB in DIR, its length restored with `set_len` (a hole).
//!
//! ```text
//! DIR/
//!   00000000000000000000      segment files, each as long as the broker's (sparse)
//!   00000000001073741824
//!   LOG_START                 where the log starts, once retention trimmed it (read on
//!                             the core thread with the point, so it matches the point)
//!   auth.json                 users and ACLs, when the broker has them
//!   quarantine/<name>         what recovery or repair set aside, when there is any
//!   BACKUP_MANIFEST           written last (temp file, fsync, rename, fsync of DIR)
//! ```
//!
//! The manifest, one line each, the last a CRC-32 of every byte before it:
//!
//! ```text
//! rocklet-backup 1
//! version 0.1.0                       the broker's
//! log_offset 1048576                  the point
//! time_ms 1765000000000               the broker's clock when the point was taken
//! file 00000000000000000000 16777216 1048576 1a2b3c4d 5e6f7081
//!      name                 size     data    crc      head
//! crc 89abcdef
//! ```
//!
//! `size` is the file's length, `data` how many of its first bytes matter (the rest reads as
//! zeros), `crc` the CRC-32 of those bytes, `head` the CRC-32 of the first [`HEAD`] of them.
//!
//! **Retention meanwhile.** The inspection that takes the point also opens every segment
//! file below it. Retention retires segments on the core thread too and deletes their files
//! only after (retention.rs), so each file the inspection names is still there; held open,
//! a segment retention retires and unlinks while the copy runs keeps its bytes until the
//! copy is done with it (its space comes free then), and the backup is the log at its
//! point. The file descriptors are one per segment below the point, for the copy's length.
//!
//! **Incremental.** A second backup into the same DIR reads its manifest. A file listed
//! there with the same name and length as the broker's, whose copy in DIR still has that
//! length, and whose first [`HEAD`] bytes on the broker have the recorded `head` CRC (the
//! same log, not another broker's with the same file names), is not copied again when its
//! data length is the same, and only its new bytes are appended (the CRC carried on) when
//! the broker's data grew (the segment that was live at the last backup). Anything else is
//! copied whole into a temporary file, then renamed. Bytes below an earlier manifest's data
//! length are never changed in place, so a backup that fails leaves DIR's earlier manifest
//! true for what it names, or the renamed-over file caught by restore's check.
//!
//! **Restore** checks the manifest (its CRC, its fields, that the segments follow each other
//! up to the point) and every file it names (length and CRC of its data) before it writes
//! anything, then copies them (sparse) into a new or empty data directory and records there,
//! as a clean stop would, that the log ends at the point. A broker never runs on a backup
//! directory itself (it refuses one, naming the restore command), so DIR stays a backup.
//!
//! **Bounded.** One backup at a time per broker (a second one is refused by name); the copy
//! holds one [`BUF`] buffer; the manifest has a line per file of DIR. DIR must not be in the
//! data directory, nor hold it.

use std::fs::{self, File};
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocklet_core::AnyStorage;

use crate::driver::CoreHandle;

mod copy;
mod manifest;
mod restore;
#[cfg(test)]
mod tests;

use copy::write_backup;
use manifest::segment_name;

pub use manifest::{read_manifest, Entry, Manifest};
pub use restore::{refuse_backup_dir, restore, Restored};

/// The manifest's file name in a backup directory.
pub const MANIFEST: &str = "BACKUP_MANIFEST";
const MANIFEST_TMP: &str = "BACKUP_MANIFEST.tmp";
const HEADER: &str = "rocklet-backup 1";
/// Bytes at the start of a file whose CRC tells one log's file from another's of that name.
pub const HEAD: u64 = 64 * 1024;
/// The copy buffer.
const BUF: usize = 1 << 20;
/// How long a backup waits for the log to be durable up to its point.
const DURABLE_WAIT: Duration = Duration::from_secs(60);
/// Every file a backup or a restore creates: the owner's only (the log holds messages,
/// `auth.json` secret keys).
const FILE_MODE: u32 = 0o600;

/// What a backup did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// The point and when it was taken.
    pub log_offset: u64,
    pub time_ms: u64,
    /// Files written and their bytes (only data ranges count).
    pub files_copied: u32,
    pub bytes_copied: u64,
    /// Files DIR held already, and their data bytes.
    pub files_held: u32,
    pub bytes_held: u64,
    /// Wall time of the backup; time the core thread spent on it.
    pub elapsed: Duration,
    pub core: Duration,
}

/// The one-backup-at-a-time guard of a broker.
#[derive(Debug, Default, Clone)]
pub struct Backups {
    running: Arc<AtomicBool>,
}

/// Clears the running flag when dropped.
struct Running(Arc<AtomicBool>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

impl Backups {
    /// Takes a backup of the broker `core` runs into `to` (see the module doc), `now` its
    /// clock. `Err`: why not, in words for the operator.
    pub async fn run(&self, core: &CoreHandle, to: &Path, now: u64) -> Result<Report, String> {
        if self
            .running
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return Err(
                "a backup is already running on this broker: one at a time, try again once it \
                 is done"
                    .into(),
            );
        }
        let running = Running(self.running.clone());
        let started = Instant::now();
        if !to.is_absolute() {
            return Err(format!(
                "the backup directory `{}` is not an absolute path (it is a path on the \
                 broker's host)",
                to.display()
            ));
        }
        // The point and the segment list: one inspection. Its one read is `LOG_START` (where
        // the log starts and what replay from there cannot rebuild; a few KiB of live state),
        // taken here because a retention run replaces it on this thread: the copy then
        // matches the point, never a later start whose carried records lie past it.
        // The segment files are opened in the same inspection: retention retires segments on
        // this thread too and deletes their files after it, so each file named here is still
        // there, and held open it keeps its bytes for the copy when retention unlinks it
        // meanwhile (the space comes free when the copy closes it).
        let (dir, point, segments, epochs, core_time, log_start) = core
            .read_log(|b| {
                let t = Instant::now();
                let point = b.log_end();
                let epochs = b.epochs().to_vec();
                let dir = match b.storage_mut() {
                    AnyStorage::File(f) => Some(f.dir().to_path_buf()),
                    AnyStorage::Mem(_) => None,
                };
                let segments: Vec<(u64, io::Result<File>)> = match &dir {
                    Some(d) => b
                        .segment_bases()
                        .iter()
                        .copied()
                        .filter(|&s| s < point)
                        .map(|s| (s, File::open(d.join(segment_name(s)))))
                        .collect(),
                    None => Vec::new(),
                };
                let log_start = dir
                    .as_ref()
                    .map(|d| fs::read(d.join(rocklet_core::LOG_START_FILE)));
                (dir, point, segments, epochs, t.elapsed(), log_start)
            })
            .await
            .map_err(|e| format!("the broker cannot serve a backup: {e}"))?;
        let Some(dir) = dir else {
            return Err(
                "this broker's log is in memory: there is no data directory to back up".into(),
            );
        };
        {
            let (dir, to) = (dir.clone(), to.to_path_buf());
            tokio::task::spawn_blocking(move || check_target(&dir, &to))
                .await
                .map_err(|e| format!("the backup's check failed: {e}"))??;
        }
        // Durable up to the point, waited for off the core thread.
        let deadline = Instant::now() + DURABLE_WAIT;
        loop {
            let synced = core
                .inspect(|b| b.log_durable())
                .await
                .map_err(|e| format!("the broker cannot serve a backup: {e}"))?;
            if synced >= point {
                break;
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the log did not become durable up to log offset {point} within {} s \
                     (durable to {synced})",
                    DURABLE_WAIT.as_secs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let mut opened = Vec::with_capacity(segments.len());
        for (base, f) in segments {
            let f = f.map_err(|e| {
                format!(
                    "cannot open segment {}: {e}",
                    dir.join(segment_name(base)).display()
                )
            })?;
            opened.push((base, f));
        }
        let log_start = match log_start {
            Some(Err(e)) if e.kind() == io::ErrorKind::NotFound => None,
            Some(Err(e)) => {
                return Err(format!(
                    "cannot read {}: {e}",
                    dir.join(rocklet_core::LOG_START_FILE).display()
                ))
            }
            Some(Ok(bytes)) => Some(bytes),
            None => None,
        };
        let to = to.to_path_buf();
        // A replica that met a new master may cut its log and write it again while the copy
        // runs: then what was copied below the point may mix two histories. Its epochs and
        // its end tell, asked once the copy is done and before the manifest is written.
        let still_there = {
            let (core, rt) = (core.clone(), tokio::runtime::Handle::current());
            move |to: &Path| {
                let (end, after) = rt
                    .block_on(core.inspect(|b| (b.log_end(), b.epochs().to_vec())))
                    .map_err(|e| format!("the broker cannot serve a backup: {e}"))?;
                if end < point || after.iter().any(|e| e.1 < point && !epochs.contains(e)) {
                    return Err(format!(
                        "the log was cut below the backup's point {point} while it was copied \
                         (a replica following a new master): no manifest was written in {}; \
                         run the backup again",
                        to.display()
                    ));
                }
                Ok(())
            }
        };
        // The copy holds the one-at-a-time flag until it ends, even when the caller goes
        // away (a dropped request does not stop a copy already running).
        let mut report = tokio::task::spawn_blocking(move || {
            let _running = running;
            write_backup(
                &dir,
                &to,
                point,
                &opened,
                log_start.as_deref(),
                now,
                still_there,
            )
        })
        .await
        .map_err(|e| format!("the backup's copy thread failed: {e}"))??;
        report.elapsed = started.elapsed();
        report.core = core_time;
        Ok(report)
    }
}

/// `to` as an absolute path with `.` and `..` resolved against what exists: the nearest
/// existing ancestor canonicalized, the rest appended.
fn resolve(to: &Path) -> Result<PathBuf, String> {
    let mut existing = to.to_path_buf();
    let mut rest = Vec::new();
    loop {
        match existing.canonicalize() {
            Ok(c) => {
                let mut out = c;
                for part in rest.iter().rev() {
                    out.push(part);
                }
                return Ok(out);
            }
            Err(_) => {
                let name = match existing.components().next_back() {
                    Some(Component::Normal(n)) => n.to_os_string(),
                    _ => {
                        return Err(format!(
                            "cannot resolve the backup directory `{}`",
                            to.display()
                        ))
                    }
                };
                rest.push(name);
                if !existing.pop() {
                    return Err(format!(
                        "cannot resolve the backup directory `{}`",
                        to.display()
                    ));
                }
            }
        }
    }
}

/// Refuses a backup directory inside the data directory (or the data directory inside it),
/// and one that holds files but no backup.
fn check_target(data_dir: &Path, to: &Path) -> Result<(), String> {
    let data = data_dir.canonicalize().map_err(|e| {
        format!(
            "cannot resolve the data directory {}: {e}",
            data_dir.display()
        )
    })?;
    let target = resolve(to)?;
    if target.starts_with(&data) {
        return Err(format!(
            "the backup directory {} is inside the broker's data directory {}: pick a \
             directory elsewhere (on another disk, ideally)",
            to.display(),
            data.display()
        ));
    }
    if data.starts_with(&target) {
        return Err(format!(
            "the backup directory {} holds the broker's data directory {}: pick a directory \
             elsewhere",
            to.display(),
            data.display()
        ));
    }
    match fs::read_dir(&target) {
        Ok(mut entries) => {
            let empty = entries.next().is_none();
            if !empty && !target.join(MANIFEST).exists() {
                return Err(format!(
                    "the backup directory {} is not empty and holds no backup ({MANIFEST}): \
                     pick a new or empty directory, or one a backup was written to",
                    to.display()
                ));
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!(
            "cannot read the backup directory {}: {e}",
            to.display()
        )),
    }
}
