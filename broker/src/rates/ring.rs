//! The samples the rates are reckoned from ([`Rates`]): plain data, importing nothing of the
//! broker, so the counters ([`crate::metrics::Metrics`]) can hold it. Sampling (which asks
//! the core thread) is in [`super`].

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

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
