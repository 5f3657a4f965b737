//! Messages stored and handed out per second over the last 10 s, 60 s and 600 s: mqadmin's
//! `putTps` and `getTransferredTps` (`"x y z"`, RocketMQ's StoreStatsService windows).
//!
//! A task samples the counters once a second ([`sample`]); a rate is the counter now against
//! the sample one window ago (or the oldest one, while the broker is younger than the
//! window). At most 602 samples are held.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::driver::CoreHandle;
use crate::metrics::Metrics;

/// The windows, in seconds, in the order RocketMQ writes them.
pub const WINDOWS: [u64; 3] = [10, 60, 600];

/// Counters at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Messages stored (the core's `messages_stored`).
    pub put: u64,
    /// Messages handed to consumers (receives and pops, the core's `received`, plus pulls).
    pub get: u64,
}

/// The samples of the last [`WINDOWS`]`[2]` seconds.
#[derive(Debug, Default)]
pub struct Rates {
    samples: Mutex<VecDeque<(Instant, Counts)>>,
}

impl Rates {
    /// Adds a sample taken at `at`, dropping those no window reaches any more.
    pub fn record(&self, at: Instant, c: Counts) {
        let mut s = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        s.push_back((at, c));
        let keep = Duration::from_secs(WINDOWS[2]);
        // Keep the newest sample at or before `at - 600 s`: the longest window starts there.
        while s.len() > 2 && s.get(1).is_some_and(|(t, _)| at.duration_since(*t) >= keep) {
            s.pop_front();
        }
    }

    /// Per-second rates of put and get over each window, counters `now` being `c`.
    #[must_use]
    pub fn per_second(&self, now: Instant, c: Counts) -> [(f64, f64); 3] {
        let s = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        WINDOWS.map(|w| {
            let from = now.checked_sub(Duration::from_secs(w));
            // The newest sample at or before the window's start, else the oldest one.
            let base = from
                .and_then(|f| s.iter().rev().find(|(t, _)| *t <= f))
                .or_else(|| s.front());
            match base {
                Some((t, b)) => {
                    let secs = now.saturating_duration_since(*t).as_secs_f64();
                    if secs < 1e-3 {
                        (0.0, 0.0)
                    } else {
                        (
                            c.put.saturating_sub(b.put) as f64 / secs,
                            c.get.saturating_sub(b.get) as f64 / secs,
                        )
                    }
                }
                None => (0.0, 0.0),
            }
        })
    }

    /// Samples held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.samples.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// No sample yet.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The three rates as a KVTable value: `"r10 r60 r600"` (Java doubles).
#[must_use]
pub fn kv(rates: [f64; 3]) -> String {
    let [a, b, c] = rates.map(crate::disk::java_double);
    format!("{a} {b} {c}")
}

/// The counters now: the core's, plus the pulls the broker counts.
pub async fn counts(core: &CoreHandle, m: &Metrics) -> Option<Counts> {
    let s = core.inspect(|b| b.stats()).await.ok()?;
    Some(Counts {
        put: s.messages_stored,
        get: s.received + m.pulled.load(Ordering::Relaxed),
    })
}

/// Samples the counters into `m.rates` once a second until the core stops (the first sample
/// at once).
pub async fn sample(core: CoreHandle, m: Arc<Metrics>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(c) = counts(&core, &m).await else {
            return;
        };
        m.rates.record(Instant::now(), c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(put: u64, get: u64) -> Counts {
        Counts { put, get }
    }

    #[test]
    fn no_sample_is_no_rate() {
        let r = Rates::default();
        let now = Instant::now();
        assert_eq!(r.per_second(now, at(100, 100)), [(0.0, 0.0); 3]);
        r.record(now, at(5, 0));
        assert_eq!(
            r.per_second(now, at(100, 1)),
            [(0.0, 0.0); 3],
            "no time passed"
        );
    }

    #[test]
    fn each_window_reaches_back_its_length() {
        let r = Rates::default();
        let t0 = Instant::now();
        // One sample a second for 700 s: put grows 10/s for the first 640 s, then 100/s.
        let mut put = 0;
        for i in 0..=700u64 {
            r.record(t0 + Duration::from_secs(i), at(put, i));
            put += if i < 640 { 10 } else { 100 };
        }
        assert!(r.len() <= 602, "{}", r.len());
        let now = t0 + Duration::from_secs(700);
        let c = at(put - 100, 700);
        let [(p10, g10), (p60, _), (p600, g600)] = r.per_second(now, c);
        assert!((p10 - 100.0).abs() < 1e-9, "{p10}");
        assert!((p60 - 100.0).abs() < 1e-9, "{p60}");
        // 540 s at 10/s and 60 s at 100/s.
        assert!(
            (p600 - (540.0 * 10.0 + 60.0 * 100.0) / 600.0).abs() < 1e-9,
            "{p600}"
        );
        assert!((g10 - 1.0).abs() < 1e-9 && (g600 - 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_young_broker_rates_over_its_life() {
        let r = Rates::default();
        let t0 = Instant::now();
        r.record(t0, at(0, 0));
        let now = t0 + Duration::from_secs(4);
        let rates = r.per_second(now, at(400, 40));
        for (p, g) in rates {
            assert!((p - 100.0).abs() < 1e-9 && (g - 10.0).abs() < 1e-9);
        }
        assert_eq!(
            kv(rates.map(|x| x.0)),
            "100.0 100.0 100.0",
            "RocketMQ's format"
        );
        // A counter that went back (the core reopened) is no negative rate.
        assert_eq!(r.per_second(now, at(0, 0))[0], (0.0, 0.0));
    }
}
