//! Offsets reset by mqadmin resetOffsetByTime on an online group, pending until the group's
//! clients take them. As Apache 5.5's broker (its `useServerSideResetOffset`, on by
//! default): the reset offset is committed at once, and while it is pending the clients'
//! own commits of their old offsets are answered OK and dropped (Apache: "Update consumer
//! offset is rejected because of previous offset-reset"), so consumerProgress keeps showing
//! the reset offsets. A reset is taken once the group pulls the queue from its offset.

use std::collections::HashMap;

/// Most resets pending at once (group × queue); a reset that would pass it is refused.
pub const MAX_PENDING_RESETS: usize = 65_536;

/// Pending resets by group, topic and queue.
#[derive(Debug, Default)]
pub struct PendingResets {
    by_queue: HashMap<(String, String, u32), u64>,
}

impl PendingResets {
    /// Whether `n` more resets fit (some may replace pending ones).
    #[must_use]
    pub fn room_for(&self, n: usize) -> bool {
        self.by_queue.len().saturating_add(n) <= MAX_PENDING_RESETS
    }

    /// Records a reset of `group` in queue `queue_id` of `topic` to `offset`.
    pub fn set(&mut self, group: &str, topic: &str, queue_id: u32, offset: u64) {
        self.by_queue
            .insert((group.into(), topic.into(), queue_id), offset);
    }

    /// Whether a client's commit of `offset` is dropped: a reset is pending in the queue and
    /// the commit is not of its offset (a commit of the reset offset takes the reset).
    pub fn drops_commit(&mut self, group: &str, topic: &str, queue_id: u32, offset: u64) -> bool {
        self.pending(group, topic, queue_id, offset)
    }

    /// A pull of the queue from `offset`: takes the reset when the pull is from its offset.
    pub fn pulled(&mut self, group: &str, topic: &str, queue_id: u32, offset: u64) {
        self.pending(group, topic, queue_id, offset);
    }

    /// Whether a reset other than `offset` is pending; a pending reset to `offset` is taken.
    fn pending(&mut self, group: &str, topic: &str, queue_id: u32, offset: u64) -> bool {
        if self.by_queue.is_empty() {
            return false;
        }
        let key = (group.to_string(), topic.to_string(), queue_id);
        match self.by_queue.get(&key) {
            Some(&at) if at == offset => {
                self.by_queue.remove(&key);
                false
            }
            Some(_) => true,
            None => false,
        }
    }

    /// Resets pending now.
    #[must_use]
    pub fn len(&self) -> usize {
        self.by_queue.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by_queue.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_commits_are_dropped_until_the_reset_offset_is_pulled() {
        let mut r = PendingResets::default();
        assert!(!r.drops_commit("g", "T", 0, 9), "nothing pending");
        r.set("g", "T", 0, 2);
        assert!(r.drops_commit("g", "T", 0, 9), "the client's old offset");
        assert!(!r.drops_commit("g", "T", 1, 9), "another queue");
        assert!(!r.drops_commit("h", "T", 0, 9), "another group");
        r.pulled("g", "T", 0, 9);
        assert_eq!(r.len(), 1, "a pull from the old offset takes nothing");
        r.pulled("g", "T", 0, 2);
        assert!(r.is_empty(), "the pull from the reset offset takes it");
        assert!(!r.drops_commit("g", "T", 0, 9));
        r.set("g", "T", 0, 2);
        assert!(
            !r.drops_commit("g", "T", 0, 2),
            "committing the reset takes it"
        );
        assert!(r.is_empty());
        assert!(r.room_for(MAX_PENDING_RESETS));
        assert!(!r.room_for(MAX_PENDING_RESETS + 1));
    }
}
