//! What the log holds and how full the file system under it is: the numbers behind the
//! `rocklet_disk_*` / `rocklet_log_*` metrics and mqadmin's `commitLogDiskRatio`,
//! `commitLogMinOffset` and `earliestMessageTimeStamp` (GET_BROKER_RUNTIME_INFO).
//!
//! Measured at most once per [`MAX_AGE`] whoever asks (scrapes, `brokerStatus`, the console):
//! `statvfs` of the data directory runs on a blocking thread, never on the core
//! thread, which is asked only for the log's end and, when the oldest segment changes, its
//! first record's store time (one record read).
//!
//! A log held in memory (a core over `MemStorage`, as library hosts and tests run it) has no
//! file system: its ratio is 0 and no capacity is reported; its retained bytes are the bytes
//! of its segments in memory.
//!
//! [`usage`] holds the numbers and the cache ([`DiskGauge`]), a leaf below
//! [`crate::metrics`] (the counters hold the gauge); this file measures, asking the core
//! thread ([`crate::driver`]).

use std::path::PathBuf;
use std::time::Instant;

use rocklet_core::record::{self, Decoded};
use rocklet_core::AnyStorage;

use crate::driver::{CoreFailure, CoreHandle};

pub mod usage;

pub use usage::{human_bytes, java_double, DiskGauge, DiskUsage, FsSpace, MAX_AGE};

impl DiskGauge {
    /// The measurement, taken again when older than [`MAX_AGE`]. A file system that cannot
    /// be measured (the directory gone) is reported without `fs`.
    pub async fn read(&self, core: &CoreHandle) -> Result<DiskUsage, CoreFailure> {
        let mut c = self.cached.lock().await;
        if c.at.is_some_and(|t| t.elapsed() < MAX_AGE) {
            return Ok(c.usage.clone());
        }
        // The segments the log reads (a file a retention run retired is not one of them,
        // even before the host has deleted it).
        let (dir, segs, end) = core
            .read_log(|b| {
                let end = b.log_end();
                let bases = b.segment_bases();
                let segs = (bases.len() as u64, bases.first().copied());
                match b.storage_mut() {
                    AnyStorage::File(f) => (Some(f.dir().to_path_buf()), segs, end),
                    AnyStorage::Mem(_) => (None, segs, end),
                }
            })
            .await?;
        let (segments, oldest_base) = segs;
        let fs = match dir {
            Some(dir) => measure(dir).await,
            None => None,
        };
        let oldest_store_ms = match oldest_base {
            // The first record of a segment never changes while the segment is there.
            Some(base)
                if c.usage.oldest_base == Some(base) && c.usage.oldest_store_ms.is_some() =>
            {
                c.usage.oldest_store_ms
            }
            Some(base) => {
                core.read_log(move |b| {
                    let recs = b.raw_records(base, 1).ok()?;
                    let (_, bytes) = recs.first()?;
                    match record::decode_trusted(bytes) {
                        Ok(Decoded::Record(r)) => Some(r.header.store_timestamp),
                        _ => None,
                    }
                })
                .await?
            }
            None => None,
        };
        let usage = DiskUsage {
            fs,
            segments,
            oldest_base,
            retained_bytes: oldest_base.map_or(0, |b| end.saturating_sub(b)),
            oldest_store_ms,
        };
        c.at = Some(Instant::now());
        c.usage = usage.clone();
        Ok(usage)
    }
}

/// `statvfs` of `dir`, on a blocking thread.
async fn measure(dir: PathBuf) -> Option<FsSpace> {
    let r = tokio::task::spawn_blocking(move || {
        FsSpace::of(&dir)
            .map_err(|e| tracing::warn!(dir = %dir.display(), error = %e, "cannot measure the data directory's file system"))
            .ok()
    })
    .await;
    r.ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_counts_what_an_unprivileged_process_can_fill() {
        // 100 GiB, 30 free of which 5 reserved for root: 70 used of 95 fillable.
        let g = 1u64 << 30;
        let s = FsSpace {
            total: 100 * g,
            free: 30 * g,
            avail: 25 * g,
        };
        assert_eq!(s.used(), 70 * g);
        assert!((s.used_ratio() - 70.0 / 95.0).abs() < 1e-12);
        // 73.68 % rounds up to 74 %, as RocketMQ reports it.
        assert!((s.rocketmq_ratio() - 0.74).abs() < 1e-12);
        // A whole percent stays as it is.
        let s = FsSpace {
            total: 100,
            free: 92,
            avail: 92,
        };
        assert!((s.rocketmq_ratio() - 0.08).abs() < 1e-12);
        assert_eq!(java_double(s.rocketmq_ratio()), "0.08");
        // Full, and empty.
        let full = FsSpace {
            total: 10,
            free: 0,
            avail: 0,
        };
        assert!((full.used_ratio() - 1.0).abs() < 1e-12);
        assert_eq!(java_double(full.rocketmq_ratio()), "1.0");
        let none = FsSpace {
            total: 0,
            free: 0,
            avail: 0,
        };
        assert!(none.used_ratio().abs() < f64::EPSILON);
        assert!(none.rocketmq_ratio().abs() < f64::EPSILON);
        // Sizes near u64::MAX neither overflow nor panic.
        let huge = FsSpace {
            total: u64::MAX,
            free: 1,
            avail: 1,
        };
        assert!((huge.rocketmq_ratio() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn the_file_system_of_a_temp_dir_is_measured() {
        let d = tempfile::tempdir().unwrap();
        let s = FsSpace::of(d.path()).unwrap();
        assert!(
            s.total > 0 && s.avail <= s.free && s.free <= s.total,
            "{s:?}"
        );
        let r = s.used_ratio();
        assert!((0.0..=1.0).contains(&r), "{r}");
    }

    #[test]
    fn java_formats() {
        assert_eq!(java_double(0.0), "0.0");
        assert_eq!(java_double(12.0), "12.0");
        assert_eq!(java_double(98.790_120_987_901_22), "98.79012098790122");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(299 * (1 << 30) + (3 << 30) / 10), "299.3 GiB");
        assert_eq!(human_bytes(u64::MAX), "16.0 EiB");
    }

    /// A core over memory storage: no file system, ratio 0, its log's bytes retained, the
    /// first record's store time; an empty one has no oldest time.
    #[tokio::test]
    async fn a_log_in_memory_has_no_file_system() {
        use rocklet_core::{Broker, MemStorage, NewMessage};
        let clock = std::sync::Arc::new(crate::clock::ManualClock::new(1_700_000_000_000));
        let b = Broker::open(
            rocklet_core::Config::default(),
            AnyStorage::Mem(MemStorage::new()),
            1_700_000_000_000,
        )
        .unwrap();
        let (core, _thread) = crate::driver::spawn(
            b,
            clock.clone(),
            std::sync::Arc::new(crate::metrics::Metrics::default()),
        )
        .unwrap();
        let empty = DiskGauge::default().read(&core).await.unwrap();
        assert_eq!(empty.fs, None);
        assert_eq!(empty.oldest_store_ms, None);
        assert_eq!(empty.commit_log_disk_ratio(), "0.0");
        clock.advance(5);
        let sent = core
            .send(vec![NewMessage::new("MemDisk", vec![7u8; 500])])
            .await;
        assert!(matches!(sent, Ok(Ok(_))), "{sent:?}");
        let end = core.inspect(|b| b.log_end()).await.unwrap();
        let u = DiskGauge::default().read(&core).await.unwrap();
        assert_eq!(u.fs, None);
        assert_eq!(u.commit_log_disk_ratio(), "0.0");
        assert_eq!((u.segments, u.oldest_base), (1, Some(0)));
        assert_eq!(u.retained_bytes, end);
        assert!(end >= 500, "{end}");
        let t = u.oldest_store_ms.expect("a record");
        assert!((1_700_000_000_000..=1_700_000_000_005).contains(&t), "{t}");
        core.shutdown().await;
    }
}
