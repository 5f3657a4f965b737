//! The disk numbers and their cache ([`DiskGauge`]): plain data, importing nothing of the
//! broker, so the counters ([`crate::metrics::Metrics`]) can hold the gauge. Measuring
//! (which asks the core thread) is in [`super`].

use std::path::Path;
use std::time::{Duration, Instant};

/// How long a measurement is reused.
pub const MAX_AGE: Duration = Duration::from_secs(2);

/// Space of a file system, in bytes, as `statvfs` gives it (`f_frsize` units).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsSpace {
    /// `f_blocks`: the file system's size.
    pub total: u64,
    /// `f_bfree`: free, counting blocks reserved for root.
    pub free: u64,
    /// `f_bavail`: free for an unprivileged process.
    pub avail: u64,
}

impl FsSpace {
    /// `statvfs` of the file system holding `path`.
    pub fn of(path: &Path) -> std::io::Result<Self> {
        let s = rustix::fs::statvfs(path)?;
        let unit = s.f_frsize.max(1);
        Ok(FsSpace {
            total: s.f_blocks.saturating_mul(unit),
            free: s.f_bfree.saturating_mul(unit),
            avail: s.f_bavail.saturating_mul(unit),
        })
    }

    /// Bytes in use: total − free.
    #[must_use]
    pub fn used(&self) -> u64 {
        self.total.saturating_sub(self.free)
    }

    /// The share of the space an unprivileged process can fill that is filled:
    /// used / (used + available), as RocketMQ's `UtilAll.getDiskPartitionSpaceUsedPercent`
    /// and `df`'s Use% reckon it (root's reserved blocks count as neither). 0 for an empty
    /// file system.
    #[must_use]
    pub fn used_ratio(&self) -> f64 {
        let used = self.used();
        let entire = used.saturating_add(self.avail);
        if entire == 0 {
            0.0
        } else {
            used as f64 / entire as f64
        }
    }

    /// [`FsSpace::used_ratio`] as RocketMQ reports it in `commitLogDiskRatio`: whole percents,
    /// rounded up, over 100 (0.08 for 7.2 %).
    #[must_use]
    pub fn rocketmq_ratio(&self) -> f64 {
        let used = u128::from(self.used());
        let entire = used + u128::from(self.avail);
        if entire == 0 {
            return 0.0;
        }
        let pct = (used * 100).div_ceil(entire);
        pct as f64 / 100.0
    }
}

/// A number of bytes as RocketMQ's `MixAll.humanReadableByteCount(bytes, false)` writes it
/// (`299.3 GiB`, `512 B`): `commitLogDirCapacity` holds two of them.
#[must_use]
pub fn human_bytes(bytes: u64) -> String {
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let exp = ((bytes as f64).ln() / 1024f64.ln()) as i32;
    let exp = exp.clamp(1, 6);
    let unit = ["K", "M", "G", "T", "P", "E"][exp as usize - 1];
    format!("{:.1} {unit}iB", bytes as f64 / 1024f64.powi(exp))
}

/// A double as Java's `String.valueOf(double)` writes the plain ones (`0.0`, `0.08`,
/// `98.79012098790122`): what mqadmin and its parsers read in a KVTable.
#[must_use]
pub fn java_double(v: f64) -> String {
    let s = format!("{v}");
    if s.contains(['.', 'e', 'E']) || !v.is_finite() {
        s
    } else {
        format!("{s}.0")
    }
}

/// One measurement.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DiskUsage {
    /// The file system holding the data directory (`None`: the log is in memory).
    pub fs: Option<FsSpace>,
    /// Segments of the log.
    pub segments: u64,
    /// The log offset the oldest segment starts at (`None`: no segment yet).
    pub oldest_base: Option<u64>,
    /// Bytes of log data retained: from the oldest segment's first byte to the log's end.
    /// The zeros a segment file is preallocated with after the end (each file is
    /// `segment_size` long, sparse until written) are not counted.
    pub retained_bytes: u64,
    /// Store time (ms) of the oldest segment's first record (`None`: no record).
    pub oldest_store_ms: Option<u64>,
}

impl DiskUsage {
    /// `commitLogDiskRatio` (RocketMQ's rounding; `0.0` for a log in memory).
    #[must_use]
    pub fn commit_log_disk_ratio(&self) -> String {
        java_double(self.fs.map_or(0.0, |f| f.rocketmq_ratio()))
    }
}

#[derive(Debug, Default)]
pub(super) struct Cached {
    pub(super) at: Option<Instant>,
    pub(super) usage: DiskUsage,
}

/// The cached measurement ([`MAX_AGE`]), shared by everything that reports it.
#[derive(Debug, Default)]
pub struct DiskGauge {
    pub(super) cached: tokio::sync::Mutex<Cached>,
}
