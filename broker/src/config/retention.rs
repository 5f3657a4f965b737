//! Retention's settings: when the oldest segments of the log go.

use rocklet_core::Millis;

/// When the oldest segments of the log go ([`crate::retention`]).
#[derive(Clone, Debug, PartialEq)]
pub struct RetentionConfig {
    /// A segment sealed this many hours ago goes (default 72, RocketMQ's fileReservedTime).
    pub file_reserved_time_hours: f64,
    /// Hours of the day (UTC, 0 to 23) at which expired segments go (default `04`,
    /// RocketMQ's deleteWhen).
    pub delete_when: Vec<u8>,
    /// Above this share of the disk used, expired segments go at once, whatever the hour
    /// (default 0.75, RocketMQ's diskMaxUsedSpaceRatio).
    pub disk_max_used_space_ratio: f64,
    /// Above this share, the oldest segments go whatever their age, until the disk is below
    /// it again (default 0.85, RocketMQ's diskSpaceCleanForciblyRatio).
    pub disk_space_clean_forcibly_ratio: f64,
    /// How often retention looks, in ms (default 10 000).
    pub check_interval_ms: Millis,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            file_reserved_time_hours: 72.0,
            delete_when: vec![4],
            disk_max_used_space_ratio: 0.75,
            disk_space_clean_forcibly_ratio: 0.85,
            check_interval_ms: 10_000,
        }
    }
}

/// Parses `delete_when`: hours of the day, `;`-separated (`"04"`, `"04;16"`).
pub fn parse_delete_when(v: &str) -> Result<Vec<u8>, String> {
    let mut hours = Vec::new();
    for part in v.split(';') {
        let h: u8 = part
            .trim()
            .parse()
            .ok()
            .filter(|h| *h < 24)
            .ok_or_else(|| {
                format!(
                    "invalid config `delete_when`: `{part}` is not an hour of the day (00 to 23; \
                 several are separated by `;`)"
                )
            })?;
        hours.push(h);
    }
    Ok(hours)
}

/// When the core records a checkpoint of its state ([`crate::checkpoint`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointConfig {
    /// Once the log grew by this many bytes since the last checkpoint (default 256 MiB):
    /// what a start after a kill -9 replays at most, whatever the log holds.
    pub bytes: u64,
    /// Once this many ms passed since the last checkpoint and the log grew (default 60 000).
    pub interval_ms: Millis,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        CheckpointConfig {
            bytes: 256 << 20,
            interval_ms: 60_000,
        }
    }
}
