//! Messages stored and handed out per second over the last 10 s, 60 s and 600 s: mqadmin's
//! `putTps` and `getTransferredTps` (`"x y z"`, RocketMQ's StoreStatsService windows).
//!
//! A task samples the counters once a second ([`sample`]); a rate is the counter now against
//! the sample one window ago (or the oldest one, while the broker is younger than the
//! window). At most 602 samples are held.
//!
//! [`ring`] holds the samples ([`Rates`]): a leaf below [`crate::metrics`], whose counters
//! hold it; this file samples into it and reads the core.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::driver::CoreHandle;
use crate::metrics::Metrics;

pub mod ring;

pub use ring::{Counts, Rates, WINDOWS};

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
