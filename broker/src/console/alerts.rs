//! The alerts that would fire now, for the console's banner: the three transaction rules of
//! RocketMQ's production guidance, as `broker/packaging/alerts/rocklet-alerts.yml` writes
//! them for Prometheus, evaluated here over the console's own time series ([`series`]), so
//! an operator without Prometheus sees them too. A test holds the two to the same alert
//! names, thresholds, windows and `for` durations.
//!
//! Evaluation follows Prometheus: an expression is evaluated at each sample over the window
//! of samples ending there; a rule is *pending* while its expression has held for less than
//! its `for` duration, and *firing* once it has held at every sample for that long.
//!
//! [`series`]: super::series

use rocklet_core::Millis;
use serde::Serialize;

use super::series::Sample;

/// One rule.
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    /// The alert's name in rocklet-alerts.yml.
    pub alert: &'static str,
    /// The expression is true above this value.
    pub threshold: f64,
    /// Its range (rate window), 0 for an instant value.
    pub window_ms: Millis,
    /// How long it must hold before the alert fires.
    pub for_ms: Millis,
    /// What the value is, for the banner.
    pub what: &'static str,
    /// The section of docs/runbooks.md.
    pub runbook: &'static str,
    value: fn(&[Sample], Millis) -> Option<f64>,
}

/// The rules the console evaluates.
pub const RULES: [Rule; 3] = [
    Rule {
        alert: "RockletTransactionCheckTimeoutRateHigh",
        threshold: 0.05,
        window_ms: 300_000,
        for_ms: 300_000,
        what: "of the transaction checks of the last 5 minutes went unanswered",
        runbook: "transaction-checks-go-unanswered",
        value: timeout_rate,
    },
    Rule {
        alert: "RockletTransactionCheckFailuresHigh",
        threshold: 100.0,
        window_ms: 60_000,
        for_ms: 60_000,
        what: "transaction checks a minute fail (unanswered or UNKNOWN)",
        runbook: "transaction-checks-fail",
        value: failures_per_minute,
    },
    Rule {
        alert: "RockletHalfBacklogHigh",
        threshold: 10_000.0,
        window_ms: 0,
        for_ms: 300_000,
        what: "transactions pending",
        runbook: "the-half-message-backlog-grows",
        value: half_backlog,
    },
];

/// Checks unanswered / checks sent over the window (`None`: none sent).
fn timeout_rate(w: &[Sample], _: Millis) -> Option<f64> {
    let sent: u64 = w.iter().map(|s| s.checks_sent).sum();
    let unanswered: u64 = w.iter().map(|s| s.checks_unanswered).sum();
    (sent > 0).then(|| unanswered as f64 / sent as f64)
}

/// Failed checks a minute over the window.
fn failures_per_minute(w: &[Sample], window_ms: Millis) -> Option<f64> {
    let failed: u64 = w
        .iter()
        .map(|s| s.checks_unanswered + s.checks_unknown)
        .sum();
    Some(failed as f64 * 60_000.0 / window_ms.max(1) as f64)
}

fn half_backlog(w: &[Sample], _: Millis) -> Option<f64> {
    w.last().map(|s| s.half_backlog as f64)
}

/// An alert that would be pending or firing now.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Active {
    pub alert: &'static str,
    /// `firing` or `pending`.
    pub state: &'static str,
    pub value: f64,
    pub threshold: f64,
    pub what: &'static str,
    pub runbook: &'static str,
    /// Since when the expression has held (the broker's clock).
    pub since: Millis,
}

impl Rule {
    /// The expression's value at sample `i` (over the samples of its window).
    fn at(&self, samples: &[Sample], i: usize, step_ms: Millis) -> Option<f64> {
        let end = samples[i].at;
        let span = self.window_ms.max(step_ms);
        let from = samples[..=i].partition_point(|s| s.at + span <= end);
        (self.value)(&samples[from..=i], span)
    }

    fn holds(&self, samples: &[Sample], i: usize, step_ms: Millis) -> bool {
        self.at(samples, i, step_ms)
            .is_some_and(|v| v > self.threshold)
    }

    /// Whether the rule is pending or firing at the newest sample.
    #[must_use]
    pub fn evaluate(&self, samples: &[Sample], step_ms: Millis) -> Option<Active> {
        let last = samples.len().checked_sub(1)?;
        if !self.holds(samples, last, step_ms) {
            return None;
        }
        let mut first = last;
        while first > 0 && self.holds(samples, first - 1, step_ms) {
            first -= 1;
        }
        let since = samples[first].at;
        let held = samples[last].at - since;
        Some(Active {
            alert: self.alert,
            state: if held >= self.for_ms {
                "firing"
            } else {
                "pending"
            },
            value: self.at(samples, last, step_ms).unwrap_or_default(),
            threshold: self.threshold,
            what: self.what,
            runbook: self.runbook,
            since,
        })
    }
}

/// Every rule that is pending or firing at the newest sample.
#[must_use]
pub fn active(samples: &[Sample], step_ms: Millis) -> Vec<Active> {
    RULES
        .iter()
        .filter_map(|r| r.evaluate(samples, step_ms))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STEP: Millis = 10_000;

    fn sample(at: Millis, halves: u64, sent: u64, unanswered: u64, unknown: u64) -> Sample {
        Sample {
            at,
            stored_per_s: 0.0,
            committed_per_s: 0.0,
            rolled_back_per_s: 0.0,
            half_backlog: halves,
            delay_backlog: 0,
            checks_sent: sent,
            checks_answered: sent - unanswered,
            checks_unanswered: unanswered,
            checks_unknown: unknown,
            check_success: None,
            end_transactions: 0,
            end_transaction_mean_ms: None,
            end_transaction_p99_ms: None,
        }
    }

    fn series(n: u64, f: impl Fn(u64) -> Sample) -> Vec<Sample> {
        (1..=n).map(f).collect()
    }

    #[test]
    fn a_backlog_above_ten_thousand_is_pending_then_fires_after_five_minutes() {
        let rule = &RULES[2];
        // 2 minutes above: pending.
        let s = series(60, |i| {
            sample(i * STEP, if i > 48 { 10_001 } else { 5 }, 0, 0, 0)
        });
        let a = rule.evaluate(&s, STEP).expect("active");
        assert_eq!(a.state, "pending");
        assert_eq!(a.since, 49 * STEP);
        // 5 minutes above: firing.
        let s = series(60, |i| {
            sample(i * STEP, if i > 29 { 10_001 } else { 5 }, 0, 0, 0)
        });
        assert_eq!(rule.evaluate(&s, STEP).expect("active").state, "firing");
        // At the threshold: not above it.
        let s = series(60, |i| sample(i * STEP, 10_000, 0, 0, 0));
        assert_eq!(rule.evaluate(&s, STEP), None);
        assert_eq!(rule.evaluate(&[], STEP), None);
    }

    #[test]
    fn the_check_timeout_rate_is_over_the_five_minute_window() {
        let rule = &RULES[0];
        // 100 checks a step, 6 unanswered: 6 % for the whole series → firing.
        let s = series(70, |i| sample(i * STEP, 0, 100, 6, 0));
        let a = rule.evaluate(&s, STEP).expect("active");
        assert_eq!(a.state, "firing");
        assert!((a.value - 0.06).abs() < 1e-9, "{}", a.value);
        // 4 %: below.
        let s = series(70, |i| sample(i * STEP, 0, 100, 4, 0));
        assert_eq!(rule.evaluate(&s, STEP), None);
        // One bad step among good ones over 5 minutes (30 steps): 60/3000 = 2 %.
        let s = series(70, |i| {
            sample(i * STEP, 0, 100, if i == 70 { 60 } else { 0 }, 0)
        });
        assert_eq!(rule.evaluate(&s, STEP), None);
        // No check sent: nothing to rate.
        let s = series(70, |i| sample(i * STEP, 0, 0, 0, 0));
        assert_eq!(rule.evaluate(&s, STEP), None);
    }

    #[test]
    fn check_failures_count_unanswered_and_unknown_a_minute() {
        let rule = &RULES[1];
        // 10 + 8 failures every 10 s: 108 a minute, for 2 minutes → firing.
        let s = series(12, |i| sample(i * STEP, 0, 20, 10, 8));
        let a = rule.evaluate(&s, STEP).expect("active");
        assert_eq!(a.state, "firing");
        assert!((a.value - 108.0).abs() < 1e-9, "{}", a.value);
        // 16 every 10 s: 96 a minute.
        let s = series(12, |i| sample(i * STEP, 0, 20, 8, 8));
        assert_eq!(rule.evaluate(&s, STEP), None);
        // Above for 30 s only: pending.
        let s = series(12, |i| {
            sample(i * STEP, 0, 40, if i > 9 { 40 } else { 0 }, 0)
        });
        assert_eq!(active(&s, STEP).len(), 2, "{:?}", active(&s, STEP));
        assert_eq!(rule.evaluate(&s, STEP).expect("active").state, "pending");
    }

    /// The rules here are the rules of the file operators load into Prometheus.
    #[test]
    fn the_rules_match_the_prometheus_rule_file() {
        let file = include_str!("../../packaging/alerts/rocklet-alerts.yml");
        for r in RULES {
            let at = file
                .find(&format!("alert: {}\n", r.alert))
                .unwrap_or_else(|| panic!("{} is not in rocklet-alerts.yml", r.alert));
            let rest = &file[at..];
            let end = rest[1..].find("- alert:").map_or(rest.len(), |e| e + 1);
            let rule = &rest[..end];
            let threshold = if r.threshold >= 1.0 {
                format!("> {}", r.threshold as u64)
            } else {
                format!("> {}", r.threshold)
            };
            assert!(
                rule.contains(&threshold),
                "{}: {threshold}\n{rule}",
                r.alert
            );
            let minutes = |ms: Millis| format!("{}m", ms / 60_000);
            assert!(
                rule.contains(&format!("for: {}\n", minutes(r.for_ms))),
                "{}: for {}\n{rule}",
                r.alert,
                minutes(r.for_ms)
            );
            if r.window_ms > 0 {
                assert!(
                    rule.contains(&format!("[{}]", minutes(r.window_ms))),
                    "{}: window {}\n{rule}",
                    r.alert,
                    minutes(r.window_ms)
                );
            }
            assert!(rule.contains(&format!("docs/runbooks.md#{}\"", r.runbook)));
        }
    }
}
