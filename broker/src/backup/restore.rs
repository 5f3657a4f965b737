//! `rocklet admin restore`: a backup checked whole, then copied into a new data directory.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use rocklet_core::Storage as _;

use super::copy::{copy_range, sync_dir};
use super::{read_manifest, BUF, FILE_MODE, MANIFEST};

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
