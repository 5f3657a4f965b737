//! Queue locks of orderly v4 consumers (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ).
//!
//! An orderly push consumer consumes a queue only while it holds the queue's lock at the
//! broker, so two clients of a group never consume one queue at the same time. RocketMQ's
//! rules, kept here:
//!
//! - a queue of a group is locked by at most one client id;
//! - the holder renews its lock by locking again (clients do every 20 s); a lock not renewed
//!   for [`LOCK_TTL_MS`] expires and another client may take it;
//! - the holder releases it with UNLOCK_BATCH_MQ; a lock held by someone else is left alone.
//!
//! The broker also releases a client's locks when it unregisters from the group or its
//! connection closes, so a restarted consumer need not wait out the TTL.
//!
//! This is connection state of the remoting host (like its table of consumer connections),
//! not message state: nothing is stored, and a broker restart starts with no locks, as
//! RocketMQ's does. Time is passed in (`now`, ms), never read here.

use std::collections::HashMap;

use rocklet_core::Millis;

/// A lock not renewed for this long expires (RocketMQ's `rocketmq.broker.rebalance.lockMaxLiveTime`).
pub const LOCK_TTL_MS: Millis = 60_000;
/// Most queues one request may name (a rebalance names a few per broker).
pub const MAX_QUEUES_PER_REQUEST: usize = 4096;
/// Most locks held in all. When full, expired locks are dropped first; beyond it, new locks
/// are refused (the queue is simply not locked, and the client retries later).
pub const MAX_LOCKS: usize = 1 << 16;
/// Longest client id taken.
pub const MAX_CLIENT_ID_LEN: usize = 255;

/// A queue of a topic.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueKey {
    pub topic: String,
    pub queue_id: u32,
}

#[derive(Clone, Debug)]
struct Holder {
    client: String,
    conn: u64,
    renewed: Millis,
}

/// Every queue lock of the broker: group → queue → holder.
#[derive(Debug, Default)]
pub struct QueueLocks {
    groups: HashMap<String, HashMap<QueueKey, Holder>>,
    count: usize,
}

impl QueueLocks {
    /// Locks (or renews) `queues` of `group` for `client`, which speaks over `conn`; returns
    /// the queues the client holds afterwards, in the order asked.
    pub fn lock(
        &mut self,
        now: Millis,
        group: &str,
        client: &str,
        conn: u64,
        queues: &[QueueKey],
    ) -> Vec<QueueKey> {
        if self.count + queues.len() > MAX_LOCKS {
            self.release(|_, h| now.saturating_sub(h.renewed) > LOCK_TTL_MS);
        }
        let mut ok = Vec::with_capacity(queues.len());
        let mut added = 0;
        let full = self.count >= MAX_LOCKS;
        let table = self.groups.entry(group.to_string()).or_default();
        for q in queues {
            match table.get_mut(q) {
                Some(h) if h.client == client || now.saturating_sub(h.renewed) > LOCK_TTL_MS => {
                    h.client = client.to_string();
                    h.conn = conn;
                    h.renewed = now;
                    ok.push(q.clone());
                }
                Some(_) => {}
                None if full || self.count + added >= MAX_LOCKS => {}
                None => {
                    table.insert(
                        q.clone(),
                        Holder {
                            client: client.to_string(),
                            conn,
                            renewed: now,
                        },
                    );
                    added += 1;
                    ok.push(q.clone());
                }
            }
        }
        if table.is_empty() {
            self.groups.remove(group);
        }
        self.count += added;
        ok
    }

    /// Releases the locks `client` holds on `queues` of `group` (others' locks stay).
    pub fn unlock(&mut self, group: &str, client: &str, queues: &[QueueKey]) {
        let Some(table) = self.groups.get_mut(group) else {
            return;
        };
        for q in queues {
            if table.get(q).is_some_and(|h| h.client == client) {
                table.remove(q);
                self.count -= 1;
            }
        }
        if table.is_empty() {
            self.groups.remove(group);
        }
    }

    /// Releases every lock of `client` in `group` (it unregistered).
    pub fn release_client(&mut self, group: &str, client: &str) {
        self.release(|g, h| g == group && h.client == client);
    }

    /// Releases every lock last taken or renewed over connection `conn` (it closed).
    pub fn release_conn(&mut self, conn: u64) {
        self.release(|_, h| h.conn == conn);
    }

    fn release(&mut self, gone: impl Fn(&str, &Holder) -> bool) {
        let mut removed = 0;
        self.groups.retain(|g, table| {
            let before = table.len();
            table.retain(|_, h| !gone(g, h));
            removed += before - table.len();
            !table.is_empty()
        });
        self.count -= removed;
    }

    /// The client holding `queue` of `group` at `now`, if any (expired locks hold nothing).
    #[must_use]
    pub fn holder(&self, now: Millis, group: &str, queue: &QueueKey) -> Option<&str> {
        self.groups
            .get(group)?
            .get(queue)
            .filter(|h| now.saturating_sub(h.renewed) <= LOCK_TTL_MS)
            .map(|h| h.client.as_str())
    }

    /// Locks held, expired ones included until taken over or released.
    #[must_use]
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether no lock is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(i: u32) -> QueueKey {
        QueueKey {
            topic: "T".into(),
            queue_id: i,
        }
    }

    #[test]
    fn one_client_per_queue_until_expiry() {
        let mut l = QueueLocks::default();
        assert_eq!(l.lock(0, "G", "a", 1, &[q(0), q(1)]), [q(0), q(1)]);
        // b gets only the free queue; a renews.
        assert_eq!(l.lock(10, "G", "b", 2, &[q(1), q(2)]), [q(2)]);
        assert_eq!(l.lock(20_000, "G", "a", 1, &[q(0)]), [q(0)]);
        // Another group is independent.
        assert_eq!(l.lock(20, "H", "b", 2, &[q(0)]), [q(0)]);
        // q(1) was last renewed at 0: held until 60 s, free after.
        assert_eq!(
            l.lock(LOCK_TTL_MS, "G", "b", 2, &[q(1)]),
            Vec::<QueueKey>::new()
        );
        assert_eq!(l.holder(LOCK_TTL_MS, "G", &q(1)), Some("a"));
        assert_eq!(l.holder(LOCK_TTL_MS + 1, "G", &q(1)), None);
        assert_eq!(l.lock(LOCK_TTL_MS + 1, "G", "b", 2, &[q(1)]), [q(1)]);
        // q(0) was renewed at 20 s: still a's.
        assert_eq!(
            l.lock(LOCK_TTL_MS + 1, "G", "b", 2, &[q(0)]),
            Vec::<QueueKey>::new()
        );
        assert_eq!(l.len(), 4);
    }

    #[test]
    fn unlock_releases_only_the_holders_locks() {
        let mut l = QueueLocks::default();
        l.lock(0, "G", "a", 1, &[q(0), q(1)]);
        l.unlock("G", "b", &[q(0)]);
        assert_eq!(l.holder(0, "G", &q(0)), Some("a"));
        l.unlock("G", "a", &[q(0), q(7)]);
        assert_eq!(l.holder(0, "G", &q(0)), None);
        assert_eq!(l.lock(1, "G", "b", 2, &[q(0), q(1)]), [q(0)]);
        l.unlock("nope", "a", &[q(1)]);
        assert_eq!(l.len(), 2);
    }

    #[test]
    fn unregistering_or_disconnecting_releases() {
        let mut l = QueueLocks::default();
        l.lock(0, "G", "a", 1, &[q(0)]);
        l.lock(0, "H", "a", 1, &[q(0)]);
        l.lock(0, "G", "b", 2, &[q(1)]);
        l.release_client("G", "a");
        assert_eq!(l.holder(0, "G", &q(0)), None);
        assert_eq!(l.holder(0, "H", &q(0)), Some("a"));
        // A renewal over a new connection moves the lock to it.
        l.lock(1, "G", "b", 3, &[q(1)]);
        l.release_conn(2);
        assert_eq!(l.holder(1, "G", &q(1)), Some("b"));
        l.release_conn(3);
        l.release_conn(1);
        assert!(l.is_empty());
        assert!(l.groups.is_empty());
    }

    #[test]
    fn the_table_is_bounded() {
        let mut l = QueueLocks::default();
        let all: Vec<QueueKey> = (0..MAX_LOCKS as u32 - 1).map(q).collect();
        assert_eq!(l.lock(0, "G", "a", 1, &all).len(), MAX_LOCKS - 1);
        let (x, y) = (MAX_LOCKS as u32, MAX_LOCKS as u32 + 1);
        assert_eq!(l.lock(0, "G", "b", 2, &[q(x), q(y)]), [q(x)]);
        assert_eq!(l.len(), MAX_LOCKS);
        // Renewals still work when full; new locks do not.
        assert_eq!(l.lock(1, "G", "b", 2, &[q(x), q(y)]), [q(x)]);
        // Once a's locks expire they make room (b's, renewed, stay).
        assert_eq!(l.lock(LOCK_TTL_MS + 1, "G", "c", 3, &[q(y)]), [q(y)]);
        assert_eq!(l.len(), 2);
        assert_eq!(l.holder(LOCK_TTL_MS + 1, "G", &q(x)), Some("b"));
    }
}
