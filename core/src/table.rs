//! Deadline-driven tables of pending records (half messages, delayed messages).
//!
//! Entries arrive in log order, so a deque sorted by log offset finds one by binary search;
//! resolution leaves a tombstone that is dropped from the front at once and compacted away
//! when tombstones reach half the deque. Deadlines live in a binary heap of
//! `(deadline, offset)`; a heap entry whose deadline no longer matches its table entry is
//! stale and skipped when it surfaces (lazy deletion), so resolving is O(log n) and finding
//! the next due entry is O(1).

use alloc::collections::{BinaryHeap, VecDeque};
use core::cmp::Reverse;

use crate::Millis;

/// A row of a [`PendingTable`].
pub(crate) trait Row: Copy {
    fn offset(&self) -> u64;
    fn deadline(&self) -> Millis;
    fn is_dead(&self) -> bool;
    fn kill(&mut self);
}

#[derive(Debug)]
pub(crate) struct PendingTable<R> {
    rows: VecDeque<R>,
    dead: usize,
    timers: BinaryHeap<Reverse<(Millis, u64)>>,
}

impl<R: Row> PendingTable<R> {
    pub(crate) fn new() -> Self {
        PendingTable {
            rows: VecDeque::new(),
            dead: 0,
            timers: BinaryHeap::new(),
        }
    }

    /// Live rows.
    pub(crate) fn len(&self) -> usize {
        self.rows.len() - self.dead
    }

    /// Inserts a row. Rows come in ascending offset order (log order), except a row that
    /// retention carried forward, which keeps its older offset and goes where it belongs.
    pub(crate) fn insert(&mut self, row: R) {
        self.timers.push(Reverse((row.deadline(), row.offset())));
        if self.rows.back().is_none_or(|r| r.offset() < row.offset()) {
            self.rows.push_back(row);
            return;
        }
        match self.rows.binary_search_by_key(&row.offset(), Row::offset) {
            // A dead row of the same offset (resolved, then carried back in): replaced.
            Ok(i) => {
                if self.rows[i].is_dead() {
                    self.dead -= 1;
                }
                self.rows[i] = row;
            }
            Err(i) => self.rows.insert(i, row),
        }
    }

    fn index(&self, offset: u64) -> Option<usize> {
        let i = self.rows.binary_search_by_key(&offset, Row::offset).ok()?;
        (!self.rows[i].is_dead()).then_some(i)
    }

    pub(crate) fn get(&self, offset: u64) -> Option<&R> {
        self.index(offset).map(|i| &self.rows[i])
    }

    /// Changes a row; a new deadline is scheduled.
    pub(crate) fn update(&mut self, offset: u64, f: impl FnOnce(&mut R)) -> Option<R> {
        let i = self.index(offset)?;
        let before = self.rows[i].deadline();
        f(&mut self.rows[i]);
        let row = self.rows[i];
        if row.deadline() != before {
            self.timers.push(Reverse((row.deadline(), offset)));
            self.prune();
        }
        Some(row)
    }

    /// Removes a row, returning it.
    pub(crate) fn remove(&mut self, offset: u64) -> Option<R> {
        let i = self.index(offset)?;
        let row = self.rows[i];
        self.rows[i].kill();
        self.dead += 1;
        while self.rows.front().is_some_and(Row::is_dead) {
            self.rows.pop_front();
            self.dead -= 1;
        }
        if self.dead > 64 && self.dead * 2 > self.rows.len() {
            self.rows.retain(|r| !r.is_dead());
            self.dead = 0;
        }
        self.prune();
        Some(row)
    }

    /// Drops stale timers from the top of the heap, so [`PendingTable::next_deadline`] is
    /// always a real deadline. Each timer is dropped once: amortized O(log n).
    fn prune(&mut self) {
        while let Some(&Reverse((deadline, offset))) = self.timers.peek() {
            if self.get(offset).is_some_and(|r| r.deadline() == deadline) {
                break;
            }
            self.timers.pop();
        }
    }

    /// The earliest deadline of a live row.
    pub(crate) fn next_deadline(&self) -> Option<Millis> {
        self.timers.peek().map(|Reverse((d, _))| *d)
    }

    /// Pops the next timer due at or before `now` whose row is still live with that deadline.
    pub(crate) fn pop_due(&mut self, now: Millis) -> Option<R> {
        while let Some(&Reverse((deadline, offset))) = self.timers.peek() {
            if deadline > now {
                return None;
            }
            self.timers.pop();
            if let Some(row) = self.get(offset) {
                if row.deadline() == deadline {
                    let row = *row;
                    self.prune();
                    return Some(row);
                }
            }
        }
        None
    }

    /// Schedules a row's current deadline again (after its timer fired but could not be
    /// acted on, say because the storage failed).
    pub(crate) fn reschedule(&mut self, offset: u64) {
        if let Some(row) = self.get(offset) {
            let d = row.deadline();
            self.timers.push(Reverse((d, offset)));
        }
    }

    /// Rows (live or not) whose offset is above `after`, in offset order: a page starts
    /// with a binary search, never a walk from the front.
    pub(crate) fn rows_after(&self, after: Option<u64>) -> impl Iterator<Item = &R> {
        let from = after.map_or(0, |a| self.rows.partition_point(|r| r.offset() <= a));
        self.rows.range(from..)
    }

    /// Live rows in offset order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &R> {
        self.rows.iter().filter(|r| !r.is_dead())
    }

    /// Bytes held (for memory accounting in tests and benchmarks).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.rows.capacity() * core::mem::size_of::<R>() + self.timers.capacity() * 16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug)]
    struct T {
        off: u64,
        due: Millis,
    }
    impl Row for T {
        fn offset(&self) -> u64 {
            self.off
        }
        fn deadline(&self) -> Millis {
            self.due
        }
        fn is_dead(&self) -> bool {
            self.due == Millis::MAX
        }
        fn kill(&mut self) {
            self.due = Millis::MAX;
        }
    }

    #[test]
    fn due_order_and_lazy_deletion() {
        let mut t = PendingTable::new();
        for i in 0..100u64 {
            t.insert(T {
                off: i * 10,
                due: 1000 - i,
            });
        }
        assert!(t.remove(500).is_some());
        assert!(t.remove(500).is_none());
        t.update(990, |r| r.due = 5000);
        let mut seen = alloc::vec::Vec::new();
        while let Some(r) = t.pop_due(2000) {
            seen.push(r.off);
            t.remove(r.off);
        }
        assert_eq!(seen.len(), 98);
        assert!(seen.windows(2).all(|w| w[0] > w[1]));
        assert_eq!(t.len(), 1);
        assert_eq!(t.next_deadline(), Some(5000), "stale timers never show");
        assert_eq!(t.pop_due(5000).map(|r| r.off), Some(990));
        assert_eq!(t.next_deadline(), None);
    }

    #[test]
    fn compaction_keeps_lookup() {
        let mut t = PendingTable::new();
        for i in 0..1000u64 {
            t.insert(T { off: i, due: i });
        }
        for i in (1..1000u64).step_by(2) {
            t.remove(i);
        }
        for i in (0..1000u64).step_by(4) {
            t.remove(i);
        }
        assert_eq!(t.len(), 250);
        for i in 0..1000u64 {
            assert_eq!(t.get(i).is_some(), i % 4 == 2, "{i}");
        }
    }
}
