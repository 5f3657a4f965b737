//! Online backup and restore (issue 31, item 4): `rocklet admin backup --to DIR` against a
//! running broker, `rocklet admin restore --from DIR --to DATA_DIR` without one.
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

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocklet_core::{AnyStorage, Storage as _};

use crate::driver::CoreHandle;

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

/// One file of a backup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Path in the backup directory (`00000000000000000000`, `auth.json`,
    /// `quarantine/<name>`).
    pub name: String,
    /// The file's length.
    pub size: u64,
    /// Bytes at its start that matter; the rest reads as zeros.
    pub data: u64,
    /// CRC-32 of those bytes.
    pub crc: u32,
    /// CRC-32 of the first `min(data, HEAD)` of them.
    pub head: u32,
}

/// What a backup directory holds ([`MANIFEST`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The broker version that wrote it.
    pub version: String,
    /// Every record below this log offset is in the backup.
    pub log_offset: u64,
    /// The broker's clock when the point was taken.
    pub time_ms: u64,
    /// Every file, segments first (ascending), then the others.
    pub files: Vec<Entry>,
}

/// A segment file's name: its base offset in 20 digits.
fn segment_name(base: u64) -> String {
    format!("{base:020}")
}

fn segment_base(name: &str) -> Option<u64> {
    (name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()))
        .then(|| name.parse().ok())
        .flatten()
}

/// A file name a manifest may hold: a plain name, or `quarantine/<plain name>`, plain
/// meaning no separator, no whitespace, not starting with a dot.
fn valid_name(name: &str) -> bool {
    let plain = |n: &str| {
        !n.is_empty()
            && !n.starts_with('.')
            && !n.contains(['/', '\\'])
            && !n.chars().any(char::is_whitespace)
    };
    match name.split_once('/') {
        Some((dir, rest)) => dir == rocklet_core::QUARANTINE_DIR && plain(rest),
        None => plain(name),
    }
}

impl Manifest {
    /// The manifest's text, its last line the CRC of the lines before it.
    #[must_use]
    pub fn encode(&self) -> String {
        use std::fmt::Write as _;
        let mut s = format!(
            "{HEADER}\nversion {}\nlog_offset {}\ntime_ms {}\n",
            self.version, self.log_offset, self.time_ms
        );
        for f in &self.files {
            let _ = writeln!(
                s,
                "file {} {} {} {:08x} {:08x}",
                f.name, f.size, f.data, f.crc, f.head
            );
        }
        let crc = crc32fast::hash(s.as_bytes());
        let _ = writeln!(s, "crc {crc:08x}");
        s
    }

    /// Reads a manifest, refusing anything that is not exactly what [`Manifest::encode`]
    /// writes: a damaged one is never taken for a shorter backup.
    pub fn parse(text: &[u8]) -> Result<Self, String> {
        let text = std::str::from_utf8(text).map_err(|_| "it is not text".to_string())?;
        let body_end = text
            .trim_end_matches('\n')
            .rfind('\n')
            .map(|i| i + 1)
            .ok_or("it has no `crc` line")?;
        let (body, last) = text.split_at(body_end);
        let want = last
            .strip_suffix('\n')
            .and_then(|l| l.strip_prefix("crc "))
            .and_then(|v| u32::from_str_radix(v, 16).ok())
            .ok_or("its last line is not `crc <8 hex digits>` (cut short?)")?;
        let got = crc32fast::hash(body.as_bytes());
        if got != want {
            return Err(format!(
                "its CRC is {got:08x}, its last line says {want:08x} (it was changed or damaged)"
            ));
        }
        let mut lines = body.lines();
        if lines.next() != Some(HEADER) {
            return Err(format!("its first line is not `{HEADER}`"));
        }
        let mut field = |name: &str| {
            lines
                .next()
                .and_then(|l| l.strip_prefix(name))
                .and_then(|v| v.strip_prefix(' '))
                .map(str::to_string)
                .ok_or_else(|| format!("it has no `{name}` line"))
        };
        let version = field("version")?;
        let num = |name: &str, v: String| {
            v.parse::<u64>()
                .map_err(|_| format!("its `{name}` is not a number"))
        };
        let log_offset = num("log_offset", field("log_offset")?)?;
        let time_ms = num("time_ms", field("time_ms")?)?;
        let mut files = Vec::new();
        for line in lines {
            let bad = || format!("its line `{line}` is not `file NAME SIZE DATA CRC HEAD`");
            let parts: Vec<&str> = line.split(' ').collect();
            let ["file", name, size, data, crc, head] = parts[..] else {
                return Err(bad());
            };
            let entry = Entry {
                name: name.to_string(),
                size: size.parse().map_err(|_| bad())?,
                data: data.parse().map_err(|_| bad())?,
                crc: u32::from_str_radix(crc, 16).map_err(|_| bad())?,
                head: u32::from_str_radix(head, 16).map_err(|_| bad())?,
            };
            if !valid_name(&entry.name) || entry.data > entry.size {
                return Err(bad());
            }
            files.push(entry);
        }
        Ok(Manifest {
            version,
            log_offset,
            time_ms,
            files,
        })
    }

    /// The segments, as (base, entry), ascending.
    fn segments(&self) -> Vec<(u64, &Entry)> {
        let mut s: Vec<_> = self
            .files
            .iter()
            .filter_map(|f| segment_base(&f.name).map(|b| (b, f)))
            .collect();
        s.sort_by_key(|(b, _)| *b);
        s
    }

    /// The log the segments hold must run without a gap from the first one's base to the
    /// point, each segment's data ending where the next one starts.
    fn check_log(&self) -> Result<(), String> {
        let segs = self.segments();
        for w in segs.windows(2) {
            let ((a, ea), (b, _)) = (w[0], w[1]);
            if a + ea.data != b {
                return Err(format!(
                    "segment {} holds log offsets {a}..{} but the next segment starts at {b}",
                    ea.name,
                    a + ea.data
                ));
            }
        }
        match segs.last() {
            Some((b, e)) if b + e.data != self.log_offset => Err(format!(
                "the newest segment {} ends at log offset {}, not at the backup's point {}",
                e.name,
                b + e.data,
                self.log_offset
            )),
            None if self.log_offset != 0 => Err(format!(
                "it names no segment but a point of log offset {}",
                self.log_offset
            )),
            _ => Ok(()),
        }
    }
}

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
        let (dir, point, bases, epochs, core_time, log_start) = core
            .read_log(|b| {
                let t = Instant::now();
                let point = b.log_end();
                let epochs = b.epochs().to_vec();
                let bases: Vec<u64> = b
                    .segment_bases()
                    .iter()
                    .copied()
                    .filter(|&s| s < point)
                    .collect();
                let dir = match b.storage_mut() {
                    AnyStorage::File(f) => Some(f.dir().to_path_buf()),
                    AnyStorage::Mem(_) => None,
                };
                let log_start = dir
                    .as_ref()
                    .map(|d| fs::read(d.join(rocklet_core::LOG_START_FILE)));
                (dir, point, bases, epochs, t.elapsed(), log_start)
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
                &bases,
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

/// Where data starts at or after `pos` (`None`: only a hole follows). A file system without
/// `SEEK_DATA` has data everywhere.
fn next_data(f: &File, pos: u64) -> Option<u64> {
    match rustix::fs::seek(f, rustix::fs::SeekFrom::Data(pos)) {
        Ok(at) => Some(at),
        Err(rustix::io::Errno::NXIO) => None,
        Err(_) => Some(pos),
    }
}

/// Where the data that starts at `pos` ends (a hole, or the file's end).
fn next_hole(f: &File, pos: u64, end: u64) -> u64 {
    rustix::fs::seek(f, rustix::fs::SeekFrom::Hole(pos)).unwrap_or(end)
}

fn feed_zeros(crc: &mut crc32fast::Hasher, mut n: u64) {
    const Z: [u8; 4096] = [0; 4096];
    while n > 0 {
        let k = n.min(Z.len() as u64) as usize;
        crc.update(&Z[..k]);
        n -= k as u64;
    }
}

/// Reads bytes `from..to` of `src` — its data ranges only; holes are zeros — into `crc`,
/// and writes them at the same positions of `dst` when given (its holes stay holes).
/// Returns the bytes read from data ranges.
fn copy_range(
    src: &File,
    src_name: &Path,
    dst: Option<&File>,
    from: u64,
    to: u64,
    crc: &mut crc32fast::Hasher,
    buf: &mut [u8],
) -> io::Result<u64> {
    let mut pos = from;
    let mut copied = 0;
    while pos < to {
        let Some(data) = next_data(src, pos).filter(|&d| d < to) else {
            feed_zeros(crc, to - pos);
            break;
        };
        feed_zeros(crc, data - pos);
        let end = next_hole(src, data, to).clamp(data + 1, to);
        let mut at = data;
        while at < end {
            let want = ((end - at) as usize).min(buf.len());
            let n = src.read_at(&mut buf[..want], at)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "{} ends at byte {at}, before the {to} bytes of data expected",
                        src_name.display()
                    ),
                ));
            }
            crc.update(&buf[..n]);
            if let Some(d) = dst {
                d.write_all_at(&buf[..n], at)?;
            }
            at += n as u64;
            copied += n as u64;
        }
        pos = end;
    }
    Ok(copied)
}

/// CRC of the first `min(len, HEAD)` bytes of `f`.
fn head_crc(f: &File, name: &Path, len: u64, buf: &mut [u8]) -> io::Result<u32> {
    let mut h = crc32fast::Hasher::new();
    copy_range(f, name, None, 0, len.min(HEAD), &mut h, buf)?;
    Ok(h.finalize())
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Brings one file into the backup directory: held, appended to, or copied whole (see the
/// module doc). Returns its entry and the bytes written (`None`: held as it was).
fn back_up_file(
    src_path: &Path,
    to: &Path,
    name: &str,
    data: Option<u64>,
    prior: Option<&Entry>,
    buf: &mut [u8],
) -> io::Result<(Entry, Option<u64>)> {
    let ctx = |e: io::Error, what: &str| io::Error::new(e.kind(), format!("{what}: {e}"));
    let src =
        File::open(src_path).map_err(|e| ctx(e, &format!("cannot open {}", src_path.display())))?;
    let size = src.metadata()?.len();
    let data = data.unwrap_or(size);
    if data > size {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "{} is {size} bytes long, but the log has {data} bytes of data in it",
                src_path.display()
            ),
        ));
    }
    let dst_path = to.join(name);
    if let Some(p) = prior {
        let held_len = fs::metadata(&dst_path).map(|m| m.len()).ok();
        let same_log = p.size == size
            && held_len == Some(p.size)
            && p.data <= data
            && head_crc(&src, src_path, p.data, buf)? == p.head;
        if same_log && p.data == data {
            return Ok((p.clone(), None));
        }
        if same_log {
            // The broker's file grew since (the live segment then): append the new bytes.
            let dst = OpenOptions::new().write(true).open(&dst_path)?;
            let mut crc = crc32fast::Hasher::new_with_initial_len(p.crc, p.data);
            let n = copy_range(&src, src_path, Some(&dst), p.data, data, &mut crc, buf)?;
            dst.sync_all()?;
            let head = if p.data >= HEAD {
                p.head
            } else {
                head_crc(&src, src_path, data, buf)?
            };
            let entry = Entry {
                name: name.to_string(),
                size,
                data,
                crc: crc.finalize(),
                head,
            };
            return Ok((entry, Some(n)));
        }
    }
    // Whole: into a temporary file, renamed over whatever was there.
    let tmp = to.join(format!(".{}.partial", name.replace('/', "_")));
    let dst = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(&tmp)
        .map_err(|e| ctx(e, &format!("cannot create {}", tmp.display())))?;
    let mut crc = crc32fast::Hasher::new();
    let n = copy_range(&src, src_path, Some(&dst), 0, data, &mut crc, buf)?;
    dst.set_len(size)?;
    dst.sync_all()?;
    drop(dst);
    fs::rename(&tmp, &dst_path)?;
    let entry = Entry {
        name: name.to_string(),
        size,
        data,
        crc: crc.finalize(),
        head: head_crc(&src, src_path, data, buf)?,
    };
    Ok((entry, Some(n)))
}

/// The backup's copy (a blocking thread): the segments below `point`, `auth.json`, the
/// quarantine, then — once `still_there` says the log below the point is the one copied —
/// the manifest.
fn write_backup(
    data_dir: &Path,
    to: &Path,
    point: u64,
    bases: &[u64],
    log_start: Option<&[u8]>,
    now: u64,
    still_there: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<Report, String> {
    let fail = |what: String| move |e: io::Error| format!("{what}: {e}");
    fs::create_dir_all(to).map_err(fail(format!("cannot create {}", to.display())))?;
    // What an earlier backup left (a manifest that does not read is as none: all is copied).
    let prior = match fs::read(to.join(MANIFEST)) {
        Ok(t) => match Manifest::parse(&t) {
            Ok(m) => Some(m),
            Err(why) => {
                tracing::warn!(dir = %to.display(), %why, "the backup directory's manifest does not read: copying everything again");
                None
            }
        },
        Err(_) => None,
    };
    let prior_entry = |name: &str| {
        prior
            .as_ref()
            .and_then(|m| m.files.iter().find(|f| f.name == name))
    };
    let mut buf = vec![0u8; BUF];
    let mut report = Report {
        log_offset: point,
        time_ms: now,
        ..Report::default()
    };
    let mut files = Vec::new();
    let mut add = |(entry, written): (Entry, Option<u64>), report: &mut Report| {
        match written {
            Some(n) => {
                report.files_copied += 1;
                report.bytes_copied += n;
            }
            None => {
                report.files_held += 1;
                report.bytes_held += entry.data;
            }
        }
        files.push(entry);
    };
    for (i, &base) in bases.iter().enumerate() {
        let end = bases.get(i + 1).copied().unwrap_or(point);
        let name = segment_name(base);
        let r = back_up_file(
            &data_dir.join(&name),
            to,
            &name,
            Some(end - base),
            prior_entry(&name),
            &mut buf,
        )
        .map_err(fail(format!("cannot back up segment {name}")))?;
        add(r, &mut report);
    }
    // Where the log starts, as it was at the point (taken on the core thread with it).
    if let Some(bytes) = log_start {
        let name = rocklet_core::LOG_START_FILE;
        write_whole(to, name, bytes).map_err(fail(format!("cannot write the backup's {name}")))?;
        let entry = Entry {
            name: name.to_string(),
            size: bytes.len() as u64,
            data: bytes.len() as u64,
            crc: crc32fast::hash(bytes),
            head: crc32fast::hash(&bytes[..bytes.len().min(HEAD as usize)]),
        };
        add((entry, Some(bytes.len() as u64)), &mut report);
    }
    let auth = data_dir.join(crate::auth::STORE_FILE);
    if auth.exists() {
        let r = back_up_file(
            &auth,
            to,
            crate::auth::STORE_FILE,
            None,
            prior_entry(crate::auth::STORE_FILE),
            &mut buf,
        )
        .map_err(fail(format!("cannot back up {}", auth.display())))?;
        add(r, &mut report);
    }
    let q = data_dir.join(rocklet_core::QUARANTINE_DIR);
    if let Ok(entries) = fs::read_dir(&q) {
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        names.sort();
        if !names.is_empty() {
            fs::create_dir_all(to.join(rocklet_core::QUARANTINE_DIR))
                .map_err(fail("cannot create the backup's quarantine".into()))?;
        }
        for n in names {
            let name = format!("{}/{n}", rocklet_core::QUARANTINE_DIR);
            if !valid_name(&name) {
                tracing::warn!(file = %q.join(&n).display(), "not a quarantine file name: left out of the backup");
                continue;
            }
            let r = back_up_file(&q.join(&n), to, &name, None, prior_entry(&name), &mut buf)
                .map_err(fail(format!("cannot back up {}", q.join(&n).display())))?;
            add(r, &mut report);
        }
        if to.join(rocklet_core::QUARANTINE_DIR).exists() {
            sync_dir(&to.join(rocklet_core::QUARANTINE_DIR))
                .map_err(fail("cannot sync the backup's quarantine".into()))?;
        }
    }
    sync_dir(to).map_err(fail(format!("cannot sync {}", to.display())))?;
    let manifest = Manifest {
        version: env!("CARGO_PKG_VERSION").to_string(),
        log_offset: point,
        time_ms: now,
        files,
    };
    manifest
        .check_log()
        .map_err(|e| format!("the log changed under the backup: {e}"))?;
    still_there(to)?;
    write_manifest(to, &manifest).map_err(fail(format!(
        "cannot write {}",
        to.join(MANIFEST).display()
    )))?;
    Ok(report)
}

/// Writes `bytes` as `dir/name`: a temp file (the owner's only), fsync, rename.
fn write_whole(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    fs::rename(&tmp, dir.join(name))
}

/// Temp file, fsync, rename, fsync of the directory: DIR is a backup from here on.
fn write_manifest(to: &Path, m: &Manifest) -> io::Result<()> {
    let tmp = to.join(MANIFEST_TMP);
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(&tmp)?;
    f.write_all(m.encode().as_bytes())?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, to.join(MANIFEST))?;
    sync_dir(to)
}

/// Reads and checks `from`'s manifest (not the files it names).
pub fn read_manifest(from: &Path) -> Result<Manifest, String> {
    let path = from.join(MANIFEST);
    let text = match fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(format!(
                "{} is not a complete backup: it has no {MANIFEST} (a backup that is still \
                 running or that failed writes none)",
                from.display()
            ))
        }
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let m = Manifest::parse(&text).map_err(|why| {
        format!(
            "the backup in {} is damaged: {MANIFEST} does not read: {why}",
            from.display()
        )
    })?;
    m.check_log()
        .map_err(|why| format!("the backup in {} is damaged: {why}", from.display()))?;
    Ok(m)
}

/// What a restore did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    pub log_offset: u64,
    pub time_ms: u64,
    pub version: String,
    pub files: usize,
    pub bytes: u64,
    pub elapsed: Duration,
}

/// `rocklet admin restore --from DIR --to DATA_DIR`: checks the backup in `from` whole,
/// then copies it into `to` (new or empty) and records there that the log ends, cleanly, at
/// the backup's point. Nothing is written when the backup does not check out.
pub fn restore(from: &Path, to: &Path) -> Result<Restored, String> {
    let started = Instant::now();
    let m = read_manifest(from)?;
    match fs::read_dir(to) {
        Ok(mut e) => {
            if e.next().is_some() {
                return Err(format!(
                    "{} is not empty: restore into a new or empty data directory",
                    to.display()
                ));
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot read {}: {e}", to.display())),
    }
    let mut buf = vec![0u8; BUF];
    // Every file first: its length and the CRC of its data.
    for f in &m.files {
        let path = from.join(&f.name);
        let damaged = |why: String| {
            format!(
                "the backup in {} is damaged or incomplete: {why}; nothing was restored",
                from.display()
            )
        };
        let src = File::open(&path).map_err(|e| damaged(format!("{}: {e}", path.display())))?;
        let len = src
            .metadata()
            .map_err(|e| damaged(format!("{}: {e}", path.display())))?
            .len();
        if len != f.size {
            return Err(damaged(format!(
                "{} is {len} bytes long, the manifest says {}",
                path.display(),
                f.size
            )));
        }
        let mut crc = crc32fast::Hasher::new();
        copy_range(&src, &path, None, 0, f.data, &mut crc, &mut buf)
            .map_err(|e| damaged(format!("{}: {e}", path.display())))?;
        let got = crc.finalize();
        if got != f.crc {
            return Err(damaged(format!(
                "the CRC of {}'s {} bytes of data is {got:08x}, the manifest says {:08x}",
                path.display(),
                f.data,
                f.crc
            )));
        }
    }
    let fail = |what: String| move |e: io::Error| format!("{what}: {e}");
    fs::create_dir_all(to).map_err(fail(format!("cannot create {}", to.display())))?;
    let mut bytes = 0;
    for f in &m.files {
        let src_path = from.join(&f.name);
        let dst_path = to.join(&f.name);
        if let Some(parent) = dst_path.parent() {
            fs::create_dir_all(parent)
                .map_err(fail(format!("cannot create {}", parent.display())))?;
        }
        let src =
            File::open(&src_path).map_err(fail(format!("cannot open {}", src_path.display())))?;
        let dst = OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(FILE_MODE)
            .open(&dst_path)
            .map_err(fail(format!("cannot create {}", dst_path.display())))?;
        let mut crc = crc32fast::Hasher::new();
        bytes += copy_range(&src, &src_path, Some(&dst), 0, f.data, &mut crc, &mut buf)
            .map_err(fail(format!("cannot copy {}", src_path.display())))?;
        if crc.finalize() != f.crc {
            return Err(format!(
                "{} changed while it was restored (its CRC no longer matches the manifest)",
                src_path.display()
            ));
        }
        dst.set_len(f.size)
            .and_then(|()| dst.sync_all())
            .map_err(fail(format!("cannot write {}", dst_path.display())))?;
    }
    if to.join(rocklet_core::QUARANTINE_DIR).exists() {
        sync_dir(&to.join(rocklet_core::QUARANTINE_DIR))
            .map_err(fail("cannot sync the quarantine".into()))?;
    }
    // LOG_END as a clean stop at the point writes it: the newest segment, the end, clean.
    let mut storage = rocklet_core::FileStorage::open(to).map_err(fail(format!(
        "cannot open {} as a data directory",
        to.display()
    )))?;
    storage
        .record_log_end(m.log_offset, true)
        .map_err(fail(format!(
            "cannot record the log's end in {}",
            to.display()
        )))?;
    drop(storage);
    sync_dir(to).map_err(fail(format!("cannot sync {}", to.display())))?;
    Ok(Restored {
        log_offset: m.log_offset,
        time_ms: m.time_ms,
        version: m.version,
        files: m.files.len(),
        bytes,
        elapsed: started.elapsed(),
    })
}

/// A broker never runs on a backup directory: refused, naming the restore.
pub fn refuse_backup_dir(data_dir: &Path) -> Result<(), String> {
    if data_dir.join(MANIFEST).exists() {
        return Err(format!(
            "{} is a backup ({MANIFEST}), not a data directory: a broker never runs on a \
             backup. Restore it with `rocklet admin restore --from {} --to NEW_DATA_DIR` and \
             start the broker there",
            data_dir.display(),
            data_dir.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest {
            version: "0.1.0".into(),
            log_offset: 300,
            time_ms: 1_765_000_000_000,
            files: vec![
                Entry {
                    name: segment_name(0),
                    size: 1000,
                    data: 200,
                    crc: 0xdead_beef,
                    head: 1,
                },
                Entry {
                    name: segment_name(200),
                    size: 1000,
                    data: 100,
                    crc: 7,
                    head: 8,
                },
                Entry {
                    name: "quarantine/10-20.damaged".into(),
                    size: 10,
                    data: 10,
                    crc: 9,
                    head: 9,
                },
            ],
        }
    }

    #[test]
    fn a_manifest_reads_back_and_refuses_any_change() {
        let m = sample();
        let text = m.encode();
        assert_eq!(Manifest::parse(text.as_bytes()).unwrap(), m);
        m.check_log().unwrap();
        // One byte changed, a line lost, cut short: each refused.
        let changed = text.replacen(" 200 ", " 201 ", 1);
        assert!(Manifest::parse(changed.as_bytes())
            .unwrap_err()
            .contains("CRC"));
        let cut = &text[..text.len() - 10];
        assert!(Manifest::parse(cut.as_bytes()).is_err());
        let no_line: String = text
            .lines()
            .filter(|l| !l.starts_with("time_ms"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(Manifest::parse(no_line.as_bytes()).is_err());
    }

    #[test]
    fn a_gap_between_segments_or_before_the_point_is_refused() {
        let mut m = sample();
        m.files[0].data = 150;
        assert!(m
            .check_log()
            .unwrap_err()
            .contains("next segment starts at 200"));
        let mut m = sample();
        m.log_offset = 400;
        assert!(m
            .check_log()
            .unwrap_err()
            .contains("not at the backup's point 400"));
    }

    #[test]
    fn names_outside_the_backup_are_refused() {
        for bad in [
            "../x",
            "/etc/passwd",
            "quarantine/../x",
            ".hidden",
            "a b",
            "x/y",
            "",
        ] {
            assert!(!valid_name(bad), "{bad}");
        }
        assert!(valid_name("auth.json"));
        assert!(valid_name("quarantine/1-2.missing"));
    }

    /// A preallocated file holding a little data costs that data in the copy, and reads
    /// back the same (holes as zeros) with the same CRC.
    #[test]
    fn a_sparse_file_copies_its_data_only() {
        let d = tempfile::tempdir().unwrap();
        let src_path = d.path().join("src");
        let src = File::create(&src_path).unwrap();
        src.set_len(64 << 20).unwrap();
        src.write_all_at(&[7u8; 100_000], 0).unwrap();
        src.write_all_at(&[9u8; 5000], 8 << 20).unwrap();
        let src = File::open(&src_path).unwrap();
        let dst_path = d.path().join("dst");
        let dst = File::create(&dst_path).unwrap();
        let mut buf = vec![0u8; BUF];
        let mut c1 = crc32fast::Hasher::new();
        let n = copy_range(&src, &src_path, Some(&dst), 0, 64 << 20, &mut c1, &mut buf).unwrap();
        dst.set_len(64 << 20).unwrap();
        // Data ranges are file-system blocks: at most a few blocks more than the data.
        assert!((105_000..=105_000 + 64 * 1024).contains(&n), "{n}");
        let mut c2 = crc32fast::Hasher::new();
        let dst = File::open(&dst_path).unwrap();
        copy_range(&dst, &dst_path, None, 0, 64 << 20, &mut c2, &mut buf).unwrap();
        assert_eq!(c1.finalize(), c2.finalize());
        assert_eq!(fs::read(&src_path).unwrap(), fs::read(&dst_path).unwrap());
    }

    /// One backup at a time, by name; a relative directory and a log in memory are refused
    /// before anything is copied.
    #[tokio::test]
    async fn one_backup_at_a_time_and_what_cannot_be_backed_up() {
        use rocklet_core::{Broker, MemStorage};
        let clock = Arc::new(crate::clock::ManualClock::new(1_700_000_000_000));
        let b = Broker::open(
            rocklet_core::Config::default(),
            AnyStorage::Mem(MemStorage::new()),
            1_700_000_000_000,
        )
        .unwrap();
        let (core, _thread) =
            crate::driver::spawn(b, clock, Arc::new(crate::metrics::Metrics::default())).unwrap();
        let d = tempfile::tempdir().unwrap();
        let backups = Backups::default();
        let e = backups.run(&core, d.path(), 0).await.unwrap_err();
        assert!(e.contains("in memory"), "{e}");
        let e = backups
            .run(&core, Path::new("rel/dir"), 0)
            .await
            .unwrap_err();
        assert!(e.contains("not an absolute path"), "{e}");
        // While one runs, another is refused by name; once it is done, the next one runs.
        let held = Running(backups.running.clone());
        backups.running.store(true, Ordering::SeqCst);
        let e = backups.run(&core, d.path(), 0).await.unwrap_err();
        assert!(e.contains("a backup is already running"), "{e}");
        drop(held);
        let e = backups.run(&core, d.path(), 0).await.unwrap_err();
        assert!(e.contains("in memory"), "{e}");
        core.shutdown().await;
    }
}
