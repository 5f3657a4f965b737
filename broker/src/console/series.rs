//! The broker's own time series for the console's overview: one sample per step (10 s by
//! default) for the last hour, from the core's counters and the broker's END_TRANSACTION
//! latency histogram. No external Prometheus needed.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rocklet_core::{Millis, Stats};

use crate::clock::Clock;
use crate::driver::CoreHandle;
use crate::metrics::Metrics;

/// How long the series reaches back.
pub const SPAN_MS: Millis = 3_600_000;

/// One step of the series.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Sample {
    /// End of the step, on the broker's clock.
    pub at: Millis,
    /// Messages stored in user topics per second (sends, commits, deliveries).
    pub stored_per_s: f64,
    /// Transactions committed and rolled back per second.
    pub committed_per_s: f64,
    pub rolled_back_per_s: f64,
    /// Pending transactions at the end of the step.
    pub half_backlog: u64,
    /// Delayed messages not yet delivered at the end of the step.
    pub delay_backlog: u64,
    /// Checks issued and answered during the step.
    pub checks_sent: u64,
    pub checks_answered: u64,
    /// Checks that failed during the step: unanswered before the next was due, and answered
    /// UNKNOWN (`rocklet_transaction_check_failures_total{reason="no_answer"|"unknown"}`).
    pub checks_unanswered: u64,
    pub checks_unknown: u64,
    /// Answered / issued during the step (`None`: no check was issued).
    pub check_success: Option<f64>,
    /// END_TRANSACTION calls during the step and their mean and ~p99 latency in ms.
    pub end_transactions: u64,
    pub end_transaction_mean_ms: Option<f64>,
    pub end_transaction_p99_ms: Option<f64>,
}

/// What a sample is computed from.
#[derive(Clone, Debug)]
pub struct Reading {
    pub at: Millis,
    pub stats: Stats,
    pub halves: u64,
    pub delays: u64,
    /// END_TRANSACTION histogram: (count, sum in ns, cumulative bucket counts).
    pub end_txn: (u64, u64, Vec<(f64, u64)>),
}

/// The samples of the last hour.
#[derive(Debug)]
pub struct Series {
    step_ms: Millis,
    inner: Mutex<(Option<Reading>, VecDeque<Sample>)>,
}

impl Series {
    /// A series with one sample per `step_ms` (at least 1).
    #[must_use]
    pub fn new(step_ms: Millis) -> Self {
        Series {
            step_ms: step_ms.max(1),
            inner: Mutex::new((None, VecDeque::new())),
        }
    }

    /// The step.
    #[must_use]
    pub fn step_ms(&self) -> Millis {
        self.step_ms
    }

    /// Samples kept at most (an hour of steps).
    #[must_use]
    pub fn capacity(&self) -> usize {
        (SPAN_MS / self.step_ms).clamp(1, 3600) as usize
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Option<Reading>, VecDeque<Sample>)> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds a reading: the first only sets the baseline; each later one a sample of the
    /// change since the one before.
    pub fn push(&self, r: Reading) {
        let cap = self.capacity();
        let mut g = self.lock();
        let (prev, samples) = &mut *g;
        if let Some(p) = prev.as_ref() {
            let s = sample(p, &r);
            if samples.len() >= cap {
                samples.pop_front();
            }
            samples.push_back(s);
        }
        *prev = Some(r);
    }

    /// Every sample kept, oldest first.
    #[must_use]
    pub fn samples(&self) -> Vec<Sample> {
        self.lock().1.iter().cloned().collect()
    }
}

fn sample(p: &Reading, r: &Reading) -> Sample {
    let secs = (r.at.saturating_sub(p.at) as f64 / 1000.0).max(0.001);
    let d = |a: u64, b: u64| b.saturating_sub(a);
    let checks_sent = d(p.stats.checks_sent, r.stats.checks_sent);
    let checks_answered = d(p.stats.checks_answered, r.stats.checks_answered);
    let n = d(p.end_txn.0, r.end_txn.0);
    let sum_ns = d(p.end_txn.1, r.end_txn.1);
    let p99 = (n > 0).then(|| {
        // The smallest bucket bound holding 99% of this step's calls.
        let want = (n as f64 * 0.99).ceil() as u64;
        r.end_txn
            .2
            .iter()
            .zip(&p.end_txn.2)
            .find(|((_, now), (_, before))| now.saturating_sub(*before) >= want)
            .map_or(f64::INFINITY, |((le, _), _)| le * 1000.0)
    });
    Sample {
        at: r.at,
        stored_per_s: d(p.stats.messages_stored, r.stats.messages_stored) as f64 / secs,
        committed_per_s: d(p.stats.committed, r.stats.committed) as f64 / secs,
        rolled_back_per_s: d(p.stats.rolled_back, r.stats.rolled_back) as f64 / secs,
        half_backlog: r.halves,
        delay_backlog: r.delays,
        checks_sent,
        checks_answered,
        checks_unanswered: d(p.stats.checks_unanswered, r.stats.checks_unanswered),
        checks_unknown: d(p.stats.checks_unknown, r.stats.checks_unknown),
        check_success: (checks_sent > 0)
            .then(|| (checks_answered as f64 / checks_sent as f64).min(1.0)),
        end_transactions: n,
        end_transaction_mean_ms: (n > 0).then(|| sum_ns as f64 / n as f64 / 1e6),
        end_transaction_p99_ms: p99.filter(|v| v.is_finite()),
    }
}

/// Reads the core's counters and the broker's histogram now.
pub async fn read(core: &CoreHandle, metrics: &Metrics, clock: &dyn Clock) -> Option<Reading> {
    let (stats, halves, delays) = core
        .inspect(|b| {
            (
                b.stats(),
                b.pending_transaction_count() as u64,
                b.pending_delay_count() as u64,
            )
        })
        .await
        .ok()?;
    Some(Reading {
        at: clock.now(),
        stats,
        halves,
        delays,
        end_txn: metrics.end_transaction_latency.snapshot(),
    })
}

/// Samples every step until the task is dropped.
pub async fn run(
    series: Arc<Series>,
    core: CoreHandle,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(series.step_ms()));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Some(r) = read(&core, &metrics, clock.as_ref()).await {
            series.push(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(at: Millis, stored: u64, halves: u64, sent: u64, answered: u64) -> Reading {
        Reading {
            at,
            stats: Stats {
                messages_stored: stored,
                checks_sent: sent,
                checks_answered: answered,
                ..Stats::default()
            },
            halves,
            delays: 0,
            end_txn: (0, 0, vec![(0.001, 0), (1.0, 0)]),
        }
    }

    #[test]
    fn samples_are_rates_of_change_and_the_ring_keeps_an_hour() {
        let s = Series::new(600_000);
        assert_eq!(s.capacity(), 6);
        s.push(reading(0, 0, 0, 0, 0));
        assert!(s.samples().is_empty(), "the first reading is a baseline");
        s.push(reading(10_000, 500, 7, 4, 3));
        let x = &s.samples()[0];
        assert_eq!(x.stored_per_s, 50.0);
        assert_eq!(x.half_backlog, 7);
        assert_eq!(x.check_success, Some(0.75));
        assert_eq!(x.end_transaction_mean_ms, None);
        for i in 2..20 {
            s.push(reading(i * 10_000, 500, 7, 4, 3));
        }
        let all = s.samples();
        assert_eq!(all.len(), 6);
        assert_eq!(all.last().unwrap().at, 190_000);
        assert_eq!(all.last().unwrap().stored_per_s, 0.0);
        assert_eq!(all.last().unwrap().check_success, None);
    }

    #[test]
    fn latency_mean_and_p99_come_from_the_histogram_change() {
        let s = Series::new(10_000);
        let mut a = reading(0, 0, 0, 0, 0);
        a.end_txn = (10, 10_000_000, vec![(0.001, 10), (0.01, 10), (1.0, 10)]);
        let mut b = reading(10_000, 0, 0, 0, 0);
        // 100 more calls: 98 under 1 ms, 2 under 10 ms; 300 ms in all.
        b.end_txn = (
            110,
            310_000_000,
            vec![(0.001, 108), (0.01, 110), (1.0, 110)],
        );
        s.push(a);
        s.push(b);
        let x = &s.samples()[0];
        assert_eq!(x.end_transactions, 100);
        assert_eq!(x.end_transaction_mean_ms, Some(3.0));
        assert_eq!(x.end_transaction_p99_ms, Some(10.0));
    }
}
