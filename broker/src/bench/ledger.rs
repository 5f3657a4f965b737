//! What every sequence number should have become, and what the consumers saw.

use std::fmt::Write as _;

/// Expected fate of one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fate {
    /// Not sent (or its send not answered yet).
    #[default]
    Unset,
    /// A normal or delayed message: consumed exactly once.
    Once,
    /// A half message whose end is in flight.
    Prepared,
    /// Committed (by the producer or a check's answer): consumed exactly once.
    Committed,
    /// Rolled back: never consumed.
    RolledBack,
    /// The producer answered nothing: waiting for the check.
    AwaitingCheck,
    /// A backlog half left pending: never consumed unless a check commits it.
    Backlog,
    /// Its request failed: stored or not, so zero or one consumption is fine.
    Ambiguous,
}

#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    fate: Fate,
    consumed: u16,
    early: bool,
    /// First consumed after the drain timed out ([`Ledger::mark_late`]).
    late: bool,
    /// Delayed messages: not consumable before this (epoch or bench ms).
    deliver_at: u64,
}

/// Per-sequence ledger for one run.
#[derive(Debug, Default)]
pub struct Ledger {
    entries: Vec<Entry>,
    foreign: u64,
    consumed: u64,
    /// The drain timed out: first consumptions from now on are late, not on time.
    late_from_now: bool,
    /// FIFO runs: message `seq` is of message group `seq % groups`; the last sequence number
    /// consumed of each group, and consumptions that came before an earlier one of theirs.
    fifo: Option<FifoOrder>,
}

#[derive(Debug, Default)]
struct FifoOrder {
    groups: u64,
    last: Vec<Option<u64>>,
    out_of_order: u64,
}

/// The correctness check's findings.
#[derive(Debug, Default, Clone)]
pub struct Verdict {
    pub expected: u64,
    pub exactly_once: u64,
    pub missing: u64,
    pub duplicated: u64,
    pub rolled_back: u64,
    pub rolled_back_consumed: u64,
    pub early: u64,
    pub never_checked: u64,
    pub backlog_pending: u64,
    pub ambiguous: u64,
    pub foreign: u64,
    pub delayed: u64,
    /// Messages consumed once, but only after the drain timed out (while the run waited
    /// `--late-wait` for them): delivered late, not lost.
    pub late: u64,
    /// FIFO runs: messages consumed after a later one of their message group.
    pub out_of_order: u64,
    /// Whether group order was checked (a FIFO run).
    pub fifo: bool,
}

impl Verdict {
    /// No loss, no duplicate, no rolled-back or early delivery, every check answered.
    #[must_use]
    pub fn ok(&self) -> bool {
        self.missing == 0
            && self.duplicated == 0
            && self.rolled_back_consumed == 0
            && self.early == 0
            && self.never_checked == 0
            && self.out_of_order == 0
    }

    /// One line.
    #[must_use]
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "{} — {} of {} committed/plain messages consumed exactly once, {} missing, {} duplicated; {} rolled back, {} of them consumed",
            if self.ok() { "OK" } else { "FAILED" },
            self.exactly_once,
            self.expected,
            self.missing,
            self.duplicated,
            self.rolled_back,
            self.rolled_back_consumed
        );
        if self.late > 0 {
            let _ = write!(
                s,
                "; {} of them delivered late (after the drain timed out)",
                self.late
            );
        }
        if self.delayed > 0 || self.early > 0 {
            let _ = write!(
                s,
                "; {} delayed, {} consumed early",
                self.delayed, self.early
            );
        }
        if self.never_checked > 0 {
            let _ = write!(
                s,
                "; {} unknown transactions never checked",
                self.never_checked
            );
        }
        if self.backlog_pending > 0 {
            let _ = write!(s, "; {} backlog halves still pending", self.backlog_pending);
        }
        if self.ambiguous > 0 {
            let _ = write!(
                s,
                "; {} failed requests (0 or 1 delivery accepted)",
                self.ambiguous
            );
        }
        if self.foreign > 0 {
            let _ = write!(s, "; {} messages of other runs ignored", self.foreign);
        }
        if self.fifo {
            let _ = write!(
                s,
                "; {} consumed out of message-group order",
                self.out_of_order
            );
        }
        s
    }
}

impl Ledger {
    fn at(&mut self, seq: u64) -> &mut Entry {
        let i = seq as usize;
        if i >= self.entries.len() {
            self.entries.resize(i + 1, Entry::default());
        }
        &mut self.entries[i]
    }

    /// Bytes of memory the per-message entries fill (what `--rss-every` takes out of the
    /// process's growth to show the broker's own).
    #[must_use]
    pub fn entry_bytes(&self) -> u64 {
        (self.entries.len() * std::mem::size_of::<Entry>()) as u64
    }

    /// Sets what should become of `seq`.
    pub fn set(&mut self, seq: u64, fate: Fate) {
        self.at(seq).fate = fate;
    }

    /// The current expectation.
    #[must_use]
    pub fn fate(&self, seq: u64) -> Fate {
        self.entries
            .get(seq as usize)
            .map_or(Fate::Unset, |e| e.fate)
    }

    /// A delayed message may not be consumed before `at`.
    pub fn set_deliver_at(&mut self, seq: u64, at: u64) {
        self.at(seq).deliver_at = at;
    }

    /// A FIFO run: message `seq` is of message group `seq % groups`, and each group must be
    /// consumed in sequence order (a message consumed again right after itself is a
    /// duplicate, not out of order).
    pub fn expect_fifo(&mut self, groups: u64) {
        self.fifo = Some(FifoOrder {
            groups: groups.max(1),
            last: Vec::new(),
            out_of_order: 0,
        });
    }

    /// The drain timed out: from now on a message's first consumption counts as late
    /// (delivered, after the bound a run is expected to drain in: a failover's redelivery).
    pub fn mark_late(&mut self) {
        self.late_from_now = true;
    }

    /// A message of another run (or not a bench message) was consumed.
    pub fn foreign(&mut self) {
        self.foreign += 1;
    }

    /// Records a consumption at `now` (same clock as `deliver_at`, `tolerance_ms` slack for
    /// clock granularity). Returns the delivery lateness of a delayed message.
    pub fn consumed(&mut self, seq: u64, now: u64, tolerance_ms: u64) -> Option<u64> {
        self.consumed += 1;
        if let Some(f) = &mut self.fifo {
            let g = (seq % f.groups) as usize;
            if g >= f.last.len() {
                f.last.resize(g + 1, None);
            }
            match f.last[g] {
                Some(last) if seq < last => f.out_of_order += 1,
                _ => f.last[g] = Some(seq),
            }
        }
        let late = self.late_from_now;
        let e = self.at(seq);
        if e.consumed == 0 && late {
            e.late = true;
        }
        e.consumed = e.consumed.saturating_add(1);
        if e.deliver_at == 0 {
            return None;
        }
        if now + tolerance_ms < e.deliver_at {
            e.early = true;
        }
        Some(now.saturating_sub(e.deliver_at))
    }

    /// Consumptions so far.
    #[must_use]
    pub fn consumed_total(&self) -> u64 {
        self.consumed
    }

    /// Messages that should still arrive: expected once and not yet consumed, plus unknowns
    /// waiting for their check.
    #[must_use]
    pub fn outstanding(&self) -> (u64, u64) {
        let mut consume = 0;
        let mut checks = 0;
        for e in &self.entries {
            match e.fate {
                Fate::Once | Fate::Committed | Fate::Prepared if e.consumed == 0 => consume += 1,
                Fate::AwaitingCheck => checks += 1,
                _ => {}
            }
        }
        (consume, checks)
    }

    /// Messages whose expected fate is `fate`.
    #[must_use]
    pub fn count(&self, fate: Fate) -> u64 {
        self.entries.iter().filter(|e| e.fate == fate).count() as u64
    }

    /// Counts unknowns waiting for their check (cheap enough once a second).
    #[must_use]
    pub fn awaiting_checks(&self) -> u64 {
        self.entries
            .iter()
            .filter(|e| e.fate == Fate::AwaitingCheck)
            .count() as u64
    }

    /// The correctness check.
    #[must_use]
    pub fn verdict(&self) -> Verdict {
        let mut v = Verdict {
            foreign: self.foreign,
            fifo: self.fifo.is_some(),
            out_of_order: self.fifo.as_ref().map_or(0, |f| f.out_of_order),
            ..Verdict::default()
        };
        for e in &self.entries {
            if e.deliver_at != 0 {
                v.delayed += 1;
            }
            if e.early {
                v.early += 1;
            }
            match e.fate {
                Fate::Once | Fate::Committed => {
                    v.expected += 1;
                    match e.consumed {
                        0 => v.missing += 1,
                        1 => v.exactly_once += 1,
                        _ => v.duplicated += 1,
                    }
                    if e.late && e.consumed > 0 {
                        v.late += 1;
                    }
                }
                Fate::RolledBack => {
                    v.rolled_back += 1;
                    if e.consumed > 0 {
                        v.rolled_back_consumed += 1;
                    }
                }
                Fate::Backlog => {
                    v.backlog_pending += 1;
                    if e.consumed > 0 {
                        v.rolled_back_consumed += 1;
                    }
                }
                Fate::AwaitingCheck => {
                    v.never_checked += 1;
                    if e.consumed > 1 {
                        v.duplicated += 1;
                    }
                }
                Fate::Prepared => {
                    // An end that never answered (counted as an error by the producer).
                    v.ambiguous += 1;
                }
                Fate::Ambiguous => {
                    v.ambiguous += 1;
                    if e.consumed > 1 {
                        v.duplicated += 1;
                    }
                }
                Fate::Unset => {
                    if e.consumed > 0 {
                        // Consumed but never sent by this run: a phantom.
                        v.duplicated += 1;
                    }
                }
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_duplicate_rollback_and_early_fail_the_check() {
        let mut l = Ledger::default();
        l.set(0, Fate::Committed);
        l.set(1, Fate::Once);
        l.set(2, Fate::RolledBack);
        l.consumed(0, 0, 0);
        l.consumed(1, 0, 0);
        assert!(l.verdict().ok(), "{}", l.verdict().summary());
        l.set(3, Fate::Once);
        assert_eq!(l.verdict().missing, 1);
        assert_eq!(l.verdict().late, 0);
        l.consumed(3, 0, 0);
        l.consumed(3, 0, 0);
        assert_eq!(l.verdict().duplicated, 1);
        let mut l = Ledger::default();
        l.set(0, Fate::RolledBack);
        l.consumed(0, 0, 0);
        assert!(!l.verdict().ok());
        let mut l = Ledger::default();
        l.set(0, Fate::Once);
        l.set_deliver_at(0, 1000);
        assert_eq!(l.consumed(0, 990, 5), Some(0));
        assert!(!l.verdict().ok());
        assert_eq!(l.verdict().early, 1);
        let mut l = Ledger::default();
        l.set(0, Fate::AwaitingCheck);
        assert!(!l.verdict().ok());
    }

    #[test]
    fn deliveries_after_the_drain_are_late_not_missing() {
        let mut l = Ledger::default();
        for seq in 0..3 {
            l.set(seq, Fate::Once);
        }
        l.consumed(0, 0, 0);
        l.mark_late();
        // Two arrive after the drain timed out (a failover's redelivery): late, delivered.
        l.consumed(1, 0, 0);
        l.consumed(2, 0, 0);
        let v = l.verdict();
        assert!(v.ok(), "{}", v.summary());
        assert_eq!((v.missing, v.late, v.exactly_once), (0, 2, 3));
        assert!(
            v.summary().contains("2 of them delivered late"),
            "{}",
            v.summary()
        );
        // One never arrives: missing, not late.
        l.set(3, Fate::Once);
        let v = l.verdict();
        assert_eq!((v.missing, v.late), (1, 2));
        assert!(!v.ok());
    }

    #[test]
    fn a_fifo_run_fails_when_a_group_is_consumed_out_of_order() {
        let mut l = Ledger::default();
        l.expect_fifo(2);
        for seq in 0..6 {
            l.set(seq, Fate::Once);
        }
        // Groups 0 (0, 2, 4) and 1 (1, 3, 5), interleaved but each in order.
        for seq in [1, 0, 3, 2, 4, 5] {
            l.consumed(seq, 0, 0);
        }
        assert!(l.verdict().ok(), "{}", l.verdict().summary());
        assert!(l
            .verdict()
            .summary()
            .contains("0 consumed out of message-group order"));
        let mut l = Ledger::default();
        l.expect_fifo(2);
        for seq in 0..4 {
            l.set(seq, Fate::Once);
        }
        for seq in [0, 2, 1, 0, 3] {
            l.consumed(seq, 0, 0);
        }
        let v = l.verdict();
        assert_eq!((v.out_of_order, v.duplicated), (1, 1));
        assert!(!v.ok());
    }
}
