//! The sparse and incremental copy of the log's files into DIR.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use super::manifest::{segment_name, valid_name, write_manifest};
use super::{Entry, Manifest, Report, BUF, FILE_MODE, HEAD, MANIFEST};

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
pub(super) fn copy_range(
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

pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Brings one file into the backup directory: held, appended to, or copied whole (see the
/// module doc). Returns its entry and the bytes written (`None`: held as it was).
fn back_up_file(
    src: &File,
    src_path: &Path,
    to: &Path,
    name: &str,
    data: Option<u64>,
    prior: Option<&Entry>,
    buf: &mut [u8],
) -> io::Result<(Entry, Option<u64>)> {
    let ctx = |e: io::Error, what: &str| io::Error::new(e.kind(), format!("{what}: {e}"));
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
            && head_crc(src, src_path, p.data, buf)? == p.head;
        if same_log && p.data == data {
            return Ok((p.clone(), None));
        }
        if same_log {
            // The broker's file grew since (the live segment then): append the new bytes.
            let dst = OpenOptions::new().write(true).open(&dst_path)?;
            let mut crc = crc32fast::Hasher::new_with_initial_len(p.crc, p.data);
            let n = copy_range(src, src_path, Some(&dst), p.data, data, &mut crc, buf)?;
            dst.sync_all()?;
            let head = if p.data >= HEAD {
                p.head
            } else {
                head_crc(src, src_path, data, buf)?
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
    let n = copy_range(src, src_path, Some(&dst), 0, data, &mut crc, buf)?;
    dst.set_len(size)?;
    dst.sync_all()?;
    drop(dst);
    fs::rename(&tmp, &dst_path)?;
    let entry = Entry {
        name: name.to_string(),
        size,
        data,
        crc: crc.finalize(),
        head: head_crc(src, src_path, data, buf)?,
    };
    Ok((entry, Some(n)))
}

/// Opens `path` for a copy.
fn open(path: &Path) -> io::Result<File> {
    File::open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot open {}: {e}", path.display())))
}

/// The backup's copy (a blocking thread): the segments below `point` (each with its file,
/// opened when the point was taken), `auth.json`, the quarantine, then — once `still_there`
/// says the log below the point is the one copied — the manifest.
pub(super) fn write_backup(
    data_dir: &Path,
    to: &Path,
    point: u64,
    segments: &[(u64, File)],
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
    for (i, (base, src)) in segments.iter().enumerate() {
        let base = *base;
        let end = segments.get(i + 1).map_or(point, |s| s.0);
        let name = segment_name(base);
        let r = back_up_file(
            src,
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
        let r = open(&auth)
            .and_then(|src| {
                back_up_file(
                    &src,
                    &auth,
                    to,
                    crate::auth::STORE_FILE,
                    None,
                    prior_entry(crate::auth::STORE_FILE),
                    &mut buf,
                )
            })
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
            let path = q.join(&n);
            let r = open(&path)
                .and_then(|src| {
                    back_up_file(&src, &path, to, &name, None, prior_entry(&name), &mut buf)
                })
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
