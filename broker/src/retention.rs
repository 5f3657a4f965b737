//! Log retention, as RocketMQ's CleanCommitLogService: every
//! [`RetentionConfig::check_interval_ms`] it looks whether the oldest segments may go —
//! those sealed more than `file_reserved_time_hours` ago, at a `delete_when` hour or at any
//! hour while the disk is used above `disk_max_used_space_ratio`; above
//! `disk_space_clean_forcibly_ratio`, the oldest ones whatever their age (as many as bring
//! the disk below it, at most [`MAX_PER_RUN`] a run) — and asks the core
//! to retire them ([`rocklet_core::Broker::retain`]: it carries forward what is still owed
//! and records where the log now starts). The files are deleted here, on a blocking
//! thread: unlinking a 1 GiB file can take long, and the core thread never waits on it.
//!
//! A segment's age is the store time of the first record after it (when it was sealed), on
//! the broker's clock, so it is the same on every restart and on a replica. A replica
//! applies the same rule to its own copy; its core carries nothing (it writes only what its
//! master sends), so a pending half or delay holds its cut until its master carried it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rocklet_core::record::{self, Decoded};
use rocklet_core::{AnyStorage, Millis, Retention, Storage};
use tracing::{info, warn};

use crate::clock::Clock;
use crate::config::RetentionConfig;
use crate::driver::CoreHandle;
use crate::metrics::Metrics;

/// Most segments one run retires because the disk is too full.
pub const MAX_PER_RUN: usize = 10;

/// Runs retention every `cfg.check_interval_ms` until the task is dropped.
pub async fn run(core: CoreHandle, clock: Arc<dyn Clock>, m: Arc<Metrics>, cfg: RetentionConfig) {
    let period = Duration::from_millis(cfg.check_interval_ms);
    // The first look one period after the start, not during it.
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = run_once(&core, clock.as_ref(), &m, &cfg, false).await {
            warn!(error = %e, "log retention failed");
        }
    }
}

/// One retention run; `force`: whatever the hour (`delete_when` does not apply). Returns
/// what the core retired (already deleted from the disk when this returns).
pub async fn run_once(
    core: &CoreHandle,
    clock: &dyn Clock,
    m: &Metrics,
    cfg: &RetentionConfig,
    force: bool,
) -> Result<Retention, String> {
    let now = clock.now();
    let hour = ((now / 3_600_000) % 24) as u8;
    let fs = m.disk.read(core).await.map_err(|e| e.to_string())?.fs;
    // Bytes above a share of the disk (0: below it).
    let above = |ratio: f64| {
        fs.map_or(0, |f| {
            let entire = f.used().saturating_add(f.avail) as f64;
            f.used().saturating_sub((entire * ratio) as u64)
        })
    };
    let by_age =
        force || cfg.delete_when.contains(&hour) || above(cfg.disk_max_used_space_ratio) > 0;
    let excess = above(cfg.disk_space_clean_forcibly_ratio);
    if !by_age && excess == 0 {
        return Ok(Retention::default());
    }
    let reserved_ms = (cfg.file_reserved_time_hours * 3_600_000.0) as Millis;
    let (retention, dir) = core
        .with_mut(move |b| {
            let bases = b.segment_bases().to_vec();
            let mut before = 0;
            if by_age {
                // Oldest first: each sealed segment whose successor began long enough ago.
                for next in bases.iter().skip(1) {
                    let sealed = b.raw_records(*next, 1).ok().and_then(|recs| {
                        let (_, bytes) = recs.first()?;
                        match record::decode_trusted(bytes) {
                            Ok(Decoded::Record(r)) => Some(r.header.store_timestamp),
                            _ => None,
                        }
                    });
                    match sealed {
                        Some(t) if t.saturating_add(reserved_ms) <= now => before = *next,
                        _ => break,
                    }
                }
            }
            if excess > 0 {
                let mut freed = 0u64;
                for w in bases.windows(2).take(MAX_PER_RUN) {
                    if freed >= excess {
                        break;
                    }
                    freed += w[1] - w[0];
                    before = before.max(w[1]);
                }
            }
            let dir = match b.storage_mut() {
                AnyStorage::File(f) => Some(f.dir().to_path_buf()),
                AnyStorage::Mem(_) => None,
            };
            if before <= b.log_start() {
                return Ok::<_, String>((Retention::default(), dir));
            }
            let r = b.retain(now, before).map_err(|e| e.to_string())?;
            if !r.retired.is_empty() {
                // `LOG_START` changed, so the checkpoint before it is no longer used: a new
                // one keeps the next start short.
                if let Err(e) = b.checkpoint() {
                    warn!(error = %e, "recording a checkpoint after retention failed");
                }
            }
            if let AnyStorage::Mem(mem) = b.storage_mut() {
                for base in &r.retired {
                    let _ = mem.remove(*base);
                }
            }
            Ok((r, dir))
        })
        .await
        .map_err(|e| e.to_string())??;
    if retention.retired.is_empty() {
        return Ok(retention);
    }
    delete(dir, &retention).await?;
    info!(
        start = retention.start,
        retired = retention.retired.len(),
        carried = retention.carried,
        carried_bytes = retention.carried_bytes,
        held = ?retention.held,
        "log retention retired the oldest segments"
    );
    Ok(retention)
}

/// The environment variable of the crash tests' hook: with it set to N, each run's deletion
/// stops for N ms — after its first unlink, or before it when the run retired one segment —
/// and logs `retention paused mid-deletion` first, so a test can kill the broker where
/// `LOG_START` names the new start and retired files are still on disk
/// (tests/crash_loop.rs). Unset (as always outside tests), nothing waits.
pub const PAUSE_ENV: &str = "ROCKLET_TEST_RETENTION_PAUSE_MS";

fn pause_ms() -> Option<u64> {
    static PAUSE: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *PAUSE.get_or_init(|| std::env::var(PAUSE_ENV).ok()?.parse().ok())
}

/// Deletes the retired segment files, on a blocking thread (a memory log's were dropped
/// on the core thread: nothing slow about them). A backup copying one of them holds it
/// open (it opened its segments with its point, on the core thread, before this run
/// retired them), so its copy still reads every byte (backup/mod.rs).
async fn delete(dir: Option<PathBuf>, r: &Retention) -> Result<(), String> {
    let Some(dir) = dir else {
        return Ok(());
    };
    let bases = r.retired.clone();
    let pause_at = bases.len().min(2) - 1;
    tokio::task::spawn_blocking(move || {
        for (i, base) in bases.into_iter().enumerate() {
            if let (Some(ms), true) = (pause_ms(), i == pause_at) {
                warn!(
                    before = base,
                    ms, "retention paused mid-deletion ({PAUSE_ENV})"
                );
                std::thread::sleep(Duration::from_millis(ms));
            }
            let path = dir.join(format!("{base:020}"));
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                // Left for the next open, which removes what lies before the log's start.
                Err(e) => return Err(format!("cannot delete {}: {e}", path.display())),
            }
        }
        Ok(())
    })
    .await
    .map_err(|e| e.to_string())?
}
