//! The disk-full guard: new messages are refused while the data directory's file system is
//! fuller than `disk_space_warning_level_ratio` (RocketMQ's `diskSpaceWarningLevelRatio`,
//! 90 % by default), and taken again once it is not.
//!
//! A task looks at the file system once a second (the shared [`crate::disk::DiskGauge`]:
//! `statvfs` on a blocking thread, never on the core thread) and tells the core only when the answer changes
//! ([`rocklet_core::Broker::set_disk_full`]); the core then refuses sends, half messages and
//! send-backs with `DISK_FULL`, on both protocols, while reads, acks, transaction ends and
//! delayed messages coming due go on. Refusing at 90 % leaves the rest of the disk for what
//! the broker itself still writes, so a full disk never fails an fsync of acknowledged data.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rocklet_core::DiskFull;
use tracing::{info, warn};

use crate::disk::FsSpace;
use crate::driver::CoreHandle;
use crate::metrics::Metrics;

/// How often the file system is measured.
pub const PERIOD: Duration = Duration::from_secs(1);

/// Whether a file system of this fill refuses new messages at `limit` (a share, 0 to 1):
/// `Some` with both in thousandths (rounded down, so 89.96 % is not reported as 90.0 %).
#[must_use]
pub fn verdict(space: &FsSpace, limit: f64) -> Option<DiskFull> {
    let used = space.used_ratio();
    if space.total == 0 || used < limit {
        return None;
    }
    let permille = |r: f64| (r * 1000.0).floor().clamp(0.0, 1000.0) as u16;
    Some(DiskFull {
        used_permille: permille(used),
        limit_permille: permille(limit),
    })
}

/// Looks at the data directory's file system every [`PERIOD`] (the one measurement the
/// metrics and retention read too, [`crate::disk::DiskGauge`], taken again when older than
/// its [`crate::disk::MAX_AGE`]) and keeps the core's refusal in step, until the core stops.
/// `limit` is `disk_space_warning_level_ratio`.
pub async fn guard(core: CoreHandle, limit: f64, m: Arc<Metrics>) {
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut told: Option<DiskFull> = None;
    loop {
        tick.tick().await;
        let space = match m.disk.read(&core).await {
            Ok(u) => match u.fs {
                Some(fs) => fs,
                // Not measurable now (the directory being replaced, say), or a log in
                // memory: keep what was told.
                None => continue,
            },
            Err(_) => return,
        };
        let now = verdict(&space, limit);
        // Tell the core on a change of state only (not of the fill while full).
        if now.is_some() == told.is_some() {
            continue;
        }
        if core.with_mut(move |b| b.set_disk_full(now)).await.is_err() {
            return;
        }
        m.disk_full.store(now.is_some(), Ordering::Relaxed);
        match now {
            Some(d) => warn!(
                used_permille = d.used_permille,
                limit_permille = d.limit_permille,
                "the disk holding the log passed disk_space_warning_level_ratio: new messages are refused (DISK_FULL) until space is freed"
            ),
            None => {
                info!("disk space is back under disk_space_warning_level_ratio: new messages are taken again")
            }
        }
        told = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space(used: u64, avail: u64) -> FsSpace {
        FsSpace {
            total: used + avail + 10,
            free: avail + 10,
            avail,
        }
    }

    #[test]
    fn refuses_from_the_limit_on_and_reports_thousandths() {
        assert_eq!(verdict(&space(899, 101), 0.9), None);
        assert_eq!(
            verdict(&space(900, 100), 0.9),
            Some(DiskFull {
                used_permille: 900,
                limit_permille: 900
            })
        );
        assert_eq!(
            verdict(&space(9_999, 1), 0.9).map(|d| d.used_permille),
            Some(999)
        );
        assert_eq!(verdict(&space(0, 0), 0.5), None, "an empty file system");
        assert_eq!(
            verdict(&space(1, 0), 1.0).map(|d| d.used_permille),
            Some(1000)
        );
    }
}
