//! Checkpoints of the core's state, on a schedule: whenever the log grew by
//! [`CheckpointConfig::bytes`] since the last one, or [`CheckpointConfig::interval_ms`]
//! passed and it grew at all, the core records one ([`crate::driver::CoreHandle::checkpoint`]:
//! the snapshot on the core thread, the sync and the write of `CHECKPOINT` off it); the
//! driver records one more at a clean stop, on the core thread. A start then reads the newest checkpoint
//! and only the log after it (a kill -9 replays at most about `bytes` of log, or what
//! `interval_ms` of traffic wrote), not the whole retained log.

use std::time::Duration;

use tracing::{debug, warn};

use crate::config::CheckpointConfig;
use crate::driver::CoreHandle;

/// How often the task looks at the log's end.
const LOOK_MS: u64 = 200;

/// Records checkpoints as `cfg` says until the task is dropped.
pub async fn run(core: CoreHandle, cfg: CheckpointConfig) {
    let mut log_end = core.log_end_watch();
    let mut at = *log_end.borrow();
    let mut since = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(LOOK_MS.min(cfg.interval_ms)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let end = *log_end.borrow_and_update();
        let grown = end.saturating_sub(at);
        let due = grown >= cfg.bytes
            || (grown > 0 && since.elapsed() >= Duration::from_millis(cfg.interval_ms));
        if !due {
            continue;
        }
        // The core thread only takes the snapshot; the sync and the write run on the sync
        // thread, and this answers once the checkpoint is written.
        match core.checkpoint().await {
            Ok(Ok(Some(covers))) => {
                debug!(covers, "checkpoint recorded");
                at = covers;
            }
            Ok(Ok(None)) => at = end,
            Ok(Err(e)) => warn!(error = %e, "recording a checkpoint failed"),
            // The core stopped: nothing more to record.
            Err(_) => return,
        }
        since = tokio::time::Instant::now();
    }
}
